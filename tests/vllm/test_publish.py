"""pagedkit's cache events in vLLM's format, read back by `CachedBlocks`
(no vLLM needed: the paging core alone, no torch)."""

import random
from collections import Counter

import pytest

from pagedkit.memory import KVCacheManager
from pagedkit.vllm.publish import WirePublisher, external_hash
from pagedkit.vllm.reader import CachedBlocks, replay
from pagedkit.vllm.wire import AllBlocksCleared, BlockRemoved, BlockStored, encode_batch


def manager(num_blocks=8, block_size=4):
    return KVCacheManager(num_blocks, block_size, enable_prefix_caching=True)


def events(pub):
    pub.flush()
    return [e for b in pub.batches for e in b.events]


def test_one_allocation_is_one_block_stored_chained_to_its_parent():
    kv = manager()
    pub = WirePublisher(kv, int_hashes=False)
    kv.allocate_slots("A", list(range(10)))  # two full blocks, one partial
    names = kv.table("A").block_hashes
    assert events(pub) == [BlockStored(names, None, list(range(8)), 4, extra_keys=[None, None],
                                       group_idx=0, kv_cache_spec_kind="full_attention")]
    kv.allocate_slots("A", [10, 11])  # the third block fills
    (third,) = events(pub)[1:]
    assert third.parent_block_hash == names[1] and third.block_hashes == [
        kv.table("A").block_hashes[2]] and third.token_ids == [8, 9, 10, 11]


def test_hashes_go_out_as_vllms_64_bit_ints_by_default(monkeypatch):
    monkeypatch.delenv("VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES", raising=False)
    kv = manager()
    pub = WirePublisher(kv)
    kv.allocate_slots("A", list(range(8)))
    (stored,) = events(pub)
    assert stored.block_hashes == [external_hash(h) for h in kv.table("A").block_hashes]
    assert external_hash(b"\xff" * 24 + bytes(range(8))) == int.from_bytes(bytes(range(8)), "big")


def test_a_cache_hit_and_a_free_say_nothing():
    kv = manager()
    pub = WirePublisher(kv, int_hashes=False)
    prompt = list(range(9))
    kv.allocate_slots("A", prompt)
    before = len(events(pub))
    kv.allocate_slots("B", prompt[8:], kv.cached_prefix("B", prompt))
    kv.free("A")
    kv.free("B")
    assert len(events(pub)) == before


def test_evictions_come_before_the_stored_blocks_of_the_same_allocation():
    kv = manager(num_blocks=3)
    pub = WirePublisher(kv, int_hashes=False)
    kv.allocate_slots("A", list(range(8)))
    old = kv.table("A").block_hashes
    kv.free("A")  # both blocks stay cached, free
    kv.allocate_slots("B", list(range(100, 112)))  # 3 blocks: 1 blank, then both cached evicted
    new = kv.table("B").block_hashes
    got = events(pub)[1:]
    # as vLLM reports an allocation: the blocks it evicted, then the blocks it named
    assert [type(e).__name__ for e in got] == ["BlockRemoved", "BlockRemoved", "BlockStored"]
    assert sorted(h for e in got[:2] for h in e.block_hashes) == sorted(old)
    assert got[2].block_hashes == new


def test_reset_is_all_blocks_cleared_and_a_rollback_is_block_removed():
    kv = manager()
    pub = WirePublisher(kv, int_hashes=False)
    kv.allocate_slots("A", list(range(8)))
    kv.free("A")
    assert kv.reset_prefix_cache()
    assert events(pub)[-1] == AllBlocksCleared()
    kv.allocate_slots("A", list(range(8)))
    kv.allocate_slots("B", list(range(50, 58)))
    kv.free_uncomputed([("B", 0)])  # B's admission undone: its blocks forgotten
    got = events(pub)
    assert [type(e).__name__ for e in got[-2:]] == ["BlockRemoved", "BlockRemoved"]
    assert replay(pub.batches).state().keys() == set(kv.table("A").block_hashes)


def test_late_attach_with_a_snapshot_and_listeners():
    kv = manager()
    kv.allocate_slots("A", list(range(12)))
    pub = WirePublisher(kv, int_hashes=False, snapshot=True)
    seen = []
    pub.subscribe(seen.append)
    kv.allocate_slots("A", [12, 13, 14, 15])
    pub.flush()
    cache = replay(pub.batches)
    assert set(cache.blocks) == set(kv.table("A").block_hashes)
    assert cache.chains()[kv.table("A").block_hashes[-1]] == tuple(range(16))
    assert len(seen) == 1 and cache.unknown_removals == cache.conflicts == 0


def named_blocks(kv):
    """The allocator's own view: name -> (tokens, copies)."""
    pool = kv.allocator
    keys = [pool.block_key(b) for b in range(pool.num_blocks)]
    copies = Counter(k.hash for k in keys if k is not None)
    return {k.hash: (k.token_ids, copies[k.hash]) for k in keys if k is not None}


