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
  A *full* block is named by a hash chained over its parent's name and its
  own token ids (`block_hash.py`), so equal prefixes get equal names; a
  lookup confirms a name with the block's exact `BlockKey`. Several blocks
  may hold the same content (two requests computed it at once): each copy is
  named and any of them is found. When its last owner frees it, a named
  block keeps its contents and stays findable until the pool needs the space.

Free blocks wait in two queues, so a block is only evicted when nothing
blank is left: blocks that hold nothing worth keeping (never named, or
forgotten) are handed out first, oldest first; cached blocks after them, in
LRU order — least recently freed first, and a freed sequence's tail before
its head (`BlockTable.free` frees the tail first). vLLM's block pool keeps the
same order (it reuses blank blocks last-freed first; pagedkit, oldest first).
"""

from __future__ import annotations

import numbers
from collections import OrderedDict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any

from .._validation import check_bool, check_int, plural
from .block_hash import ROOT_HASH, BlockHash, BlockKey, HashFunction, root_hash, sha256
from .errors import BlockStateError, OutOfBlocksError
from .events import Event, EventBus, EventKind


@dataclass(frozen=True)
class MemoryStats:
    """A snapshot of paged memory (`BlockAllocator.stats`).

    ``kv_usage = tokens_stored / slots_allocated`` is the paper's "KV usage":
    the share of reserved KV slots that hold a token's state (1.0 when no
    block is in use). With paging the only waste is the unfilled tail of
    each sequence's last block.
    """

    block_size: int
    total_blocks: int
    free_blocks: int  # free and holding nothing worth keeping
    cached_blocks: int  # free, but still holding a cached prefix (reusable until evicted)
    used_blocks: int  # referenced by at least one sequence
    swapped_blocks: int  # blocks parked in the CPU swap pool
    tokens_stored: int  # token slots holding a token, in used blocks
    slots_allocated: int  # used_blocks * block_size
    kv_usage: float

    def counts(self) -> str:
        """``"16 blocks of 4 tokens: 3 used, 12 free, 1 cached"`` (and the swapped
        ones, if any): the pool in a line, for the memory classes' reprs."""
        swapped = f", {self.swapped_blocks} swapped out" if self.swapped_blocks else ""
        return (f"{plural(self.total_blocks, 'block')} of {plural(self.block_size, 'token')}: "
                f"{self.used_blocks} used, {self.free_blocks} free, {self.cached_blocks} "
                f"cached{swapped}")


