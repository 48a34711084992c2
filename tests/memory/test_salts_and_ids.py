"""The memory API checks what a direct caller gives it as the engine checks it.

* `KVCacheManager.allocate_slots(..., cache_salt=...)` and `cached_prefix`
  refuse a salt that is not a string (the engine refused it earlier, a
  direct caller was not), with nothing changed;
* cached blocks found under one salt never start a sequence of another
  (vLLM's rule: the salt keys only the first block, and every later name
  chains from it), nor do blocks that are not one chain from the start;
* the advice for an unhashable sequence id holds for every unhashable id.
"""

import itertools

import pytest

from pagedkit.memory import BlockStateError, EventLog, KVCacheManager, hash_block
from pagedkit.memory.block_hash import salt_keys

BLOCK = 4
TOKENS = list(range(1, 3 * BLOCK + 2))  # three full blocks and one token


def manager(hash_fn=None):
    kv = KVCacheManager(16, BLOCK, enable_prefix_caching=True, hash_fn=hash_fn)
    kv.events_seen = EventLog(kv.events)
    return kv


def state(kv):
    """Everything a refused call must leave as it was."""
    pool = kv.allocator
    return ({s: (list(t.blocks), t.num_tokens, t.cache_salt) for s, t in kv.tables().items()},
            kv.stats(), [(pool.block_hash(b), pool.is_free(b)) for b in range(pool.num_blocks)],
            len(kv.events_seen.events))


