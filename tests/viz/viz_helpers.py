"""Scripted scheduler events for driving a KVCacheManager by hand in the tests."""

from pagedkit.memory import KVCacheManager
from pagedkit.scheduler import Admit, Finish, Preempt, SchedulerEventKind, Step


def emit(kv: KVCacheManager, kind: SchedulerEventKind, seq=None, value=None, step=None) -> None:
    """A scheduler event of `kind`: `value` is the request (admit), the mode
    (preempt) or the reason (finish)."""
    event = {SchedulerEventKind.ADMIT: lambda: Admit(seq, value),
             SchedulerEventKind.PREEMPT: lambda: Preempt(seq, None, value),
             SchedulerEventKind.FINISH: lambda: Finish(seq, None, value),
             SchedulerEventKind.STEP: lambda: Step(step)}[kind]()
    kv.events.emit(event)


def admit(kv: KVCacheManager, seq, request, tokens) -> None:
    """What the scheduler does to start a request: room for its prompt, then ADMIT."""
    assert kv.allocate_slots(seq, tokens) is not None
    emit(kv, SchedulerEventKind.ADMIT, seq, request)


def step(kv: KVCacheManager, number: int) -> None:
    emit(kv, SchedulerEventKind.STEP, step=number)
