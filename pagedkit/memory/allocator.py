"""The block pool: physical KV-cache blocks, their owners and their contents.

This is the bookkeeping half of paged memory (paper §4.2-4.4), kept apart
from policy the way vLLM V1 keeps ``block_pool.py`` apart from
``kv_cache_manager.py``. It knows nothing of models or tensors: a block is an
integer id, and the GPU memory it stands for lives elsewhere.

Four ideas live here:

* **A free queue.** Free block ids wait in an ordered queue; allocating pops
  the head, freeing appends at the tail. Both are O(1).
* **Reference counts.** A block may belong to several sequences at once
  (parallel samples sharing a prompt, beams sharing a history). ``fork`` adds
  an owner, ``free`` removes one; the block is free again only at zero.
* **Copy-on-write** (§4.4). A sequence about to write into a block that others
  still read gets a fresh block and the copy to make, instead of clobbering
  the shared one.
* **Prefix caching** (§4.4, "shared prefix"; vLLM's automatic prefix caching).
  A *full* block is named by a hash chained over its parent's hash and its
  own token ids, so equal prefixes get equal names. When its last owner
  frees it, a cached block keeps its contents and stays findable by that
  name until the allocator needs the space: the free queue is also the LRU
  eviction order.
"""

from __future__ import annotations

import numbers
from collections import OrderedDict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

from .._validation import check_bool, check_int
from .errors import BlockStateError, OutOfBlocksError
from .events import Event, EventBus, EventKind

#: The "parent hash" of a sequence's first block.
ROOT_HASH = 0x5EED


def hash_block(parent_hash: int, token_ids: Sequence[int]) -> int:
    """Name a full block by its tokens *and everything before it*.

    Chaining the parent's hash in means two blocks with equal tokens but
    different histories get different names, because their keys and values
    differ (attention saw different prefixes). Python's hash of a tuple of
    ints is deterministic across runs, so names are reproducible.
    """
    return hash((parent_hash, tuple(token_ids)))


@dataclass(frozen=True)
class MemoryStats:
    """A snapshot of paged memory.

    ``tokens_stored / slots_allocated`` is the paper's "KV usage": the share
    of reserved KV slots that hold a token's state. With paging the only
    waste is the unfilled tail of each sequence's last block.
    """

    block_size: int
    total_blocks: int
    free_blocks: int  # free and holding nothing worth keeping
    cached_blocks: int  # free, but still holding a cached prefix (reusable until evicted)
    used_blocks: int  # referenced by at least one sequence
    tokens_stored: int  # token slots holding a token, in used blocks
    swapped_blocks: int = 0  # blocks parked in the CPU swap pool

    @property
    def slots_allocated(self) -> int:
        return self.used_blocks * self.block_size

    @property
    def kv_usage(self) -> float:
        """Share of allocated slots that hold tokens (1.0 when nothing is allocated)."""
        return self.tokens_stored / self.slots_allocated if self.used_blocks else 1.0

    def as_dict(self) -> dict[str, float]:
        return {
            "block_size": self.block_size,
            "total_blocks": self.total_blocks,
            "free_blocks": self.free_blocks,
            "cached_blocks": self.cached_blocks,
            "used_blocks": self.used_blocks,
            "swapped_blocks": self.swapped_blocks,
            "tokens_stored": self.tokens_stored,
            "slots_allocated": self.slots_allocated,
            "kv_usage": self.kv_usage,
        }


