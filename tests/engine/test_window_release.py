"""Blocks a sliding window has left go back to the pool while a request runs.

A model whose every attention layer slides (Mistral with ``sliding_window``)
needs only the last `WINDOW` keys of each sequence, so the engine releases
older blocks after every step (`KVCacheManager.release_outside_window`,
called from `Scheduler.update`). Outputs must still equal transformers'
`generate` token for token, under swap and recompute preemption and with
prefix caching + chunked prefill, and memory must stay flat over a long
generation, while the same model without a window grows with it. Models with
any full-attention layer keep every block.
"""

import re

import pytest
import torch
from transformers import Gemma2Config, Gemma2ForCausalLM, MistralConfig, MistralForCausalLM

from pagedkit import LLM, SamplingParams
from pagedkit.memory import KVCacheManager
from pagedkit.memory.block_table import NULL_BLOCK

from .conftest import hf_greedy, prompts

VOCAB = 96
WINDOW = 6  # with blocks of 4: not a multiple of the block size, shorter than most prompts
BLOCK = 4
LONG = 200  # generated tokens of the flat-memory test


def mistral(window=WINDOW):
    torch.manual_seed(0)
    config = MistralConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=128,
                           num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                           max_position_embeddings=512, sliding_window=window)
    return MistralForCausalLM(config).eval()


def gemma2(layer_types):
    torch.manual_seed(0)
    config = Gemma2Config(vocab_size=VOCAB, hidden_size=64, intermediate_size=128,
                          num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                          head_dim=16, max_position_embeddings=512, sliding_window=WINDOW,
                          layer_types=layer_types)
    return Gemma2ForCausalLM(config).eval()


def greedy(n):
    return SamplingParams(temperature=0, max_tokens=n, ignore_eos=True)


def counting_releases(llm):
    """Count the blocks the engine releases (wraps the manager's one method)."""
    kv = llm.llm_engine.kv
    release, released = kv.release_outside_window, []

    def spy(*args):
        out = release(*args)
        released.extend(out)
        return out

    kv.release_outside_window = spy
    return released


@pytest.fixture(scope="module")
def expected():
    prompt_list = prompts(lengths=(1, 5, 16, 17, 31, 40))
    return prompt_list, hf_greedy(mistral(), prompt_list, 24)


def run(prompt_list, n=24, **engine_args):
    llm = LLM(mistral(), block_size=BLOCK, **engine_args)
    assert llm.llm_engine.release_window == WINDOW
    released = counting_releases(llm)
    preempted = []
    outs = llm.generate(prompt_list, greedy(n), use_tqdm=False,
                        on_step=lambda step: preempted.extend(m for _, m in step.preempted))
    return llm, [o.outputs[0].token_ids for o in outs], released, preempted


def test_release_matches_transformers(expected):
    prompt_list, want = expected
    llm, got, released, _ = run(prompt_list, num_blocks=64)
    assert got == want
    assert released
    assert llm.llm_engine.memory_stats()["used_blocks"] == 0


@pytest.fixture(scope="module")
def crowded():
    """Eight short prompts: each decoding sequence holds 2-3 blocks, so 12
    blocks of 4 cannot hold them all and requests must take turns."""
    prompt_list = prompts(lengths=(3, 7, 11, 13, 9, 6, 12, 10))
    return prompt_list, hf_greedy(mistral(), prompt_list, 24)


@pytest.mark.parametrize("mode", ["swap", "recompute"])
def test_release_under_preemption(crowded, mode):
    prompt_list, want = crowded
    llm, got, released, preempted = run(prompt_list, num_blocks=12, preemption_mode=mode)
    assert got == want
    assert mode in preempted and released
    stats = llm.llm_engine.memory_stats()
    assert stats["used_blocks"] == 0 and stats["swapped_blocks"] == 0


def test_release_with_prefix_caching_and_chunked_prefill(expected):
    prompt_list, want = expected
    shared = [p[:8] + q for p, q in zip(prompt_list, prompt_list[::-1], strict=True)]
    want_shared = hf_greedy(mistral(), shared, 24)
    llm = LLM(mistral(), block_size=BLOCK, num_blocks=200, enable_prefix_caching=True,
              enable_chunked_prefill=True, max_num_batched_tokens=10)
    released = counting_releases(llm)
    hits = []
    llm.llm_engine.events.subscribe(lambda e: hits.append(e) if e.kind == "cache_hit" else None)
    for batch, want_batch in ((prompt_list, want), (shared, want_shared), (prompt_list, want)):
        outs = llm.generate(batch, greedy(24), use_tqdm=False)
        assert [o.outputs[0].token_ids for o in outs] == want_batch
    assert released and hits


