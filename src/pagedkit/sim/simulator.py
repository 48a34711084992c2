"""The simulator: iteration-level FCFS scheduling over a trace, no model compute.

A deliberately small model of the scheduler the paper evaluates (§4.5,
§6.1; Orca's iteration-level scheduling). Each call to `Simulator.step`
is one iteration. By default (``prefill="separate"``) it runs as the vLLM
the paper measured did:

1. Requests whose arrival time has passed join the waiting queue.
2. If requests wait and none is swapped out, they are admitted in arrival
   order while memory and `max_num_seqs` allow (the paged manager keeps a
   `watermark` of free blocks back, as vLLM does); a request that could
   never fit is aborted with the reason. If anyone was admitted, this
   iteration computes their prompts alone (each produces its first token)
   while the running requests wait, holding their memory: on to step 5.
3. Otherwise every running request, oldest first, gets a slot for the
   token it computes now (the one it produced last). If the paged pool has
   no block left, the newest running request is preempted until the older
   one fits: its blocks are freed and it returns to its place (by arrival)
   in the waiting queue to be recomputed later
   (the paper's default), or they are swapped to CPU memory
   (``preemption="swap"``; the transfer takes time, `LatencyModel.swap_time`,
   added to this iteration's). Contiguous managers reserved at admission and
   never run out. If nobody was preempted, swapped-out requests come back,
   oldest first, while they fit.
4. Every running sequence produces one token.
5. `LatencyModel` says how long the iteration took (its compute, plus the
   blocks swapped out and in before it, which it waits for); sequences that
   produced their whole output finish and free their memory.

``prefill="mixed"`` is Orca's batching (and pagedkit's engine's): a newly
admitted prompt joins the decoding iteration instead, so admission (step
2, when nobody was preempted and nobody is swapped out) comes after step
3 and every running request produces a token in every iteration.
``separate`` is the default because it is the paper's setting: every
experiment of `pagedkit.sim.experiments` and ``python -m pagedkit
simulate`` use it, so a `Simulator` made without options reproduces them.

``batching="static"`` is request-level batching, the scheduling the paper
contrasts with Orca's iteration-level one (§2.3, §6; FasterTransformer's):
nothing enters the running batch (admission in step 2, swap-in in step 3)
while any request runs. A batch is formed, first come first served, only
when the previous one has drained, and runs until its last request
finishes, however many slots its finished requests left empty. With paged
memory a request can still be preempted inside a batch; it leaves the
batch and, back in the waiting (or swapped) queue by arrival, heads the
next one. The default, ``"iteration"``, admits whenever memory allows.

Every change is announced on `events` exactly as the engine announces it
(the memory manager's own events plus ``admit``, ``preempt``, ``finish`` and
``step``), so a widget can animate a simulation like a live engine. With
no listener, no event is ever built.
"""

from __future__ import annotations

import random
import time
from collections import Counter, deque
from collections.abc import Hashable
from dataclasses import dataclass

from .._validation import check_int, check_name, check_number, choice_name
from ..i18n import _
from ..memory import ContiguousAllocator, EventBus, KVCacheManager
from ..scheduler import PREEMPTION_MODES, Admit, Finish, Preempt, Step
from ..scheduler.policy import (
    Admission,
    Fit,
    Room,
    admit_head,
    insert_by_arrival,
    make_room,
    preemption_mode,
)
from .latency import PRESETS, LatencyModel, ModelPreset
from .managers import PAGED, ContiguousMemory, Group, ManagerSpec, PagedMemory, Seq, Usage
from .metrics import RequestResult, SimResult, StepLog
from .sharing import (
    BeamSearch,
    ParallelSampling,
    SharedPrefix,
    Sharing,
    choose_parents,
    group_past_max_num_seqs,
    num_sequences,
    sample_output_lens,
)
from .trace import Trace

PREFILL_MODES = ("separate", "mixed")  # the default first
BATCHING_MODES = ("iteration", "static")  # the default first
DEFAULT_MAX_NUM_SEQS = 256  # sequences one iteration may run (vLLM's default)


