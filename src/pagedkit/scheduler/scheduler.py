"""Iteration-level scheduling over paged memory (paper §4.5, after Orca).

Every step the scheduler decides, from scratch, which sequences compute which
tokens. A step is one forward pass over a *mixed* batch: decode tokens of
running sequences and prompt tokens (whole, or a chunk with chunked prefill)
of newly admitted ones. Requests join and leave between any two steps —
continuous batching — so a short request never waits for a long one.

The order of each step (`Scheduler.schedule`):

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

The rules — who gives way, where a victim goes, who may come in — are pure
functions of `pagedkit.scheduler.policy`, shared with the simulator; the
loops that follow them are here, in view.

**A group is scheduled whole.** Its sequences share blocks and, for beam
search, are ranked against each other, so a step either computes the last
token of every live sequence of a group (all of them sample) or of none.
When the step's token budget cannot take the whole group, it waits for the
next step — or, where splitting is allowed (chunked prefill, or tokens
being recomputed after a preemption), computes a chunk that reaches no
sequence's last token. A group larger than the whole budget (more beams than
``max_num_batched_tokens``) runs when it is the first in a step.

**A recomputed group shares its prompt again.** A group preempted by
recomputation comes back as it first ran: its prompt is allocated once (from
the prefix cache where it can), its sequences fork from it, and each appends
its own generated tokens — what `KVCacheManager.blocks_to_admit` counts.

"Oldest" is by arrival: every queue is kept in arrival order, so a group
brought back from swap or recomputation takes its old place. The prompt of a
new request must fit one step's token budget (the engine checks); the tokens
a preempted group must recompute may not, so they are spread over as many
steps as needed.

Every decision is also an event (`Admit`, `Preempt`, `Finish`, `Step`, from
`pagedkit.scheduler.events`) on the memory's event bus, so widgets can replay it.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from .._validation import check_choice, check_int
from ..memory import BlockCopy, KVCacheManager
from ..sequence import FinishReason, Sequence, SequenceGroup, SequenceStatus
from .events import Admit, Finish, Preempt, Step
from .policy import (
    Admission,
    Fit,
    Room,
    admit_head,
    insert_by_arrival,
    make_room,
    may_admit_waiting,
    preemption_mode,
)

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
    """One sequence's share of a step: tokens ``start .. start + num_tokens``,
    and whether they reach its last token (so a next token is sampled from its
    logits; a prompt chunk that stops short does not), decided with the plan."""

    group: SequenceGroup
    seq: Sequence
    num_tokens: int
    start: int
    computes_last_token: bool


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


@dataclass
class Sampled:
    """What sampling decided in a step, for `Scheduler.update` to write down.

    The sampler only changes sequences (tokens, new forks in ``group.seqs``,
    pruned beams out of it); the memory they hold changes in `update`."""

    new_tokens: dict[int, int] = field(default_factory=dict)  # seq_id -> token appended
    forks: list[tuple[SequenceGroup, Sequence, Sequence]] = field(
        default_factory=list)  # (group, parent, child): the child shares all its parent's blocks
    dropped: list[tuple[SequenceGroup, Sequence]] = field(default_factory=list)  # pruned beams
    stops: list[tuple[SequenceGroup, Sequence, FinishReason]] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Plan:
    """A group's step: each sequence's tokens, and the fresh blocks they take
    (counted once, when the plan is made). An admission lists every sequence
    (one may compute nothing yet) and names the prefix-cache blocks its first
    sequence starts from; a group re-admitted with several sequences gives
    every token its slot `ahead` of the steps that compute them."""

    group: SequenceGroup
    seqs: list[ScheduledSeq]
    blocks: int
    cached: list[int] = field(default_factory=list)
    ahead: bool = False


class Scheduler:
    """FCFS continuous batching with a token budget, a sequence cap and preemption.

    It owns the requests in flight (`requests`, by id) and the memory of
    their sequences: only the scheduler and its `KVCacheManager` write KV
    bookkeeping."""

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
        self._requests: dict[str, SequenceGroup] = {}
        self.num_steps = 0
        self.num_preemptions = 0

    # ----------------------------------------------------------------- queues
    @property
    def requests(self) -> Mapping[str, SequenceGroup]:
        """Every request in flight, by id (read-only): queued, running,
        swapped, or caught between queues by an interrupted step."""
        return MappingProxyType(self._requests)

    def add(self, group: SequenceGroup) -> None:
        if group.request_id in self._requests:
            raise ValueError(f"request id {group.request_id!r} is already in the engine")
        self._requests[group.request_id] = group
        _insert_by_arrival(self.waiting, group)

    def abort(self, request_id: str) -> SequenceGroup | None:
        """End a request wherever it is and free its memory; None if it is not
        in flight. Blocks past what its sequences computed lose their
        prefix-cache names: a step that failed midway may have named a full
        one whose K/V were never written."""
        group = self._requests.pop(request_id, None)
        if group is None:
            return None
        for queue in (self.waiting, self.running, self.swapped):
            if group in queue:
                queue.remove(group)
        self._free_uncomputed(group)
        self._end(group, FinishReason.ABORT)
        return group

    def has_unfinished(self) -> bool:
        return bool(self._requests)

    # --------------------------------------------------------------- schedule
    def schedule(self) -> SchedulerOutput:
        """Decide the next step: running groups, then swapped ones, then new ones."""
        out = SchedulerOutput(step=self.num_steps)
        self.num_steps += 1
        budget = _Budget(self.config.max_num_batched_tokens, self.config.max_num_batched_tokens,
                         self.config.max_num_seqs)
        self._schedule_running(out, budget)
        if self.swapped and not out.preempted:
            self._schedule_swapped(out, budget)
        if self.waiting and may_admit_waiting(bool(out.preempted), bool(self.swapped)):
            self._schedule_waiting(out, budget)
        # decodes first (stable): the model runner sends them through the decode kernel
        out.scheduled.sort(key=lambda s: s.num_tokens != 1)
        return out

    def _schedule_running(self, out: SchedulerOutput, budget: _Budget) -> None:
        """Oldest first, each group gets room for its next tokens; while one
        does not fit, someone gives way (`policy.make_room`). A group the
        budget cannot take this step keeps its seats and waits a step."""
        queue, self.running = deque(self.running), []
        while queue:
            group = queue.popleft()
            plan = self._plan(group, budget)
            if plan is None:  # no budget left for it: still running, next step
                budget.seqs_left -= len(group.unfinished_seqs())
                self.running.append(group)
                continue
            # (a preempted group frees only blocks of its own: groups share only
            # full blocks, which the plan's count never touches, so it stands)
            fits = plan.blocks <= self.kv.allocator.num_free_blocks
            while not fits:
                room = make_room(newer_unserved=bool(queue), older_served=bool(self.running))
                if room is Room.PREEMPT_NEWEST:
                    self._preempt(queue.pop(), out)
                    fits = plan.blocks <= self.kv.allocator.num_free_blocks
                elif room is Room.STEP_ASIDE:
                    self._preempt(group, out)
                    break
                else:
                    self._end_never(group, out, "sequence outgrew the whole KV cache")
                    break
            if fits:
                self._allocate(plan, out, budget)
                self.running.append(group)

    def _schedule_swapped(self, out: SchedulerOutput, budget: _Budget) -> None:
        """Swapped groups come back oldest first, while they fit."""
        while self.swapped:
            group = self.swapped[0]
            plan = self._plan(group, budget)
            ids = [s.seq_id for s in group.unfinished_seqs()]
            fit = (Fit.NO_BUDGET if plan is None else
                   Fit.YES if self.kv.can_swap_in(ids, reserve=plan.blocks) else Fit.NO_MEMORY)
            verdict = admit_head(fit, memory_held=bool(self.running))
            if verdict is Admission.WAIT:
                return
            self.swapped.popleft()
            if verdict is Admission.NEVER:
                for seq_id in ids:
                    self.kv.free(seq_id)
                self._end_never(group, out, "does not fit the whole KV cache")
                continue
            out.swap_in += self.kv.swap_in(ids)
            group.set_status(SequenceStatus.RUNNING)
            self._allocate(plan, out, budget)
            _insert_by_arrival(self.running, group)

    def _schedule_waiting(self, out: SchedulerOutput, budget: _Budget) -> None:
        """Waiting groups come in first come, first served, while they fit."""
        while self.waiting:
            group = self.waiting[0]
            plan = self._plan_admission(group, budget)
            fit = (Fit.NO_BUDGET if plan is None else
                   Fit.YES if plan.blocks <= self.kv.allocator.num_free_blocks else Fit.NO_MEMORY)
            verdict = admit_head(fit, memory_held=bool(self.running))
            if verdict is Admission.WAIT:
                return
            self.waiting.popleft()
            if verdict is Admission.NEVER:  # nothing else holds memory: it can never fit
                self._end_never(group, out, "does not fit the whole KV cache")
            else:
                self._admit(plan, out, budget)

    # ------------------------------------------------------------------ plans
    def _plan(self, group: SequenceGroup, budget: _Budget) -> Plan | None:
        """The step of a group in memory (GPU or swapped): each sequence's
        tokens (`_split`) and the fresh blocks they take all together
        (`KVCacheManager.blocks_needed_for`: sequences whose tables end in
        one shared, partly filled block write into it together). None if the
        budget cannot take the group now.

        A sequence's table may already hold slots for some of these tokens (a
        step that raised before its forward pass or its sampling, or a group
        re-admitted whole): only the rest get new ones, so retrying a step
        never allocates twice. (Progress is written only by `update`, after
        sampling, so a step that raised left every sequence with its last
        token still to compute.)"""
        seqs = group.unfinished_seqs()
        if len(seqs) > budget.seqs_left or budget.tokens_left <= 0:  # seats and tokens left?
            return None
        for seq in seqs:
            if seq.num_computed_tokens == len(seq.token_ids):  # update() leaves the sampled token
                raise RuntimeError(f"sequence {seq.seq_id} of request {group.request_id} has "
                                   "computed all its tokens and has no token to sample from")
        starts = [s.num_computed_tokens for s in seqs]
        takes = self._split(seqs, starts, budget)
        if takes is None:
            return None
        scheduled = [ScheduledSeq(group, s, n, start, start + n == len(s.token_ids))
                     for s, start, n in zip(seqs, starts, takes, strict=True) if n]
        blocks = self.kv.blocks_needed_for(
            (p.seq.seq_id, max(0, p.start + p.num_tokens - self.kv.table(p.seq.seq_id).num_tokens))
            for p in scheduled)
        return Plan(group, scheduled, blocks)

    def _plan_admission(self, group: SequenceGroup, budget: _Budget) -> Plan | None:
        """The first step of a waiting group, from its prefix-cache hits. A
        group that comes back after a recompute preemption with several
        sequences shares its prompt again: the first sequence holds the
        prompt, the others fork from it and recompute only their own tokens
        (from the prompt's last full block on: a partly filled one is copied
        for each, before anyone computed it). All its blocks are taken at
        once, counted by `KVCacheManager.blocks_to_admit`."""
        seqs = group.unfinished_seqs()
        # seats for every sequence the request will fork into (n samples, beams), and
        # tokens left (a group may overrun the budget alone), before the cache lookup
        seats = max(group.params.num_sequences, len(seqs))
        if seats > budget.seqs_left or budget.tokens_left <= 0:
            return None
        first = seqs[0]
        # a group of several shares only its prompt: its cached blocks lie within it
        shared = first.token_ids if len(seqs) == 1 else first.token_ids[:first.prompt_len]
        # prompt logprobs need every prompt token computed: no cache hits (vLLM's rule)
        cached = (self.kv.cached_prefix(first.seq_id, shared, cache_salt=group.cache_salt)
                  if group.params.prompt_logprobs is None else [])
        prompt_len, block_size = first.prompt_len, self.kv.block_size
        shared_start = prompt_len - prompt_len % block_size  # the forks' start
        starts = [len(cached) * block_size] + [shared_start] * (len(seqs) - 1)
        takes = self._split(seqs, starts, budget)
        if takes is None or not takes[0]:
            return None
        scheduled = [ScheduledSeq(group, s, n, start, start + n == len(s.token_ids))
                     for s, start, n in zip(seqs, starts, takes, strict=True)]
        if len(seqs) == 1:  # one stream (a prompt, or a prompt and its recomputed output)
            blocks = self.kv.blocks_needed(first.seq_id, takes[0], cached)
        else:
            blocks = self.kv.blocks_to_admit(first.seq_id, prompt_len - starts[0], cached,
                                             [s.num_output_tokens for s in seqs])
        return Plan(group, scheduled, blocks, cached, ahead=len(seqs) > 1)

    def _split(self, seqs: list[Sequence], starts: list[int], budget: _Budget) -> list[int] | None:
        """How many tokens each sequence of a group computes this step, or
        None if the group must wait for the next one.

        Whole if the budget takes it: every sequence computes up to its last
        token, and samples. Otherwise a chunk, where splitting is allowed
        (chunked prefill, or tokens recomputed after a preemption: only the
        prompt was checked against the budget): the budget's tokens in
        sequence order, reaching no sequence's last token, so nobody samples
        while a sibling waits. A group that can be neither (more decoding
        sequences than the whole budget) runs whole as the first of a step."""
        wants = [len(s.token_ids) - start for s, start in zip(seqs, starts, strict=True)]
        if sum(wants) <= budget.tokens_left:
            return wants
        if self.config.enable_chunked_prefill or any(s.num_output_tokens for s in seqs):
            takes, left = [], budget.tokens_left
            for want in wants:
                takes.append(min(left, want - 1))
                left -= takes[-1]
            if any(takes):
                return takes
        return wants if budget.untouched else None

    # ------------------------------------------------------------- mechanics
    def _allocate(self, plan: Plan, out: SchedulerOutput, budget: _Budget) -> None:
        """Give a counted plan's tokens their slots (every token's, for a plan
        `ahead`), naming the full blocks the step computes."""
        for p in plan.seqs:
            end = p.start + p.num_tokens
            held = self.kv.table(p.seq.seq_id).num_tokens  # a failed step may have left slots
            upto = len(p.seq.token_ids) if plan.ahead else end
            copies = self.kv.allocate_slots(p.seq.seq_id, p.seq.token_ids[held:upto],
                                            computed=end if p.num_tokens else 0)
            if copies is None:
                raise self._refused(plan)
            out.block_copies += copies
            if p.num_tokens:
                out.scheduled.append(p)
        budget.tokens_left -= sum(p.num_tokens for p in plan.seqs)
        budget.seqs_left -= len(plan.group.unfinished_seqs())  # a chunk may leave some out

    def _admit(self, plan: Plan, out: SchedulerOutput, budget: _Budget) -> None:
        """Start a waiting group from its prefix-cache hits; with several
        sequences, its prompt is allocated once and forked (see
        `_plan_admission`). Then its first step is allocated and it runs."""
        group, head = plan.group, plan.seqs[0]
        first = head.seq
        shared_end = first.prompt_len if len(plan.seqs) > 1 else head.start
        copies = self.kv.allocate_slots(first.seq_id, first.token_ids[head.start:shared_end],
                                        plan.cached, computed=0,  # named as steps compute it
                                        cache_salt=group.cache_salt)
        if copies is None:
            raise self._refused(plan)
        out.block_copies += copies
        for p in plan.seqs:
            if p is not head:
                self.kv.fork(first.seq_id, p.seq.seq_id)
            p.seq.num_computed_tokens = p.start
        self._allocate(plan, out, budget)
        if group.metrics.first_scheduled_time is None:
            group.metrics.first_scheduled_time = time.monotonic()
            group.num_cached_tokens = head.start
        group.set_status(SequenceStatus.RUNNING)
        _insert_by_arrival(self.running, group)
        out.admitted.append(group)
        if self.events:
            for p in plan.seqs:
                self.events.emit(Admit(p.seq.seq_id, group.request_id))

    @staticmethod
    def _refused(plan: Plan) -> RuntimeError:
        """The error of a counted plan the pool refused: a broken count."""
        return RuntimeError(f"scheduler counted {plan.blocks} blocks for request "
                            f"{plan.group.request_id} but the pool refused them")

    def _preempt(self, group: SequenceGroup, out: SchedulerOutput) -> None:
        """Evict a whole group (paper §4.5: all-or-nothing, its blocks are shared)."""
        seqs = group.unfinished_seqs()
        ids = [s.seq_id for s in seqs]
        requested = self.config.preemption_mode
        mode = preemption_mode(requested, requested == "swap" and self.kv.can_swap_out(ids))
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

    def _end_never(self, group: SequenceGroup, out: SchedulerOutput, message: str) -> None:
        """A group that can never fit the cache ends with ``"length"``."""
        self._end(group, FinishReason.LENGTH, message)
        self._requests.pop(group.request_id, None)
        out.ended.append(group)

    def _end(self, group: SequenceGroup, reason: FinishReason,
             message: str | None = None) -> None:
        for seq in group.unfinished_seqs():
            self._finish_seq(group, seq, reason, message)

    def _finish_seq(self, group: SequenceGroup, seq: Sequence, reason: FinishReason,
                    message: str | None = None) -> None:
        """A sequence is done: free its blocks now (its group may run on)."""
        seq.status = SequenceStatus.FINISHED
        seq.finish_reason = reason
        if seq.seq_id in self.kv:
            self.kv.free(seq.seq_id)
        if self.events:
            self.events.emit(Finish(seq.seq_id, group.request_id, reason.value, message))

    def _drop_seq(self, group: SequenceGroup, seq: Sequence) -> None:
        """Free a sequence that leaves its group without an output (a pruned beam)."""
        if seq.seq_id in self.kv:
            self.kv.free(seq.seq_id)
        seq.status = SequenceStatus.FINISHED
        if self.events:
            self.events.emit(Finish(seq.seq_id, group.request_id, "pruned"))

    def _free_uncomputed(self, group: SequenceGroup) -> None:
        """Free the memory of a group's sequences, forgetting the prefix-cache
        names of GPU blocks no step has computed (`KVCacheManager.free_uncomputed`;
        a swapped-out group is simply freed: the swap pool names nothing)."""
        held = [s for s in group.seqs if s.seq_id in self.kv]
        for seq in held:
            if seq.status is SequenceStatus.SWAPPED:
                self.kv.free(seq.seq_id)
        self.kv.free_uncomputed([(s.seq_id, s.num_computed_tokens) for s in held
                                 if s.status is not SequenceStatus.SWAPPED])

    # ----------------------------------------------------------------- update
    def update(self, out: SchedulerOutput, sampled: Sampled | None = None) -> list[SequenceGroup]:
        """Close a step that ran (vLLM's ``update_from_output``, nano-vllm's
        ``postprocess``): the only place a step's progress is written.

        Every scheduled sequence now holds the K/V of the tokens it computed;
        a sequence forked while sampling (n > 1, a beam chosen twice) gets
        all its parent's blocks and has computed all but the token it just
        sampled, like its parent. Then the pruned beams and the sequences
        that stop are freed, and the groups with nothing left to run leave
        the running list and the requests in flight; they are returned, with
        the groups this step ended (that could never fit), and a `Step`
        event closes the step.

        A step that raised before this call changed no progress, so it is
        simply scheduled again (its slots are still held)."""
        sampled = Sampled() if sampled is None else sampled
        for s in out.scheduled:
            s.seq.num_computed_tokens = s.start + s.num_tokens
        for group, parent, child in sampled.forks:
            self.kv.fork(parent.seq_id, child.seq_id)
            child.num_computed_tokens = len(child.token_ids) - 1
            if self.events:
                self.events.emit(Admit(child.seq_id, group.request_id))
        for group, seq in sampled.dropped:
            self._drop_seq(group, seq)
        for group, seq, reason in sampled.stops:
            self._finish_seq(group, seq, reason)
        if self.release_window is not None:
            self._release_outside_window(out.scheduled)
        done = [g for g in self.running if not g.unfinished_seqs()]
        self.running = [g for g in self.running if g.unfinished_seqs()]
        for group in done:
            self._requests.pop(group.request_id, None)
        if self.events:  # the queues ride along: requests never admitted make no event
            self.events.emit(Step(out.step, len(self.running), len(self.waiting),
                                  len(self.swapped)))
        return done + out.ended

    def _release_outside_window(self, scheduled: Iterable[ScheduledSeq]) -> None:
        """Every sequence that took part in the step (its forks included) gives
        back the blocks its next queries can no longer see."""
        for group in {id(s.group): s.group for s in scheduled}.values():
            for seq in group.unfinished_seqs():
                if seq.seq_id in self.kv:  # a group that just ran is in GPU memory
                    self.kv.release_outside_window(seq.seq_id, seq.num_computed_tokens,
                                                   self.release_window)



def _insert_by_arrival(queue, group: SequenceGroup) -> None:
    """Put a group back in its place: queues are in arrival order."""
    insert_by_arrival(queue, group, _arrival)


def _arrival(group: SequenceGroup) -> tuple[float, int]:
    return group.metrics.arrival_time, group.arrival_order


@dataclass
class _Budget:
    """Tokens and sequences left in this step."""

    max_tokens: int
    tokens_left: int
    seqs_left: int

    @property
    def untouched(self) -> bool:
        """Nothing has been scheduled yet: a group may exceed the budget alone."""
        return self.tokens_left == self.max_tokens