@pytest.mark.parametrize("params", [
    SamplingParams(n=3, temperature=1.0, seed=7, max_tokens=20, ignore_eos=True),
    SamplingParams(n=2, use_beam_search=True, beam_width=3, temperature=0, max_tokens=20,
                   ignore_eos=True),
], ids=["parallel-sampling", "beam-search"])
@pytest.mark.parametrize("mode", ["swap", "recompute"])
def test_forks_share_placeholders(expected, params, mode):
    """Samples and beams fork tables holding placeholders: the same tokens as
    with every block kept (itself checked against transformers elsewhere)."""
    prompt_list, _ = expected

    def outputs(release):
        # kept: room for everything; released: 24 blocks, where every block
        # kept would not fit (a request would be cut short)
        llm = LLM(mistral(), block_size=BLOCK, num_blocks=24 if release else 200,
                  preemption_mode=mode)
        if not release:
            llm.llm_engine.scheduler.release_window = None
        released = counting_releases(llm)
        outs = llm.generate(prompt_list, params, use_tqdm=False)
        assert llm.llm_engine.memory_stats()["used_blocks"] == 0
        return [[c.token_ids for c in o.outputs] for o in outs], released

    kept, none = outputs(False)
    freed, released = outputs(True)
    assert not none and released
    assert all(len(c) == params.max_tokens for o in kept for c in o)
    assert freed == kept


def peak_blocks(window, num_prompts=1):
    llm = LLM(mistral(window), block_size=BLOCK, num_blocks=400)
    outs = llm.generate(prompts(seed=3, lengths=(8,) * num_prompts), greedy(LONG),
                        use_tqdm=False)
    assert all(len(o.outputs[0].token_ids) == LONG for o in outs)
    return llm.llm_engine.memory_stats()["peak_used_blocks"]


@pytest.mark.parametrize("num_prompts", [1, 4])
def test_memory_stays_flat(num_prompts):
    """Peak blocks over 200 generated tokens: the window's few blocks per
    sequence with release, the whole sequence without a window."""
    flat, grown = peak_blocks(WINDOW, num_prompts), peak_blocks(None, num_prompts)
    print(f"\npeak used blocks, {num_prompts} x (8 + {LONG}) tokens, blocks of {BLOCK}: "
          f"window {WINDOW} with release {flat}, no window {grown}")
    per_seq = -(-WINDOW // BLOCK) + 1  # the window's blocks, a partial block at each end
    assert flat <= num_prompts * per_seq
    assert grown == num_prompts * -(-(8 + LONG - 1) // BLOCK)


@pytest.mark.parametrize(("layer_types", "window"), [
    (["sliding_attention", "full_attention"], None),  # mixed (Gemma 2/3): keep everything
    (["sliding_attention", "sliding_attention"], WINDOW),
])
def test_release_only_when_every_layer_slides(layer_types, window):
    llm = LLM(gemma2(layer_types), block_size=BLOCK, num_blocks=64)
    assert llm.llm_engine.release_window == window
    assert LLM(mistral(None), block_size=BLOCK, num_blocks=64).llm_engine.release_window is None


@pytest.mark.parametrize("block_size", [1, 3, 4, 5])
@pytest.mark.parametrize("window", [1, 2, 4, 6, 9])
def test_release_bound_is_exact(block_size, window):
    """Block b goes exactly when (b + 1) * block_size <= computed - window + 1:
    the first query still to come (at `computed`) sees keys from
    computed - window + 1 on, and that key's block stays."""
    for computed in range(0, 30):
        kv = KVCacheManager(num_blocks=40, block_size=block_size)
        kv.allocate_slots("s", list(range(30)))
        kv.release_outside_window("s", computed, window)
        first_needed = max(0, computed - window + 1)
        table = kv.table("s")
        for b, block in enumerate(table.blocks):
            assert (block == NULL_BLOCK) == ((b + 1) * block_size <= first_needed)
        assert kv.allocator.num_free_blocks == 40 - len(table.live_blocks)
        kv.free("s")
        assert kv.allocator.num_free_blocks == 40


def test_release_refuses_bad_input():
    kv = KVCacheManager(num_blocks=8, block_size=4)
    kv.allocate_slots("s", [1, 2, 3, 4, 5])
    for computed, window, error, named in (  # check_int's rule, as every count (newcomer22 N2)
            (6, 2, ValueError, "must be <= 5, got 6"), (-1, 2, ValueError, ">= 0, got -1"),
            (3, 0, ValueError, "sliding window must be >= 1, got 0"),
            (3, True, TypeError, "got True (bool)"), (True, 2, TypeError, "got True (bool)"),
            (3, 2.0, TypeError, "got 2.0 (float)"), (1.5, 2, TypeError, "got 1.5 (float)")):
        with pytest.raises(error, match=re.escape(named)):
            kv.release_outside_window("s", computed, window)
    assert kv.block_ids("s") == [0, 1]
    with pytest.raises(KeyError, match=r"swapped out|no GPU block table"):
        kv.release_outside_window("t", 1, 1)
    kv.release_outside_window("s", 5, 1)
    with pytest.raises(IndexError, match="released"):
        kv.table("s").slot(0)
    assert kv.block_ids("s") == [NULL_BLOCK, 1]
