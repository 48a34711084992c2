import pytest

from pagedkit.memory import BlockStateError, KVCacheManager, OutOfBlocksError


def test_allocate_slots_returns_none_and_changes_nothing_when_full():
    kv = KVCacheManager(3, 2)
    assert kv.allocate_slots("A", [1, 2, 3]) == []
    before = kv.stats()
    assert kv.allocate_slots("B", [1, 2, 3]) is None
    assert "B" not in kv and kv.stats() == before


def test_prefix_hits_through_the_manager():
    kv = KVCacheManager(8, 2, enable_prefix_caching=True)
    kv.allocate_slots("A", [1, 2, 3, 4, 5])
    hits = kv.cached_prefix("B", [1, 2, 3, 4, 6])
    assert kv.blocks_needed("B", 1, hits) == 1
    kv.allocate_slots("B", [6], hits)
    assert kv.block_ids("B")[:2] == kv.block_ids("A")[:2]
    assert kv.num_tokens("B") == 5
    with pytest.raises(BlockStateError, match="already exists"):
        kv.allocate_slots("B", [7], hits)


def test_fork_and_free():
    kv = KVCacheManager(4, 2)
    kv.allocate_slots("A", [1, 2, 3])
    kv.fork("A", "B")
    with pytest.raises(BlockStateError, match="already has a block table"):
        kv.fork("A", "B")
    kv.free("A")
    kv.free("B")
    assert kv.allocator.num_free_blocks == 4
    with pytest.raises(KeyError, match="cannot free sequence 'A'"):
        kv.free("A")


def test_swap_round_trip_keeps_sharing_and_tokens():
    kv = KVCacheManager(6, 2, num_swap_blocks=6)
    kv.allocate_slots("A", [1, 2, 3])
    kv.fork("A", "B")
    kv.allocate_slots("B", [4])
    assert kv.can_swap_out(["A", "B"])
    out = kv.swap_out(["A", "B"])
    assert len(out) == 3  # the shared first block travels once
    assert "A" in kv.swapped_tables() and "A" not in kv.tables()
    assert kv.allocator.num_free_blocks == 6
    assert kv.stats().swapped_blocks == 3
    assert kv.table("A") is kv.swapped_tables()["A"]  # it points into the swap pool now
    with pytest.raises(KeyError, match="swapped out"):
        kv.block_ids("A")
    with pytest.raises(BlockStateError, match="swap it in"):
        kv.allocate_slots("A", [9])
    back = kv.swap_in(["A", "B"])
    assert {cpu for cpu, _ in back} == {cpu for _, cpu in out}
    a, b = kv.block_ids("A"), kv.block_ids("B")
    assert a[0] == b[0] and kv.allocator.ref_count(a[0]) == 2
    assert kv.num_tokens("B") == 4 and kv.stats().swapped_blocks == 0
    kv.free("A")
    kv.free("B")
    assert kv.allocator.num_free_blocks == 6 and kv.swap_pool.num_free_blocks == 6


def test_swap_limits():
    kv = KVCacheManager(4, 2)
    kv.allocate_slots("A", [1])
    assert not kv.can_swap_out(["A"])
    with pytest.raises(OutOfBlocksError, match="no swap space"):
        kv.swap_out(["A"])
    kv = KVCacheManager(4, 1, num_swap_blocks=1)
    kv.allocate_slots("A", [1, 2])
    with pytest.raises(OutOfBlocksError, match="needs 2 CPU blocks, 1 of 1 are free"):
        kv.swap_out(["A"])


def test_swap_in_needs_gpu_room():
    kv = KVCacheManager(2, 1, num_swap_blocks=2)
    kv.allocate_slots("A", [1, 2])
    kv.swap_out(["A"])
    kv.allocate_slots("B", [1])
    assert not kv.can_swap_in(["A"])
    with pytest.raises(OutOfBlocksError, match="needs 2 GPU blocks, 1 are free"):
        kv.swap_in(["A"])