@pytest.mark.parametrize("seed", range(6))
def test_the_reader_mirrors_the_allocator_after_every_step(seed):
    """Random admissions (shared prefixes, cache hits), appends, frees, resets
    and rollbacks: after each step the cache the events describe is the
    allocator's, name for name, copy for copy, and the bytes round-trip."""
    rng = random.Random(seed)
    kv = manager(num_blocks=12, block_size=4)
    pub = WirePublisher(kv, int_hashes=False)
    cache = CachedBlocks()
    pub.subscribe(lambda batch: cache.apply_batch(encode_batch(batch)))
    stems = [[rng.randrange(50) for _ in range(12)] for _ in range(3)]
    live: list[str] = []
    for step in range(120):
        op = rng.random()
        if op < 0.4 and len(live) < 5:
            seq = f"s{step}"
            prompt = rng.choice(stems)[:rng.randrange(1, 13)] + [rng.randrange(50)
                                                                  for _ in range(rng.randrange(4))]
            hit = kv.cached_prefix(seq, prompt)
            if kv.allocate_slots(seq, prompt[len(hit) * 4:], hit) is not None:
                live.append(seq)
        elif op < 0.75 and live:
            kv.allocate_slots(rng.choice(live), [rng.randrange(50)
                                                 for _ in range(rng.randrange(1, 6))])
        elif op < 0.92 and live:
            kv.free(live.pop(rng.randrange(len(live))))
        elif op < 0.96 and live:
            kv.free_uncomputed([(live.pop(), 0)])
        elif not live:
            kv.reset_prefix_cache()
        pub.flush()
        state = {h: (b.token_ids, b.copies) for h, b in cache.blocks.items()}
        assert state == named_blocks(kv), f"step {step}"
    assert cache.unknown_removals == cache.conflicts == 0


def test_blocks_named_by_a_later_step_are_published_then():
    """A recomputation allocates ahead of the steps that compute it
    (``computed=0``); its blocks are published when a later step's
    `allocate_slots` names them, and a block reused before that is never
    published."""
    kv = manager(num_blocks=12, block_size=4)
    pub = WirePublisher(kv, int_hashes=False)
    cache = CachedBlocks()
    pub.subscribe(lambda batch: cache.apply_batch(encode_batch(batch)))

    def state():
        pub.flush()
        return {h: (b.token_ids, b.copies) for h, b in cache.blocks.items()}

    kv.allocate_slots("a", list(range(10)), computed=0)
    assert state() == named_blocks(kv) == {}
    kv.allocate_slots("a", [], computed=6)  # the first step computed 6 tokens: one full block
    assert len(state()) == 1 and state() == named_blocks(kv)
    kv.allocate_slots("a", [], computed=10)
    kv.allocate_slots("a", [1, 2])  # after the gap is computed, appends name at once
    assert len(state()) == 3 and state() == named_blocks(kv)
    kv.allocate_slots("b", list(range(50, 58)), computed=0)
    kv.free_uncomputed([("b", 0)])  # never computed: freed unnamed
    kv.allocate_slots("c", list(range(70, 82)))  # reuses b's blocks, named as c's
    assert state() == named_blocks(kv) and len(state()) == 6
    assert cache.unknown_removals == cache.conflicts == 0


def test_zmq_publisher_and_stream(tmp_path):
    pytest.importorskip("zmq")
    import time

    from pagedkit.vllm.reader import ZmqEventStream

    kv = manager()
    pub = WirePublisher(kv, int_hashes=False, endpoint=f"ipc://{tmp_path}/kv")
    stream = ZmqEventStream(pub.endpoint)
    time.sleep(0.3)  # a subscriber misses what is sent before it has joined
    kv.allocate_slots("A", list(range(8)))
    pub.flush()
    got = stream.receive(2000)
    pub.close()
    stream.close()
    assert [seq for seq, _ in got] == [0] and got[0][1].events == pub.batches[0].events


def test_removed_of_an_unknown_name_is_counted():
    cache = CachedBlocks()
    cache.apply(BlockRemoved([b"x"]))
    assert cache.unknown_removals == 1 and len(cache) == 0


@pytest.mark.parametrize("salt", [None, "", "a", "tenant-7"])
def test_a_salted_first_block_publishes_the_salt_alone_as_vllm_does(salt):
    """The hash keys the salt tagged, ``(("cache_salt", "a"),)``; vLLM's events
    carry the value alone, ``("a",)`` (its ``to_event_extra_keys``), and only
    on the first block."""
    kv = manager()
    pub = WirePublisher(kv, int_hashes=False)
    kv.allocate_slots("A", list(range(10)), cache_salt=salt)
    (stored,) = events(pub)
    assert stored.extra_keys == [(salt,) if salt else None, None]
    assert stored.block_hashes == kv.table("A").block_hashes
    kv.allocate_slots("A", [10, 11])  # the third block fills: no salt there
    assert events(pub)[1].extra_keys == [None]
