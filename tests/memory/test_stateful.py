"""Hypothesis drives random sequences of allocate / append / fork / free /
prefix-cache hits / evictions / swaps against a KVCacheManager, and checks the
invariants of paged memory after every step.

The strongest check uses a *shadow memory*: a dict standing in for the GPU
and CPU KV tensors. Every token the manager gives a slot is written there,
every copy it asks for (copy-on-write, swap) is performed there, and after
each step every live sequence must read back exactly its own tokens through
its block table. That one invariant catches lost tokens, clobbered shared
blocks, wrong cache hits and broken swaps alike.

The pool names blocks with SHA-256 or with a weak hash that collides on
purpose: the shadow check then proves that a collision never serves another
prefix's K/V. Prompts are also allocated without a lookup, so several blocks
hold the same content; every named block must stay findable, a lookup must
prefer a live copy, and a cached block may only be evicted when no blank
block is left.

Sliding-window releases are interleaved with everything else: a release
promises that the sequence will never read tokens before ``num_computed -
window + 1`` again, so the shadow check then asks back only the tokens from
there on, and every released (placeholder) entry must lie wholly before that
point. A release that freed a block still inside the window fails here, as
does one that leaks a block or leaves a placeholder a real owner.
"""

from collections import Counter

import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    initialize,
    invariant,
    rule,
)

from pagedkit.memory import EventLog, KVCacheManager
from pagedkit.memory.block_table import NULL_BLOCK

NUM_BLOCKS = 12
NUM_SWAP_BLOCKS = 12
# A tiny vocabulary so that prompts share prefixes and the cache gets hits.
tokens = st.lists(st.integers(0, 2), min_size=1, max_size=9)
#: SHA-256, and hashes that collide on purpose (see test_prefix_cache.py).
HASHES = {
    "sha256": None,
    "constant": lambda obj: b"\x00",
    "parity": lambda obj: bytes([sum(obj[1]) & 1]) if isinstance(obj, tuple) else b"r",
}


