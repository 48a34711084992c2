"""``computed=`` of `BlockTable.append`/`try_append` and
`KVCacheManager.allocate_slots`: with prefix caching, a full block is named
(given its prefix-cache hash) only once all its tokens are among the
sequence's first `computed` tokens, the tokens whose K/V exist by the end of
the current step. A name promises K/V that are there: naming a block early
would let another request read K/V never written.

The expected names come from a plain recount (`Shadow`): how many leading
tokens are computed, hence how many leading full blocks are named; the hashes
themselves must be those a table that computed everything at once gives.
"""

import itertools
import random

import pytest

from pagedkit.memory import BlockAllocator, BlockTable, KVCacheManager

SIZES = [1, 2, 3, 4, 5]


class Shadow:
    """The rule in words: the computed prefix only grows, up to the tokens
    there are; by default an append is computed with the earlier tokens when
    those are all computed (no gap), else it computes nothing; the named
    blocks are the full blocks within the computed prefix."""

    def __init__(self, block_size):
        self.size, self.tokens, self.computed = block_size, 0, 0

    def append(self, count, computed=None):
        if computed is None:
            computed = self.tokens + count if self.computed == self.tokens else 0
        self.tokens += count
        self.computed = max(self.computed, min(computed, self.tokens))

    @property
    def named(self):
        return self.computed // self.size


def tokens(n, start=0):
    """Distinct token ids, so no two blocks of a test share content."""
    return list(range(1000 + start, 1000 + start + n))


def reference_hashes(block_size, token_ids):
    """The names of every full block of `token_ids`, computed all at once."""
    table = BlockTable(BlockAllocator(64, block_size, enable_prefix_caching=True), seq="ref")
    table.append(token_ids)
    return table.block_hashes


def assert_named(table, shadow, token_ids):
    """Exactly the shadow's leading blocks are named, with the reference hashes;
    the blocks after them carry no name in the pool."""
    pool = table.allocator
    assert table.num_tokens == shadow.tokens == len(token_ids)
    assert len(table.block_keys) == shadow.named
    assert table.block_hashes == reference_hashes(table.block_size, token_ids)[:shadow.named]
    for i, block in enumerate(table.blocks):
        expected = table.block_hashes[i] if i < shadow.named else None
        assert pool.block_hash(block) == expected, (i, block)


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("n", range(0, 12))
def test_one_append_names_full_blocks_within_computed(size, n):
    for computed in range(0, n + 1):
        table = BlockTable(BlockAllocator(16, size, enable_prefix_caching=True), seq="A")
        table.append(tokens(n), computed=computed)
        shadow = Shadow(size)
        shadow.append(n, computed)
        assert shadow.named == computed // size
        assert_named(table, shadow, tokens(n))


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("n", range(0, 12))
def test_try_append_names_like_append(size, n):
    for computed in [None, *range(0, n + 1)]:
        table = BlockTable(BlockAllocator(16, size, enable_prefix_caching=True), seq="A")
        assert table.try_append(tokens(n), computed=computed) == []
        shadow = Shadow(size)
        shadow.append(n, computed)
        assert_named(table, shadow, tokens(n))


@pytest.mark.parametrize("size", SIZES)
def test_computed_past_the_tokens_is_refused_and_changes_nothing(size):
    """Tokens past the end cannot be computed: such a `computed` is a caller's
    mistake, refused with the limit (it was once clamped, silently)."""
    table = BlockTable(BlockAllocator(16, size, enable_prefix_caching=True), seq="A")
    table.append(tokens(3))
    with pytest.raises(ValueError, match="computed must be <= 10, got 100"):
        table.append(tokens(7, 3), computed=100)
    assert table.num_tokens == 3 and len(table.block_keys) == 3 // size
    table.append(tokens(7, 3), computed=10)  # the tokens there are: all named
    assert len(table.block_keys) == 10 // size


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("n, m", [(1, 1), (3, 4), (5, 5), (7, 2), (10, 0)])
def test_computed_zero_names_nothing_until_the_gap_closes(size, n, m):
    """Tokens appended ahead of the steps that compute them (``computed=0``)
    keep later default appends unnamed too (they cannot be computed before
    the gap); once a step computes up to the end, default appends name again."""
    table = BlockTable(BlockAllocator(32, size, enable_prefix_caching=True), seq="A")
    shadow = Shadow(size)
    table.append(tokens(n), computed=0)
    shadow.append(n, 0)
    assert table.block_keys == [] and shadow.named == 0
    table.append(tokens(m, n))  # default, behind the gap: nothing named
    shadow.append(m)
    assert table.block_keys == [] and shadow.named == 0
    assert_named(table, shadow, tokens(n + m))
    for step_end in range(1, n + m + 1):  # the steps that compute them, one token each
        table.append([], computed=step_end)
        shadow.append(0, step_end)
        assert shadow.named == step_end // size
        assert_named(table, shadow, tokens(n + m))
    table.append(tokens(size + 1, n + m))  # gap closed: a default append names at once
    shadow.append(size + 1)
    assert shadow.named == (n + m + size + 1) // size
    assert_named(table, shadow, tokens(n + m + size + 1))


