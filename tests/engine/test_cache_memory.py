"""A KV cache (or swap space) larger than the memory it would live in is
refused before anything is allocated, naming the bytes it needs, the memory
there is and what fits — not torch's allocation error, which names no
argument (or, on Linux, a lazily zeroed allocation that succeeds and fails
later). A refused engine leaves the model as it was given."""

import re

import pytest
import torch

from pagedkit import LLM, SamplingParams
from pagedkit.engine import llm_engine
from pagedkit.model.kv_cache import KVCacheSpec

BLOCK = 4
GREEDY = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True)


def bytes_per_block(model):
    return KVCacheSpec.from_config(model.config, torch.float32).bytes_per_block(BLOCK)


@pytest.mark.parametrize("kwargs", [
    {"num_blocks": 10**12}, {"num_blocks": 10**10}, {"kv_cache_memory": 2**60},
    {"kv_cache_memory": 2**50}, {"num_blocks": 8, "preemption_mode": "swap", "swap_space": 1e6},
    {"num_blocks": 8, "preemption_mode": "swap", "swap_space": 1e5},
], ids=str)
def test_a_cache_larger_than_the_machine_is_refused_before_allocating(reference, kwargs,
                                                                     monkeypatch):
    build, prompts, _ = reference("llama")
    model = build()
    # the machine's figure, read once: it moves between two readings as others allocate
    memory, what = llm_engine.memory_available(torch.device("cpu"))
    monkeypatch.setattr(llm_engine, "memory_available", lambda device: (memory, what))
    with pytest.raises(ValueError) as refused:
        LLM(model, block_size=BLOCK, **kwargs)
    message = str(refused.value)
    assert what in message and "Nothing was allocated" in message
    asked = kwargs.get("swap_space", kwargs.get("num_blocks", kwargs.get("kv_cache_memory")))
    assert str(asked) in message
    fit = int(re.search(r"(?:num_blocks=|\()(\d+)(?: or fewer| blocks\))", message)[1])
    assert 0 < fit <= memory // bytes_per_block(model)
    # the model is as it was: an engine built from it now serves what a fresh one does
    ok = LLM(model, block_size=BLOCK, num_blocks=32)
    fresh = LLM(build(), block_size=BLOCK, num_blocks=32)
    got = ok.generate(prompts[:2], GREEDY, use_tqdm=False)
    want = fresh.generate(prompts[:2], GREEDY, use_tqdm=False)
    assert [o.outputs[0].token_ids for o in got] == [o.outputs[0].token_ids for o in want]


@pytest.fixture
def memory_of_100_blocks(reference, monkeypatch):
    """A machine with room for exactly 100 blocks of the reference model."""
    build, _, _ = reference("llama")
    per_block = bytes_per_block(build())
    monkeypatch.setattr(llm_engine, "memory_available",
                        lambda device: (100 * per_block, "available on this machine"))
    return build, per_block


def test_the_limit_is_the_memory_to_the_block(memory_of_100_blocks):
    build, per_block = memory_of_100_blocks
    for num_blocks in range(95, 106):
        if num_blocks <= 100:
            LLM(build(), block_size=BLOCK, num_blocks=num_blocks)
            continue
        with pytest.raises(ValueError, match=rf"num_blocks={num_blocks}: a KV cache of "
                           rf"{num_blocks} blocks x {BLOCK} tokens \({per_block} bytes a block\) "
                           rf"needs {num_blocks * per_block} bytes .* but {100 * per_block} "
                           r"bytes \(.* GiB\) are available on this machine; give "
                           r"num_blocks=100 or fewer"):
            LLM(build(), block_size=BLOCK, num_blocks=num_blocks)
    for memory in range(98 * per_block, 103 * per_block, per_block // 2):
        if memory < 101 * per_block:
            assert LLM(build(), block_size=BLOCK, kv_cache_memory=memory)
            continue
        with pytest.raises(ValueError, match=rf"kv_cache_memory={memory}: .* give num_blocks=100 "
                           rf"or fewer \(or kv_cache_memory={100 * per_block} or less\)"):
            LLM(build(), block_size=BLOCK, kv_cache_memory=memory)


def test_swap_space_shares_the_machines_memory_with_a_cpu_cache(memory_of_100_blocks):
    build, per_block = memory_of_100_blocks
    gib = 2**30
    for swap_blocks in range(55, 66):
        swap_space = swap_blocks * per_block / gib
        if 40 + swap_blocks <= 100:
            LLM(build(), block_size=BLOCK, num_blocks=40, preemption_mode="swap",
                swap_space=swap_space)
            continue
        with pytest.raises(ValueError) as refused:
            LLM(build(), block_size=BLOCK, num_blocks=40, preemption_mode="swap",
                swap_space=swap_space)
        message = str(refused.value)
        assert f"swap_space={swap_space} (GiB) needs {swap_blocks} CPU blocks" in message
        assert f"besides the KV cache's {40 * per_block} bytes" in message
        advice, blocks = re.search(r"give swap_space=([0-9.e-]+) or less \((\d+) blocks\)",
                                   message).groups()
        # rounded down (fifth newcomer's N3): 99% of the 60 blocks that fit, none more
        assert 60 * 0.99 <= int(blocks) <= 60
        assert int(float(advice) * gib) // per_block == int(blocks)
        LLM(build(), block_size=BLOCK, num_blocks=40, preemption_mode="swap",
            swap_space=float(advice))
    # unset, the swap space is as large as the cache: 60 + 60 blocks do not fit
    with pytest.raises(ValueError, match=r"swap_space unset \(as many blocks as the cache\) needs "
                       r"60 CPU blocks .* give swap_space=.* or less \((39|40) blocks\)"):
        LLM(build(), block_size=BLOCK, num_blocks=60, preemption_mode="swap")
