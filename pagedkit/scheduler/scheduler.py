"""Iteration-level scheduling over paged memory (paper §4.5, after Orca).

Every step the scheduler decides, from scratch, which sequences compute which
tokens. A step is one forward pass over a *mixed* batch: decode tokens of
running sequences and prompt tokens (whole, or a chunk with chunked prefill)
of newly admitted ones. Requests join and leave between any two steps —
continuous batching — so a short request never waits for a long one.

The order of each step:

1. **Running** groups, oldest first, get room for their next tokens. When
   the block pool runs dry, the *newest* running group is preempted (all its
   sequences at once: they share blocks) until the older one fits. Preemption
   either frees the group's blocks and recomputes its tokens later
   (``"recompute"``) or parks them in CPU memory (``"swap"``).
2. **Swapped** groups come back, oldest first, when their blocks fit again.
3. **Waiting** groups are admitted first-come first-served while the token
   budget, the sequence cap and the pool allow — but never while a group
   sits swapped out or someone was preempted this step (paper §4.5): memory
   is short, and the oldest requests go first.

"Oldest" is by arrival: every queue is kept in arrival order, so a group
brought back from swap or recomputation takes its old place. The prompt of a
new request must fit one step's token budget (the engine checks); the
tokens a preempted sequence must recompute may not, so they are spread over
as many steps as needed, as chunked prefill would.

Every decision is also an event (`Admit`, `Preempt`, `Finish`, `Step`, from
`pagedkit.scheduler.events`) on the memory's event bus, so widgets can replay it.
"""

from __future__ import annotations

import enum
import time
from collections import deque
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass, field

from .._validation import check_choice, check_int
from ..memory import BlockCopy, KVCacheManager
from ..sequence import FinishReason, Sequence, SequenceGroup, SequenceStatus
from .events import Admit, Finish, Preempt, Step
from .policy import Verdict, admit_fcfs, insert_by_arrival, preemption_mode, serve_oldest_first

PREEMPTION_MODES = ("recompute", "swap")


@dataclass(frozen=True)
class SchedulerConfig:
    max_num_seqs: int = 256  # sequences computed in one step
    max_num_batched_tokens: int = 2048  # tokens computed in one step
    enable_chunked_prefill: bool = False  # may a prompt be split across steps?
    preemption_mode: str = "recompute"

    def __post_init__(self) -> None:
        check_int("max_num_seqs", self.max_num_seqs, minimum=1)
        check_int("max_num_batched_tokens", self.max_num_batched_tokens, minimum=1)
        check_choice("preemption_mode", self.preemption_mode, PREEMPTION_MODES)


@dataclass(slots=True)
class ScheduledSeq:
    """One sequence's share of a step: tokens ``start .. start + num_tokens``."""

    group: SequenceGroup
    seq: Sequence
    num_tokens: int
    start: int

    @property
    def computes_last_token(self) -> bool:
        """Does this step compute the sequence's last token (so a next token is
        sampled from its logits)? A prompt chunk that stops short does not."""
        return self.start + self.num_tokens == self.seq.num_tokens


@dataclass
class SchedulerOutput:
    """What one step will compute, and the memory moves that must happen first."""

    step: int
    scheduled: list[ScheduledSeq] = field(default_factory=list)
    block_copies: list[BlockCopy] = field(default_factory=list)  # copy-on-write, GPU -> GPU
    swap_out: list[BlockCopy] = field(default_factory=list)  # GPU block -> CPU block
    swap_in: list[BlockCopy] = field(default_factory=list)  # CPU block -> GPU block
    preempted: list[tuple[SequenceGroup, str]] = field(default_factory=list)
    admitted: list[SequenceGroup] = field(default_factory=list)
    ended: list[SequenceGroup] = field(default_factory=list)  # could never fit the cache

    @property
    def num_batched_tokens(self) -> int:
        return sum(s.num_tokens for s in self.scheduled)

    @property
    def is_empty(self) -> bool:
        return not self.scheduled


