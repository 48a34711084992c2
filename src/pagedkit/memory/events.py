"""The event stream: every change to paged memory, as a small record.

Widgets, the simulator's recorders and the labs watch memory through this
stream; nothing in the engine depends on it. The bus carries any record with
a ``kind``: the scheduler puts its own (`pagedkit.scheduler.events`) on the
same bus, so one listener sees a step's memory changes and decisions in
order. Emitting costs one truthiness test when nobody listens, so producers
write::

    if self.events:
        self.events.emit(Event(EventKind.ALLOCATE, block=b, seq=seq_id))

and the record is never even built.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass
from enum import Enum
from typing import Any


class EventKind(str, Enum):
    """What happened to memory. (The scheduler's request-level kinds — admit,
    preempt, finish, step — are defined a layer up, in
    `pagedkit.scheduler.events`; the same bus carries both.)"""

    ALLOCATE = "allocate"  # a free block was handed to a sequence
    APPEND = "append"  # tokens were written into a block (num_tokens = its new fill)
    FREE = "free"  # a sequence let go of a block (ref_count = what is left; cached =
    #                at zero, it keeps its prefix-cache contents)
    FORK = "fork"  # a block gained one more owner (ref_count = new count)
    COW = "cow"  # copy-on-write: `src` was shared, the writer got `block`
    CACHE_HIT = "cache_hit"  # a prefix-cache lookup reused `block`
    EVICT = "evict"  # a cached-but-free block lost its cached contents
    SWAP_OUT = "swap_out"  # GPU block `src` was copied to CPU block `block`
    SWAP_IN = "swap_in"  # CPU block `src` was copied back to GPU block `block`

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True, slots=True)
class Event:
    """One change to memory. Fields that do not apply to a kind stay ``None``
    (``cached`` is meaningful for ``FREE`` only)."""

    kind: EventKind
    block: int | None = None
    seq: Hashable | None = None
    src: int | None = None
    num_tokens: int | None = None
    ref_count: int | None = None
    cached: bool = False


Listener = Callable[[Any], None]  # an `Event` or a scheduler event


class EventBus(list):
    """A list of listeners. Falsy while empty, as any list, so producers can
    skip work (``if self.events: ...emit``) at the price of one truth test."""

    __slots__ = ()

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """Call `listener(event)` for every future event; returns an unsubscribe function."""
        self.append(listener)
        return lambda: self.remove(listener)

    def emit(self, event: Event) -> None:
        for listener in self:
            listener(event)


class EventLog:
    """A listener that keeps every event, for tests and replay.

    >>> bus = EventBus(); log = EventLog(bus)
    >>> bus.emit(Event(EventKind.ALLOCATE, block=0)); [e.kind.value for e in log]
    ['allocate']
    """

    def __init__(self, bus: EventBus) -> None:
        self.events: list[Event] = []
        self.close = bus.subscribe(self.events.append)

    def __iter__(self):
        return iter(self.events)

    def __len__(self) -> int:
        return len(self.events)

    def kinds(self) -> list[str]:
        return [e.kind.value for e in self.events]

    def clear(self) -> None:
        self.events.clear()
