"""Issue #26's findings that needed engine code (a vLLM user feels at home,
a newcomer's first hour has no rough edge), each pinned."""

import re

import pytest

from pagedkit import LLM

TINY_MAX_MODEL_LEN = 2048  # the embedded model's max_position_embeddings

#: a block longer than any sequence that does not fit: (engine arguments, the
#: max_model_len the error names, what its memory part says)
TOO_LONG_BLOCKS = [
    (dict(block_size=100000), TINY_MAX_MODEL_LEN, r"one such block \(409600000 bytes\) is more "
                                                  "than the default KV cache budget"),
    (dict(block_size=100000, max_model_len=8), 8, "one such block"),
    (dict(block_size=70000, kv_cache_memory=2**20), TINY_MAX_MODEL_LEN,
     "more than kv_cache_memory=1048576 bytes"),
    (dict(block_size=100000, num_blocks=10**4), TINY_MAX_MODEL_LEN,
     r"10000 such blocks need 4096000000000 bytes \(3814.70 GiB\), but .* bytes .* are"),
    (dict(block_size=2049, num_blocks=10**6), TINY_MAX_MODEL_LEN, "1000000 such blocks need"),
    (dict(block_size=64, max_model_len=32, num_blocks=10**8), 32, "100000000 such blocks"),
]


@pytest.mark.parametrize("kwargs, limit, cost", TOO_LONG_BLOCKS,
                         ids=[str(k) for k, _, _ in TOO_LONG_BLOCKS])
def test_a_block_longer_than_any_sequence_is_named_not_the_memory(kwargs, limit, cost):
    """N1: block_size=100000 was refused for memory, with advice to give
    num_blocks=58 (a 21 GiB cache) or block_size=65536: the real cause is a
    block longer than any sequence. The error names block_size, its value,
    the max_model_len and what to give; the advice is accepted."""
    with pytest.raises(ValueError) as e:
        LLM("tiny", **kwargs)
    text = str(e.value)
    assert text.startswith(f"block_size={kwargs['block_size']} is longer than any sequence: "
                           f"max_model_len is {limit}, so no sequence fills more than {limit} "
                           f"of a block's {kwargs['block_size']} slots, and ")
    assert re.search(cost, text), text
    assert "num_blocks=" not in text.split("; give ")[-1]  # fewer blocks would not help
    advice = int(re.search(r"give block_size=(\d+)", text).group(1))
    assert advice == min(16, limit)
    LLM("tiny", **{**kwargs, "block_size": advice, "num_blocks": 4, "kv_cache_memory": None})


@pytest.mark.parametrize("kwargs, message", [
    (dict(block_size=2048, num_blocks=10**6), "give num_blocks="),  # as long as a sequence
    (dict(block_size=16, num_blocks=10**9), "give num_blocks="),
    (dict(block_size=2048, kv_cache_memory=2**20), "give block_size=256 or less"),
])
def test_a_block_no_longer_than_a_sequence_keeps_the_memory_advice(kwargs, message):
    with pytest.raises(ValueError, match=message) as e:
        LLM("tiny", **kwargs)
    assert "longer than any sequence" not in str(e.value)


@pytest.mark.parametrize("block_size", [2049, 3000])
def test_a_long_block_that_fits_is_served(block_size):
    """Exact, only wasteful: the engine serves it (as vLLM does)."""
    llm = LLM("tiny", block_size=block_size)
    assert llm.llm_engine.kv.block_size == block_size
