"""The prefix cache as vLLM keeps it: collision-safe names, every copy named,
blank blocks reused before cached ones, and a reset only when nothing runs.

Each scenario an outside review found (a collision served another request's
K/V, a second copy never named, cached content lost when re-allocated
without a lookup, cached blocks evicted while blank ones sat free) is here,
under the default SHA-256 names and under injected weak hashes that force
collisions: a weak hash may cost a miss, never a wrong block.
"""

import itertools
import pickle

import cbor2
import pytest

from pagedkit.memory import (
    HASH_FUNCTIONS,
    ROOT_HASH,
    BlockAllocator,
    BlockKey,
    EventKind,
    EventLog,
    KVCacheManager,
    hash_block,
    sha256_cbor,
)
from pagedkit.memory.block_hash import DEFAULT_ROOT_SEED, cbor_encode, root_hash

#: Hash functions that collide on purpose: everything alike, Python's own
#: hash squeezed to two bits, and the parity of the tokens' sum.
WEAK_HASHES = {
    "constant": lambda obj: b"\x00",
    "builtin-2bit": lambda obj: bytes([hash(obj) & 3]),
    "parity": lambda obj: bytes([sum(obj[1]) & 1]) if isinstance(obj, tuple) else b"r",
}
ALL_HASHES = {"sha256": None, **WEAK_HASHES}



def manager(num_blocks=8, block_size=4, hash_fn=None, **kw):
    return KVCacheManager(num_blocks, block_size, enable_prefix_caching=True,
                          hash_fn=hash_fn, **kw)


# ------------------------------------------------------------------ the names
def test_names_are_vllms_sha256_of_parent_tokens_and_extra_keys():
    """vLLM's ``hash_block_tokens``: SHA-256 of the pickle of
    ``(parent, tuple(tokens), extra_keys)``, rooted at the hash of its seed."""
    import hashlib
    import os

    seed = os.environ.get("PYTHONHASHSEED", DEFAULT_ROOT_SEED)
    root = hashlib.sha256(pickle.dumps(seed, protocol=pickle.HIGHEST_PROTOCOL)).digest()
    assert root == ROOT_HASH and len(ROOT_HASH) == 32
    expected = hashlib.sha256(pickle.dumps((root, (1, 2, 3), None),
                                           protocol=pickle.HIGHEST_PROTOCOL)).digest()
    assert hash_block(ROOT_HASH, [1, 2, 3]) == expected
    assert BlockKey(None, [1, 2, 3]).hash == expected
    assert root_hash(sha256_cbor) == sha256_cbor(seed) != ROOT_HASH
    assert set(HASH_FUNCTIONS) == {"sha256", "sha256_cbor"}


def test_the_builtin_hash_collision_of_the_review_is_gone():
    """CPython's ``hash(-1) == hash(-2)``: built-in tuple hashes of these two
    blocks were equal. Their SHA-256 names are not."""
    assert hash((0, (-1,) * 4)) == hash((0, (-2,) * 4))
    assert hash_block(ROOT_HASH, [-1] * 4) != hash_block(ROOT_HASH, [-2] * 4)


@pytest.mark.parametrize("value", [
    None, True, False, 0, 23, 24, 255, 256, 65535, 65536, 2**32, 2**64 - 1, -1, -24, -25,
    -2**64, b"", b"\x00" * 32, "", "cache_salt", "é" * 30, (), [1, [2, (3,)]],
    (b"\x07" * 32, tuple(range(300)), None), (ROOT_HASH, (1, 2), (("cache_salt", "x"),))])
def test_cbor_encoding_is_cbor2s_canonical_one(value):
    assert cbor_encode(value) == cbor2.dumps(value, canonical=True)


def test_cbor_refuses_what_it_cannot_encode():
    with pytest.raises(TypeError, match="cannot CBOR-encode float"):
        cbor_encode(1.5)
    with pytest.raises(ValueError, match="does not fit CBOR's 64-bit"):
        cbor_encode(2**64)