class BlockAllocator:
    """A pool of `num_blocks` physical blocks of `block_size` token slots each.

    >>> pool = BlockAllocator(num_blocks=4, block_size=16)
    >>> a = pool.allocate(); pool.fork(a)
    0
    >>> pool.ref_count(a)
    2
    >>> pool.free(a); pool.free(a); pool.num_free_blocks
    4

    `hash_fn` names blocks for the prefix cache (SHA-256 by default, as in
    vLLM; `block_hash.HASH_FUNCTIONS` has the others).
    """

    def __init__(self, num_blocks: int, block_size: int, *,
                 enable_prefix_caching: bool = False, events: EventBus | None = None,
                 hash_fn: HashFunction | None = None) -> None:
        self.num_blocks = check_int("num_blocks", num_blocks, minimum=1)
        self.block_size = check_int("block_size", block_size, minimum=1)
        self.enable_prefix_caching = check_bool("enable_prefix_caching", enable_prefix_caching)
        self.events = events if events is not None else EventBus()
        self.hash_fn = sha256 if hash_fn is None else hash_fn
        self.root_hash = ROOT_HASH if hash_fn is None else root_hash(hash_fn)
        # Free blocks, each queue oldest first. Blank ones hold nothing worth
        # keeping and go first; cached ones leave after them, in LRU order.
        self._blank: OrderedDict[int, None] = OrderedDict.fromkeys(range(self.num_blocks))
        self._cached: OrderedDict[int, None] = OrderedDict()
        self._ref = [0] * self.num_blocks
        self._fill = [0] * self.num_blocks  # tokens written into each block
        self._key: list[BlockKey | None] = [None] * self.num_blocks  # of a named full block
        self._cache: dict[BlockHash, dict[int, None]] = {}  # name -> blocks holding it
        self._tokens_stored = 0  # sum of fills over referenced blocks
        #: Blocks `allocate` can hand out (cached-but-free ones included), and
        #: blocks referenced by at least one sequence: plain counts, kept as
        #: blocks change hands (the scheduler and the engine read them every step).
        self.num_free_blocks = self.num_blocks
        self.num_used_blocks = 0

    # ------------------------------------------------------------------ queries
    @property
    def num_tokens_stored(self) -> int:
        """Slots holding a token, in used blocks (`stats().tokens_stored`, without the snapshot)."""
        return self._tokens_stored

    @property
    def num_cached_blocks(self) -> int:
        """Free blocks still holding a cached prefix."""
        return len(self._cached)

    def free_order(self) -> list[int]:
        """The free blocks in the order `allocate` hands them out: blank ones,
        then cached ones from the least recently freed."""
        return [*self._blank, *self._cached]

    def ref_count(self, block: int) -> int:
        return self._ref[self._check_id(block)]

    def num_tokens(self, block: int) -> int:
        """How many of the block's slots hold a token."""
        return self._fill[self._check_id(block)]

    def block_key(self, block: int) -> BlockKey | None:
        """The exact content of a named full block (`BlockKey`), else None."""
        return self._key[self._check_id(block)]

    def block_hash(self, block: int) -> BlockHash | None:
        """The cache name of a named full block, else None."""
        key = self.block_key(block)
        return None if key is None else key.hash

    def is_free(self, block: int) -> bool:
        return self._ref[self._check_id(block)] == 0

    def __repr__(self) -> str:
        return f"BlockAllocator({self.stats().counts()})"

    def stats(self, *, swapped_blocks: int = 0) -> MemoryStats:
        """A snapshot, from counters kept as blocks change hands (O(1)).
        `swapped_blocks` is for `KVCacheManager`, which owns a swap pool too."""
        swapped_blocks = check_int("swapped_blocks", swapped_blocks, minimum=0)
        used = self.num_used_blocks
        slots = used * self.block_size
        return MemoryStats(
            block_size=self.block_size,
            total_blocks=self.num_blocks,
            free_blocks=len(self._blank),
            cached_blocks=len(self._cached),
            used_blocks=used,
            swapped_blocks=swapped_blocks,
            tokens_stored=self._tokens_stored,
            slots_allocated=slots,
            kv_usage=self._tokens_stored / slots if used else 1.0,
        )

    # ---------------------------------------------------------- owner changes
    def allocate(self, seq: Hashable | None = None) -> int:
        """Hand out a blank block if there is one, else evict the least recently
        used cached block."""
        if self._blank:
            block, _ = self._blank.popitem(last=False)
        elif self._cached:
            block, _ = self._cached.popitem(last=False)
            self._evict(block)
        else:
            raise OutOfBlocksError(
                f"no free blocks: all {self.num_blocks} blocks of the pool are in use")
        self._ref[block] = 1
        self._fill[block] = 0
        self.num_free_blocks -= 1
        self.num_used_blocks += 1
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
        """Drop one owner of `block`; at zero owners it joins a free queue's
        tail: the cached one if it is named (a future cache hit), else the blank one."""
        ref = self._ref[self._check_id(block)]
        if ref == 0:
            raise BlockStateError(f"cannot free block {block}: it is already free (ref count 0)")
        self._ref[block] = ref - 1
        named = self._key[block] is not None
        if self.events:
            self.events.emit(Event(EventKind.FREE, block=block, seq=seq, ref_count=ref - 1,
                                   cached=ref == 1 and named))
        if ref == 1:
            self._tokens_stored -= self._fill[block]
            self.num_free_blocks += 1
            self.num_used_blocks -= 1
            if named:
                self._cached[block] = None
            else:
                self._blank[block] = None
                self._fill[block] = 0

    def copy_on_write(self, block: int, seq: Hashable | None = None
                      ) -> tuple[int, tuple[int, int] | None]:
        """Get a block `seq` may write into in place of `block`.

        A block with one owner is returned as is. A shared one is left to its
        other owners: the writer gets a fresh block and the ``(src, dst)``
        copy that must happen before the write (paper §4.4).
        """
        ref = self._ref[self._check_id(block)]
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
        check_int("num_tokens", num_tokens, minimum=0)
        fill = self._fill[self._check_id(block)] + num_tokens
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
    def new_key(self, parent: BlockKey | None, token_ids: Sequence[int],
                extra_keys: Any = None) -> BlockKey:
        """The key (and name) of a full block of `token_ids` after `parent`'s
        content (None: the first block), under this pool's hash function."""
        return BlockKey(parent, token_ids, extra_keys, root=self.root_hash, hash_fn=self.hash_fn)

    def register(self, block: int, key: BlockKey) -> bool:
        """Make a full block findable by its key. Several blocks may hold the
        same content (computed twice): each is named. Returns False if caching
        is off or the block already has a name."""
        _check_key(key)
        fill = self._fill[self._check_id(block)]  # a bad id is an error, caching or not
        if not self.enable_prefix_caching:
            return False
        if fill != self.block_size or len(key.token_ids) != self.block_size:
            raise BlockStateError(
                f"only full blocks can be cached: block {block} holds {fill} "
                f"of {self.block_size} tokens ({len(key.token_ids)} token ids given)")
        if self._ref[block] == 0:
            raise BlockStateError(f"cannot cache block {block}: it is free")
        if self._key[block] is not None:
            return False
        self._key[block] = key
        self._cache.setdefault(key.hash, {})[block] = None
        return True

    def find_cached(self, key: BlockKey) -> int | None:
        """A block holding exactly `key`'s content, without touching anything:
        a live copy if there is one (sharing it costs no free block), else a
        cached one. The name finds the candidates; their keys must be equal
        too, so even a hash collision is a miss, never another prefix's K/V."""
        found = None
        for block in self._cache.get(_check_key(key).hash, ()):
            if self._key[block].same_content(key):
                if self._ref[block]:
                    return block
                if found is None:
                    found = block
        return found

    def touch(self, block: int, seq: Hashable | None = None) -> int:
        """Take a reference on a named block found by `find_cached` (a cache hit).
        A cached-but-free block leaves its free queue and is live again."""
        if self._key[self._check_id(block)] is None:
            raise BlockStateError(f"block {block} is not in the prefix cache")
        if self._ref[block] == 0:
            del self._cached[block]
            self._tokens_stored += self._fill[block]
            self.num_free_blocks -= 1
            self.num_used_blocks += 1
        self._ref[block] += 1
        if self.events:
            self.events.emit(Event(EventKind.CACHE_HIT, block=block, seq=seq,
                                   ref_count=self._ref[block], num_tokens=self._fill[block]))
        return block

    def forget(self, block: int) -> bool:
        """Drop a free block's cached contents now (they were never computed,
        say): it becomes blank. Returns whether there was anything to forget."""
        if self._ref[self._check_id(block)] or self._key[block] is None:
            return False
        del self._cached[block]
        self._make_blank(block)
        return True

    def evict_all_cached(self) -> int:
        """Forget every cached-but-free block (they stay free, now blank).
        Returns how many."""
        victims = list(self._cached)
        self._cached.clear()
        for block in victims:
            self._make_blank(block)
        return len(victims)

    def _make_blank(self, block: int) -> None:
        self._evict(block)
        self._fill[block] = 0
        self._blank[block] = None

    def _evict(self, block: int) -> None:
        """Drop a block's name (its content is about to be overwritten or forgotten)."""
        key = self._key[block]
        copies = self._cache[key.hash]
        del copies[block]
        if not copies:
            del self._cache[key.hash]
        self._key[block] = None
        if self.events:
            self.events.emit(Event(EventKind.EVICT, block=block))

    def _check_id(self, block: int) -> int:
        """`block` if it names a block of the pool (any integer type), else the error."""
        if isinstance(block, bool) or not isinstance(block, numbers.Integral):
            raise TypeError(f"a block id is an int, got {block!r}")
        if not 0 <= block < self.num_blocks:
            raise IndexError(f"block id {block} is outside the pool [0, {self.num_blocks})")
        return block


def _check_key(key: BlockKey) -> BlockKey:
    if not isinstance(key, BlockKey):
        raise TypeError(f"a block's cache entry is a BlockKey (from new_key), got {key!r}")
    return key