class PagedMemoryMachine(RuleBasedStateMachine):
    seqs = Bundle("seqs")

    def __init__(self):
        super().__init__()
        self.contents: dict[str, list[int]] = {}  # what each live sequence holds
        self.gpu: dict[int, int] = {}  # shadow GPU memory: slot -> token
        self.cpu: dict[int, int] = {}  # shadow swap space
        self.needed_from: dict[str, int] = {}  # first token each sequence may still read
        self.computed: dict[str, int] = {}  # leading tokens whose K/V are (named as) computed
        self.next_id = 0

    @initialize(block_size=st.sampled_from([1, 2, 3, 4]), hash_name=st.sampled_from(sorted(HASHES)))
    def pool(self, block_size, hash_name):
        self.kv = KVCacheManager(NUM_BLOCKS, block_size, enable_prefix_caching=True,
                                 num_swap_blocks=NUM_SWAP_BLOCKS, hash_fn=HASHES[hash_name])
        self.log = EventLog(self.kv.events)

    @rule(target=seqs, prompt=tokens, lookup=st.booleans())
    def start(self, prompt, lookup):
        """A new sequence, from the cache's hits or (no lookup) computed afresh."""
        seq = f"s{self.next_id}"
        self.next_id += 1
        cached = self.kv.cached_prefix(seq, prompt) if lookup else []
        done = len(cached) * self.kv.block_size
        need = self.kv.blocks_needed(seq, len(prompt) - done, cached)
        copies = self._evicting_only_without_blanks(
            lambda: self.kv.allocate_slots(seq, prompt[done:], cached))
        if copies is None:
            assert need > self.kv.allocator.num_free_blocks
            assert seq not in self.kv
            return seq
        event("prefix cache hit" if cached else "prefix cache miss")
        self._apply(copies, self.gpu, self.gpu)
        self.contents[seq] = list(prompt)
        self.needed_from[seq] = 0
        self.computed[seq] = len(prompt)  # by default, all of a new sequence's tokens
        self._write(seq, done)
        return seq

    @rule(seq=seqs, new=tokens, data=st.data())
    def append(self, seq, new, data):
        """New tokens; by default computed with the earlier ones (if no gap is
        left before them), or computed only up to a drawn `computed` (tokens
        appended ahead of the steps that compute them)."""
        if seq not in self.contents or self._swapped(seq):
            return
        start = len(self.contents[seq])
        computed = data.draw(st.none() | st.integers(0, start + len(new)), label="computed")
        copies = self._evicting_only_without_blanks(
            lambda: self.kv.allocate_slots(seq, new, computed=computed))
        if copies is None:
            return
        if computed is None:
            computed = start + len(new) if self.computed[seq] == start else 0
        self.computed[seq] = max(self.computed[seq], min(computed, start + len(new)))
        if copies:
            event("copy-on-write")
        self._apply(copies, self.gpu, self.gpu)
        self.contents[seq].extend(new)
        self._write(seq, start)

    @rule(seq=seqs, data=st.data())
    def compute(self, seq, data):
        """A step computes up to `computed` tokens: ``allocate_slots`` with no
        tokens names the full blocks among them."""
        if seq not in self.contents or self._swapped(seq):
            return
        n = len(self.contents[seq])
        computed = data.draw(st.integers(0, n), label="computed")
        assert self.kv.allocate_slots(seq, [], computed=computed) == []
        self.computed[seq] = max(self.computed[seq], min(computed, n))

    @rule(target=seqs, seq=seqs)
    def fork(self, seq):
        if seq not in self.contents or self._swapped(seq):
            return seq
        child = f"s{self.next_id}"
        self.next_id += 1
        self.kv.fork(seq, child)
        self.contents[child] = list(self.contents[seq])
        self.needed_from[child] = self.needed_from[seq]
        self.computed[child] = self.computed[seq]
        return child

    @rule(seq=consumes(seqs))
    def free(self, seq):
        if seq in self.contents:
            self.kv.free(seq)
            del self.contents[seq], self.needed_from[seq], self.computed[seq]

    @rule(seq=seqs, data=st.data(), window=st.integers(1, 7))
    def release(self, seq, data, window):
        """A step computed `computed` tokens of `seq`; its window lets go of the rest."""
        if seq not in self.contents or self._swapped(seq):
            return
        table = self.kv.table(seq)
        computed = data.draw(st.integers(0, table.num_tokens), label="num_computed_tokens")
        before = set(table.live_blocks)
        free_before = self.kv.allocator.num_free_blocks
        released = self.kv.release_outside_window(seq, computed, window)
        bound = max(0, computed - window + 1)
        self.needed_from[seq] = max(self.needed_from[seq], bound)
        # exactly the blocks wholly before the bound went, and only this table's
        bs = self.kv.block_size
        assert set(released) <= before
        assert table.num_released == max(table.num_released - len(released), bound // bs)
        assert all(table.blocks[b] == NULL_BLOCK for b in range(bound // bs))
        # a released block no one else holds is back in the pool (cached or free)
        back = sum(self.kv.allocator.is_free(b) for b in released)
        assert self.kv.allocator.num_free_blocks == free_before + back
        if released:
            event("window released blocks")

    @rule(group=st.lists(seqs, min_size=1, max_size=3, unique=True))
    def swap_out(self, group):
        if all(s in self.contents and not self._swapped(s) for s in group) \
                and self.kv.can_swap_out(group):
            distinct = {b for s in group for b in self.kv.table(s).live_blocks}
            copies = self.kv.swap_out(group)
            assert len(copies) == len(distinct)  # shared blocks travel once
            self._apply(copies, self.gpu, self.cpu)
            event(f"swap out a group of {len(group)}")

    @rule(group=st.lists(seqs, min_size=1, max_size=3, unique=True))
    def swap_in(self, group):
        if all(s in self.contents and self._swapped(s) for s in group) \
                and self.kv.can_swap_in(group):
            self._apply(self.kv.swap_in(group), self.cpu, self.gpu)

    # ------------------------------------------------------------ shadow memory
    def _swapped(self, seq):
        return seq in self.kv.swapped_tables()

    def _evicting_only_without_blanks(self, allocate):
        """Run `allocate`; a cached block may only have been evicted for a
        block taken when no blank one was left."""
        blank = self.kv.stats().free_blocks
        self.log.clear()
        result = allocate()
        kinds = self.log.kinds()
        fresh = kinds.count("allocate")
        assert kinds.count("evict") == max(0, fresh - blank), kinds
        return result

    def _write(self, seq, start):
        table = self.kv.table(seq)
        for pos in range(start, table.num_tokens):
            block = table.blocks[pos // self.kv.block_size]
            # no two live sequences write the same slot: writes need one owner
            assert self.kv.allocator.ref_count(block) == 1
            self.gpu[table.slot(pos)] = self.contents[seq][pos]

    def _apply(self, copies, src_mem, dst_mem):
        bs = self.kv.block_size
        for src, dst in copies:
            for off in range(bs):
                if src * bs + off in src_mem:
                    dst_mem[dst * bs + off] = src_mem[src * bs + off]

    # --------------------------------------------------------------- invariants
    @invariant()
    def every_sequence_reads_back_its_tokens(self):
        for seq, expected in self.contents.items():
            swapped = self._swapped(seq)
            table = self.kv.swapped_tables()[seq] if swapped else self.kv.table(seq)
            memory = self.cpu if swapped else self.gpu
            assert table.num_tokens == len(expected)
            start = self.needed_from[seq]
            bs = self.kv.block_size
            released = [b for b, x in enumerate(table.blocks) if x == NULL_BLOCK]
            # placeholders are a prefix, wholly before every token still needed
            assert released == list(range(len(released)))
            assert len(released) * bs <= start, \
                f"{seq} released block {len(released) - 1} but still reads token {start}"
            got = [memory.get(table.slot(p)) for p in range(start, table.num_tokens)]
            assert got == expected[start:], f"{seq} reads {got}, holds {expected[start:]}"

    @invariant()
    def named_blocks_are_the_full_blocks_of_the_computed_prefix(self):
        for seq, computed in self.computed.items():
            table = self.kv.table(seq)
            # (the pool may name a block past them: a sharer that computed it)
            assert len(table.block_keys) == computed // self.kv.block_size, (seq, computed)

    @invariant()
    def every_named_block_is_findable_and_live_copies_come_first(self):
        pool = self.kv.allocator
        keys = {b: pool.block_key(b) for b in range(pool.num_blocks) if pool.block_key(b)}
        for key in keys.values():
            found = pool.find_cached(key)
            assert found is not None and keys[found].same_content(key)
            copies = [b for b, other in keys.items() if other.same_content(key)]
            if any(pool.ref_count(b) for b in copies):
                assert pool.ref_count(found) > 0, f"{found} is free, a live copy is in {copies}"
            if len(copies) > 1:
                event("several copies of one content")
            if any(other.hash == key.hash and not other.same_content(key)
                   for other in keys.values()):
                event("two contents share a name")

    @invariant()
    def ref_counts_equal_table_references(self):
        for pool, tables in ((self.kv.allocator, self.kv.tables()),
                             (self.kv.swap_pool, self.kv.swapped_tables())):
            owners = Counter(b for t in tables.values() for b in t.live_blocks)
            for block in range(pool.num_blocks):
                assert pool.ref_count(block) == owners[block]
                # each block is free xor referenced
                assert (block in pool.free_order()) == (owners[block] == 0)

    @invariant()
    def stats_add_up(self):
        s = self.kv.stats()
        assert s.free_blocks + s.cached_blocks + s.used_blocks == s.total_blocks
        filled = sum(self.kv.allocator.num_tokens(b) for b in range(NUM_BLOCKS)
                     if not self.kv.allocator.is_free(b))
        assert s.tokens_stored == filled <= s.slots_allocated

    @invariant()
    def stats_equal_a_count_from_scratch(self):
        """`stats()` is read from counters the pools keep as blocks change hands;
        counted afresh, block by block, every figure is the same."""
        pool, swap, s = self.kv.allocator, self.kv.swap_pool, self.kv.stats()
        free = [b for b in range(pool.num_blocks) if pool.ref_count(b) == 0]
        cached = sum(pool.block_hash(b) is not None for b in free)
        assert (s.total_blocks, s.used_blocks, s.cached_blocks, s.free_blocks) == (
            pool.num_blocks, pool.num_blocks - len(free), cached, len(free) - cached)
        assert s.tokens_stored == sum(pool.num_tokens(b) for b in range(pool.num_blocks)
                                      if pool.ref_count(b))
        assert s.swapped_blocks == sum(swap.ref_count(b) > 0 for b in range(swap.num_blocks))
        # the plain counts the scheduler reads every step, of either pool
        for p, held in ((pool, pool.num_blocks - len(free)), (swap, s.swapped_blocks)):
            assert (p.num_used_blocks, p.num_free_blocks) == (held, p.num_blocks - held)

    @invariant()
    def slots_are_the_tables_entry_by_entry(self):
        for table in self.kv.tables().values():
            # the slots from the entries themselves (not through `slot`, which the
            # one-token path of `slot_mapping` calls), one token and all at once (the
            # kernels' view of a table is pack_step's: tests/model/test_runner.py)
            size = table.block_size
            start = sum(1 for b in table.blocks if b == NULL_BLOCK) * size
            slots = [table.blocks[p // size] * size + p % size
                     for p in range(start, table.num_tokens)]
            assert table.slot_mapping(start, table.num_tokens) == slots
            assert [table.slot_mapping(p, p + 1)[0]
                    for p in range(start, table.num_tokens)] == slots
            if start:  # a released token's slot is refused, one token or a run
                with pytest.raises(IndexError, match="already released"):
                    table.slot_mapping(start - 1, start)
                with pytest.raises(IndexError, match="already released"):
                    table.slot_mapping(0, table.num_tokens)

    def teardown(self):
        for seq in list(self.contents):
            self.kv.free(seq)
        # nothing leaks: every block can be handed out again
        assert self.kv.allocator.num_free_blocks == NUM_BLOCKS
        assert self.kv.swap_pool.num_free_blocks == NUM_SWAP_BLOCKS
        assert len({self.kv.allocator.allocate() for _ in range(NUM_BLOCKS)}) == NUM_BLOCKS


PagedMemoryMachine.TestCase.settings = settings(
    max_examples=300, stateful_step_count=40, deadline=None,
    suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow])
TestPagedMemory = PagedMemoryMachine.TestCase
