"""Scripted scheduler events for driving a KVCacheManager by hand in the tests."""

from pagedkit.memory import Event, EventKind, KVCacheManager


def emit(kv: KVCacheManager, kind: EventKind, seq=None, detail=None, step=None) -> None:
    kv.events.emit(Event(kind, seq=seq, detail=detail, step=step))


def admit(kv: KVCacheManager, seq, request, tokens) -> None:
    """What the scheduler does to start a request: room for its prompt, then ADMIT."""
    assert kv.allocate_slots(seq, tokens) is not None
    emit(kv, EventKind.ADMIT, seq, request)


def step(kv: KVCacheManager, number: int) -> None:
    emit(kv, EventKind.STEP, step=number)