# ------------------------------------------------- review scenario 1: collision
@pytest.mark.parametrize("hash_name", sorted(ALL_HASHES))
def test_a_hit_is_never_a_block_computed_after_another_prefix(hash_name):
    kv = manager(hash_fn=ALL_HASHES[hash_name])
    kv.allocate_slots("A", [-1] * 4 + [0])
    kv.allocate_slots("B", [-2] * 4 + [5, 6, 7, 8, 0])
    assert kv.cached_prefix("C", [-1] * 4 + [5, 6, 7, 8, 0]) == kv.block_ids("A")[:1]
    assert kv.cached_prefix("D", [-2] * 4 + [5, 6, 7, 8, 0]) == kv.block_ids("B")[:2]


@pytest.mark.parametrize("hash_name", sorted(WEAK_HASHES))
def test_weak_hashes_find_exactly_the_prefixes_sha256_finds(hash_name):
    """Every pair of 2-block prompts over a 2-token alphabet (block size 2):
    what a weak hash finds is what SHA-256 finds, block for block."""
    prompts = [[*p, 9] for p in itertools.product([0, 1], repeat=4)]
    for first, second in itertools.product(prompts, repeat=2):
        hits = []
        for hash_fn in (None, WEAK_HASHES[hash_name]):
            kv = manager(8, 2, hash_fn=hash_fn)
            kv.allocate_slots("first", first)
            hits.append(kv.cached_prefix("second", second))
        assert hits[0] == hits[1], (first, second)
        common = next((i for i in range(4) if first[i] != second[i]), 4)
        assert len(hits[0]) == common // 2


# --------------------------------------------- review scenarios 2 and 3: copies
@pytest.mark.parametrize("hash_name", sorted(ALL_HASHES))
def test_a_second_copy_is_named_and_survives_the_first(hash_name):
    kv = manager(hash_fn=ALL_HASHES[hash_name])
    tokens = [1, 2, 3, 4, 5, 6, 7, 8, 0]
    kv.allocate_slots("A", tokens)
    kv.allocate_slots("B", tokens)  # no lookup: computes the same content again
    a, b = kv.block_ids("A"), kv.block_ids("B")
    assert [kv.allocator.block_hash(x) for x in a[:2]] == [kv.allocator.block_hash(x)
                                                          for x in b[:2]]
    kv.free("A")
    free = kv.allocator.num_free_blocks
    kv.allocate_slots("filler", list(range(100, 100 + 4 * free)))  # evicts A's
    assert set(a) <= set(kv.block_ids("filler")) and kv.stats().cached_blocks == 0
    assert kv.cached_prefix("C", tokens) == b[:2]


def test_a_lookup_prefers_a_live_copy():
    kv = manager()
    tokens = [1, 2, 3, 4, 0]
    kv.allocate_slots("A", tokens)
    kv.allocate_slots("B", tokens)
    kv.free("A")  # A's copy is cached and free, B's is live
    hit = kv.cached_prefix("C", tokens)
    assert hit == kv.block_ids("B")[:1]
    assert kv.blocks_needed("C", 1, hit) == 1  # sharing a live copy costs no free block


