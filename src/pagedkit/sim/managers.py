"""The memory managers the simulator compares, as thin adapters over `pagedkit.memory`.

The paper's evaluation (§6) runs one scheduler over four ways of holding
the KV cache. Three reserve one contiguous region per request when it
starts (`ContiguousAllocator`, the Orca baselines); one allocates blocks
as tokens arrive (`KVCacheManager`, vLLM). The simulator talks to both
through the small interface below, so its scheduling loop does not care
which it drives; the bookkeeping itself is the real `pagedkit.memory`
code, not a copy.

A request in flight is a `Group` of sequences: one for plain sampling,
``n`` for parallel sampling, ``width`` beams for beam search (§4.4).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import NamedTuple

from .._validation import check_int, choice_name
from ..i18n import _
from ..memory import ContiguousAllocator, EventBus, KVCacheManager
from ..memory.kv_cache_manager import blocks_to_append
from .trace import TraceRequest


@dataclass(frozen=True)
class ManagerSpec:
    """Which memory manager to simulate: ``"max"``, ``"pow2"``, ``"oracle"``
    (contiguous, Orca) or ``"paged"`` with a block size (vLLM)."""

    kind: str
    block_size: int = 16

    def __post_init__(self) -> None:
        if self.kind not in ("max", "pow2", "oracle", "paged"):
            raise ValueError(_("manager kind must be 'max', 'pow2', 'oracle', 'paged' or "
                               "'paged:BLOCK_SIZE' (e.g. 'paged:32'); got {kind!r}")
                             .format(kind=self.kind))
        check_int("block_size", self.block_size)  # 2.5, "16": not a block size
        if self.block_size < 1:
            raise ValueError(_("block_size must be >= 1, got {block_size}")
                             .format(block_size=self.block_size))

    @property
    def paged(self) -> bool:
        return self.kind == "paged"

    @property
    def label(self) -> str:
        if self.paged:
            return "vLLM" if self.block_size == 16 else f"vLLM (block {self.block_size})"
        return {"max": "Orca (Max)", "pow2": "Orca (Pow2)", "oracle": "Orca (Oracle)"}[self.kind]

    @classmethod
    def parse(cls, text: str) -> ManagerSpec:
        """``"max"``, ``"pow2"``, ``"oracle"``, ``"paged"`` or ``"paged:32"``."""
        kind, colon, size = choice_name(text).partition(":")
        kind = {"vllm": "paged", "orca-max": "max", "orca-pow2": "pow2",
                "orca-oracle": "oracle"}.get(kind, kind)
        if not colon:
            return cls(kind)
        if kind != "paged":
            raise ValueError(_("only the paged manager takes a block size ('paged:32'); got "
                               "{text!r}").format(text=text))
        number = size.strip()
        if not number.removeprefix("-").isdigit():
            raise ValueError(_("the block size in {text!r} must be a whole number of tokens, "
                               "as in 'paged:32'").format(text=text))
        if int(number) < 1:
            raise ValueError(_("the block size in {text!r} must be 1 or more tokens, as in "
                               "'paged:32'").format(text=text))
        return cls(kind, int(number))


def block_past_capacity(block_size: int, capacity: int, whose: str) -> str | None:
    """What is wrong when a block of `block_size` slots is larger than the
    `capacity` (`whose` KV slots: a model's name, or "the capacity"): no block
    would fit; None when it does. The rule of the simulator and of its
    command line's ``--manager``."""
    if block_size <= capacity:
        return None
    return _("a block of {size} slots is more than {whose}'s {slots:,} KV slots; use a block "
             "size of {slots} or less (16 is vLLM's default)").format(
                 size=block_size, whose=whose, slots=capacity)


ORCA_MAX = ManagerSpec("max")
ORCA_POW2 = ManagerSpec("pow2")
ORCA_ORACLE = ManagerSpec("oracle")
PAGED = ManagerSpec("paged", 16)
#: The paper's four systems (Fig. 2, 12, 13), in its order.
PAPER_MANAGERS = (ORCA_MAX, ORCA_POW2, ORCA_ORACLE, PAGED)


@dataclass(eq=False)
class Seq:
    """One sequence: it has produced `generated` of its `output_len` tokens."""

    seq_id: int
    output_len: int
    generated: int = 0
    pending: int = 0  # tokens written but not yet handed to the allocator (`Memory.lazy`)
    room: int = 0  # slots it holds alone that more tokens may fill the same way


@dataclass(eq=False)
class Group:
    """A request in flight: its sequences and its prompt (with any shared prefix)."""

    request: TraceRequest
    prompt_len: int
    seqs: list[Seq] = field(default_factory=list)
    done: list[Seq] = field(default_factory=list)
    first_token_time: float | None = None
    num_preemptions: int = 0
    order: int = 0  # its place in the trace (arrival order)
    token: list[int] = field(default_factory=lambda: [0])  # id of the tokens it appends
    checked: bool = False  # known to fit an empty memory

    def prompt_tokens(self, prefix: list[int]) -> list[int]:
        """The prompt's token ids: the shared prefix, then tokens of its own."""
        return prefix + self.token * self.request.prompt_len

    @property
    def request_id(self) -> Hashable:
        return self.request.request_id


class Usage(NamedTuple):
    """Where the KV slots are at the end of a step (paper Fig. 2's categories):
    one row of the step log, in its column order."""

    token_states: int
    reservation: int = 0
    internal_fragmentation: int = 0
    external_fragmentation: int = 0
    used_blocks: int = 0  # paged only: blocks referenced by some sequence
    blocks_alone: int = 0  # paged only: blocks the sequences would hold without sharing


class Memory(ABC):
    """What the two managers share: the simulator's interface, and its two
    shortcuts, each written once.

    **Slots a sequence already holds** (`lazy`). `Simulator.run()` sets
    `lazy` when nobody listens to events. A token that then lands in a slot
    its sequence holds alone (`Seq.room`: what is left of a contiguous
    region; the free tail of a paged block no one else reads) is counted
    (`Seq.pending`), not handed to the allocator. The allocator gets the
    held-back tokens in one call when the sequence next needs a slot it does
    not hold, is forked, swapped out or freed, and at the end of the run
    (`sync`); `usage()` counts them meanwhile. The same memory is taken at the
    same iterations (a test checks it against stepping one token at a time);
    only one call per token, and its ``append`` event nobody hears, are saved.

    **A head that did not fit** (`blocked`). The group whose admission last
    failed for want of memory. Until memory is freed, memory only shrinks, so
    it cannot fit: the simulator does not ask again (every iteration a queue
    waits would otherwise re-count its blocks or search the holes)."""

    def __init__(self) -> None:
        self.lazy = False
        self.blocked: Group | None = None
        self._pending_total = 0  # tokens held back, all sequences together

    # --------------------------------------------------- the manager's part
    @abstractmethod
    def never_fits(self, group: Group) -> str | None:
        """Why `group` could never be admitted, even alone, or None."""

    @abstractmethod
    def _fits_next_tokens(self, group: Group) -> bool:
        """Is there room for every held-back token plus one more per sequence?"""

    @abstractmethod
    def _store(self, group: Group, seq: Seq, num_tokens: int) -> None:
        """Hand `seq`'s next `num_tokens` tokens to the allocator (they fit)."""

    @abstractmethod
    def _room(self, seq: Seq) -> int:
        """Slots `seq` holds alone beyond its stored tokens (what `lazy` may fill)."""

    @abstractmethod
    def _release(self, seq: Seq) -> None:
        """Give back everything `seq` holds."""

    # ------------------------------------------------------------- shared
    def try_append(self, group: Group) -> bool:
        """Give every sequence of `group` a slot for one more token, or return
        False (nothing changed) if memory is short."""
        if self.lazy and len(group.seqs) == 1:
            seq = group.seqs[0]
            if seq.room:
                seq.room -= 1
                seq.pending += 1
                self._pending_total += 1
                return True
        if not self._fits_next_tokens(group):
            return False
        for seq in group.seqs:
            self._write(group, seq, seq.pending + 1)
        return True

    def free_seq(self, group: Group, seq: Seq) -> None:
        # held-back tokens are stored first, so the allocator's books stay whole
        self._sync(group, seq)
        self._release(seq)
        self.blocked = None

    def sync(self, groups: list[Group]) -> None:
        """Hand every held-back token to the allocator (leaving lazy mode)."""
        for group in groups:
            for seq in group.seqs:
                self._sync(group, seq)

    def _write(self, group: Group, seq: Seq, num_tokens: int) -> None:
        """Store `num_tokens` (any held back included); see how many more may wait."""
        self._store(group, seq, num_tokens)
        self._pending_total -= seq.pending
        seq.pending = 0
        seq.room = self._room(seq) if self.lazy else 0

    def _sync(self, group: Group, seq: Seq) -> None:
        """Store what `seq` holds back and hold nothing back until it next
        writes (its blocks are about to be shared, moved or freed)."""
        if seq.pending:
            self._write(group, seq, seq.pending)
        seq.room = 0


class ContiguousMemory(Memory):
    """Orca's reservations: a region sized by the policy, taken at admission.

    A request holds its region until it finishes, so running requests never
    need more memory and are never preempted; the cost is paid up front."""

    def __init__(self, spec: ManagerSpec, capacity: int, max_seq_len: int) -> None:
        super().__init__()
        self.spec = spec
        self.allocator = ContiguousAllocator(capacity, spec.kind, max_seq_len)
        self.capacity = capacity
        self._head: Group | None = None
        self._head_size = 0

    def never_fits(self, group: Group) -> str | None:
        """Why the request can never be admitted, or None. (`Simulator` has
        already refused anything longer than ``max_seq_len``.)"""
        size = self.region_size(group)
        if size > self.capacity:
            return _("needs a {size}-slot region > capacity {capacity}").format(
                size=size, capacity=self.capacity)
        return None

    def region_size(self, group: Group) -> int:
        """Slots the policy reserves for `group` (at most ``max_seq_len``, also
        for a request too long to ever run)."""
        prompt_len, output_len = group.prompt_len, group.seqs[0].output_len
        if prompt_len + output_len > self.allocator.max_seq_len:
            return self.allocator.max_seq_len
        return self.allocator.reservation_size(prompt_len, output_len)

    def try_admit(self, group: Group) -> bool:
        """Reserve the policy's region for the request's whole life."""
        if group is self.blocked:
            return False
        seq = group.seqs[0]
        prompt = group.prompt_len + seq.generated
        region = self.allocator.allocate(seq.seq_id, prompt, seq.output_len - seq.generated)
        if region is None:
            self.blocked = group
            return False
        seq.room = self._room(seq) if self.lazy else 0
        return True

    def _fits_next_tokens(self, group: Group) -> bool:
        return True  # the region was reserved for every token up front

    def _store(self, group: Group, seq: Seq, num_tokens: int) -> None:
        self.allocator.append(seq.seq_id, num_tokens)

    def _room(self, seq: Seq) -> int:
        region = self.allocator.region(seq.seq_id)
        return region.need - region.used

    def _release(self, seq: Seq) -> None:
        self.allocator.free(seq.seq_id)

    def usage(self, head: Group | None, running: list[Group] | None = None) -> Usage:
        """The allocator's breakdown; free slots count as external fragmentation
        while the waiting `head` fits in no hole."""
        s = self.allocator.stats()
        external = 0
        if head is not None:
            if head is not self._head:  # the region the waiting head asks for
                self._head, self._head_size = head, self.region_size(head)
            external = s.external_fragmentation(self._head_size)
        pending = self._pending_total  # held back: token states, no longer reservation
        return Usage(s.token_states + pending, s.reservation - pending,
                     s.internal_fragmentation, external)


class PagedMemory(Memory):
    """vLLM's paged KV cache: blocks are taken one at a time as tokens arrive.

    Nothing is reserved ahead, so a running sequence may find the pool empty
    when it needs its next block: the scheduler then preempts someone (§4.5).
    """

    def __init__(self, spec: ManagerSpec, capacity: int, *, enable_prefix_caching: bool = False,
                 swap_slots: int = 0, events: EventBus | None = None,
                 whose: str = "the capacity") -> None:
        super().__init__()
        self.spec = spec
        self.block_size = spec.block_size
        problem = block_past_capacity(spec.block_size, capacity, whose)
        if problem:
            raise ValueError(problem)
        num_blocks = capacity // spec.block_size
        self.kv = KVCacheManager(num_blocks, spec.block_size,
                                 enable_prefix_caching=enable_prefix_caching,
                                 num_swap_blocks=swap_slots // spec.block_size, events=events)
        self.num_blocks = num_blocks

    # ---------------------------------------------------------------- blocks
    def never_fits(self, group: Group) -> str | None:
        # the last token is produced but never stored (it would be the next input)
        prompt, bs = group.prompt_len, self.block_size
        worst = -(-prompt // bs) + blocks_to_append(
            prompt, bs, [s.output_len - 1 for s in group.seqs], owners=len(group.seqs))
        if worst > self.num_blocks:
            return _("needs up to {worst} blocks > the pool's {num_blocks}").format(
                worst=worst, num_blocks=self.num_blocks)
        return None

    def try_admit(self, group: Group, prefix: list[int], watermark: int = 0) -> int | None:
        """Prefill the prompt once, share it with every sequence of the group,
        then give each its own tokens: those it had generated before a
        recompute preemption, all recomputed now. The token this iteration
        produces gets its slot next iteration, when it is computed (as in
        the engine: a slot is taken for the token a step computes).

        Returns how many prompt tokens the prefix cache supplied, or ``None``
        (nothing changed) if the blocks plus `watermark` are not free."""
        if group is self.blocked:
            return None
        kv, parent = self.kv, group.seqs[0].seq_id
        caching = kv.allocator.enable_prefix_caching
        tokens = group.prompt_tokens(prefix)
        cached = kv.cached_prefix(parent, tokens) if caching else []
        new_tokens = tokens[len(cached) * self.block_size:]
        need = kv.blocks_to_admit(parent, len(new_tokens), cached,
                                  [s.generated for s in group.seqs])
        if need + watermark > kv.allocator.num_free_blocks:
            if not caching:  # with the prefix cache, blocks filled since may be hits
                self.blocked = group
            return None
        self._must(kv.allocate_slots(parent, new_tokens, cached))
        for seq in group.seqs[1:]:
            kv.fork(parent, seq.seq_id)
        for seq in group.seqs:
            self._write(group, seq, seq.generated)
        return len(cached) * self.block_size

    def append_cost(self, group: Group) -> int:
        """Blocks that the held-back tokens and one more token for every
        sequence of `group` take (the paging core's rule, `blocks_needed_for`)."""
        return self.kv.blocks_needed_for([(s.seq_id, s.pending + 1) for s in group.seqs])

    def _fits_next_tokens(self, group: Group) -> bool:
        return self.append_cost(group) <= self.kv.allocator.num_free_blocks

    def _store(self, group: Group, seq: Seq, num_tokens: int) -> None:
        self._must(self.kv.allocate_slots(seq.seq_id, group.token * num_tokens))

    def _room(self, seq: Seq) -> int:
        table = self.kv.table(seq.seq_id)
        offset = table.num_tokens % self.block_size  # the next token's place in its block
        if offset and self.kv.allocator.ref_count(table.blocks[-1]) == 1:
            return self.block_size - offset
        return 0

    def _release(self, seq: Seq) -> None:
        self.kv.free(seq.seq_id)

    def fork_seq(self, group: Group, parent: Seq, child: Seq) -> None:
        self._sync(group, parent)
        self.kv.fork(parent.seq_id, child.seq_id)

    # ------------------------------------------------------------------ swap
    def can_swap_out(self, group: Group) -> bool:
        return self.kv.can_swap_out(s.seq_id for s in group.seqs)

    def swap_out(self, group: Group) -> int:
        """Move the group's blocks to the CPU pool; returns how many moved."""
        for seq in group.seqs:
            self._sync(group, seq)
        copies = self.kv.swap_out([s.seq_id for s in group.seqs])
        self.blocked = None  # its GPU blocks are free
        return len(copies)

    def can_swap_in(self, group: Group, reserve: int = 0) -> bool:
        return self.kv.can_swap_in((s.seq_id for s in group.seqs), reserve=reserve)

    def swap_in(self, group: Group) -> int:
        """Bring the group's blocks back; returns how many moved."""
        return len(self.kv.swap_in([s.seq_id for s in group.seqs]))

    # ----------------------------------------------------------------- usage
    def usage(self, head: Group | None, running: list[Group] | None = None) -> Usage:
        """Token states and the unfilled tails of last blocks (paging's only
        waste); `running` is given to count what the sequences would hold
        without sharing."""
        a = self.kv.allocator
        used = a.num_used_blocks
        tokens = a.num_tokens_stored + self._pending_total
        alone = used
        if running is not None:
            bs = self.block_size
            alone = sum(-(-(g.prompt_len + s.generated - 1) // bs)
                        for g in running for s in g.seqs)
        return Usage(tokens, 0, used * self.block_size - tokens, 0, used, alone)

    @staticmethod
    def _must(copies) -> None:
        if copies is None:  # the room was checked first: this is a bookkeeping bug
            raise RuntimeError("the KV cache refused an allocation the simulator had checked")