def recount(kv, tokens, salt):
    """The names of `tokens`' full blocks by vLLM's rule, computed here from
    the pool's hash function: the salt's extra keys on the first block only."""
    pool, names = kv.allocator, []
    parent = pool.root_hash
    for i in range(len(tokens) // BLOCK):
        parent = hash_block(parent, tokens[i * BLOCK:(i + 1) * BLOCK],
                            salt_keys(salt) if i == 0 else None, pool.hash_fn)
        names.append(parent)
    return names


# ------------------------------------------------------------------ bad salts
BAD_SALTS = [5, 0, 1.5, True, False, b"a", bytearray(b"a"), ["a"], ("a",), {"a": 1}, {"a"},
             object()]


def salt_id(salt):
    return f"{type(salt).__name__}-{salt!r}"[:20] if type(salt) is not object else "object"


@pytest.mark.parametrize("salt", BAD_SALTS, ids=salt_id)
@pytest.mark.parametrize("call", ["allocate_slots", "cached_prefix"])
def test_a_salt_that_is_not_a_string_is_refused_by_name(call, salt):
    kv = manager()
    kv.allocate_slots("A", TOKENS, cache_salt="a")
    before = state(kv)
    with pytest.raises(TypeError) as refused:
        getattr(kv, call)("B", TOKENS, cache_salt=salt)
    assert str(refused.value).startswith("cache_salt must be a string, got ")
    assert f"({type(salt).__name__})" in str(refused.value)
    assert state(kv) == before


@pytest.mark.parametrize("salt", [*BAD_SALTS, "b", "A", ""], ids=salt_id)
def test_an_existing_sequence_keeps_its_salt(salt):
    """A salt given for a sequence that exists must be its own: it named the
    first block, and cannot change."""
    kv = manager()
    kv.allocate_slots("A", TOKENS[:5], cache_salt="a")
    before = state(kv)
    with pytest.raises((TypeError, BlockStateError)):
        kv.allocate_slots("A", TOKENS[5:], cache_salt=salt)
    assert state(kv) == before
    assert kv.allocate_slots("A", TOKENS[5:7], cache_salt="a") == []
    assert kv.allocate_slots("A", TOKENS[7:]) == []  # None: the sequence's own
    assert [kv.allocator.block_hash(b) for b in kv.block_ids("A")[:3]] == recount(kv, TOKENS, "a")


# ------------------------------------------------------- two salts, same tokens
SALTS = [None, "", "a", "b", "a "]


def same(s1, s2):
    return (s1 or None) == (s2 or None)  # "" salts nothing, as in vLLM


@pytest.mark.parametrize("s1, s2", list(itertools.product(SALTS, repeat=2)), ids=repr)
def test_cached_blocks_of_one_salt_never_start_a_sequence_of_another(s1, s2):
    """A direct caller: A under salt s1, then B with the same tokens under
    s2, starting from A's blocks. Only equal salts share; otherwise the
    blocks are refused with nothing changed, and B computes its own, named
    as the recount names them."""
    kv = manager()
    kv.allocate_slots("A", TOKENS, cache_salt=s1)
    a_blocks = kv.block_ids("A")[:3]
    assert [kv.allocator.block_hash(b) for b in a_blocks] == recount(kv, TOKENS, s1)
    found = kv.cached_prefix("B", TOKENS, cache_salt=s2)
    assert found == (a_blocks if same(s1, s2) else [])
    before = state(kv)
    rest = TOKENS[3 * BLOCK:]
    if same(s1, s2):
        assert kv.allocate_slots("B", rest, a_blocks, cache_salt=s2) == []
        assert kv.block_ids("B")[:3] == a_blocks
    else:
        with pytest.raises(BlockStateError, match="only within one salt"):
            kv.allocate_slots("B", rest, a_blocks, cache_salt=s2)
        assert state(kv) == before
        assert kv.allocate_slots("B", TOKENS, cache_salt=s2) == []
        assert not set(kv.block_ids("B")) & set(kv.block_ids("A"))
    assert [kv.allocator.block_hash(b) for b in kv.block_ids("B")[:3]] == recount(kv, TOKENS, s2)


@pytest.mark.parametrize("s1, s2", list(itertools.product(SALTS, repeat=2)), ids=repr)
def test_a_block_table_adopts_cached_blocks_of_its_own_salt_only(s1, s2):
    """Review 41: the salt rule lived in the manager only, and the public
    `BlockTable.adopt_cached` let a table salted s2 adopt blocks cached under
    s1, then name its next block in s1's chain. Now the table refuses them,
    with nothing taken; only equal salts share."""
    from pagedkit.memory import BlockTable

    kv = manager()
    kv.allocate_slots("A", TOKENS, cache_salt=s1)
    a_blocks = kv.block_ids("A")[:3]
    table = BlockTable(kv.allocator, "B", cache_salt=s2)
    before = state(kv)
    if same(s1, s2):
        table.adopt_cached(a_blocks)
        assert table.blocks == a_blocks
    else:
        with pytest.raises(BlockStateError, match="only within one salt"):
            table.adopt_cached(a_blocks)
        assert state(kv) == before and table.blocks == [] and table.num_tokens == 0
        table.append(TOKENS)
        assert not set(table.blocks) & set(a_blocks)
    assert [kv.allocator.block_hash(b) for b in table.blocks[:3]] == recount(kv, TOKENS, s2)


def two_chains(hash_fn):
    """A manager holding two cached prefixes, A's and C's: ``(kv, A's first three
    blocks, [(block ids that are no chain from the start, what the refusal says)])``."""
    kv = manager(hash_fn)
    kv.allocate_slots("A", TOKENS)
    kv.allocate_slots("C", [t + 100 for t in TOKENS])
    a, c = kv.block_ids("A")[:3], kv.block_ids("C")[:3]
    return kv, a, [(a[1:], "does not start a sequence"), (a[:1] + a[2:], "does not follow"),
                   (a[:1] + c[1:2], "does not follow"), (a[1::-1], "does not start"),
                   (c[:1] + a[1:2], "does not follow")]


@pytest.mark.parametrize("hash_fn", [None, lambda obj: b"\x00"], ids=["sha256", "constant"])
def test_a_block_table_adopts_one_chain_from_the_start_only(hash_fn):
    """The chain rule, asked of `BlockTable.adopt_cached` directly."""
    from pagedkit.memory import BlockTable

    kv, a, broken = two_chains(hash_fn)
    before = state(kv)
    for blocks, says in [*broken, (a[:1] + a[:1], "twice")]:
        table = BlockTable(kv.allocator, "B")
        with pytest.raises(BlockStateError, match=says):
            table.adopt_cached(blocks)
        assert state(kv) == before and table.blocks == []
    table = BlockTable(kv.allocator, "B")
    table.adopt_cached(a[:2])
    assert table.blocks == a[:2]


@pytest.mark.parametrize("hash_fn", [None, lambda obj: b"\x00"], ids=["sha256", "constant"])
def test_cached_blocks_must_be_one_chain_from_the_start(hash_fn):
    """Blocks that are cached but are not the first blocks of one prefix, in
    order, are refused (under a hash where every name collides too)."""
    kv, a, broken = two_chains(hash_fn)
    before = state(kv)
    for blocks, says in broken:
        with pytest.raises(BlockStateError, match=says):
            kv.allocate_slots("B", [1], blocks)
        assert state(kv) == before
    assert kv.allocate_slots("B", TOKENS[2 * BLOCK:], a[:2]) == []


# ----------------------------------------------------------- unhashable ids
class Unhashable:
    __hash__ = None

    def __repr__(self):
        return "Unhashable()"


UNHASHABLE_IDS = [["x"], [1, [2]], {"a": 1}, {1}, ([1],), (1, {"a": 1}), ((1, [2]),),
                  bytearray(b"x"), [bytearray(b"x")], ({1},), Unhashable(), (Unhashable(),)]
#: What an error message might suggest, and the conversion it names
CONVERSIONS = {"tuple(": tuple, "frozenset(": frozenset, "bytes(": bytes, "str(": str}


@pytest.mark.parametrize("seq", UNHASHABLE_IDS, ids=repr)
@pytest.mark.parametrize("call", ["allocate_slots", "contains"])
def test_the_advice_for_an_unhashable_id_holds_for_every_one(seq, call):
    """The hint suggested ``tuple(...)``, which does not help for a tuple
    holding a list. Whatever the message suggests must make this id hashable."""
    kv = manager()
    with pytest.raises(TypeError) as refused:
        kv.allocate_slots(seq, [1]) if call == "allocate_slots" else seq in kv
    message = str(refused.value)
    assert message == (f"sequence id {seq!r} ({type(seq).__name__}) is not hashable, and a "
                       "sequence's id keys its block table: give a str, an int, or a tuple "
                       "holding only str and int")
    for named, convert in CONVERSIONS.items():
        if named in message:
            hash(convert(seq))  # the suggestion works for this id
    assert not kv.tables()