def test_free_a_swapped_sequence():
    kv = KVCacheManager(2, 1, num_swap_blocks=2)
    kv.allocate_slots("A", [1, 2])
    kv.swap_out(["A"])
    kv.free("A")
    assert kv.swap_pool.num_free_blocks == 2 and "A" not in kv


def test_errors_name_the_sequence():
    kv = KVCacheManager(4, 2, num_swap_blocks=4)
    kv.allocate_slots("A", [1, 2, 3])
    with pytest.raises(KeyError, match="sequence 'A' is not swapped out"):
        kv.swap_in(["A"])
    with pytest.raises(KeyError, match=r"sequence 'Z' is not swapped out \(unknown\)"):
        kv.can_swap_in(["Z"])
    with pytest.raises(IndexError, match=r"logical block 5 is outside the table \[0, 2\)"):
        kv.table("A").physical_block(5)


def test_an_empty_table_is_still_a_table():
    kv = KVCacheManager(4, 2)
    assert kv.allocate_slots("A", []) == []
    assert kv.table("A").blocks == []
    kv.free("A")
    assert "A" not in kv


def test_bad_cached_blocks_change_nothing():
    kv = KVCacheManager(8, 2, enable_prefix_caching=True)
    kv.allocate_slots("A", [1, 2, 3, 4, 5])
    hits = kv.cached_prefix("B", [1, 2, 3, 4, 9])
    before = kv.stats()
    with pytest.raises(BlockStateError, match="are not in the prefix cache"):
        kv.allocate_slots("B", [9], [*hits, 7])
    with pytest.raises(BlockStateError, match="name a block twice"):
        kv.allocate_slots("B", [9], [hits[0], hits[0]])
    assert "B" not in kv and kv.stats() == before


def test_group_block_count_counts_copy_on_write_once_per_copy():
    kv = KVCacheManager(16, 4)
    kv.allocate_slots("P", [1, 2, 3, 4, 5, 6])  # one full block, one half-full
    kv.fork("P", "C1")
    kv.fork("P", "C2")
    # all three owners write into the shared half-full block: two copies suffice
    assert kv.blocks_needed_for([("P", 1), ("C1", 1), ("C2", 1)]) == 2
    # two of three write: both must copy (the third still reads the original)
    assert kv.blocks_needed_for([("P", 1), ("C1", 1)]) == 2
    # three tokens each still fit the block's two free slots... after the copy
    assert kv.blocks_needed_for([("P", 3), ("C1", 3), ("C2", 3)]) == 2 + 3


@pytest.mark.parametrize("num_tokens", range(0, 10))
@pytest.mark.parametrize("owners", [1, 2, 3])
def test_blocks_to_append_is_what_appending_takes(num_tokens, owners):
    """The copy-on-write rule, against the pool: ``owners`` sequences share a
    table of ``num_tokens`` tokens; every choice of writers among them
    (each appending 0..5 tokens) takes exactly the blocks `blocks_to_append`
    and `blocks_needed_for` say."""
    import itertools

    from pagedkit.memory.kv_cache_manager import blocks_to_append

    for appends in itertools.product(range(6), repeat=owners):
        kv = KVCacheManager(num_blocks=32, block_size=4)
        kv.allocate_slots("s0", list(range(num_tokens)))
        for i in range(1, owners):
            kv.fork("s0", f"s{i}")
        want = blocks_to_append(num_tokens, 4, list(appends), owners=owners)
        assert kv.blocks_needed_for([(f"s{i}", n) for i, n in enumerate(appends)]) == want
        free = kv.allocator.num_free_blocks
        for i, n in enumerate(appends):
            assert kv.allocate_slots(f"s{i}", [7] * n) is not None
        assert free - kv.allocator.num_free_blocks == want, appends


def test_blocks_to_append_refuses_bad_counts():
    from pagedkit.memory.kv_cache_manager import blocks_to_append

    with pytest.raises(ValueError, match="-1"):
        blocks_to_append(-1, 4, [1])
    with pytest.raises(ValueError, match="block_size"):
        blocks_to_append(3, 0, [1])
    with pytest.raises(ValueError, match="only 1"):
        blocks_to_append(3, 4, [1, 1], owners=1)
