import dataclasses

import pytest

from pagedkit.memory import (
    ROOT_HASH,
    BlockAllocator,
    BlockStateError,
    EventKind,
    EventLog,
    OutOfBlocksError,
    hash_block,
)


def test_allocate_pops_free_queue_in_order_and_free_appends_at_tail():
    pool = BlockAllocator(4, 8)
    assert [pool.allocate() for _ in range(3)] == [0, 1, 2]
    pool.free(1)
    assert pool.num_free_blocks == 2
    assert pool.allocate() == 3  # head of the queue, not the block just freed
    assert pool.allocate() == 1


def test_fork_and_free_follow_reference_counts():
    pool = BlockAllocator(2, 4)
    b = pool.allocate()
    pool.fork(b)
    pool.fork(b)
    assert pool.ref_count(b) == 3
    pool.free(b)
    pool.free(b)
    assert not pool.is_free(b)
    pool.free(b)
    assert pool.is_free(b) and pool.num_free_blocks == 2


@pytest.mark.parametrize("kwargs, message", [
    ({"num_blocks": 0, "block_size": 4}, "num_blocks must be >= 1, got 0"),
    ({"num_blocks": 4, "block_size": 0}, "block_size must be >= 1, got 0"),
    ({"num_blocks": 4, "block_size": -3}, "block_size must be >= 1, got -3"),
])
def test_bad_sizes_name_the_value(kwargs, message):
    with pytest.raises(ValueError, match=message):
        BlockAllocator(**kwargs)


def test_non_integer_size_is_a_type_error():
    with pytest.raises(TypeError, match=r"block_size must be an integer, got 2\.5"):
        BlockAllocator(4, 2.5)


def test_double_free_is_refused():
    pool = BlockAllocator(2, 4)
    b = pool.allocate()
    pool.free(b)
    with pytest.raises(BlockStateError, match=f"cannot free block {b}: it is already free"):
        pool.free(b)


def test_fork_of_free_block_is_refused():
    pool = BlockAllocator(2, 4)
    with pytest.raises(BlockStateError, match="cannot fork block 1: it is free"):
        pool.fork(1)


def test_unknown_block_id():
    pool = BlockAllocator(2, 4)
    with pytest.raises(IndexError, match=r"block id 7 is outside the pool \[0, 2\)"):
        pool.free(7)


def test_out_of_blocks_names_the_pool():
    pool = BlockAllocator(2, 4)
    pool.allocate(), pool.allocate()
    with pytest.raises(OutOfBlocksError, match="all 2 blocks"):
        pool.allocate()
    assert pool.num_free_blocks == 0


def test_copy_on_write_only_copies_shared_blocks():
    pool = BlockAllocator(4, 4)
    b = pool.allocate()
    pool.append_tokens(b, 3)
    assert pool.copy_on_write(b) == (b, None)
    pool.fork(b)
    new, copy = pool.copy_on_write(b)
    assert copy == (b, new) and new != b
    assert pool.ref_count(b) == 1 and pool.ref_count(new) == 1
    assert pool.num_tokens(new) == 3  # the copy carries the tokens
    assert pool.stats().tokens_stored == 6


def test_copy_on_write_without_room_changes_nothing():
    pool = BlockAllocator(1, 4)
    b = pool.allocate()
    pool.fork(b)
    with pytest.raises(OutOfBlocksError):
        pool.copy_on_write(b)
    assert pool.ref_count(b) == 2


def test_writes_into_shared_or_overfull_blocks_are_refused():
    pool = BlockAllocator(2, 4)
    b = pool.allocate()
    pool.fork(b)
    with pytest.raises(BlockStateError, match="ref count is 2"):
        pool.append_tokens(b, 1)
    pool.free(b)
    with pytest.raises(BlockStateError, match="would hold 5 tokens but block_size is 4"):
        pool.append_tokens(b, 5)


def _full_cached_block(pool, tokens, parent=None):
    b = pool.allocate()
    pool.append_tokens(b, len(tokens))
    key = pool.new_key(parent, tokens)
    assert pool.register(b, key)
    return b, key


def test_cached_block_survives_free_and_is_found_again():
    pool = BlockAllocator(4, 2, enable_prefix_caching=True)
    b, _ = _full_cached_block(pool, [5, 6])
    pool.free(b)
    stats = pool.stats()
    assert (stats.cached_blocks, stats.free_blocks, stats.used_blocks) == (1, 3, 0)
    assert pool.find_cached(pool.new_key(None, [5, 6])) == b  # an equal key, not the same one
    pool.touch(b)
    assert pool.ref_count(b) == 1 and pool.stats().tokens_stored == 2
    assert pool.stats().cached_blocks == 0


