"""The memory classes and `LLM` show what they hold (newcomer 41: a
`BlockAllocator`, a `KVCacheManager` and an `LLM` printed Python's default
``<... object at 0x...>``): each repr's counts are the pool's `stats()` —
used, free, cached and swapped out adding up to the pool — and the number of
sequences, after every step of a small run (allocate, fork, free to the
cache, swap out)."""

from __future__ import annotations

import re

import pytest

from pagedkit import LLM
from pagedkit.memory import BlockAllocator, KVCacheManager

PATTERN = re.compile(r"(\d+) blocks? of (\d+) tokens?: (\d+) used, (\d+) free, (\d+) cached"
                     r"(?:, (\d+) swapped out)?")


def _counts(text):
    total, size, used, free, cached, swapped = PATTERN.search(text).groups()
    return int(total), int(size), int(used), int(free), int(cached), int(swapped or 0)


@pytest.mark.parametrize(("num_blocks", "block_size"), [(1, 1), (4, 16), (13, 3)])
def test_a_block_allocator_shows_its_counts(num_blocks, block_size):
    pool = BlockAllocator(num_blocks, block_size)
    for taken in range(num_blocks + 1):
        total, size, used, free, cached, _ = _counts(repr(pool))
        assert repr(pool).startswith("BlockAllocator(")
        assert (total, size, used, free + cached) == (num_blocks, block_size, taken,
                                                      num_blocks - taken)
        if taken < num_blocks:
            pool.allocate()


def test_a_kv_cache_manager_shows_its_counts_and_sequences_at_every_step():
    kv = KVCacheManager(num_blocks=12, block_size=4, num_swap_blocks=8)
    steps = [lambda: kv.allocate_slots("A", list(range(10))),
             lambda: kv.fork("A", "B"),
             lambda: kv.allocate_slots("C", list(range(20, 27))),
             lambda: kv.swap_out(["C"]),
             lambda: kv.free("B"),
             lambda: kv.free("A")]
    for step in [lambda: None, *steps]:
        step()
        text = repr(kv)
        s = kv.stats()
        assert text.startswith("KVCacheManager(")
        assert _counts(text) == (12, 4, s.used_blocks, s.free_blocks, s.cached_blocks,
                                 s.swapped_blocks)
        assert s.used_blocks + s.free_blocks + s.cached_blocks == 12
        sequences = len(kv.tables()) + len(kv.swapped_tables())
        word = "sequence" if sequences == 1 else "sequences"
        assert text.endswith(f"; {sequences} {word})")


def test_an_llm_shows_its_engine():
    llm = LLM("tiny", num_blocks=32)
    assert repr(llm) == "LLM" + repr(llm.llm_engine).removeprefix("LLMEngine")
    assert repr(llm).startswith("LLM(model='tiny', 32 blocks x 16 tokens")