@pytest.mark.parametrize("size", SIZES)
def test_a_smaller_computed_later_unnames_nothing(size):
    table = BlockTable(BlockAllocator(16, size, enable_prefix_caching=True), seq="A")
    table.append(tokens(11), computed=9)
    named = list(table.block_hashes)
    assert len(named) == 9 // size
    table.append([], computed=2)
    table.append([], computed=0)
    assert table.block_hashes == named


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("seed", range(40))
def test_random_appends_match_the_shadow(size, seed):
    """Random appends (0..size+2 tokens) with computed = None, 0, part of the
    tokens or all of them, checked against the recount each time."""
    rng = random.Random(seed * 10 + size)
    table = BlockTable(BlockAllocator(128, size, enable_prefix_caching=True), seq="A")
    shadow = Shadow(size)
    for _ in range(12):
        count = rng.randrange(size + 3)
        after = table.num_tokens + count
        computed = rng.choice([None, 0, rng.randrange(after + 1), after])
        table.append(tokens(count, table.num_tokens), computed=computed)
        shadow.append(count, computed)
        assert_named(table, shadow, tokens(after))


# ---------------------------------------------------------------- KVCacheManager
@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("n", range(0, 10))
def test_allocate_slots_names_within_computed(size, n):
    for computed in [None, *range(0, n + 1)]:
        kv = KVCacheManager(16, size, enable_prefix_caching=True)
        assert kv.allocate_slots("A", tokens(n), computed=computed) == []
        shadow = Shadow(size)
        shadow.append(n, computed)
        assert_named(kv.table("A"), shadow, tokens(n))
        # a step computing one more token names up to it (empty token_ids)
        if shadow.computed < n:
            kv.allocate_slots("A", [], computed=shadow.computed + 1)
            shadow.append(0, shadow.computed + 1)
            assert_named(kv.table("A"), shadow, tokens(n))


@pytest.mark.parametrize("computed", [None, 0])
def test_allocate_slots_empty_tokens_on_a_new_sequence_makes_an_empty_table(computed):
    """`Scheduler._admit` relies on it: a prompt whose first step is wholly
    the later `_allocate`'s still gets its (empty) table here."""
    kv = KVCacheManager(4, 2, enable_prefix_caching=True)
    free = kv.allocator.num_free_blocks
    assert kv.allocate_slots("A", [], computed=computed) == []
    assert "A" in kv
    table = kv.table("A")
    assert table.blocks == [] and table.num_tokens == 0 and table.block_keys == []
    assert kv.allocator.num_free_blocks == free
    kv.allocate_slots("A", tokens(5), computed=4)  # and it takes tokens afterwards
    assert kv.num_tokens("A") == 5 and len(table.block_keys) == 2


@pytest.mark.parametrize("size", SIZES)
def test_allocate_slots_from_cached_blocks_then_computed(size):
    """Cached blocks are named already; tokens appended after them with
    ``computed=0`` are not, until a step computes them."""
    kv = KVCacheManager(32, size, enable_prefix_caching=True)
    prompt = tokens(3 * size + 2)
    kv.allocate_slots("A", prompt)
    hits = kv.cached_prefix("B", prompt)[:3]  # block size 1 finds a fourth
    assert len(hits) == 3
    kv.allocate_slots("B", [], hits, computed=0)
    assert kv.table("B").block_hashes == kv.table("A").block_hashes[:3]
    kv.free("A")  # B alone now: its new blocks get names only from B's steps
    kv.allocate_slots("B", prompt[3 * size:] + tokens(size, 500), computed=0)
    shadow = Shadow(size)
    shadow.append(3 * size)  # the adopted blocks: computed
    shadow.append(size + 2, 0)
    assert_named(kv.table("B"), shadow, prompt + tokens(size, 500))
    kv.allocate_slots("B", [], computed=4 * size + 2)
    shadow.append(0, 4 * size + 2)
    assert_named(kv.table("B"), shadow, prompt + tokens(size, 500))


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("n", [1, 4, 7, 10])
def test_fork_child_behind_its_start_names_only_as_it_computes(size, n):
    """A parallel-sampling prompt is allocated once with ``computed=0`` and
    forked; a child not scheduled this step gets ``computed=0`` (what
    `Scheduler._allocate` passes for a sequence with no tokens), which must
    name nothing, since the prompt's K/V are not written yet."""
    kv = KVCacheManager(32, size, enable_prefix_caching=True)
    kv.allocate_slots("P", tokens(n), computed=0)
    kv.fork("P", "C")
    kv.allocate_slots("C", [], computed=0)
    assert kv.table("C").block_keys == [] and kv.table("P").block_keys == []
    assert all(kv.allocator.block_hash(b) is None for b in kv.block_ids("P"))
    kv.allocate_slots("P", [], computed=n)  # the parent's step computes the prompt
    shadow = Shadow(size)
    shadow.append(n, n)
    assert_named(kv.table("P"), shadow, tokens(n))
    assert kv.table("C").block_keys == []  # the child's table names at its own step
    kv.allocate_slots("C", [], computed=n)
    assert kv.table("C").block_hashes == kv.table("P").block_hashes
    # both go on with their own token, by default: a full block is named in each
    kv.allocate_slots("P", tokens(size, 100))
    kv.allocate_slots("C", tokens(size, 200))
    child = Shadow(size)
    child.append(n, n)
    child.append(size)
    assert_named(kv.table("C"), child, tokens(n) + tokens(size, 200))
    assert_named(kv.table("P"), child, tokens(n) + tokens(size, 100))


@pytest.mark.parametrize("size", SIZES)
def test_computed_names_nothing_without_prefix_caching(size):
    for n, computed in itertools.product(range(8), [None, 0, 3, 7]):
        if computed is not None and computed > n:  # past the tokens: refused
            continue
        kv = KVCacheManager(16, size)
        kv.allocate_slots("A", tokens(n), computed=computed)
        assert kv.table("A").block_keys == []
        assert all(kv.allocator.block_hash(b) is None for b in kv.block_ids("A"))
