"""Replay one trace through a contiguous cache and a paged one, side by side.

The contiguous-vs-paged view needs both memories at the same moments of the
same workload. `replay` steps two `pagedkit.sim.Simulator`s together over
one trace: the same iteration-level, first-come-first-served scheduler with
the same options, one driving `ContiguousAllocator`, the other
`KVCacheManager`, so the only difference is how memory is handed out
(paper §3 vs §4):

* contiguous: a request reserves its whole region when it is admitted and
  never runs out later, but wastes the reservation, its unused tail and the
  holes between regions;
* paged: a request takes a block at a time, wastes at most part of its last
  block, and is preempted (recomputed later) when the pool runs dry.

Time is the simulator's. By default it is a `StepClock`: every iteration
lasts one step, so a request's `arrival` counts steps and frame *i* of both
sides is the state after iteration *i* (a stretch where both sides are idle
is skipped; `Comparison.times` says when each frame is). Pass ``model=`` (a `LatencyModel`)
to replay a simulator trace in seconds; frames then fall where either side
ends an iteration, each side shown after its iteration in progress.

The paged side is recorded by a `Recorder` reading the paged simulator's
own `KVCacheManager` and queues at each moment (its requests named as in
the trace), so its frames are the very frames the block map draws. Whether
a request can ever fit is the simulators' own rule (`Simulator.never_fits`:
its length limit and its memory), asked before anything runs.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Hashable, Iterable
from dataclasses import dataclass, replace
from typing import Any

from .._validation import check_choice, check_int, did_you_mean
from ..memory import POLICIES, ContiguousAllocator, ContiguousStats
from ..sim import LatencyModel, ManagerSpec, ModelPreset, Simulator, StepClock, Trace, TraceRequest
from ..sim.managers import Group, Seq
from .frames import Frame
from .recorder import Recorder


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
    next_size: int | None = None  # slots the head of the queue asks for (None: nobody waits)

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
    """The same trace through both memories: frame *i* of each is the same moment."""

    policy: str
    block_size: int
    capacity: int  # token slots, the same on both sides
    contiguous: tuple[ContiguousFrame, ...]
    paged: tuple[Frame, ...]
    recorder: Recorder  # the paged side's recorder (its colors, its frames)
    times: tuple[float, ...] = ()  # the clock at each frame (steps, or seconds)

    def __len__(self) -> int:
        return len(self.paged)

    def __repr__(self) -> str:
        """One line (the frames are many: `ContiguousVsPaged` draws them; newcomer 40)."""
        requests = len(self.recorder.first_seen)
        return (f"Comparison({self.policy} vs paged, {len(self)} frames, {self.capacity} slots "
                f"in blocks of {self.block_size}, {requests} request"
                f"{'' if requests == 1 else 's'}: ContiguousVsPaged(comparison) draws them)")


def as_trace(requests: Trace | Iterable[Any]) -> list[TraceRequest]:
    """A `pagedkit.sim.Trace`, `pagedkit.sim.TraceRequest`s, or anything with
    ``prompt_len`` and ``output_len`` (and optionally ``request_id``, any
    hashable name, by default its position, and ``arrival``, by default 0)."""
    items = requests.requests if isinstance(requests, Trace) else requests
    trace = []
    for i, r in enumerate(items):
        if isinstance(r, TraceRequest):
            trace.append(r)
            continue
        try:
            prompt_len, output_len = r.prompt_len, r.output_len
        except AttributeError:
            raise TypeError(f"trace item {i} ({r!r}) has no prompt_len/output_len") from None
        trace.append(TraceRequest(getattr(r, "request_id", i), getattr(r, "arrival", 0.0),
                                  prompt_len, output_len))
    return trace


#: The `Simulator` options `replay` passes on to both sides (the rest it sets itself).
REPLAY_OPTIONS = tuple(name for name, p in inspect.signature(Simulator).parameters.items()
                       if p.kind is p.KEYWORD_ONLY
                       and name not in ("model", "capacity_slots", "events"))


def replay(requests: Trace | Iterable[Any], *, num_blocks: int | None = None,
           block_size: int | None = None,
           policy: str = "pow2", max_seq_len: int | None = None,
           model: LatencyModel | ModelPreset | None = None, max_steps: int = 10_000,
           **options: Any) -> Comparison:
    """Step `requests` (see `as_trace`) through both memories until every
    request finished on both.

    Both get `num_blocks` blocks of `block_size` slots; the contiguous one
    reserves by `policy` (``"max"``, ``"pow2"`` or ``"oracle"``, first-fit)
    up to `max_seq_len` (by default the longest request's prompt + output).
    `model` is the clock (`StepClock()`: one step per iteration); other
    keyword arguments (``prefill``, ``preemption``, ``watermark``,
    ``max_num_seqs``) go to both `Simulator`s. Unlike the simulator's
    paper experiments, a replay mixes new prompts into the decoding
    iteration (``prefill="mixed"``, as pagedkit's engine and Orca do), so
    every running request writes one token at every step; pass
    ``prefill="separate"`` for the paper's vLLM.
    """
    own = ("num_blocks", "block_size", "policy", "max_seq_len", "model", "max_steps")
    for name in options:
        if name not in REPLAY_OPTIONS:  # newcomer 41: Simulator.__init__'s TypeError
            raise TypeError(f"replay() got an unexpected keyword argument {name!r}"
                            f"{did_you_mean(name, own + REPLAY_OPTIONS)}; the simulators' "
                            f"options it passes on: {', '.join(REPLAY_OPTIONS)}")
    for name, value in (("num_blocks", num_blocks), ("block_size", block_size)):
        if value is None:  # required; a default of None lets a misspelling be named above
            raise TypeError(f"replay() needs {name}=: the pool both memories get is "
                            "num_blocks blocks of block_size token slots")
    check_int("num_blocks", num_blocks, minimum=1)
    check_int("block_size", block_size, minimum=1)
    check_choice("policy", policy, POLICIES)
    check_int("max_steps", max_steps, minimum=1)
    trace = as_trace(requests)
    if not trace:
        raise ValueError("the trace is empty: give at least one request")
    # Names become strings: both sides must name (and so color) a request alike.
    names = [str(r.request_id) for r in trace]
    if len(set(names)) != len(names):
        raise ValueError("request ids in the trace must be unique")
    capacity = num_blocks * block_size
    for r, name in zip(trace, names, strict=True):
        check_int(f"prompt_len of request {name!r}", r.prompt_len, minimum=1)
        check_int(f"output_len of request {name!r}", r.output_len, minimum=1)
        if not (math.isfinite(r.arrival) and r.arrival >= 0):
            raise ValueError(f"request {name!r} arrives at {r.arrival!r}; give a time >= 0")
    longest = max(r.total_len for r in trace)
    max_seq_len = check_int("max_seq_len", max_seq_len or longest, minimum=1)
    for r, name in zip(trace, names, strict=True):
        if r.total_len > max_seq_len:  # the limit said, not either memory (newcomer 41)
            raise ValueError(f"request {name!r} needs {r.total_len} tokens (prompt "
                             f"{r.prompt_len} + output {r.output_len}), more than "
                             f"max_seq_len={max_seq_len}: give max_seq_len={longest} or more, "
                             "or leave it out (the longest request's length)")

    # The simulators take requests in arrival order, numbered from 0.
    order = sorted(range(len(trace)), key=lambda i: trace[i].arrival)
    sim_trace = Trace("replay", tuple(
        TraceRequest(k, float(trace[i].arrival), trace[i].prompt_len, trace[i].output_len)
        for k, i in enumerate(order)), "pagedkit.viz.replay")
    names = [names[i] for i in order]
    clock = model if isinstance(model, LatencyModel) else \
        StepClock() if model is None else LatencyModel(model)
    clock = replace(clock, preset=replace(clock.preset, max_seq_len=max_seq_len))
    options.setdefault("prefill", "mixed")
    paged = Simulator(sim_trace, ManagerSpec("paged", block_size), model=clock,
                      capacity_slots=capacity, **options)
    contiguous = Simulator(sim_trace, ManagerSpec(policy), model=clock, capacity_slots=capacity,
                           **options)
    _refuse_what_never_fits(sim_trace, names,
                            {"paged": paged, f"contiguous ({policy})": contiguous})
    # one frame per moment of the replay, not per paged iteration: cut by hand
    recorder = Recorder(paged.memory_manager, paged, request_name=names.__getitem__,
                        cut_on_step=False)
    frames = [_contiguous_frame(0, contiguous, names)]
    times = [0.0]
    sides = (paged, contiguous)
    while starts := [(s.next_step_time, k) for k, s in enumerate(sides)
                     if s.next_step_time is not None]:
        if len(frames) > max_steps:
            raise RuntimeError(f"the trace did not finish within max_steps={max_steps} steps")
        _, k = min(starts)  # the side whose next iteration starts first runs it
        sides[k].step()
        now = sides[k].now
        sides[1 - k].advance_to(now)  # the other catches up to that moment
        recorder.cut(paged.step_count)
        frames.append(_contiguous_frame(len(frames), contiguous, names))
        times.append(now)
    recorder.close()
    return Comparison(policy, block_size, capacity, tuple(frames), tuple(recorder.frames),
                      recorder, tuple(times))


def _refuse_what_never_fits(trace: Trace, names: list[str], sims: dict[str, Simulator]) -> None:
    """A request either side (`sims`, by the name the replay gives it) could never
    hold (too long for ``max_seq_len``, or for its memory) is refused up front,
    in the simulator's own words (it would otherwise abort it mid-replay)."""
    for r, name in zip(trace.requests, names, strict=True):
        group = Group(r, r.prompt_len, [Seq(0, r.output_len)])
        for side, sim in sims.items():
            if (why := sim.never_fits(group)) is not None:
                raise ValueError(f"request {name!r} never fits the {side} memory of "
                                 f"{sim.capacity} slots: it {why}")


def _contiguous_frame(index: int, sim: Simulator, names: list[str]) -> ContiguousFrame:
    """The contiguous simulator's address space now, regions named by request."""
    mem: ContiguousAllocator = sim.memory_manager
    owner = {seq.seq_id: names[g.request_id] for g in sim.running for seq in g.seqs}
    stats = mem.stats()
    head = sim.waiting[0] if sim.waiting else None
    next_size = sim.memory.region_size(head) if head is not None else None
    external = stats.external_fragmentation(next_size) if next_size is not None else 0
    regions = tuple(Region(owner[r.request], r.start, r.size, r.need, r.used)
                    for r in mem.regions())
    return ContiguousFrame(index, regions, tuple(mem.holes()), stats, len(sim.running),
                           len(sim.waiting), external, next_size)
