"""The KV-cache manager: block tables for every sequence over one block pool.

This is the policy half (vLLM V1's ``kv_cache_manager.py``): the scheduler and
the simulator ask it for room for tokens, to share a sequence's blocks with
a new one, to free a finished sequence, or to park a preempted group's blocks
in CPU memory (swapping, paper §4.5). The bookkeeping lives in
`BlockAllocator`; this class only decides what to ask of it.

Every request for room is all-or-nothing: `allocate_slots` either gives every
token a slot or returns ``None`` having changed nothing, so a scheduler can
try, and preempt someone if it must.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Iterator, Mapping, Sequence
from types import MappingProxyType

from .._validation import check_cache_salt, check_int, check_token_ids, plural
from .allocator import BlockAllocator, MemoryStats
from .block_hash import HashFunction
from .block_table import NULL_BLOCK, BlockTable, check_block_list
from .errors import BlockStateError, OutOfBlocksError
from .events import Event, EventBus, EventKind

BlockCopy = tuple[int, int]


class KVCacheManager:
    """Paged KV memory for many sequences.

    >>> kv = KVCacheManager(num_blocks=8, block_size=4)
    >>> kv.allocate_slots("A", [1, 2, 3, 4, 5])
    []
    >>> kv.fork("A", "B"); kv.allocate_slots("B", [6])   # B's write copies the shared block
    [(1, 2)]
    >>> kv.block_ids("A"), kv.block_ids("B")
    ([0, 1], [0, 2])
    """

    def __init__(self, num_blocks: int, block_size: int, *, enable_prefix_caching: bool = False,
                 num_swap_blocks: int = 0, events: EventBus | None = None,
                 hash_fn: HashFunction | None = None) -> None:
        self.events = events if events is not None else EventBus()
        self.allocator = BlockAllocator(num_blocks, block_size,
                                        enable_prefix_caching=enable_prefix_caching,
                                        events=self.events, hash_fn=hash_fn)
        # The CPU swap space is a second pool of the same kind: a swapped-out
        # table simply points into it instead.
        num_swap_blocks = check_int("num_swap_blocks", num_swap_blocks, minimum=0)
        self.swap_pool = BlockAllocator(num_swap_blocks, block_size) if num_swap_blocks else None
        self._tables: dict[Hashable, BlockTable] = {}
        self._swapped: dict[Hashable, BlockTable] = {}

    @property
    def block_size(self) -> int:
        return self.allocator.block_size

    def __contains__(self, seq: Hashable) -> bool:
        _check_seq(seq)
        return seq in self._tables or seq in self._swapped

    def table(self, seq: Hashable) -> BlockTable:
        """A sequence's block table wherever it is: in GPU memory, or swapped
        out (then it points into `swap_pool`; see `swapped_tables`)."""
        try:
            table = self._tables.get(seq)
        except TypeError:  # only on the error path: a step's ids are fine
            _check_seq(seq)
            raise
        if table is None:
            table = self._swapped.get(seq)
        if table is None:
            _check_seq(seq)  # only on the error path: a NaN is refused as such
            raise KeyError(f"sequence {seq!r} has no block table")
        return table

    def gpu_table(self, seq: Hashable) -> BlockTable:
        """The table of a sequence that must be in GPU memory (to be forked,
        packed into a step, released or swapped out); a `KeyError` says where
        it is otherwise."""
        try:
            return self._tables[seq]
        except TypeError:
            _check_seq(seq)
            raise
        except KeyError:
            _check_seq(seq)
            where = "swapped out" if seq in self._swapped else "unknown"
            raise KeyError(f"sequence {seq!r} has no GPU block table ({where})") from None

    def tables(self) -> Mapping[Hashable, BlockTable]:
        """Every GPU-resident sequence's block table, read-only (for widgets that
        draw the pool as it is; the tables themselves must not be changed)."""
        return MappingProxyType(self._tables)

    def swapped_tables(self) -> Mapping[Hashable, BlockTable]:
        """Every swapped-out sequence's table (pointing into `swap_pool`), read-only."""
        return MappingProxyType(self._swapped)

    def block_ids(self, seq: Hashable) -> list[int]:
        """The GPU blocks of a sequence in GPU memory (a swapped-out one raises)."""
        return list(self.gpu_table(seq).blocks)

    def num_tokens(self, seq: Hashable) -> int:
        """Tokens with a slot in GPU memory (a swapped-out sequence raises)."""
        return self.gpu_table(seq).num_tokens

    def __repr__(self) -> str:
        sequences = len(self._tables) + len(self._swapped)
        return f"KVCacheManager({self.stats().counts()}; {plural(sequences, 'sequence')})"

    def stats(self) -> MemoryStats:
        """The GPU pool's `BlockAllocator.stats`, with the blocks parked in the swap pool."""
        return self.allocator.stats(
            swapped_blocks=self.swap_pool.num_used_blocks if self.swap_pool else 0)

    # ------------------------------------------------------------------- room
    def cached_prefix(self, seq: Hashable, token_ids: Sequence[int], *,
                      cache_salt: str | None = None) -> list[int]:
        """Cached blocks a new sequence (of a request salted `cache_salt`, if
        given: `salt_keys`) could start from (asks only)."""
        _check_seq(seq)
        hits = BlockTable(self.allocator, seq, cache_salt=cache_salt).cached_prefix(token_ids)
        return [] if seq in self else hits

    def reset_prefix_cache(self) -> bool:
        """Forget every cached block, as vLLM does: only while no block of the
        GPU pool is in use (a running sequence's blocks stay named, so a reset
        then would not give a cold cache). Returns whether the cache was reset."""
        if self.allocator.num_used_blocks:
            return False
        self.allocator.evict_all_cached()
        return True

    def blocks_needed(self, seq: Hashable, num_new_tokens: int,
                      cached_blocks: Sequence[int] = ()) -> int:
        """Blocks that `allocate_slots(seq, <num_new_tokens tokens>, cached_blocks)` would use.

        A new sequence starting from `cached_blocks` takes each cached block
        that sits free in the pool (it leaves the free queue; a live one is
        shared for nothing) and then the blocks its new tokens fill."""
        _check_seq(seq)
        check_int("num_new_tokens", num_new_tokens, minimum=0)
        check_block_list("cached_blocks", cached_blocks)
        table = self._tables.get(seq)
        if table is not None:  # one table alone: its own count (what `append` checks)
            return table.blocks_needed(num_new_tokens)
        revived = sum(1 for b in cached_blocks if self.allocator.is_free(b))
        return revived + blocks_to_append(len(cached_blocks) * self.block_size,
                                          self.block_size, [num_new_tokens])

    def blocks_needed_for(self, appends: Iterable[tuple[Hashable, int]]) -> int:
        """Fresh blocks that appending ``n`` tokens to each ``(seq, n)`` takes,
        all together (the sequences of one group, in GPU or in swap memory).

        Sequences whose tables end in the same partly filled block write into
        it together: `blocks_to_append` counts their copies (k writers into
        a block only they own need k - 1 copies). A single writer is its
        table's own count, the same rule for k = 1 (what `append` checks).
        Each sequence is named once: a sequence is not two writers of its block."""
        if isinstance(appends, Iterator):  # a generator (the scheduler's): read it once
            appends = list(appends)
        if (type(appends) is list and len(appends) == 1 and type(appends[0]) is tuple
                and len(appends[0]) == 2):  # one sequence: its table's own count
            seq, n = appends[0]
            return self.table(seq).blocks_needed(n)
        appends = _pairs(appends, "appends", "count the blocks of")
        total = 0
        writers: dict[tuple[int, int], list[int]] = {}  # (pool, shared last block) -> appends
        tails: dict[tuple[int, int], BlockTable] = {}
        for seq, n in appends:
            table = self.table(seq)
            check_int(f"the tokens appended to sequence {seq!r}", n, minimum=0)
            if n > 0 and table.num_tokens % self.block_size:  # into a partly filled last block
                key = (id(table.allocator), table.blocks[-1])
                writers.setdefault(key, []).append(n)
                tails[key] = table
            else:
                total += blocks_to_append(table.num_tokens, self.block_size, [n])
        for key, ns in writers.items():
            table = tails[key]
            total += blocks_to_append(table.num_tokens, self.block_size, ns,
                                      owners=table.allocator.ref_count(table.blocks[-1]))
        return total

    def blocks_to_admit(self, seq: Hashable, num_new_tokens: int, cached_blocks: Sequence[int],
                        appends: Sequence[int]) -> int:
        """Blocks a new sequence takes for its prompt (`num_new_tokens` after
        `cached_blocks`), forked into ``len(appends)`` sequences of which the
        i-th then appends ``appends[i]`` tokens (a group coming back after a
        recompute preemption)."""
        if not isinstance(appends, (list, tuple, range)):
            raise TypeError(f"appends must be a list of token counts, one per sequence of the "
                            f"group (like [0] for one new sequence), got {appends!r} "
                            f"({type(appends).__name__})")
        check_block_list("cached_blocks", cached_blocks)
        for i, n in enumerate(appends):
            check_int(f"appends[{i}] (the tokens sequence {i} of the group appends)", n,
                      minimum=0)
        need = self.blocks_needed(seq, num_new_tokens, cached_blocks)
        if not any(appends):  # a first admission: the sequences write nothing yet
            return need
        prompt = len(cached_blocks) * self.block_size + num_new_tokens
        return need + blocks_to_append(prompt, self.block_size, appends, owners=len(appends))

    def can_allocate(self, seq: Hashable, num_new_tokens: int,
                     cached_blocks: Sequence[int] = (), *, reserve: int = 0) -> bool:
        """Would the tokens fit, leaving at least `reserve` blocks free?"""
        check_int("reserve", reserve, minimum=0)
        needed = self.blocks_needed(seq, num_new_tokens, cached_blocks)
        return needed + reserve <= self.allocator.num_free_blocks

    def allocate_slots(self, seq: Hashable, token_ids: Sequence[int],
                       cached_blocks: Sequence[int] = (), *, computed: int | None = None,
                       cache_salt: str | None = None) -> list[BlockCopy] | None:
        """Give `token_ids` slots at the end of `seq` (creating its table if new,
        starting from `cached_blocks` if given). Returns the copy-on-write copies
        to perform, or ``None`` — with nothing changed — if the pool is too small.

        With prefix caching, full blocks are named as they are appended
        (`BlockTable.name_blocks`): those within the sequence's first
        `computed` tokens, the tokens computed by the end of the current step;
        by default all of them. Tokens appended ahead of the steps that
        compute them (a recomputation spread over steps) give a smaller
        `computed`, and each later step names up to its own tokens (an
        empty `token_ids` appends nothing and names). A new sequence's
        `cache_salt` (its request's) names its first block with the tokens
        (`salt_keys`), as `cached_prefix` looked it up: its `cached_blocks`
        must be a chain cached under that salt. An existing sequence keeps
        the salt it started with (another one given is refused).
        """
        try:
            swapped = seq in self._swapped
        except TypeError:
            _check_seq(seq)
            raise
        if swapped:
            raise BlockStateError(f"sequence {seq!r} is swapped out; swap it in before appending")
        table = self._tables.get(seq)
        if table is not None:
            if cached_blocks:
                raise BlockStateError(
                    f"sequence {seq!r} already exists; cached blocks can only start a sequence")
            if cache_salt is not None and check_cache_salt(cache_salt) != table.cache_salt:
                raise BlockStateError(
                    f"sequence {seq!r} started with cache_salt {table.cache_salt!r}, not "
                    f"{cache_salt!r}: a sequence keeps its salt (give None, or the same salt)")
            return table.try_append(token_ids, computed=computed)  # all or nothing
        _check_new_seq(seq, "allocate slots for")
        cache_salt = check_cache_salt(cache_salt)
        check_token_ids("token_ids", token_ids)  # before anything changes (cached blocks)
        if computed is not None:
            check_int("computed", computed, minimum=0,
                      maximum=len(cached_blocks) * self.block_size + len(token_ids))
        table = BlockTable(self.allocator, seq, cache_salt=cache_salt)
        if cached_blocks:  # an error whether or not the tokens would fit
            table.check_cached(cached_blocks)
        if not self.can_allocate(seq, len(token_ids), cached_blocks):
            return None
        table.adopt_cached(cached_blocks)
        try:
            copies = table.append(token_ids, computed=computed)
        except BaseException:  # bad token ids: the new sequence never existed
            table.free()
            raise
        self._tables[seq] = table
        return copies

    def fork(self, parent: Hashable, child: Hashable) -> None:
        """Let `child` share all of `parent`'s blocks (parallel sampling, beams)."""
        _check_new_seq(child, "fork into")
        if child in self:
            raise BlockStateError(f"cannot fork into {child!r}: it already has a block table")
        self._tables[child] = self.gpu_table(parent).fork(child)

    def free(self, seq: Hashable) -> None:
        """Release a sequence's blocks, wherever they are."""
        _check_seq(seq)
        table = self._tables.pop(seq, None)
        if table is None:
            table = self._swapped.pop(seq, None)
        if table is None:
            raise KeyError(f"cannot free sequence {seq!r}: it has no block table")
        table.free()

    def free_uncomputed(self, seqs: Iterable[tuple[Hashable, int]]) -> None:
        """Undo an admission: free each ``(seq, num_computed_tokens)`` and forget
        the prefix-cache names of its blocks past those tokens. They were never
        computed, so a later cache hit on one would read K/V never written.
        Names are dropped after every sequence has let go (only a free block
        can lose its name), so blocks the sequences shared are caught too.
        Each sequence is named once (a second mention is refused, with nothing freed)."""
        seqs = _pairs(seqs, "seqs", "free the uncomputed blocks of")
        seqs = [(seq, check_int(f"the computed tokens of sequence {seq!r}", computed, minimum=0,
                                maximum=self.gpu_table(seq).num_tokens))
                for seq, computed in seqs]  # all checked before any is freed
        fresh: list[int] = []
        for seq, computed in seqs:
            fresh += [b for b in self.gpu_table(seq).blocks[computed // self.block_size:]
                      if b != NULL_BLOCK]
            self.free(seq)
        for block in fresh:
            self.allocator.forget(block)

    # ---------------------------------------------------------- sliding window
    def release_outside_window(self, seq: Hashable, num_computed_tokens: int,
                               window: int) -> list[int]:
        """Give back `seq`'s blocks that a sliding window of `window` keys has
        left for good; returns them. Call it after a step, for a model where
        *every* attention layer slides (with mixed full and sliding layers, as
        in Gemma 2/3, the full layers still read every block: keep them all).

        The next step's queries sit at positions ``p >= num_computed_tokens``
        and a query at ``p`` sees keys ``k > p - window``, so keys before
        ``num_computed_tokens - window + 1`` are never read again, and block
        ``b`` can go once ``(b + 1) * block_size <= num_computed_tokens - window + 1``.
        The kernels neither read nor check those table entries (the attention
        contract); the engine shows them as block 0. A swapped-out or unknown
        sequence is an error; a sequence re-prefilled after recompute
        preemption starts a new table and is released again as it goes."""
        table = self.gpu_table(seq)
        window = check_int("the sliding window", window, minimum=1)
        num_computed_tokens = check_int(
            f"num_computed_tokens (of the {table.num_tokens} tokens of sequence {seq!r})",
            num_computed_tokens, minimum=0, maximum=table.num_tokens)
        return table.release_before(max(0, num_computed_tokens - window + 1))

    # ------------------------------------------------------------------- swap
    def _distinct_blocks(self, tables: Iterable[BlockTable]) -> set[int]:
        return {b for t in tables for b in t.live_blocks}

    def can_swap_out(self, seqs: Iterable[Hashable]) -> bool:
        seqs = _group(seqs, "swap out")
        needed = len(self._distinct_blocks(self.gpu_table(s) for s in seqs))
        return self.swap_pool is not None and needed <= self.swap_pool.num_free_blocks

    def _swapped_table(self, seq: Hashable) -> BlockTable:
        _check_seq(seq)
        try:
            return self._swapped[seq]
        except KeyError:
            where = "in GPU memory" if seq in self._tables else "unknown"
            raise KeyError(f"sequence {seq!r} is not swapped out ({where})") from None

    def can_swap_in(self, seqs: Iterable[Hashable], *, reserve: int = 0) -> bool:
        seqs = _group(seqs, "swap in")
        check_int("reserve", reserve, minimum=0)
        needed = len(self._distinct_blocks(self._swapped_table(s) for s in seqs))
        return needed + reserve <= self.allocator.num_free_blocks

    def swap_out(self, seqs: Sequence[Hashable]) -> list[BlockCopy]:
        """Move a group's blocks to the CPU pool; returns the ``(gpu, cpu)`` copies.

        Blocks shared inside the group travel once, so sharing survives the
        round trip (paper §4.5: a group is swapped all or nothing)."""
        seqs = _group(seqs, "swap out")
        if self.swap_pool is None:
            raise OutOfBlocksError("no swap space: create the manager with num_swap_blocks > 0")
        if not self.can_swap_out(seqs):
            raise OutOfBlocksError(
                f"swap space full: the group needs "
                f"{len(self._distinct_blocks(self.gpu_table(s) for s in seqs))} CPU blocks, "
                f"{self.swap_pool.num_free_blocks} of {self.swap_pool.num_blocks} are free")
        return self._move(seqs, self._tables, self._swapped, self.allocator, self.swap_pool,
                          EventKind.SWAP_OUT)

    def swap_in(self, seqs: Sequence[Hashable]) -> list[BlockCopy]:
        """Bring a swapped group back into GPU blocks; returns the ``(cpu, gpu)`` copies."""
        seqs = _group(seqs, "swap in")
        if not self.can_swap_in(seqs):
            raise OutOfBlocksError(
                f"cannot swap in: the group needs "
                f"{len(self._distinct_blocks(self._swapped_table(s) for s in seqs))} GPU blocks, "
                f"{self.allocator.num_free_blocks} are free")
        return self._move(seqs, self._swapped, self._tables, self.swap_pool, self.allocator,
                          EventKind.SWAP_IN)

    def _move(self, seqs, src_tables, dst_tables, src_pool: BlockAllocator,
              dst_pool: BlockAllocator, kind: EventKind) -> list[BlockCopy]:
        copies: dict[int, int] = {}
        for seq in seqs:
            table = src_tables.pop(seq)
            moved = []
            for block in table.blocks:
                if block == NULL_BLOCK:  # released: travels as a placeholder, costs nothing
                    moved.append(NULL_BLOCK)
                    continue
                dst = copies.get(block)
                if dst is None:
                    dst = copies[block] = dst_pool.allocate(seq)
                    dst_pool.append_tokens(dst, src_pool.num_tokens(block), seq)
                    if self.events:
                        self.events.emit(Event(kind, block=dst, src=block, seq=seq))
                else:
                    dst_pool.fork(dst, seq)
                moved.append(dst)
            for block in reversed(table.live_blocks):
                src_pool.free(block, seq)
            table.relocate(dst_pool, moved)
            dst_tables[seq] = table
        return list(copies.items())



def blocks_to_append(num_tokens: int, block_size: int, appends: Sequence[int],
                     owners: int = 1) -> int:
    """Fresh blocks taken when ``len(appends)`` sequences that share one table
    of `num_tokens` tokens (its last block held by `owners` sequences in all)
    append ``appends[i]`` tokens each. The rule of copy-on-write (paper §4.4),
    written once for the scheduler and the simulator:

    * a full last block is never written again: each writer only takes the
      blocks its tokens fill, ``ceil(n / block_size)``;
    * a partly filled last block is written in place by a sole owner; with
      several owners each writer first copies it, except that k writers into
      a block only they own need k - 1 copies: the last one finds itself the
      block's only owner. Writers that leave other readers need k copies.

    >>> blocks_to_append(5, 4, [1])              # room in its own last block
    0
    >>> blocks_to_append(5, 4, [1, 1], owners=2)  # two samples write the shared tail
    1
    >>> blocks_to_append(5, 4, [4, 4, 4], owners=3)
    5
    >>> blocks_to_append(8, 4, [1, 1], owners=2)  # the tail is full: a block each
    2
    """
    if block_size < 1:
        raise ValueError(f"block_size must be >= 1, got {block_size}")
    if num_tokens < 0 or min(appends, default=0) < 0:
        raise ValueError(f"token counts must be >= 0; got num_tokens={num_tokens}, "
                         f"appends={list(appends)}")
    used = num_tokens % block_size
    if used == 0:
        return sum(-(-n // block_size) for n in appends)
    growing = [n for n in appends if n > 0]
    if len(growing) > owners:
        raise ValueError(f"{len(growing)} sequences write into a last block held by only "
                         f"{owners}")
    beyond = sum(-(-(used + n) // block_size) - 1 for n in growing)  # past the last block
    copies = len(growing) - (len(growing) == owners)
    return beyond + copies

def _check_new_seq(seq: Hashable, action: str) -> None:
    """A new sequence's id: anything hashable but None, which the pool's events
    use for "no sequence" (`BlockAllocator.allocate(seq=None)`)."""
    if seq is None:
        raise TypeError(f"cannot {action} sequence None: None means no sequence in the pool "
                        "and its events; give the sequence an id (a str or an int)")
    _check_seq(seq)


def _check_seq(seq: object, who: str = "sequence", keys: str = "block table") -> None:
    """A sequence's id keys the manager's tables, so it must be hashable (a
    str, an int, a tuple of them); a list is refused by name, not by Python's
    "unhashable type". The advice holds for every unhashable id: ``tuple(...)``
    would not do for a list holding a list, nor a tuple holding a dict. It
    must also equal itself: a NaN is hashable, but a table it keys could never
    be found (nor freed) again. The same rule for `ContiguousAllocator`'s
    request ids (`who`), which key its reservations (`keys`)."""
    try:
        hash(seq)
    except TypeError:
        raise TypeError(f"{who} id {seq!r} ({type(seq).__name__}) is not hashable, and a "
                        f"{who}'s id keys its {keys}: give a str, an int, or a tuple "
                        "holding only str and int") from None
    if not _equals_itself(seq):
        raise ValueError(f"{who} id {seq!r} is not equal to itself (it is or holds a NaN), so "
                         f"its {keys} could never be found again: give a str, an int, or a "
                         "tuple holding only str and int")


def _equals_itself(seq: object) -> bool:
    """Whether `seq` (inside a tuple too) finds itself as a dict key: a NaN
    does not (``nan != nan``, and each ``float("nan")`` hashes apart)."""
    if isinstance(seq, (tuple, frozenset)):
        return all(_equals_itself(item) for item in seq)
    return seq is None or isinstance(seq, (str, int)) or bool(seq == seq)


def _pairs(entries: object, name: str, action: str) -> list[tuple[Hashable, int]]:
    """``(seq, n)`` pairs as a list, each sequence once (checked before anything changes)."""
    if isinstance(entries, (str, bytes)) or not isinstance(entries, Iterable):
        raise TypeError(f"{name} must be a list of (sequence, token count) pairs, got "
                        f"{entries!r} ({type(entries).__name__})")
    entries = list(entries)
    for i, entry in enumerate(entries):
        if not isinstance(entry, tuple) or len(entry) != 2:
            raise TypeError(f"{name}[{i}] must be a (sequence, token count) pair, got {entry!r}")
    _group([seq for seq, _ in entries], action)
    return entries


def _group(seqs: Iterable[Hashable], action: str) -> list[Hashable]:
    """A group's sequences as a list, each named once (checked before anything moves)."""
    if isinstance(seqs, (str, bytes)):
        raise TypeError(f"cannot {action} {seqs!r}: give a list of sequences, not one id")
    seqs = list(seqs)
    seen: set[Hashable] = set()
    for seq in seqs:
        _check_seq(seq)
        if seq in seen:
            raise BlockStateError(f"cannot {action} {seqs!r}: sequence {seq!r} is named twice")
        seen.add(seq)
    return seqs
