"""Greedy outputs must equal transformers' own `generate`, token for token,
whatever the paging does underneath: block sizes, prefix caching, chunked
prefill, and preemption by recomputation or swapping."""

import pytest

from pagedkit import LLM, SamplingParams, ops

GREEDY = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)


def run(model, prompt_list, **engine_args):
    llm = LLM(model, **engine_args)
    outs = llm.generate(prompt_list, GREEDY, use_tqdm=False)
    return llm, [o.outputs[0].token_ids for o in outs]


@pytest.mark.parametrize("backend", ["auto", "torch"])  # auto: batched on CPU; the reference
@pytest.mark.parametrize("arch", ["llama", "qwen2", "gpt2"])
@pytest.mark.parametrize("block_size", [1, 8, 16, 32])
def test_matches_transformers(reference, arch, block_size, backend):
    build, prompt_list, expected = reference(arch)
    with ops.use_backend(backend):
        llm, got = run(build(), prompt_list, block_size=block_size,
                       num_blocks=256 // block_size + 8)
    assert got == expected
    assert llm.llm_engine.memory_stats()["used_blocks"] == 0


@pytest.mark.parametrize("prefix_caching", [True, False])
def test_prefix_caching_keeps_outputs(reference, make_prompts, transformers_greedy,
                                      prefix_caching):
    build, _, _ = reference("llama")
    shared = make_prompts(seed=7, lengths=(24,))[0]
    tails = make_prompts(seed=8, lengths=(3, 9, 1))
    prompt_list = [shared + t for t in tails]
    model = build()
    expected = transformers_greedy(model, prompt_list, 12)
    llm = LLM(model, block_size=4, num_blocks=80, enable_prefix_caching=prefix_caching)
    first = llm.generate(prompt_list, GREEDY, use_tqdm=False)
    second = llm.generate(prompt_list, GREEDY, use_tqdm=False)
    for outs in (first, second):
        assert [o.outputs[0].token_ids for o in outs] == expected
    cached = [o.num_cached_tokens for o in second]
    if prefix_caching:
        assert all(c >= 24 for c in cached)  # the shared prefix, at least
    else:
        assert cached == [0, 0, 0]


@pytest.mark.parametrize("budget", [1, 7, 16])
def test_chunked_prefill(reference, budget):
    build, prompt_list, expected = reference("llama")
    _llm, got = run(build(), prompt_list, block_size=8, num_blocks=64,
                   enable_chunked_prefill=True, max_num_batched_tokens=budget)
    assert got == expected


@pytest.mark.parametrize("mode", ["recompute", "swap"])
@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_preemption(reference, mode, arch):
    build, prompt_list, expected = reference(arch)
    # 14 blocks of 4 = 56 slots: the longest prompt alone needs 52 by its end,
    # so requests must take turns.
    llm, got = run(build(), prompt_list, block_size=4, num_blocks=14, preemption_mode=mode)
    assert got == expected
    stats = llm.llm_engine.memory_stats()
    assert stats["num_preemptions"] > 0
    assert stats["used_blocks"] == 0 and stats["swapped_blocks"] == 0


def test_swap_mode_really_swaps(reference):
    build, prompt_list, _ = reference("llama")
    llm = LLM(build(), block_size=4, num_blocks=14, preemption_mode="swap")
    modes = []
    llm.generate(prompt_list, GREEDY, use_tqdm=False,
                 on_step=lambda step: modes.extend(m for _, m in step.preempted))
    assert "swap" in modes


def test_chunked_prefill_with_preemption_and_prefix_cache(reference):
    build, prompt_list, expected = reference("qwen2")
    _llm, got = run(build(), prompt_list, block_size=4, num_blocks=16,
                   enable_chunked_prefill=True, max_num_batched_tokens=10,
                   enable_prefix_caching=True)
    assert got == expected
