import pytest

from pagedkit.memory import BlockAllocator, BlockStateError, BlockTable, OutOfBlocksError


def test_slots_follow_the_block_table():
    pool = BlockAllocator(8, 4)
    for _ in range(3):  # make the table's blocks non-trivial
        pool.allocate()
    table = BlockTable(pool, "A")
    table.append(list(range(6)))
    assert table.blocks == [3, 4]
    assert table.slot_mapping() == [12, 13, 14, 15, 16, 17]
    assert table.physical_block(1) == 4
    assert len(table) * 4 - table.num_tokens == 2  # empty slots: paging's only waste
    with pytest.raises(IndexError, match=r"token position 6 is outside \[0, 6\)"):
        table.slot(6)


@pytest.mark.parametrize("block_size", [1, 3, 16])
def test_blocks_needed_matches_what_append_takes(block_size):
    pool = BlockAllocator(64, block_size)
    table = BlockTable(pool)
    for n in [1, 5, block_size, 2 * block_size + 1, 0, 1]:
        need = table.blocks_needed(n)
        free = pool.num_free_blocks
        table.append([7] * n)
        assert free - pool.num_free_blocks == need
        assert len(table) == -(-table.num_tokens // block_size)


def test_append_is_all_or_nothing():
    pool = BlockAllocator(2, 2)
    table = BlockTable(pool, "A")
    table.append([1])
    with pytest.raises(OutOfBlocksError, match="needs 2 more blocks for 4 tokens but only 1"):
        table.append([2, 3, 4, 5])
    assert table.num_tokens == 1 and pool.num_free_blocks == 1


def test_fork_shares_and_first_write_copies():
    pool = BlockAllocator(8, 4)
    parent = BlockTable(pool, "P")
    parent.append([1, 2, 3, 4, 5, 6])  # one full block, one half-full
    child = parent.fork("C")
    assert child.blocks == parent.blocks
    assert [pool.ref_count(b) for b in parent.blocks] == [2, 2]
    assert child.blocks_needed(1) == 1  # the copy of the shared tail
    copies = child.append([7])
    assert copies == [(parent.blocks[1], child.blocks[1])]
    assert child.blocks[0] == parent.blocks[0] and child.blocks[1] != parent.blocks[1]
    assert parent.append([8]) == []  # the parent is the tail's only owner now


def test_fork_of_full_tail_needs_no_copy():
    pool = BlockAllocator(8, 2)
    parent = BlockTable(pool)
    parent.append([1, 2])
    child = parent.fork()
    assert child.append([3]) == []
    assert child.blocks[0] == parent.blocks[0] and len(child) == 2


def test_free_releases_tail_first():
    pool = BlockAllocator(4, 1)
    table = BlockTable(pool)
    table.append([1, 2, 3])
    table.free()
    assert pool.free_order() == [3, 2, 1, 0]
    assert table.blocks == [] and table.num_tokens == 0


def test_prefix_cache_hit_reuses_blocks_and_skips_last_token():
    pool = BlockAllocator(8, 2, enable_prefix_caching=True)
    first = BlockTable(pool, "A")
    first.append([1, 2, 3, 4, 5])
    second = BlockTable(pool, "B")
    hits = second.cached_prefix([1, 2, 3, 4, 9])
    assert hits == first.blocks[:2]
    # a prompt that is exactly the cached blocks matches all but its last block:
    assert BlockTable(pool).cached_prefix([1, 2, 3, 4]) == first.blocks[:1]
    free = pool.num_free_blocks
    second.adopt_cached(hits)
    second.append([9])
    assert free - pool.num_free_blocks == 1  # live hits are free of charge
    assert second.num_tokens == 5 and second.blocks[:2] == first.blocks[:2]
    assert pool.ref_count(first.blocks[0]) == 2


def test_prefix_cache_misses_on_different_history():
    pool = BlockAllocator(8, 2, enable_prefix_caching=True)
    BlockTable(pool).append([1, 2, 3, 4, 5])
    assert BlockTable(pool).cached_prefix([0, 0, 3, 4, 5]) == []


def test_revived_cached_blocks_cost_a_free_block():
    pool = BlockAllocator(4, 2, enable_prefix_caching=True)
    a = BlockTable(pool)
    a.append([1, 2, 3])
    a.free()
    b = BlockTable(pool)
    hits = b.cached_prefix([1, 2, 3])
    assert len(hits) == 1
    free = pool.num_free_blocks
    b.adopt_cached(hits)
    b.append([3])
    assert free - pool.num_free_blocks == 2  # the cached block leaves the free queue too


def test_adopt_only_starts_a_table():
    pool = BlockAllocator(4, 1, enable_prefix_caching=True)
    t = BlockTable(pool)
    t.append([1, 2])
    with pytest.raises(BlockStateError, match="already has 2 blocks"):
        t.adopt_cached([0])


@pytest.mark.parametrize("block_size", [1, 3, 4])
def test_slot_mapping_by_blocks_equals_slot_per_token_and_refuses_released_blocks(block_size):
    """`slot_mapping` (one range per block, as `pack_step` packs a chunk) gives
    `slot`'s slots for every range, across blocks and to the table's end, and
    the same error for a released block or a position outside the table."""
    table = BlockTable(BlockAllocator(num_blocks=16, block_size=block_size), seq="A")
    table.append(list(range(5 * block_size + 2)))
    n = table.num_tokens

    def per_token(start, end):
        return [table.slot(p) for p in range(start, end)]

    for start in range(n + 1):
        for end in range(start, n + 1):
            assert table.slot_mapping(start, end) == per_token(start, end)
    table.release_before(2 * block_size + 1)  # the leading blocks go back to the pool
    live = table.num_released * block_size      # the first position still held

    def error(f):
        with pytest.raises(IndexError) as info:
            f()
        return str(info.value)

    for start, end in [(0, 3), (live - 1, n)]:
        assert error(lambda: table.slot_mapping(start, end)) == \
            error(lambda: per_token(start, end))  # noqa: B023
    for start, end in [(n - 1, n + 1), (-1, 2)]:  # outside the tokens: the range is refused
        assert error(lambda: table.slot_mapping(start, end)) == (  # noqa: B023
            f"slot_mapping({start}, {end}): positions run 0 <= start <= end <= {n} "
            "(the tokens of sequence 'A')")
        assert f"token position {n if start >= 0 else -1} is outside [0, {n})" in error(
            lambda: per_token(start, end))  # noqa: B023
    assert table.slot_mapping(live, n) == per_token(live, n)