@pytest.mark.parametrize("hash_name", sorted(ALL_HASHES))
@pytest.mark.parametrize("block_size", [1, 2, 4, 8])
def test_reallocating_cached_content_without_a_lookup_keeps_it_findable(hash_name, block_size):
    """The review's ``t = range(32)`` scenario, at every block size that divides it."""
    tokens = list(range(32))
    kv = manager(32 // block_size, block_size, hash_fn=ALL_HASHES[hash_name])
    kv.allocate_slots("0", tokens)
    kv.free("0")
    kv.allocate_slots("1", tokens)
    blocks = kv.block_ids("1")
    assert all(kv.allocator.block_hash(b) is not None for b in blocks)
    kv.free("1")
    usable = (len(tokens) - 1) // block_size  # the last token is never matched
    assert kv.cached_prefix("2", tokens) == blocks[:usable]


# ------------------------------------------- review scenario 4: eviction order
def test_blank_blocks_are_reused_before_cached_ones():
    """A shared system prompt stays cached while blank blocks are there to take."""
    kv = manager(6, 4)
    system = [7, 7, 7, 7, 8, 8, 8, 8]
    kv.allocate_slots("A", [*system, 1])  # 3 blocks: two full, one partial
    kv.allocate_slots("B", [1, 2])  # one partial block
    kv.free("A")
    kv.free("B")  # A's partial block and B's are blank; A's full ones are cached
    log = EventLog(kv.events)
    kv.allocate_slots("C", list(range(12)))  # 3 blocks: 3 blank ones are free
    assert EventKind.EVICT not in log.kinds()
    assert kv.cached_prefix("D", [*system, 2]) != []
    kv.allocate_slots("E", list(range(20, 28)))  # one blank left: then the LRU cached one goes
    assert log.kinds().count("evict") == 1


def test_free_order_is_blank_oldest_first_then_cached_lru_tail_first():
    assert BlockAllocator(8, 2).free_order() == list(range(8))
    kv = manager(8, 2)
    kv.allocate_slots("A", [1, 2, 3, 4, 5])  # blocks 0, 1 full, 2 partial
    kv.allocate_slots("B", [6, 7, 8, 9])  # blocks 3, 4 full
    a, b = kv.block_ids("A"), kv.block_ids("B")
    kv.free("B")
    kv.free("A")
    # blank: never-used 5, 6, 7, then A's partial tail; cached: B tail first, then A tail first
    assert kv.allocator.free_order() == [5, 6, 7, a[2], b[1], b[0], a[1], a[0]]


def test_forgotten_blocks_become_blank():
    kv = manager(4, 2)
    kv.allocate_slots("A", [1, 2, 3])
    full = kv.block_ids("A")[0]
    kv.free_uncomputed([("A", 0)])  # never computed: its names are dropped
    assert kv.stats().cached_blocks == 0
    assert full in kv.allocator.free_order()[:4]
    assert kv.cached_prefix("B", [1, 2, 3]) == []


# ------------------------------------------------------------------- reset
def test_reset_prefix_cache_follows_vllm():
    kv = manager()
    kv.allocate_slots("A", [1, 2, 3, 4, 0])
    kv.allocate_slots("B", [5, 6, 7, 8, 0])
    kv.free("A")
    assert not kv.reset_prefix_cache()  # B still runs: refused, nothing changed
    assert kv.cached_prefix("C", [1, 2, 3, 4, 0]) != []
    kv.free("B")
    assert kv.reset_prefix_cache()
    assert kv.stats().cached_blocks == 0
    assert kv.cached_prefix("C", [5, 6, 7, 8, 0]) == []
    assert kv.reset_prefix_cache()  # an empty cache resets fine


def test_off_means_no_names_and_no_hashing():
    calls = []
    kv = KVCacheManager(8, 4, hash_fn=lambda obj: calls.append(obj) or b"x")
    kv.allocate_slots("A", list(range(20)))
    assert calls == [DEFAULT_ROOT_SEED] or calls[0].isdigit()  # the root's seed, no block
    assert kv.table("A").block_hashes == []
    assert kv.cached_prefix("B", list(range(20))) == []


def test_reprs_name_their_objects_attributes():
    """Newcomer 12: BlockKey's repr said tokens= while the attribute is token_ids.
    Every ``name=value`` a memory object's repr shows is that attribute's value."""
    import re

    from pagedkit.memory import BlockAllocator, BlockTable
    from pagedkit.memory.block_hash import BlockKey

    table = BlockTable(BlockAllocator(4, 2, enable_prefix_caching=True), seq="A")
    table.append([1, 2, 3])
    for obj in (BlockKey(None, [5, 9]), table.block_keys[0], table):
        fields = re.findall(r"(\w+)=((?:\[[^\]]*\])|'[^']*'|\d+)", repr(obj))
        assert fields, repr(obj)
        for name, value in fields:
            assert hasattr(obj, name), (repr(obj), name)
            assert repr(list(getattr(obj, name)) if value.startswith("[") else
                        getattr(obj, name)) == value, (repr(obj), name)
