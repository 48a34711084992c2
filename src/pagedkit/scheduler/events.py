"""The scheduler's events: its decisions about requests, as typed records.

Memory announces its own changes (`pagedkit.memory.Event`: allocate, append,
free, ...). The scheduler adds what only it knows — a request was admitted,
preempted, finished, a step ended — on the *same* `EventBus`, so a listener
sees memory changes and the decisions that caused them in one order. Each
record has one field per meaning (no text to parse) and a ``kind`` like the
memory events, so listeners can dispatch on ``event.kind`` for both.

Emitting costs one truthiness test when nobody listens::

    if self.events:
        self.events.emit(Preempt(seq.seq_id, group.request_id, "swap"))
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from enum import Enum
from typing import ClassVar


class SchedulerEventKind(str, Enum):
    """What the scheduler decided."""

    ADMIT = "admit"  # a sequence started running (a new request, or a fork of one)
    PREEMPT = "preempt"  # a sequence was evicted with its group (mode: "swap"/"recompute")
    FINISH = "finish"  # a sequence ended (reason: "stop", "length", "abort" or "pruned")
    STEP = "step"  # a scheduler step ended; widgets cut their frames here

    def __str__(self) -> str:
        return self.value


#: Why a sequence finished: `FinishReason`'s values, plus a beam that beam
#: search dropped without an output.
FINISH_REASONS = ("stop", "length", "abort", "pruned")


@dataclass(frozen=True, slots=True)
class Admit:
    """Sequence `seq` of request `request_id` is now running."""

    seq: Hashable
    request_id: Hashable
    kind: ClassVar[SchedulerEventKind] = SchedulerEventKind.ADMIT


@dataclass(frozen=True, slots=True)
class Preempt:
    """Sequence `seq` was preempted with its group, by ``mode`` ``"swap"``
    (its blocks wait in CPU memory) or ``"recompute"`` (freed, recomputed later)."""

    seq: Hashable
    request_id: Hashable
    mode: str
    kind: ClassVar[SchedulerEventKind] = SchedulerEventKind.PREEMPT


@dataclass(frozen=True, slots=True)
class Finish:
    """Sequence `seq` ended for `reason` (one of `FINISH_REASONS`); `message`
    says more when the scheduler ended it itself (e.g. it outgrew the cache)."""

    seq: Hashable
    request_id: Hashable
    reason: str
    message: str | None = None
    kind: ClassVar[SchedulerEventKind] = SchedulerEventKind.FINISH


@dataclass(frozen=True, slots=True)
class Step:
    """Step `step` ended, leaving `running`, `waiting` and `swapped` requests
    in the scheduler's queues (``None``: the emitter keeps no queues)."""

    step: int
    running: int | None = None
    waiting: int | None = None
    swapped: int | None = None
    kind: ClassVar[SchedulerEventKind] = SchedulerEventKind.STEP


SchedulerEvent = Admit | Preempt | Finish | Step
