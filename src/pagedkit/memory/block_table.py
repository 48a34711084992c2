"""One sequence's page table: logical blocks in order, each naming a physical block.

Like an operating system's page table (paper §4.2, Figure 6), it lets a
sequence's KV cache look contiguous to the sequence while its blocks lie
anywhere in GPU memory. Token ``i`` of the sequence lives in logical block
``i // block_size`` at offset ``i % block_size``; its *slot* in the physical
cache is ``physical_block * block_size + offset``. The list of slots of a
step's new tokens is the ``slot_mapping`` the kernels write K/V through.

With a sliding window (every layer attending to the last ``window`` keys
only), the blocks a sequence has slid past are given back while it runs
(`release_before`): their entries become `NULL_BLOCK`, a placeholder that
keeps the logical numbering (block ``b`` still holds tokens ``b * block_size``
onwards) but owns nothing. vLLM V1 does the same with its null block.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

from .._validation import check_cache_salt, check_int, check_token_ids
from .allocator import BlockAllocator
from .block_hash import BlockHash, BlockKey, salt_keys
from .errors import BlockStateError, OutOfBlocksError

#: The entry of a logical block given back to the pool (`BlockTable.release_before`).
#: Negative, so it can never be mistaken for a real block: the allocator refuses it.
NULL_BLOCK = -1
#: What a kernel's block table shows for a `NULL_BLOCK` entry (and for the padding
#: of a shorter table; `pagedkit.model.runner.pack_step`): any valid id works,
#: since the kernels never read blocks wholly before the window start.
KERNEL_NULL_BLOCK = 0


def blocks_to_serve(prompt_len: int, end: int, num_sequences: int, block_size: int, *,
                    cache_sets_max_model_len: bool = False) -> int:
    """KV blocks that serve `num_sequences` sequences of one prompt, each to
    `end` tokens (prompt and generated), when they run alone: the prompt's
    full blocks once, shared (paper §4.4), plus each sequence's own blocks for
    the rest of its prompt and all but its last token (whose K/V is never
    computed). With `cache_sets_max_model_len` (an engine whose max_model_len
    was left unset, so the cache's token count sets it), also enough blocks
    for `end` tokens. `LLMEngine` and the demo's check both use it."""
    full = prompt_len // block_size
    own = -(-(end - 1 - full * block_size) // block_size)
    shared = full + num_sequences * own
    return max(shared, -(-end // block_size)) if cache_sets_max_model_len else shared


def check_block_list(name: str, blocks: object) -> Sequence[int]:
    """`blocks` if it is a list, tuple or range (of block ids, checked where
    they are used), else a TypeError naming `name`. A one-shot iterator is
    refused, as for token ids: read once to be checked, it would be empty
    when the blocks are taken."""
    if not isinstance(blocks, (list, tuple, range)):
        raise TypeError(f"{name} must be a list of block ids (from cached_prefix), got "
                        f"{blocks!r} ({type(blocks).__name__})")
    return blocks


class BlockTable:
    """Logical-to-physical block mapping of one sequence.

    >>> pool = BlockAllocator(num_blocks=8, block_size=4)
    >>> table = BlockTable(pool, seq="A")
    >>> table.append([11, 12, 13, 14, 15])      # two blocks: 4 tokens + 1
    []
    >>> table.blocks, table.num_tokens, table.slot(4)
    ([0, 1], 5, 4)
    """

    def __init__(self, allocator: BlockAllocator, seq: Hashable | None = None, *,
                 cache_salt: str | None = None) -> None:
        if not isinstance(allocator, BlockAllocator):
            hint = (": a KVCacheManager's pool is kv.allocator (or let the manager keep the "
                    "tables: kv.allocate_slots(seq, token_ids))"
                    if hasattr(allocator, "allocate_slots") else "")
            raise TypeError(f"BlockTable needs a BlockAllocator (the pool its blocks come from), "
                            f"got {allocator!r} ({type(allocator).__name__}){hint}")
        self.allocator = allocator
        self.block_size = allocator.block_size
        self.seq = seq
        if cache_salt is not None:  # a request's salt, as the engine checks it ("": none)
            cache_salt = check_cache_salt(cache_salt)
        self.cache_salt = cache_salt  # names the first block with the tokens (`salt_keys`)
        self.blocks: list[int] = []
        self.num_tokens = 0
        # With prefix caching: the keys of the named full blocks, in order, and
        # the tokens after them — enough to name each block once its K/V are
        # computed. Without it nothing is named, and hashing costs nothing.
        self.block_keys: list[BlockKey] = []
        self._unnamed: list[int] = []
        self._computed = 0  # leading tokens whose K/V are (or this step will be) written
        self._freed = False  # a freed table is closed: its sequence is over


    @property
    def block_hashes(self) -> list[BlockHash]:
        """The prefix-cache names of the full blocks, in order (empty without caching)."""
        return [key.hash for key in self.block_keys]

    def __len__(self) -> int:
        return len(self.blocks)

    def __repr__(self) -> str:
        freed = ", freed" if self._freed else ""
        return (f"BlockTable(seq={self.seq!r}, blocks={self.blocks}, "
                f"num_tokens={self.num_tokens}{freed})")

    def _check_open(self, action: str) -> None:
        """A handle kept after `free` must not take blocks nobody would free again."""
        if self._freed:
            raise BlockStateError(f"cannot {action}: the block table of sequence {self.seq!r} "
                                  "was freed; start a new BlockTable for a new sequence")

    # ------------------------------------------------------------------ reading
    def physical_block(self, logical_index: int) -> int:
        logical_index = check_int("logical_index", logical_index)
        if not 0 <= logical_index < len(self.blocks):
            raise IndexError(f"logical block {logical_index} is outside the table "
                             f"[0, {len(self.blocks)}) of sequence {self.seq!r}")
        return self.blocks[logical_index]

    @property
    def live_blocks(self) -> list[int]:
        """The physical blocks this table owns (its `NULL_BLOCK` entries left out)."""
        return [b for b in self.blocks if b != NULL_BLOCK]

    @property
    def num_released(self) -> int:
        """Leading logical blocks given back to the pool (always a prefix)."""
        return sum(1 for b in self.blocks if b == NULL_BLOCK)

    def slot(self, position: int) -> int:
        """Physical slot of token `position`: ``block * block_size + offset``."""
        position = check_int("position", position)
        if not 0 <= position < self.num_tokens:
            raise IndexError(f"token position {position} is outside [0, {self.num_tokens}) "
                             f"(the {self.num_tokens} tokens of sequence {self.seq!r})")
        return self.slot_mapping(position, position + 1)[0]

    def slot_mapping(self, start: int = 0, end: int | None = None) -> list[int]:
        """Slots of tokens ``start..end-1`` (all tokens by default): the list
        the kernels write the new K/V through. Token p sits in logical block
        ``p // block_size`` at offset ``p % block_size``, so its slot is
        ``block * block_size + offset``. Positions run
        ``0 <= start <= end <= num_tokens``; anything else is refused (an
        empty list would hide the mistake)."""
        start = check_int("start", start)
        end = self.num_tokens if end is None else check_int("end", end)
        if not 0 <= start <= end <= self.num_tokens:  # one comparison on the decode path
            raise IndexError(f"slot_mapping({start}, {end}): positions run 0 <= start <= end "
                             f"<= {self.num_tokens} (the tokens of sequence {self.seq!r})")
        slots = []
        for position in range(start, end):
            block, offset = divmod(position, self.block_size)
            if self.blocks[block] == NULL_BLOCK:
                raise IndexError(f"token position {position} of sequence {self.seq!r} lies in "
                                 f"logical block {block}, already released (outside the window)")
            slots.append(self.blocks[block] * self.block_size + offset)
        return slots

    def blocks_needed(self, num_new_tokens: int) -> int:
        """Fresh blocks that appending `num_new_tokens` would take from the pool:
        the blocks the tokens reach past the table's end, plus one copy if they
        write into a partly filled last block that others still read
        (copy-on-write; a released entry is never written)."""
        check_int("num_new_tokens", num_new_tokens, minimum=0)
        total = -(-(self.num_tokens + num_new_tokens) // self.block_size)
        last = self.blocks[-1] if self.blocks else NULL_BLOCK
        copy = (num_new_tokens > 0 and self.num_tokens % self.block_size > 0
                and last != NULL_BLOCK and self.allocator.ref_count(last) > 1)
        return total - len(self.blocks) + copy

    # ------------------------------------------------------------------ writing
    def append(self, token_ids: Sequence[int], *, computed: int | None = None
               ) -> list[tuple[int, int]]:
        """Give `token_ids` slots at the end of the sequence, all or nothing.

        Returns the ``(src, dst)`` block copies that must happen before the new
        K/V are written (copy-on-write of a shared last block). Raises
        `OutOfBlocksError` without changing anything if the pool is too small.
        With prefix caching, the full blocks among the first `computed` tokens
        are named (`name_blocks`); by default all of them, unless earlier
        tokens still wait to be computed.
        """
        copies = self.try_append(token_ids, computed=computed)
        if copies is None:
            raise OutOfBlocksError(
                f"sequence {self.seq!r} needs {self.blocks_needed(len(token_ids))} more blocks "
                f"for {len(token_ids)} tokens but only {self.allocator.num_free_blocks} are free")
        return copies

    def try_append(self, token_ids: Sequence[int], *, computed: int | None = None
                   ) -> list[tuple[int, int]] | None:
        """`append`, but returns ``None`` (having changed nothing) when the pool is too small."""
        if self._freed:
            self._check_open("append to it")
        check_token_ids("token_ids", token_ids)
        end = len(token_ids)
        if computed is not None:
            check_int("computed", computed, minimum=0, maximum=self.num_tokens + end)
        pool, blocks, size = self.allocator, self.blocks, self.block_size
        if self.blocks_needed(end) > pool.num_free_blocks:
            return None
        if computed is None:  # these tokens are computed with the earlier ones, if those are
            computed = self.num_tokens + end if self._computed == self.num_tokens else 0
        copies: list[tuple[int, int]] = []
        pos = 0
        while pos < end:  # one pass per block the tokens reach
            offset = self.num_tokens % size  # where the next token goes in its block
            if offset == 0:  # the last block is full (or there is none): a fresh one
                blocks.append(pool.allocate(self.seq))
            elif pool.ref_count(blocks[-1]) > 1:  # others still read it: copy it first
                blocks[-1], copy = pool.copy_on_write(blocks[-1], self.seq)
                copies.append(copy)
            take = min(size - offset, end - pos)
            pool.append_tokens(blocks[-1], take, self.seq)
            self.num_tokens += take
            pos += take
        if pool.enable_prefix_caching:
            self._unnamed += token_ids
            self.name_blocks(computed)
        return copies

    def name_blocks(self, num_tokens: int) -> None:
        """The first `num_tokens` tokens are computed, or are by the end of the
        current step: name, and offer to the prefix cache, every full block
        among them (vLLM's ``cache_blocks``). A name promises that a block's
        K/V are there, so tokens appended ahead of the steps that compute them
        (``append(..., computed=k)``: a recomputation spread over steps) are
        named as those steps append: `KVCacheManager.allocate_slots` with the
        tokens a step computes, or none, names up to them."""
        pool, size = self.allocator, self.block_size
        check_int("num_tokens", num_tokens, minimum=0, maximum=self.num_tokens)
        if not pool.enable_prefix_caching:
            return
        self._computed = max(self._computed, min(num_tokens, self.num_tokens))
        while (len(self.block_keys) + 1) * size <= self._computed:
            key = pool.new_key(self.block_keys[-1] if self.block_keys else None,
                               self._unnamed[:size], self._extra_keys(len(self.block_keys)))
            del self._unnamed[:size]
            block = self.blocks[len(self.block_keys)]
            if block != NULL_BLOCK and not pool.register(block, key):
                key = pool.block_key(block) or key  # a sharer named it first
            self.block_keys.append(key)

    # ------------------------------------------------------------ prefix cache
    def cached_prefix(self, token_ids: Sequence[int]) -> list[int]:
        """Cached blocks that already hold the leading full blocks of `token_ids`.

        Only asks; takes nothing. The last token is never matched: the model
        must compute at least one token to produce the next token's logits.
        Each hit's stored key is the parent of the next lookup, so the chain
        compared is the one the cache holds.
        """
        check_token_ids("token_ids", token_ids)
        pool = self.allocator
        if not pool.enable_prefix_caching or self.blocks:
            return []
        hits: list[int] = []
        parent: BlockKey | None = None
        usable = len(token_ids) - 1
        for start in range(0, usable - self.block_size + 1, self.block_size):
            block = pool.find_cached(pool.new_key(parent, token_ids[start:start + self.block_size],
                                                  self._extra_keys(len(hits))))
            if block is None:
                break
            hits.append(block)
            parent = pool.block_key(block)
        return hits

    def _extra_keys(self, index: int) -> Any:
        """The extra keys of the block at `index`: the cache salt's, for the first."""
        return salt_keys(self.cache_salt) if index == 0 else None

    def check_cached(self, blocks: Sequence[int]) -> None:
        """Raise unless cached `blocks` can start a sequence of this table: distinct
        blocks of the prefix cache, each the next block of one chain from the
        first, cached under this table's `cache_salt` (its first block's key
        holds the salt, `salt_keys`: a block cached for another salt, or none,
        is never shared with this one). Asks only: takes nothing."""
        blocks = list(check_block_list("cached_blocks", blocks))
        if len(set(blocks)) != len(blocks):
            raise BlockStateError(
                f"cached blocks {blocks} for sequence {self.seq!r} name a block twice")
        stray = [b for b in blocks if self.allocator.block_hash(b) is None]
        if stray:
            raise BlockStateError(f"cached blocks {stray} for sequence {self.seq!r} are not in "
                                  "the prefix cache (take them from cached_prefix)")
        if not blocks:
            return
        take = f"take them from cached_prefix(seq, token_ids, cache_salt={self.cache_salt!r})"
        keys = [self.allocator.block_key(b) for b in blocks]
        if keys[0].parent is not None:
            raise BlockStateError(f"cached block {blocks[0]} does not start a sequence (it "
                                  f"follows other tokens), so it cannot start {self.seq!r}; {take}")
        if keys[0].extra_keys != salt_keys(self.cache_salt):
            raise BlockStateError(
                f"cached block {blocks[0]} was cached under extra keys {keys[0].extra_keys!r}, "
                f"and sequence {self.seq!r} has cache_salt {self.cache_salt!r}: requests share "
                f"cached blocks only within one salt; {take}")
        for i in range(1, len(keys)):
            if keys[i].parent is None or not keys[i].parent.same_content(keys[i - 1]):
                raise BlockStateError(
                    f"cached block {blocks[i]} does not follow block {blocks[i - 1]} in the "
                    f"cache, so cached blocks {blocks} are not one prefix; {take}")

    def adopt_cached(self, blocks: Sequence[int]) -> None:
        """Start this (empty) table with cached blocks from `cached_prefix`
        (`check_cached` first: all are checked before any is taken)."""
        self._check_open("adopt cached blocks")
        if self.blocks:
            raise BlockStateError(
                f"sequence {self.seq!r} already has {len(self.blocks)} blocks; "
                "cached blocks can only start a sequence")
        self.check_cached(blocks)
        for block in blocks:
            self.blocks.append(self.allocator.touch(block, self.seq))
            self.block_keys.append(self.allocator.block_key(block))
        self.num_tokens = self._computed = len(self.blocks) * self.block_size

    # ------------------------------------------------------------------ sharing
    def fork(self, seq: Hashable | None = None) -> BlockTable:
        """A new table sharing every block with this one (ref counts +1)."""
        self._check_open("fork it")
        child = BlockTable(self.allocator, seq, cache_salt=self.cache_salt)
        child.blocks = [b if b == NULL_BLOCK else self.allocator.fork(b, seq)
                        for b in self.blocks]  # released entries stay released
        child.num_tokens = self.num_tokens
        child.block_keys = list(self.block_keys)
        child._unnamed = list(self._unnamed)
        child._computed = self._computed
        return child

    def free(self) -> None:
        """Release every block, last first, so a sequence's tail blocks are the
        first cached ones to be evicted (its head is likelier to be shared).
        The table is closed afterwards: appending to it again is an error."""
        self._check_open("free it again")
        for block in reversed(self.live_blocks):
            self.allocator.free(block, self.seq)
        self.blocks = []
        self.num_tokens = 0
        self.block_keys = []
        self._unnamed = []
        self._computed = 0
        self._freed = True

    def release_before(self, position: int) -> list[int]:
        """Give back the blocks that hold only tokens before `position` (a
        sliding window has left them): each logical block ``b`` with
        ``(b + 1) * block_size <= position``. Their entries become `NULL_BLOCK`;
        the blocks are freed like any other (a named one stays in the prefix
        cache, evictable, and its key stays in `block_keys`, so the blocks
        after it are still named as before). Returns the blocks released now.

        The caller picks `position` (`KVCacheManager.release_outside_window`):
        nothing in this table knows which tokens attention still reads."""
        self._check_open("release its blocks")
        position = check_int(f"the release position (in the {self.num_tokens} tokens of "
                             f"sequence {self.seq!r})", position, minimum=0,
                             maximum=self.num_tokens)
        released = []
        for b in range(min(position // self.block_size, len(self.blocks))):
            block = self.blocks[b]
            if block != NULL_BLOCK:
                self.blocks[b] = NULL_BLOCK
                released.append(block)
        for block in reversed(released):  # tail first, as `free` does
            self.allocator.free(block, self.seq)
        return released

    def relocate(self, allocator: BlockAllocator, blocks: Sequence[int]) -> None:
        """Point the table at copies of its blocks in another pool (a swap, paper
        §4.5): same tokens and names, new physical blocks, one for one. The
        caller (`KVCacheManager`) has copied the contents and let go of the old ones."""
        self._check_open("relocate it")
        if len(blocks) != len(self.blocks):
            raise BlockStateError(f"cannot relocate sequence {self.seq!r}: it holds "
                                  f"{len(self.blocks)} blocks, {len(blocks)} copies given")
        self.allocator, self.blocks = allocator, list(blocks)