@dataclass(frozen=True)
class StepRecord:
    """What one iteration did (returned by `Simulator.step`)."""

    step: int
    time: float  # when it started (s)
    duration: float  # how long it took (s)
    num_running: int  # requests in the running batch: admitted, holding KV memory (Fig. 13)
    num_scheduled: int  # requests whose tokens this iteration computed
    num_scheduled_seqs: int  # their sequences (beams, parallel samples)
    num_waiting: int
    num_swapped: int
    admitted: tuple[int, ...]  # request ids
    preempted: tuple[int, ...]
    finished: tuple[int, ...]
    num_tokens: int  # tokens computed (prompt tokens + one per decoding sequence)
    usage: Usage


class Simulator:
    """Run `trace` through one memory manager, one iteration per `step()`.

    `manager` is a `ManagerSpec` or its text (``"max"``, ``"pow2"``,
    ``"oracle"``, ``"paged"``, ``"paged:32"``); `model` a `LatencyModel`, a
    `ModelPreset` or a preset's name as the command line takes it (``"opt-13b"``:
    `PRESETS`), whose KV slots are the capacity unless `capacity_slots`
    says otherwise. `prefill` is ``"separate"`` (the paper's vLLM: new prompts
    run in an iteration of their own) or ``"mixed"`` (Orca: they join the
    decoding batch); `batching` is ``"iteration"`` (Orca, vLLM: requests
    join and leave the batch at every iteration) or ``"static"`` (a batch is
    formed only when nothing runs, and runs to its last request); see the
    module docstring. With ``preemption="swap"`` the blocks swapped out and
    back in cross the CPU-GPU link in the iteration that moves them
    (`LatencyModel.swap_time`: blocks x block bytes / the preset's
    `link_bandwidth`, 25 GB/s per GPU by default). `max_num_seqs` must hold a
    request's sequences (`sharing`'s n or width): they run as one group. `memory_manager` is the
    `pagedkit.memory` object being driven, for widgets to draw.

    >>> from pagedkit.sim import synthetic_trace
    >>> sim = Simulator(synthetic_trace("alpaca", rate=5, num_requests=20), "paged")
    >>> result = sim.run()
    >>> len(result.finished)
    20
    """

    def __init__(self, trace: Trace, manager: ManagerSpec | str = PAGED, *,
                 model: LatencyModel | ModelPreset | str | None = None,
                 capacity_slots: int | None = None, max_num_seqs: int = DEFAULT_MAX_NUM_SEQS,
                 preemption: str = "recompute", prefill: str = "separate",
                 batching: str = "iteration", swap_slots: int | None = None,
                 watermark: float = 0.01, sharing: Sharing | None = None, seed: int = 0,
                 events: EventBus | None = None) -> None:
        if not isinstance(trace, Trace):
            raise TypeError(f"trace must be a pagedkit.sim.Trace (synthetic_trace, load_trace, or "
                            f"Trace(name, requests)), got {type(trace).__name__}")
        if not isinstance(manager, (str, ManagerSpec)):
            raise TypeError(f"manager must be a ManagerSpec or one of 'max', 'pow2', 'oracle', "
                            f"'paged', 'paged:BLOCK_SIZE'; got {manager!r}")
        self.spec = ManagerSpec.parse(manager) if isinstance(manager, str) else manager
        if isinstance(model, str):
            model = PRESETS.get(choice_name(model), model)
        if isinstance(model, str):
            raise ValueError(f"model {model!r} is not a preset: give one of "
                             f"{', '.join(map(repr, PRESETS))} (pagedkit.sim.PRESETS), a "
                             "ModelPreset (pagedkit.sim.OPT_13B) or a LatencyModel")
        if model is not None and not isinstance(model, (LatencyModel, ModelPreset)):
            raise TypeError(f"model must be a LatencyModel, a ModelPreset (pagedkit.sim.OPT_13B) "
                            f"or a preset's name ({', '.join(map(repr, PRESETS))}), got "
                            f"{model!r}")
        if sharing is not None and not isinstance(sharing, (ParallelSampling, BeamSearch,
                                                            SharedPrefix)):
            raise TypeError(f"sharing must be ParallelSampling, BeamSearch or SharedPrefix, got "
                            f"{sharing!r}")
        if swap_slots is not None:
            check_int("swap_slots", swap_slots, minimum=0)
        check_int("seed", seed)
        check_number("watermark", watermark)
        if model is None:
            model = LatencyModel()
        self.latency = model if isinstance(model, LatencyModel) else LatencyModel(model)
        preset = self.latency.preset
        self.capacity = preset.kv_slots if capacity_slots is None else check_int(
            "capacity_slots", capacity_slots, minimum=1)
        check_int("max_num_seqs", max_num_seqs, minimum=1)
        preemption = check_name("preemption", preemption, PREEMPTION_MODES)
        prefill = check_name("prefill", prefill, PREFILL_MODES)
        batching = check_name("batching", batching, BATCHING_MODES)
        if not 0 <= watermark < 1:
            raise ValueError(f"watermark must be a fraction in [0, 1), got {watermark}")
        if sharing is not None and not self.spec.paged:
            raise ValueError(f"{sharing.label} shares KV blocks, which only the paged manager "
                             f"can do; got {self.spec.label}")
        problem = group_past_max_num_seqs(sharing, max_num_seqs)
        if problem:
            raise ValueError(problem)
        self.trace, self.sharing, self.preemption = trace, sharing, preemption
        self.prefill, self.batching = prefill, batching
        self.max_num_seqs, self.max_seq_len = max_num_seqs, preset.max_seq_len
        self.events = events if events is not None else EventBus()
        if self.spec.paged:
            if swap_slots is None:  # vLLM's default swap space: 4 GiB per GPU
                swap_slots = preset.slots_for_bytes(4 * (1 << 30) * preset.num_gpus)
            self.memory = PagedMemory(
                self.spec, self.capacity, swap_slots=swap_slots if preemption == "swap" else 0,
                enable_prefix_caching=isinstance(sharing, SharedPrefix), events=self.events,
                whose=preset.name if capacity_slots is None else "the capacity")
            self._watermark = int(watermark * self.memory.num_blocks)
        else:
            self.memory = ContiguousMemory(self.spec, self.capacity, self.max_seq_len)
            self._watermark = 0
        self._block_size = self.spec.block_size if self.spec.paged else None
        self._rng = random.Random(seed)
        self._output_pool = [r.output_len for r in trace.requests] or [1]
        self._prefix = list(range(1, sharing.length + 1)) if isinstance(
            sharing, SharedPrefix) else []
        self.now = 0.0
        self.step_count = 0
        self.waiting: deque[Group] = deque()
        self.running: list[Group] = []
        self.swapped: deque[Group] = deque()
        self.results: list[RequestResult] = []
        # results are listed in trace order: ids may be names, or of mixed kinds
        self._order = {r.request_id: i for i, r in enumerate(trace.requests)}
        self.log = StepLog()
        self.num_preemptions = 0
        self._blocks_moved = 0  # swapped out or in since the last iteration was timed
        self._next_arrival = 0
        self._next_seq_id = 0
        self._wall = 0.0

    # ------------------------------------------------------------- queries
    @property
    def done(self) -> bool:
        return (self._next_arrival == len(self.trace.requests) and not self.waiting
                and not self.running and not self.swapped)

    @property
    def memory_manager(self) -> KVCacheManager | ContiguousAllocator:
        """The `pagedkit.memory` object the simulation drives."""
        return self.memory.kv if self.spec.paged else self.memory.allocator

    def result(self) -> SimResult:
        """The measurements so far (complete once `done`)."""
        return SimResult(self.spec.label, self.trace.name, self.capacity,
                         sorted(self.results, key=lambda r: self._order[r.request_id]), self.log,
                         self._wall, self.num_preemptions,
                         {"sharing": self.sharing.label if self.sharing else None,
                          "preemption": self.preemption, "prefill": self.prefill,
                          "batching": self.batching})

    # ----------------------------------------------------------------- run
    def run(self, progress: bool | None = None) -> SimResult:
        """Step until every request has finished. A progress bar shows for
        long traces (`progress=None`: more than 2,000 requests)."""
        from tqdm.auto import tqdm

        show = len(self.trace) > 2000 if progress is None else progress
        self.memory.lazy = not self.events  # exact per-token calls only if watched
        started = time.perf_counter()
        try:
            with tqdm(total=len(self.trace), initial=len(self.results), disable=not show,
                      unit=_("req"), desc=_("{manager} on {trace}").format(
                          manager=self.spec.label, trace=self.trace.name)) as bar:
                reported = len(self.results)
                while not self.done:  # like step(), without the StepRecords nobody reads
                    self._iterate()
                    if len(self.results) != reported:
                        bar.update(len(self.results) - reported)
                        reported = len(self.results)
        finally:
            self.memory.sync(self.running)
            self.memory.lazy = False
            self._wall += time.perf_counter() - started
        return self.result()

    @property
    def next_step_time(self) -> float | None:
        """When the next iteration starts: now while any arrived request is
        unfinished, else when the next one arrives; ``None`` once done."""
        if self.waiting or self.running or self.swapped:
            return self.now
        if self._next_arrival < len(self.trace):
            return max(self.now, self.trace.requests[self._next_arrival].arrival)
        return None

    def advance_to(self, seconds: float) -> list[StepRecord]:
        """Run the iterations that start before `seconds`, e.g. to show two
        managers side by side at the same moment. The last one may end past
        it; an idle stretch is crossed only up to `seconds`. `seconds` is a time
        on the trace's clock (a finite number >= 0); one already reached runs
        nothing."""
        seconds = check_number("seconds", seconds, minimum=0)
        records = []
        while self.now < seconds and (start := self.next_step_time) is not None:
            if start >= seconds:  # idle until then
                self.now = seconds
                break
            record = self.step()
            if record is None:
                break
            records.append(record)
        return records

    def step(self) -> StepRecord | None:
        """Run one iteration; ``None`` once every request has finished."""
        started = time.perf_counter()
        record = None
        while record is None and not self.done:
            facts = self._iterate()  # None: everyone who had arrived was aborted
            if facts is not None:
                *counts, admitted, preempted, finished, num_tokens, usage = facts
                record = StepRecord(*counts, _ids(admitted), _ids(preempted), _ids(finished),
                                    num_tokens, usage)
        self._wall += time.perf_counter() - started
        return record

    def _iterate(self) -> tuple | None:
        """One iteration; returns the fields of its `StepRecord` (groups where
        it has request ids), or None if it ran nothing."""
        self._arrive()
        if not (self.running or self.waiting or self.swapped):
            self.now = self.trace.requests[self._next_arrival].arrival  # idle: skip ahead
            self._arrive()
        separate = self.prefill == "separate"
        # static batching: the batch is closed while anyone in it runs
        open_batch = self.batching == "iteration" or not self.running
        if separate and open_batch and self.waiting and not self.swapped:
            prefill, admitted = self._admit()
            if admitted:  # a prompt iteration: only the newcomers run
                return self._execute(prefill, admitted, [], admitted)
        preempted = self._make_room_for_running()
        prefill, admitted = 0, []
        if not preempted and open_batch:
            self._swap_in()
            if not self.swapped and not separate:
                prefill, admitted = self._admit()
        if not self.running:
            if self.waiting or self.swapped:  # an empty pool always takes the head
                raise RuntimeError("the simulator could not schedule anything; this is a bug")
            return None  # everyone who had arrived was aborted
        return self._execute(prefill, admitted, preempted, self.running)

    # -------------------------------------------------------------- phases
    def _arrive(self) -> None:
        requests = self.trace.requests
        while self._next_arrival < len(requests) and \
                requests[self._next_arrival].arrival <= self.now:
            self.waiting.append(self._new_group(requests[self._next_arrival],
                                                self._next_arrival))
            self._next_arrival += 1

    def _new_group(self, request, order: int) -> Group:
        """The group for `request`, the trace's `order`-th (counting from 0)."""
        prompt_len = len(self._prefix) + request.prompt_len
        n = num_sequences(self.sharing)
        if isinstance(self.sharing, ParallelSampling):
            room = max(1, self.max_seq_len - prompt_len)
            lens = sample_output_lens(request.output_len, n, self._output_pool, room, self._rng)
        else:
            lens = [request.output_len] * n
        seqs = [Seq(self._next_seq_id + i, length) for i, length in enumerate(lens)]
        self._next_seq_id += n
        # a token id no other request uses (the prefix's are positive), for the
        # prompt and generated tokens; from the place in the trace, as an id may be a name
        return Group(request, prompt_len, seqs, order=order, token=[-1 - order])

    def _make_room_for_running(self) -> list[Group]:
        """Give every running request its next slot, oldest first, preempting
        the newest while the paged pool is short (§4.5, `policy.make_room`)."""
        preempted: list[Group] = []
        queue, self.running = deque(self.running), []
        while queue:
            group = queue.popleft()
            if isinstance(self.sharing, BeamSearch):
                self._reshuffle_beams(group)  # once per iteration, also when retried
            fits = self.memory.try_append(group)
            while not fits:
                room = make_room(newer_unserved=bool(queue), older_served=bool(self.running))
                if room is Room.NEVER:  # admission checked it fits an empty pool
                    raise RuntimeError(f"request {group.request_id} outgrew the whole pool "
                                       "alone; the simulator's admission check has a bug")
                victim = queue.pop() if room is Room.PREEMPT_NEWEST else group
                self._preempt(victim)
                preempted.append(victim)
                if victim is group:
                    break
                fits = self.memory.try_append(group)
            if fits:
                self.running.append(group)
        return preempted

    def _reshuffle_beams(self, group: Group) -> None:
        """Beam search's step (§4.4): each new beam extends a chosen parent;
        unchosen beams are freed first, then parents chosen more than once fork."""
        children = Counter(choose_parents(len(group.seqs), self._rng))
        chosen = []
        for i, seq in enumerate(group.seqs):
            if children[i]:
                chosen.append((seq, children[i]))
            else:
                self.memory.free_seq(group, seq)
                if self.events:
                    self.events.emit(Finish(seq.seq_id, group.request_id, "pruned"))
        beams = []
        for seq, count in chosen:
            beams.append(seq)
            for _copy in range(count - 1):
                child = Seq(self._next_seq_id, seq.output_len, seq.generated)
                self._next_seq_id += 1
                self.memory.fork_seq(group, seq, child)
                beams.append(child)
        group.seqs = beams

    def _preempt(self, group: Group) -> None:
        how = preemption_mode(self.preemption,
                              self.preemption == "swap" and self.memory.can_swap_out(group))
        if how == "swap":
            self._blocks_moved += self.memory.swap_out(group)
            insert_by_arrival(self.swapped, group, _arrival)
        else:  # recompute: drop the KV cache, keep the generated tokens
            for seq in group.seqs:
                self.memory.free_seq(group, seq)
            insert_by_arrival(self.waiting, group, _arrival)
        group.num_preemptions += 1
        self.num_preemptions += 1
        if self.events:
            for seq in group.seqs:
                self.events.emit(Preempt(seq.seq_id, group.request_id, how))

    def _num_running_seqs(self) -> int:
        return sum(len(g.seqs) for g in self.running)

    def _swap_in(self) -> None:
        """Bring swapped-out requests back, oldest first, while they fit."""
        seqs = self._num_running_seqs()
        while self.swapped:
            group = self.swapped[0]
            # room to come back plus one block per sequence for its next token;
            # into an otherwise empty pool a group always fits (it did before)
            reserve = len(group.seqs) + self._watermark if self.running else 0
            fit = (Fit.NO_BUDGET if seqs + len(group.seqs) > self.max_num_seqs else
                   Fit.YES if self.memory.can_swap_in(group, reserve) else Fit.NO_MEMORY)
            verdict = admit_head(fit, memory_held=bool(self.running))
            if verdict is Admission.WAIT:
                return
            if verdict is Admission.NEVER:
                raise RuntimeError(f"request {group.request_id} cannot come back from swap; "
                                   "this is a bug")
            self.swapped.popleft()
            self._blocks_moved += self.memory.swap_in(group)
            if not self.memory.try_append(group):
                raise RuntimeError("a swapped-in group found no room it had reserved")
            insert_by_arrival(self.running, group, _arrival)
            seqs += len(group.seqs)

    def _admit(self) -> tuple[int, list[Group]]:
        """Admit waiting requests in arrival order while they fit and the
        running sequences stay within `max_num_seqs`. Returns the prompt
        tokens to compute and the admitted groups."""
        if not self.waiting or self.waiting[0] is self.memory.blocked:
            return 0, []  # nobody waits, or nothing was freed since the head did not fit
        prefill, seqs, admitted = 0, self._num_running_seqs(), []
        while self.waiting:
            group = self.waiting[0]
            never = None if group.checked else self.never_fits(group)
            if never:
                self.waiting.popleft()
                self._abort(group, never)
                continue
            group.checked = True
            computed = None
            if seqs + len(group.seqs) <= self.max_num_seqs:
                computed = self._try_admit(group)
            if computed is None:  # first come, first served: everyone behind it waits
                break
            self.waiting.popleft()
            insert_by_arrival(self.running, group, _arrival)
            admitted.append(group)
            prefill += computed
            seqs += len(group.seqs)
            if self.events:
                for seq in group.seqs:
                    self.events.emit(Admit(seq.seq_id, group.request_id))
        return prefill, admitted

    def never_fits(self, group: Group) -> str | None:
        """Why `group` can never be admitted — longer than ``max_seq_len``, or
        more than this memory holds even alone — or None."""
        longest = max(s.output_len for s in group.seqs)
        if group.prompt_len + longest > self.max_seq_len:
            return _("needs {tokens} tokens > max_seq_len {max_seq_len}").format(
                tokens=group.prompt_len + longest, max_seq_len=self.max_seq_len)
        return self.memory.never_fits(group)

    def _try_admit(self, group: Group) -> int | None:
        """Allocate the group's prompt (plus tokens to recompute); returns how
        many tokens its prefill computes, or None if memory is short."""
        recompute = sum(s.generated for s in group.seqs)
        if not self.spec.paged:
            ok = self.memory.try_admit(group)
            return group.prompt_len + recompute if ok else None
        watermark = self._watermark if self.running else 0  # an empty pool takes anyone
        hit = self.memory.try_admit(group, self._prefix, watermark)
        return None if hit is None else group.prompt_len - hit + recompute

    def _execute(self, prefill: int, admitted: list[Group], preempted: list[Group],
                 batch: list[Group]) -> tuple:
        """Every sequence of the `batch` produces a token; time the iteration;
        finish whoever is done."""
        scheduled, num_seqs, context = len(batch), 0, 0
        finished_seqs = []
        for group in batch:
            prompt_len = group.prompt_len
            for seq in group.seqs:
                context += prompt_len + seq.generated  # what it attends over: all it holds
                seq.generated += 1
                if seq.generated == seq.output_len:
                    finished_seqs.append((group, seq))
            num_seqs += len(group.seqs)
        decoding = num_seqs - sum(len(g.seqs) for g in admitted) if admitted else num_seqs
        num_tokens = prefill + decoding  # the prompts (and tokens recomputed), one per decode
        duration = self.latency.step_time(num_tokens, context, self._block_size)
        if self._blocks_moved:  # the iteration waits for its swaps (PCIe)
            duration += self.latency.swap_time(self._blocks_moved, self._block_size)
            self._blocks_moved = 0
        start, self.now = self.now, self.now + duration
        for group in admitted:
            if group.first_token_time is None:
                group.first_token_time = self.now
        head = self.waiting[0] if self.waiting else None
        usage = self.memory.usage(head, self.running if self.sharing else None)
        self.log.add(start, duration, len(self.running), scheduled, num_seqs,
                     len(self.waiting), num_tokens, context, usage)
        finished_groups = []
        for group, seq in finished_seqs:
            self.memory.free_seq(group, seq)
            group.seqs.remove(seq)
            group.done.append(seq)
            if self.events:
                self.events.emit(Finish(seq.seq_id, group.request_id, "stop"))
            if not group.seqs:
                finished_groups.append(group)
        num_running = len(self.running)
        if finished_groups:
            done = set(map(id, finished_groups))
            self.running = [g for g in self.running if id(g) not in done]
            for group in finished_groups:
                self._record(group, "stop")
        self.step_count += 1
        if self.events:  # the queues ride along, as the engine's scheduler sends them
            self.events.emit(Step(self.step_count, len(self.running), len(self.waiting),
                                  len(self.swapped)))
        return (self.step_count, start, duration, num_running, scheduled, num_seqs,
                len(self.waiting), len(self.swapped), admitted, preempted, finished_groups,
                num_tokens, usage)

    # ------------------------------------------------------------- helpers
    def _abort(self, group: Group, reason: str) -> None:
        if self.events:
            for seq in group.seqs:
                self.events.emit(Finish(seq.seq_id, group.request_id, "abort", reason))
        self._record(group, f"abort: {reason}")

    def _record(self, group: Group, reason: str) -> None:
        r = group.request
        self.results.append(RequestResult(r.request_id, r.arrival, group.prompt_len,
                                          r.output_len, group.first_token_time, self.now,
                                          group.num_preemptions, reason))


def _ids(groups: list[Group]) -> tuple[Hashable, ...]:
    return tuple(g.request_id for g in groups)


def _arrival(group: Group) -> tuple[float, int]:
    return group.request.arrival, group.order  # the trace is in arrival order


def simulate(trace: Trace, manager: ManagerSpec | str = PAGED, *,
             progress: bool | None = None, **options) -> SimResult:
    """Run a whole trace through one manager (see `Simulator` for the options)."""
    return Simulator(trace, manager, **options).run(progress)