class Scheduler:
    """FCFS continuous batching with a token budget, a sequence cap and preemption."""

    def __init__(self, config: SchedulerConfig, kv: KVCacheManager, *,
                 release_window: int | None = None) -> None:
        """`release_window`: the sliding window of a model whose every attention
        layer slides; after each step, blocks the window has left go back to
        the pool (`KVCacheManager.release_outside_window`). ``None`` (the
        default, and a must for models with any full-attention layer) keeps
        every block until the sequence ends."""
        if release_window is not None:
            check_int("release_window", release_window, minimum=1)
        self.config = config
        self.kv = kv
        self.release_window = release_window
        self.events = kv.events
        self.waiting: deque[SequenceGroup] = deque()
        self.running: list[SequenceGroup] = []
        self.swapped: deque[SequenceGroup] = deque()
        self.num_steps = 0
        self.num_preemptions = 0

    # ----------------------------------------------------------------- queues
    def add(self, group: SequenceGroup) -> None:
        _insert_by_arrival(self.waiting, group)

    def abort(self, request_id: str) -> SequenceGroup | None:
        """Remove a request wherever it is and free its memory. Blocks past
        what its sequences computed lose their prefix-cache names: a step that
        failed midway may have named a full one whose K/V were never written."""
        for queue in (self.waiting, self.running, self.swapped):
            for group in queue:
                if group.request_id == request_id:
                    queue.remove(group)
                    self.free_uncomputed(group)
                    self._end(group, FinishReason.ABORT)
                    return group
        return None

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running or self.swapped)

    def finish_seq(self, group: SequenceGroup, seq: Sequence, reason: FinishReason,
                   message: str | None = None) -> None:
        """A sequence is done: free its blocks now (its group may run on)."""
        seq.status = SequenceStatus.FINISHED
        seq.finish_reason = reason
        if seq.seq_id in self.kv:
            self.kv.free(seq.seq_id)
        if self.events:
            self.events.emit(Finish(seq.seq_id, group.request_id, reason.value, message))

    def free_uncomputed(self, group: SequenceGroup) -> None:
        """Free the memory of a group's sequences, forgetting the prefix-cache
        names of GPU blocks no step has computed (`KVCacheManager.free_uncomputed`;
        a swapped-out group is simply freed: the swap pool names nothing)."""
        held = [s for s in group.seqs if s.seq_id in self.kv]
        for seq in held:
            if seq.status is SequenceStatus.SWAPPED:
                self.kv.free(seq.seq_id)
        self.kv.free_uncomputed([(s.seq_id, s.num_computed_tokens) for s in held
                                 if s.status is not SequenceStatus.SWAPPED])

    def drop_seq(self, group: SequenceGroup, seq: Sequence) -> None:
        """Free a sequence that leaves its group without an output (a pruned beam)."""
        if seq.seq_id in self.kv:
            self.kv.free(seq.seq_id)
        seq.status = SequenceStatus.FINISHED
        if self.events:
            self.events.emit(Finish(seq.seq_id, group.request_id, "pruned"))

    # ----------------------------------------------------------------- update
    def update(self, out: SchedulerOutput, sampled: Mapping[Hashable, int] | None = None,
               stops: Iterable[tuple[SequenceGroup, Sequence, FinishReason]] = (),
               dropped: Iterable[tuple[SequenceGroup, Sequence]] = ()) -> list[SequenceGroup]:
        """Close a step that ran (vLLM's ``update_from_output``, nano-vllm's
        ``postprocess``): the only place a step's progress is written.

        Every scheduled sequence now holds the K/V of the tokens it computed;
        a sequence forked from one while sampling (n > 1, a beam chosen twice:
        in `sampled`, seq id -> token, without being scheduled) has computed
        all but the token it just sampled, like its parent.
        Then `dropped` sequences (pruned beams) and those that `stops` names
        are freed, and the groups with nothing left to run leave the running
        list; they are returned, with the groups this step ended (that could
        never fit), and a `Step` event closes the step.

        A step that raised before this call changed no progress, so it is
        simply scheduled again (its slots are still held)."""
        scheduled = {}
        for s in out.scheduled:
            s.seq.num_computed_tokens = s.start + s.num_tokens
            scheduled[s.seq.seq_id] = s.group
        forked = sampled.keys() - scheduled.keys() if sampled else ()
        if forked:
            for group in {id(g): g for g in scheduled.values()}.values():
                for seq in group.unfinished_seqs():
                    if seq.seq_id in forked:
                        seq.num_computed_tokens = seq.num_tokens - 1  # forked this step
        for group, seq in dropped:
            self.drop_seq(group, seq)
        for group, seq, reason in stops:
            self.finish_seq(group, seq, reason)
        if self.release_window is not None:
            self._release_outside_window(scheduled.values())
        done = [g for g in self.running if g.is_finished]
        if done:
            self.running = [g for g in self.running if not g.is_finished]
        self.emit_step(out.step)
        return done + out.ended

    def _release_outside_window(self, groups: Iterable[SequenceGroup]) -> None:
        """Every sequence that took part in the step (its forks included) gives
        back the blocks its next queries can no longer see."""
        for group in {id(g): g for g in groups}.values():
            for seq in group.unfinished_seqs():
                if seq.seq_id in self.kv:  # a group that just ran is in GPU memory
                    self.kv.release_outside_window(seq.seq_id, seq.num_computed_tokens,
                                                   self.release_window)

    # --------------------------------------------------------------- schedule
    def schedule(self) -> SchedulerOutput:
        out = SchedulerOutput(step=self.num_steps)
        self.num_steps += 1
        budget = _Budget(self.config.max_num_batched_tokens, self.config.max_num_seqs)
        self._schedule_running(out, budget)
        if not out.preempted:
            self._schedule_swapped(out, budget)
        if not out.preempted and not self.swapped:
            self._schedule_waiting(out, budget)
        # decodes first, each part in its order: the model runner sends them through the
        # decode kernel (a stable sort on num_tokens != 1, without a key call per sequence)
        decodes = [s for s in out.scheduled if s.num_tokens == 1]
        if len(decodes) < len(out.scheduled):
            out.scheduled = decodes + [s for s in out.scheduled if s.num_tokens != 1]
        return out

    def _schedule_running(self, out: SchedulerOutput, budget: _Budget) -> None:
        def try_serve(group: SequenceGroup) -> bool | None:
            plan = self._plan(group, budget)
            if plan is None:  # no budget left this step: it simply waits a step
                budget.take(0, len(group.unfinished_seqs()))  # but keeps its seats
                return None
            if len(plan.seqs) > 1 and self._count(plan) > self.kv.num_free_blocks:
                return False
            return self._allocate(group, plan, out, budget)

        def alone(group: SequenceGroup) -> None:  # the whole cache, and it still does not fit
            self._end(group, FinishReason.LENGTH, "sequence outgrew the whole KV cache")
            out.ended.append(group)

        self.running = serve_oldest_first(self.running, try_serve,
                                          lambda victim: self._preempt(victim, out), alone)

    def _schedule_swapped(self, out: SchedulerOutput, budget: _Budget) -> None:
        def try_swap_in(group: SequenceGroup) -> Verdict:
            ids = [s.seq_id for s in group.unfinished_seqs()]
            plan = self._plan(group, budget)
            if plan is None:
                return Verdict.WAIT
            if not self.kv.can_swap_in(ids, reserve=self._count(plan)):
                # wait until running groups free their blocks; if none runs, it never fits
                return Verdict.WAIT if self.running else Verdict.NEVER
            out.swap_in += self.kv.swap_in(ids)
            group.set_status(SequenceStatus.RUNNING)
            self._allocate(group, plan, out, budget)
            _insert_by_arrival(self.running, group)
            return Verdict.ADMITTED

        def never(group: SequenceGroup) -> None:
            for seq in group.unfinished_seqs():
                self.kv.free(seq.seq_id)
            self._end(group, FinishReason.LENGTH, "does not fit the whole KV cache")
            out.ended.append(group)

        admit_fcfs(self.swapped, try_swap_in, never)

    def _schedule_waiting(self, out: SchedulerOutput, budget: _Budget) -> None:
        def never(group: SequenceGroup) -> None:  # nothing else holds memory: it can never fit
            self._end(group, FinishReason.LENGTH, "does not fit the whole KV cache")
            out.ended.append(group)

        admit_fcfs(self.waiting, lambda group: self._admit(group, out, budget), never)

    def _admit(self, group: SequenceGroup, out: SchedulerOutput, budget: _Budget) -> Verdict:
        # seats for every sequence the request will fork into (n samples, beams)
        if not budget.fits(0, max(group.params.num_sequences, len(group.seqs))):
            return Verdict.WAIT
        admitted = self._place(group, budget)
        if admitted is Shortage.BUDGET:
            return Verdict.WAIT  # no tokens left this step: next step
        if admitted is Shortage.MEMORY:
            # first come, first served: the head waits for memory, unless none is held
            return Verdict.WAIT if self.running else Verdict.NEVER
        if group.metrics.first_scheduled_time is None:
            group.metrics.first_scheduled_time = time.monotonic()
            group.num_cached_tokens = sum(s.start for s, _ in admitted)
        for s, copies in admitted:
            if s.num_tokens:
                out.scheduled.append(s)
            out.block_copies += copies
            budget.take(s.num_tokens, 1)
        group.set_status(SequenceStatus.RUNNING)
        _insert_by_arrival(self.running, group)
        out.admitted.append(group)
        if self.events:
            for seq in group.unfinished_seqs():
                self.events.emit(Admit(seq.seq_id, group.request_id))
        return Verdict.ADMITTED

    def _place(self, group: SequenceGroup, budget: _Budget
               ) -> list[tuple[ScheduledSeq, list[BlockCopy]]] | Shortage:
        """Give each sequence of a waiting group room for its prompt (or the
        first chunk of it), starting from whatever the prefix cache holds.

        Sequences are placed one after another, so the second sequence of a
        group (one preempted after forking) finds the first one's blocks in
        the prefix cache and shares them. If any does not fit, the ones placed
        are freed again and the `Shortage` is returned."""
        placed: list[tuple[ScheduledSeq, list[BlockCopy]]] = []
        tokens_left = budget.tokens_left
        for seq in group.unfinished_seqs():
            cached = self.kv.cached_prefix(seq.seq_id, seq.token_ids)
            start = len(cached) * self.kv.block_size
            take = self._take(seq, seq.num_tokens - start, tokens_left)
            if take is None or (take == 0 and not placed):
                self._roll_back(placed)
                return Shortage.BUDGET
            copies = self.kv.allocate_slots(seq.seq_id, seq.token_ids[start:start + take],
                                            cached)
            if copies is None:
                self._roll_back(placed)
                return Shortage.MEMORY
            seq.num_computed_tokens = start
            tokens_left -= take
            placed.append((ScheduledSeq(group, seq, take, start), copies))
        return placed

    def _take(self, seq: Sequence, want: int, tokens_left: int) -> int | None:
        """How many of its `want` tokens a sequence computes this step, or None
        if it must compute them all at once and they do not fit. A prompt is
        split only with chunked prefill; tokens being recomputed after a
        preemption always may be (only the prompt was checked against the
        budget)."""
        if want <= tokens_left:
            return want  # all of them, split or not
        if self.config.enable_chunked_prefill or seq.num_output_tokens:
            return tokens_left
        return None

    # ------------------------------------------------------------ mechanics
    def _roll_back(self, placed: list[tuple[ScheduledSeq, list[BlockCopy]]]) -> None:
        """Undo a partial admission. The blocks it allocated were never
        computed, so their prefix-cache names must go with them: a later
        cache hit on one would read keys and values that were never written."""
        self.kv.free_uncomputed([(s.seq.seq_id, s.start) for s, _ in placed])
        for s, _ in placed:
            s.seq.num_computed_tokens = 0

    def _plan(self, group: SequenceGroup, budget: _Budget) -> _GroupPlan | None:
        """How many tokens each sequence of a group in memory (GPU or swapped)
        computes this step (`_count` says how many fresh blocks that takes);
        None if the budget cannot take the group now.

        A sequence's table may already hold slots for some of these tokens (a
        step that raised before its forward pass or its sampling): only the
        rest get new ones, so retrying a step never allocates twice. (Progress
        is written only by `update`, after sampling, so a step that raised left
        every sequence with its last token still to compute.)"""
        seqs = group.unfinished_seqs()
        if not budget.fits(0, len(seqs)):
            return None
        plan = _GroupPlan([])
        tokens_left = budget.tokens_left
        for seq in seqs:
            want = seq.num_uncomputed_tokens
            if want == 0:  # update() always leaves the sampled token to compute
                raise RuntimeError(f"sequence {seq.seq_id} of request {group.request_id} has "
                                   "computed all its tokens and has no token to sample from")
            take = self._take(seq, want, tokens_left)
            if take is None:
                return None
            tokens_left -= take
            if take:
                plan.seqs.append(_SeqPlan(seq, seq.num_computed_tokens, take))
        return plan if plan.seqs else None

    def _count(self, plan: _GroupPlan) -> int:
        """The exact number of fresh blocks a plan takes, its sequences together
        (`KVCacheManager.blocks_needed_for`: those whose tables end in one
        shared, partly filled block write into it together); kept in the plan."""
        plan.blocks = self.kv.blocks_needed_for(
            (p.seq.seq_id, p.start + p.num_tokens - self.kv.table(p.seq.seq_id).num_tokens)
            for p in plan.seqs)
        return plan.blocks

    def _allocate(self, group: SequenceGroup, plan: _GroupPlan, out: SchedulerOutput,
                  budget: _Budget) -> bool:
        """Give a plan's tokens their slots. A plan of one sequence needs no
        count first: its table's append is all or nothing, so it may return
        False (nothing changed: the pool is too small). A counted plan found
        room in `_count`: a refusal then is a broken invariant."""
        for p in plan.seqs:
            seq = p.seq
            held = self.kv.num_tokens(seq.seq_id)  # slots a failed step may have left
            copies = self.kv.allocate_slots(seq.seq_id,
                                            seq.token_ids[held:p.start + p.num_tokens])
            if copies is None:
                if plan.blocks is None:  # one sequence, not counted: it does not fit
                    return False
                raise RuntimeError(f"scheduler planned {plan.blocks} blocks for group "
                                   f"{group.request_id} but the pool refused sequence "
                                   f"{seq.seq_id}")
            if copies:
                out.block_copies += copies
            out.scheduled.append(ScheduledSeq(group, seq, p.num_tokens, p.start))
            budget.take(p.num_tokens, 1)
        return True

    def _preempt(self, group: SequenceGroup, out: SchedulerOutput) -> None:
        """Evict a whole group (paper §4.5: all-or-nothing, its blocks are shared)."""
        seqs = group.unfinished_seqs()
        ids = [s.seq_id for s in seqs]
        mode = preemption_mode(self.config.preemption_mode, lambda: self.kv.can_swap_out(ids))
        if mode == "swap":
            out.swap_out += self.kv.swap_out(ids)
            group.set_status(SequenceStatus.SWAPPED)
            _insert_by_arrival(self.swapped, group)
        else:
            for seq in seqs:
                self.kv.free(seq.seq_id)
                seq.num_computed_tokens = 0
            group.set_status(SequenceStatus.WAITING)
            _insert_by_arrival(self.waiting, group)
        group.num_preemptions += 1
        self.num_preemptions += 1
        out.preempted.append((group, mode))
        if self.events:
            for seq in seqs:
                self.events.emit(Preempt(seq.seq_id, group.request_id, mode))

    def _end(self, group: SequenceGroup, reason: FinishReason,
             message: str | None = None) -> None:
        for seq in group.unfinished_seqs():
            self.finish_seq(group, seq, reason, message)

    def emit_step(self, step: int) -> None:
        if self.events:  # the queues ride along: requests never admitted make no event
            self.events.emit(Step(step, len(self.running), len(self.waiting),
                                  len(self.swapped)))


