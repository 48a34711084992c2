"""Replay one trace through a contiguous cache and a paged one, step by step.

The contiguous-vs-paged view needs both memories at the same steps of the
same workload. This helper drives `ContiguousAllocator` and `KVCacheManager`
with the same first-come-first-served policy — admit while the head of the
queue fits, every running request adds one token per step, free on finish —
so the only difference is how memory is handed out (paper §3 vs §4):

* contiguous: a request reserves its whole region up front and never runs out
  later, but wastes the reservation, its unused tail and the holes between
  regions;
* paged: a request takes a block at a time, wastes at most part of its last
  block, and is preempted (recompute) when the pool runs dry.

The paged side emits the scheduler's events on its own bus, recorded by a
`Recorder`, so its frames are the very frames the block map draws.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Iterable
from dataclasses import dataclass
from typing import Any

from .._validation import check_int
from ..memory import (
    ContiguousAllocator,
    ContiguousStats,
    Event,
    EventBus,
    EventKind,
    KVCacheManager,
)
from .frames import Frame
from .recorder import Recorder


@dataclass(frozen=True)
class TraceRequest:
    """A request of the trace: it arrives at `arrival_step` with a prompt of
    `prompt_len` tokens and will generate `output_len` more."""

    request_id: Hashable
    prompt_len: int
    output_len: int
    arrival_step: int = 0

    @property
    def need(self) -> int:
        return self.prompt_len + self.output_len


@dataclass(frozen=True, slots=True)
class Region:
    """A contiguous reservation at one frame (a frozen copy of `Reservation`)."""

    request: Hashable
    start: int
    size: int
    need: int
    used: int


@dataclass(frozen=True)
class ContiguousFrame:
    """The contiguous address space at the end of one step."""

    index: int
    regions: tuple[Region, ...]
    holes: tuple[tuple[int, int], ...]
    stats: ContiguousStats
    running: int
    waiting: int
    external_fragmentation: int  # free slots the head of the queue cannot use

    @property
    def wasted(self) -> int:
        """Reserved-but-empty slots plus stranded free slots."""
        s = self.stats
        return s.reservation + s.internal_fragmentation + self.external_fragmentation


@dataclass(frozen=True, slots=True)
class PagedWaste:
    """Where the slots of a paged pool are at one frame."""

    tokens: int
    unfilled: int  # empty slots at the tails of last blocks: paging's only waste
    free: int  # slots of free (and cached-but-free) blocks

    @property
    def wasted(self) -> int:
        return self.unfilled


def paged_waste(frame: Frame) -> PagedWaste:
    m = frame.memory
    return PagedWaste(tokens=m.tokens, unfilled=m.used * frame.block_size - m.tokens,
                      free=(m.free + m.cached) * frame.block_size)


@dataclass(frozen=True)
class Comparison:
    """The same trace through both memories: frame *i* of each is step *i*."""

    policy: str
    block_size: int
    capacity: int  # token slots, the same on both sides
    contiguous: tuple[ContiguousFrame, ...]
    paged: tuple[Frame, ...]
    recorder: Recorder  # the paged side's recorder (its colors, its frames)

    def __len__(self) -> int:
        return len(self.paged)


def as_trace(requests: Iterable[Any]) -> list[TraceRequest]:
    """Accept `TraceRequest`s, or anything with ``prompt_len`` and ``output_len``
    (and optionally ``request_id`` and ``arrival_step``)."""
    trace = []
    for i, r in enumerate(requests):
        if isinstance(r, TraceRequest):
            trace.append(r)
            continue
        try:
            prompt_len, output_len = r.prompt_len, r.output_len
        except AttributeError:
            raise TypeError(f"trace item {i} ({r!r}) has no prompt_len/output_len") from None
        trace.append(TraceRequest(getattr(r, "request_id", i), prompt_len, output_len,
                                  getattr(r, "arrival_step", 0)))
    return trace


def replay(requests: Iterable[Any], *, num_blocks: int, block_size: int, policy: str = "pow2",
           max_seq_len: int | None = None, max_steps: int = 10_000) -> Comparison:
    """Step `requests` through both memories until every request finished on both."""
    check_int("num_blocks", num_blocks, minimum=1)
    check_int("block_size", block_size, minimum=1)
    # Ids become strings: the paged side's ADMIT events carry them as text, and
    # both sides must name (and so color) a request alike.
    trace = sorted((TraceRequest(str(r.request_id), r.prompt_len, r.output_len, r.arrival_step)
                    for r in as_trace(requests)), key=lambda r: r.arrival_step)
    if len({r.request_id for r in trace}) != len(trace):
        raise ValueError("request ids in the trace must be unique")
    if not trace:
        raise ValueError("the trace is empty: give at least one request")
    capacity = num_blocks * block_size
    for r in trace:
        check_int("prompt_len", r.prompt_len, minimum=1)
        check_int("output_len", r.output_len, minimum=0)
        if -(-r.need // block_size) > num_blocks:
            raise ValueError(f"request {r.request_id!r} needs {r.need} tokens, more than the "
                             f"{capacity} slots of {num_blocks} blocks of {block_size}")
    max_seq_len = max_seq_len or max(r.need for r in trace)
    contiguous = _ContiguousSide(ContiguousAllocator(capacity, policy, max_seq_len))
    paged = _PagedSide(num_blocks, block_size)
    contiguous.snapshot()
    pending = deque(trace)
    for step in range(max_steps):
        arrived = []
        while pending and pending[0].arrival_step <= step:
            arrived.append(pending.popleft())
        contiguous.step(arrived)
        paged.step(arrived, step)
        if not pending and contiguous.done and paged.done:
            break
    else:
        raise RuntimeError(f"the trace did not finish within max_steps={max_steps} steps")
    paged.recorder.close()
    return Comparison(policy, block_size, capacity, tuple(contiguous.frames),
                      tuple(paged.recorder.frames), paged.recorder)


class _ContiguousSide:
    def __init__(self, mem: ContiguousAllocator) -> None:
        self.mem = mem
        self.waiting: deque[TraceRequest] = deque()
        self.left: dict[Hashable, int] = {}  # running request -> output tokens still to come
        self.frames: list[ContiguousFrame] = []

    @property
    def done(self) -> bool:
        return not self.waiting and not self.left

    def step(self, arrived: list[TraceRequest]) -> None:
        self.waiting.extend(arrived)
        for request in list(self.left):
            self.mem.append(request)
            self.left[request] -= 1
        while self.waiting and self.mem.allocate(
                self.waiting[0].request_id, self.waiting[0].prompt_len,
                self.waiting[0].output_len) is not None:
            r = self.waiting.popleft()
            self.left[r.request_id] = r.output_len
        for request in [q for q, n in self.left.items() if n == 0]:
            self.mem.free(request)
            del self.left[request]
        self.snapshot()

    def snapshot(self) -> None:
        stats = self.mem.stats()
        head = self.waiting[0] if self.waiting else None
        external = stats.external_fragmentation(
            self.mem.reservation_size(head.prompt_len, head.output_len)) if head else 0
        regions = tuple(Region(r.request, r.start, r.size, r.need, r.used)
                        for r in self.mem.regions())
        self.frames.append(ContiguousFrame(len(self.frames), regions, tuple(self.mem.holes()),
                                           stats, len(self.left), len(self.waiting), external))


class _PagedSide:
    def __init__(self, num_blocks: int, block_size: int) -> None:
        self.events = EventBus()
        self.kv = KVCacheManager(num_blocks, block_size, events=self.events)
        self.recorder = Recorder(self.events, num_blocks, block_size)
        self.waiting: deque[TraceRequest] = deque()
        self.running: list[TraceRequest] = []  # admission order
        self.generated: dict[Hashable, int] = {}
        self._token = 0

    @property
    def done(self) -> bool:
        return not self.waiting and not self.running

    def _tokens(self, n: int) -> list[int]:
        self._token += n
        return list(range(self._token - n, self._token))

    def step(self, arrived: list[TraceRequest], step: int) -> None:
        self.waiting.extend(arrived)
        preempted = False
        for r in list(self.running):
            if r not in self.running:
                continue  # preempted to make room for an older one
            while self.kv.allocate_slots(r.request_id, self._tokens(1)) is None:
                victim = self.running[-1]
                self._preempt(victim)
                preempted = True
                if victim is r:
                    break
            else:
                self.generated[r.request_id] += 1
        while not preempted and self.waiting:
            r = self.waiting[0]
            done = self.generated.get(r.request_id, 0)
            if self.kv.allocate_slots(r.request_id, self._tokens(r.prompt_len + done)) is None:
                break
            self.waiting.popleft()
            self.running.append(r)
            self.generated[r.request_id] = done
            self._emit(EventKind.ADMIT, r.request_id, r.request_id)
        for r in [q for q in self.running if self.generated[q.request_id] == q.output_len]:
            self.kv.free(r.request_id)
            self.running.remove(r)
            self._emit(EventKind.FINISH, r.request_id, "length")
        queues = f"running={len(self.running)} waiting={len(self.waiting)} swapped=0"
        self.events.emit(Event(EventKind.STEP, step=step, detail=queues))

    def _preempt(self, r: TraceRequest) -> None:
        self.kv.free(r.request_id)
        self.running.remove(r)
        self.waiting.appendleft(r)
        self._emit(EventKind.PREEMPT, r.request_id, "recompute")

    def _emit(self, kind: EventKind, seq: Hashable, detail: str) -> None:
        self.events.emit(Event(kind, seq=seq, detail=detail))
