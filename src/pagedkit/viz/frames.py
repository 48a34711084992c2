"""Frames: what GPU memory looked like at the end of one step, as plain data.

A frame is the *model* every widget draws from. It holds no widgets and no
figures, so it can be built, compared and tested without a browser, and a
recording of a thousand steps can be scrubbed back and forth at will.

Blocks are immutable records shared between frames: a step that touches ten
blocks of a 4,096-block pool creates ten new records, and the frame itself
is a tuple of references. Treat every mapping in a frame as read-only.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field

from ..memory.block_table import NULL_BLOCK

#: Block states, as the block map colors them.
FREE, USED, CACHED = "free", "used", "cached"

#: Request states on the timeline.
RUNNING, WAITING, SWAPPED, FINISHED = "running", "waiting", "swapped", "finished"


@dataclass(frozen=True, slots=True)
class BlockState:
    """One physical GPU block.

    ``cached`` means free but still holding a prefix-cache entry: a later
    request with the same prefix can reuse it without recomputing (paper §4.4),
    until the allocator evicts it for space.
    """

    status: str = FREE
    owners: tuple[Hashable, ...] = ()  # sequences whose page tables hold it
    ref_count: int = 0
    num_tokens: int = 0  # slots holding a token (kept while cached)

    @property
    def is_shared(self) -> bool:
        return self.ref_count > 1


EMPTY_BLOCK = BlockState()


@dataclass(frozen=True, slots=True)
class SwappedBlock:
    """A block parked in CPU memory by a swap-out (paper §4.5)."""

    owners: tuple[Hashable, ...]
    num_tokens: int
    from_block: int | None  # the GPU block it was copied from (None: before recording)


@dataclass(frozen=True, slots=True)
class MemoryCounts:
    """Totals over the GPU pool, the numbers the timeline plots.

    They match `KVCacheManager.stats()` at the same moment: ``used`` is
    ``used_blocks``, ``cached`` is ``cached_blocks``, ``tokens`` is
    ``tokens_stored`` and ``swapped`` is ``swapped_blocks``.
    """

    used: int = 0
    cached: int = 0
    free: int = 0
    shared: int = 0  # used blocks with more than one owner
    tokens: int = 0
    swapped: int = 0  # CPU blocks holding swapped-out KV


@dataclass(frozen=True, slots=True)
class RequestCounts:
    """How many requests are in each scheduler queue at the end of a step."""

    running: int = 0
    waiting: int = 0
    swapped: int = 0
    finished: int = 0


@dataclass(frozen=True)
class Frame:
    """The pool at the end of one step, and what happened during it: its
    counts are the step's end, after the finished sequences freed their
    blocks; `peak_used` is the most the step held at once.

    `index` is the frame's place in its recording (0 is the state before the
    first step); `step` is the scheduler's own step number, ``None`` for a
    frame cut by hand.
    """

    index: int
    step: int | None
    block_size: int
    blocks: tuple[BlockState, ...]
    memory: MemoryCounts
    requests: RequestCounts
    # GPU page tables (sequence -> physical blocks, logical order), as the manager
    # holds them: entry i is logical block i, `NULL_BLOCK` (-1) where a sliding
    # window released it (`released_blocks` counts those)
    tables: Mapping[Hashable, tuple[int, ...]] = field(default_factory=dict)
    swapped_tables: Mapping[Hashable, tuple[int, ...]] = field(default_factory=dict)  # -> CPU
    swapped: Mapping[int, SwappedBlock] = field(default_factory=dict)  # CPU block -> contents
    request_of: Mapping[Hashable, Hashable] = field(default_factory=dict)  # sequence -> request
    seq_status: Mapping[Hashable, str] = field(default_factory=dict)
    # during this step:
    copies: tuple[tuple[int, int], ...] = ()  # copy-on-write (src, dst)
    preemptions: int = 0  # requests preempted (all sequences of each at once)
    preempted: tuple[Hashable, ...] = ()  # which ones (empty when the source cannot say)
    event_counts: Mapping[str, int] = field(default_factory=dict)
    # the most GPU blocks in use at once since the frame before, this frame's end included:
    # while the step ran, before its finished sequences gave theirs back (None: the
    # source cannot say, as a view of vLLM's pool read after its steps)
    peak_used: int | None = None

    @property
    def num_blocks(self) -> int:
        return len(self.blocks)

    def request(self, seq: Hashable) -> Hashable:
        """The request a sequence serves (the sequence itself when unknown)."""
        return self.request_of.get(seq, seq)

    def released_blocks(self, seq: Hashable) -> int:
        """Leading logical blocks of `seq` given back by a sliding window."""
        table = self.tables.get(seq, self.swapped_tables.get(seq, ()))
        return sum(1 for b in table if b == NULL_BLOCK)

    @property
    def sequences(self) -> list[Hashable]:
        """Every sequence holding blocks, GPU first, in the order they got them."""
        return [*self.tables, *(s for s in self.swapped_tables if s not in self.tables)]