class BlockAllocator:
    """A pool of `num_blocks` physical blocks of `block_size` token slots each.

    >>> pool = BlockAllocator(num_blocks=4, block_size=16)
    >>> a = pool.allocate(); pool.fork(a)
    0
    >>> pool.ref_count(a)
    2
    >>> pool.free(a); pool.free(a); pool.num_free_blocks
    4
    """

    def __init__(self, num_blocks: int, block_size: int, *,
                 enable_prefix_caching: bool = False, events: EventBus | None = None) -> None:
        self.num_blocks = check_int("num_blocks", num_blocks, minimum=1)
        self.block_size = check_int("block_size", block_size, minimum=1)
        self.enable_prefix_caching = check_bool("enable_prefix_caching", enable_prefix_caching)
        self.events = events if events is not None else EventBus()
        # The free queue, oldest first. Cached-but-free blocks sit in it too:
        # popping the head evicts the least recently freed cached block.
        self._free: OrderedDict[int, None] = OrderedDict.fromkeys(range(self.num_blocks))
        self._ref = [0] * self.num_blocks
        self._fill = [0] * self.num_blocks  # tokens written into each block
        self._hash: list[int | None] = [None] * self.num_blocks  # name of a cached full block
        self._tokens: list[tuple[int, ...] | None] = [None] * self.num_blocks
        self._cache: dict[int, int] = {}  # hash -> block
        self._num_cached_free = 0
        self._tokens_stored = 0  # sum of fills over referenced blocks

    # ------------------------------------------------------------------ queries
    @property
    def num_free_blocks(self) -> int:
        """Blocks that `allocate` can hand out (cached-but-free ones included)."""
        return len(self._free)

    @property
    def num_used_blocks(self) -> int:
        return self.num_blocks - len(self._free)

    @property
    def num_tokens_stored(self) -> int:
        """Slots holding a token, in used blocks (`stats().tokens_stored`, without the snapshot)."""
        return self._tokens_stored

    @property
    def num_cached_blocks(self) -> int:
        """Free blocks still holding a cached prefix."""
        return self._num_cached_free

    def ref_count(self, block: int) -> int:
        if type(block) is not int or not 0 <= block < self.num_blocks:
            self._check_id(block)  # the full check (and its error) only off the common case
        return self._ref[block]

    def num_tokens(self, block: int) -> int:
        """How many of the block's slots hold a token."""
        return self._fill[self._check_id(block)]

    def block_hash(self, block: int) -> int | None:
        """The cache name of a full, registered block, else None."""
        return self._hash[self._check_id(block)]

    def is_free(self, block: int) -> bool:
        return self._ref[self._check_id(block)] == 0

    def stats(self, *, swapped_blocks: int = 0) -> MemoryStats:
        """A snapshot, from counters kept as blocks change hands (O(1)).
        `swapped_blocks` is for `KVCacheManager`, which owns a swap pool too."""
        return MemoryStats(
            block_size=self.block_size,
            total_blocks=self.num_blocks,
            free_blocks=len(self._free) - self._num_cached_free,
            cached_blocks=self._num_cached_free,
            used_blocks=self.num_used_blocks,
            tokens_stored=self._tokens_stored,
            swapped_blocks=swapped_blocks,
        )

    # ---------------------------------------------------------- owner changes
    def allocate(self, seq: Hashable | None = None) -> int:
        """Pop the head of the free queue for `seq`, evicting its cached contents if any."""
        if not self._free:
            raise OutOfBlocksError(
                f"no free blocks: all {self.num_blocks} blocks of the pool are in use")
        block, _ = self._free.popitem(last=False)
        if self._hash[block] is not None:
            self._num_cached_free -= 1
            self._evict(block)
        self._ref[block] = 1
        self._fill[block] = 0
        if self.events:
            self.events.emit(Event(EventKind.ALLOCATE, block=block, seq=seq, ref_count=1))
        return block

    def fork(self, block: int, seq: Hashable | None = None) -> int:
        """Give a live block one more owner (sharing, paper §4.4). Returns `block`."""
        if self._ref[self._check_id(block)] == 0:
            raise BlockStateError(f"cannot fork block {block}: it is free (ref count 0)")
        self._ref[block] += 1
        if self.events:
            self.events.emit(Event(EventKind.FORK, block=block, seq=seq,
                                   ref_count=self._ref[block]))
        return block

    def free(self, block: int, seq: Hashable | None = None) -> None:
        """Drop one owner of `block`; at zero owners it rejoins the free queue's tail."""
        ref = self._ref[self._check_id(block)]
        if ref == 0:
            raise BlockStateError(f"cannot free block {block}: it is already free (ref count 0)")
        self._ref[block] = ref - 1
        if self.events:
            keeps = ref == 1 and self._hash[block] is not None  # stays findable in the cache
            self.events.emit(Event(EventKind.FREE, block=block, seq=seq, ref_count=ref - 1,
                                   cached=keeps))
        if ref == 1:
            self._tokens_stored -= self._fill[block]
            self._free[block] = None
            if self._hash[block] is not None:
                self._num_cached_free += 1  # keeps its tokens: a future cache hit
            else:
                self._fill[block] = 0

    def copy_on_write(self, block: int, seq: Hashable | None = None
                      ) -> tuple[int, tuple[int, int] | None]:
        """Get a block `seq` may write into in place of `block`.

        A block with one owner is returned as is. A shared one is left to its
        other owners: the writer gets a fresh block and the ``(src, dst)``
        copy that must happen before the write (paper §4.4).
        """
        if type(block) is not int or not 0 <= block < self.num_blocks:
            self._check_id(block)
        ref = self._ref[block]
        if ref == 1:
            return block, None
        if ref == 0:
            raise BlockStateError(f"cannot write to block {block}: it is free (ref count 0)")
        new = self.allocate(seq)  # raises before anything changed if the pool is empty
        self._ref[block] -= 1
        self._fill[new] = self._fill[block]
        self._tokens_stored += self._fill[new]
        if self.events:
            self.events.emit(Event(EventKind.COW, block=new, src=block, seq=seq,
                                   ref_count=self._ref[block], num_tokens=self._fill[new]))
        return new, (block, new)

    def append_tokens(self, block: int, num_tokens: int, seq: Hashable | None = None) -> None:
        """Record that `num_tokens` more slots of `block` now hold tokens."""
        if type(num_tokens) is not int or num_tokens < 0:  # checked in full only if wrong
            check_int("num_tokens", num_tokens, minimum=0)
        if type(block) is not int or not 0 <= block < self.num_blocks:
            self._check_id(block)
        fill = self._fill[block] + num_tokens
        if self._ref[block] != 1:
            raise BlockStateError(
                f"cannot write to block {block}: ref count is {self._ref[block]}, writes need "
                "exactly one owner (use copy_on_write first)")
        if fill > self.block_size:
            raise BlockStateError(
                f"cannot append {num_tokens} tokens to block {block}: it would hold {fill} "
                f"tokens but block_size is {self.block_size}")
        self._fill[block] = fill
        self._tokens_stored += num_tokens
        if self.events:
            self.events.emit(Event(EventKind.APPEND, block=block, seq=seq, num_tokens=fill))

    # ----------------------------------------------------------- prefix cache
    def register(self, block: int, block_hash: int, token_ids: Sequence[int]) -> bool:
        """Make a full block findable by its hash. Returns False if that name is
        already taken (the same prefix was computed twice) or caching is off."""
        if not self.enable_prefix_caching:
            return False
        fill = self._fill[self._check_id(block)]
        if fill != self.block_size or len(token_ids) != self.block_size:
            raise BlockStateError(
                f"only full blocks can be cached: block {block} holds {fill} "
                f"of {self.block_size} tokens ({len(token_ids)} token ids given)")
        if self._ref[block] == 0:
            raise BlockStateError(f"cannot cache block {block}: it is free")
        if block_hash in self._cache or self._hash[block] is not None:
            return False
        self._cache[block_hash] = block
        self._hash[block] = block_hash
        self._tokens[block] = tuple(token_ids)
        return True

    def find_cached(self, block_hash: int, token_ids: Sequence[int]) -> int | None:
        """Which block holds this content, without touching anything.

        The token ids are compared too, so a hash collision is a miss, never a
        wrong answer."""
        block = self._cache.get(block_hash)
        if block is None or self._tokens[block] != tuple(token_ids):
            return None
        return block

    def touch(self, block: int, seq: Hashable | None = None) -> int:
        """Take a reference on a cached block found by `find_cached` (a cache hit).

        A cached-but-free block leaves the free queue and is live again."""
        if self._hash[self._check_id(block)] is None:
            raise BlockStateError(f"block {block} is not in the prefix cache")
        if self._ref[block] == 0:
            del self._free[block]
            self._num_cached_free -= 1
            self._tokens_stored += self._fill[block]
        self._ref[block] += 1
        if self.events:
            self.events.emit(Event(EventKind.CACHE_HIT, block=block, seq=seq,
                                   ref_count=self._ref[block], num_tokens=self._fill[block]))
        return block

    def forget(self, block: int) -> bool:
        """Drop a free block's cached contents now (they were never computed,
        say). Returns whether there was anything to forget."""
        if self._ref[self._check_id(block)] or self._hash[block] is None:
            return False
        self._evict(block)
        self._fill[block] = 0
        self._num_cached_free -= 1
        return True

    def evict_all_cached(self) -> int:
        """Forget every cached-but-free block (they stay free). Returns how many."""
        victims = [b for b in self._free if self._hash[b] is not None]
        for block in victims:
            self._evict(block)
            self._fill[block] = 0
        self._num_cached_free = 0
        return len(victims)

    def _evict(self, block: int) -> None:
        del self._cache[self._hash[block]]
        self._hash[block] = None
        self._tokens[block] = None
        if self.events:
            self.events.emit(Event(EventKind.EVICT, block=block))

    def _check_id(self, block: int) -> int:
        """`block` if it names a block of the pool (any integer type), else the
        error. The per-token paths (`ref_count`, `copy_on_write`,
        `append_tokens`) call it only when ``type(block) is int and 0 <= block
        < num_blocks`` fails: a method call per token was a measurable share
        of a decode step's bookkeeping."""
        if type(block) is not int and (isinstance(block, bool)
                                       or not isinstance(block, numbers.Integral)):
            raise TypeError(f"a block id is an int, got {block!r}")
        if not 0 <= block < self.num_blocks:
            raise IndexError(f"block id {block} is outside the pool [0, {self.num_blocks})")
        return block