def _insert_by_arrival(queue, group: SequenceGroup) -> None:
    """Put a group back in its place: queues are in arrival order."""
    insert_by_arrival(queue, group, _arrival)


def _arrival(group: SequenceGroup) -> tuple[float, int]:
    return group.metrics.arrival_time, group.arrival_order


class Shortage(enum.Enum):
    """Why a waiting group could not be placed this step."""

    BUDGET = "budget"  # no tokens left in this step
    MEMORY = "memory"  # not enough free blocks


@dataclass(slots=True)
class _SeqPlan:
    seq: Sequence
    start: int
    num_tokens: int


@dataclass(slots=True)
class _GroupPlan:
    seqs: list[_SeqPlan]
    blocks: int | None = None  # fresh blocks the whole group takes, once counted (`_count`)


class _Budget:
    """Tokens and sequences left in this step."""

    def __init__(self, max_tokens: int, max_seqs: int) -> None:
        self.tokens_left = max_tokens
        self.seqs_left = max_seqs

    def fits(self, tokens: int, seqs: int) -> bool:
        return tokens <= self.tokens_left and seqs <= self.seqs_left and self.tokens_left > 0

    def take(self, tokens: int, seqs: int) -> None:
        self.tokens_left -= tokens
        self.seqs_left -= seqs