def test_cached_blocks_are_evicted_least_recently_freed_first():
    pool = BlockAllocator(2, 1, enable_prefix_caching=True)
    a, ka = _full_cached_block(pool, [1])
    b, kb = _full_cached_block(pool, [2])
    pool.free(b)
    pool.free(a)  # a was freed last: most recently used
    log = EventLog(pool.events)
    assert pool.allocate() == b
    assert log.kinds() == ["evict", "allocate"]
    assert pool.find_cached(kb) is None
    assert pool.find_cached(ka) == a


def test_hash_collision_is_a_miss_not_a_wrong_block():
    """With a hash that names everything alike, the key still tells contents apart."""
    pool = BlockAllocator(4, 2, enable_prefix_caching=True, hash_fn=lambda obj: b"same")
    first, _ = _full_cached_block(pool, [1, 2])
    assert pool.find_cached(pool.new_key(None, [3, 4])) is None
    # equal own tokens after a different parent: also a miss
    other, other_key = _full_cached_block(pool, [9, 9])
    assert pool.block_hash(first) == pool.block_hash(other) == b"same"
    child, _ = _full_cached_block(pool, [5, 6], parent=other_key)
    assert pool.find_cached(pool.new_key(pool.block_key(first), [5, 6])) is None
    assert pool.find_cached(pool.new_key(other_key, [5, 6])) == child


def test_chained_hash_depends_on_parent():
    assert hash_block(ROOT_HASH, [1, 2]) != hash_block(hash_block(ROOT_HASH, [9, 9]), [1, 2])
    assert hash_block(ROOT_HASH, [1, 2]) == hash_block(ROOT_HASH, (1, 2))


def test_register_rules():
    pool = BlockAllocator(3, 2, enable_prefix_caching=True)
    b = pool.allocate()
    pool.append_tokens(b, 1)
    with pytest.raises(BlockStateError, match="only full blocks can be cached"):
        pool.register(b, pool.new_key(None, [1]))
    pool.append_tokens(b, 1)
    key = pool.new_key(None, [1, 2])
    assert pool.register(b, key)
    assert not pool.register(b, key)  # a block has one name
    c = pool.allocate()
    pool.append_tokens(c, 2)
    assert pool.register(c, pool.new_key(None, [1, 2]))  # a second copy is named too
    assert not BlockAllocator(1, 1).register(0, pool.new_key(None, [1]))  # caching off


def test_evict_all_cached():
    pool = BlockAllocator(3, 1, enable_prefix_caching=True)
    a, key = _full_cached_block(pool, [1])
    pool.free(a)
    assert pool.evict_all_cached() == 1
    assert pool.find_cached(key) is None
    assert pool.stats().free_blocks == 3


def test_stats_kv_usage():
    pool = BlockAllocator(4, 4)
    assert pool.stats().kv_usage == 1.0
    a, b = pool.allocate(), pool.allocate()
    pool.append_tokens(a, 4)
    pool.append_tokens(b, 2)
    s = pool.stats()
    assert (s.used_blocks, s.slots_allocated, s.tokens_stored) == (2, 8, 6)
    assert s.kv_usage == pytest.approx(0.75)
    assert dataclasses.asdict(s)["kv_usage"] == pytest.approx(0.75)


def test_events_describe_each_change():
    pool = BlockAllocator(3, 2)
    log = EventLog(pool.events)
    b = pool.allocate("A")
    pool.append_tokens(b, 1, "A")
    pool.fork(b, "B")
    new, _ = pool.copy_on_write(b, "B")
    pool.free(b, "A")
    assert log.kinds() == ["allocate", "append", "fork", "allocate", "cow", "free"]
    cow = log.events[4]
    assert (cow.kind, cow.block, cow.src, cow.seq) == (EventKind.COW, new, b, "B")
    assert log.events[-1].ref_count == 0


def test_forget_drops_a_free_cached_block_only():
    pool = BlockAllocator(3, 1, enable_prefix_caching=True)
    a, h = _full_cached_block(pool, [1])
    assert not pool.forget(a)  # still in use: keeps its name
    pool.free(a)
    assert pool.stats().cached_blocks == 1
    assert pool.forget(a)
    assert pool.find_cached(h) is None
    assert pool.stats().cached_blocks == 0 and pool.stats().free_blocks == 3
    assert not pool.forget(a)
