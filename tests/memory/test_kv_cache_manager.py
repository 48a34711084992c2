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
    assert kv.num_free_blocks == 4
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
    assert kv.is_swapped("A") and kv.num_free_blocks == 6
    assert kv.stats().swapped_blocks == 3
    with pytest.raises(KeyError, match="swapped out"):
        kv.table("A")
    with pytest.raises(BlockStateError, match="swap it in"):
        kv.allocate_slots("A", [9])
    back = kv.swap_in(["A", "B"])
    assert {cpu for cpu, _ in back} == {cpu for _, cpu in out}
    a, b = kv.block_ids("A"), kv.block_ids("B")
    assert a[0] == b[0] and kv.allocator.ref_count(a[0]) == 2
    assert kv.num_tokens("B") == 4 and kv.stats().swapped_blocks == 0
    kv.free("A")
    kv.free("B")
    assert kv.num_free_blocks == 6 and kv.swap_pool.num_free_blocks == 6


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
