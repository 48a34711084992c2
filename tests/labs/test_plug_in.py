"""`ops.use_decode_attention`: a learner's per-sequence decode attention (lab
04's exercise signature) serves the real engine, which then still matches
transformers' `generate` — and a wrong one visibly does not."""

import pytest
import torch

from pagedkit import LLM, SamplingParams, ops
from pagedkit.kernels import reference
from pagedkit.models import load_tiny

PROMPTS = ["Once upon a time", "There once was a shy mouse named Sam."]


def per_sequence(query, k_cache, v_cache, block_table, context_len):
    """A learner-shaped function built from the per-sequence torch reference."""
    calls.append(context_len)
    return reference.paged_decode_attention(query[None], k_cache, v_cache, block_table[None],
                                            torch.tensor([context_len], dtype=torch.int32))[0]


calls: list[int] = []


def generate(llm, max_tokens=12):
    outs = llm.generate(PROMPTS, SamplingParams(temperature=0, max_tokens=max_tokens),
                        use_tqdm=False)
    return [o.outputs[0].token_ids for o in outs]


@pytest.fixture(scope="module")
def llm():
    return LLM("tiny", num_blocks=64, block_size=4)


@pytest.fixture(scope="module")
def expected():
    model, tokenizer = load_tiny()
    result = []
    with torch.inference_mode():
        for prompt in PROMPTS:
            ids = tokenizer(prompt, return_tensors="pt")
            out = model.generate(**ids, max_new_tokens=12, do_sample=False)
            result.append(out[0, ids["input_ids"].shape[1]:].tolist())
    return result


def test_plugged_in_function_serves_every_decode_and_matches_transformers(llm, expected):
    calls.clear()
    original = ops.paged_decode_attention
    with ops.use_decode_attention(per_sequence):
        got = generate(llm)
    assert got == expected
    layers = llm.llm_engine.runner.model.config.num_hidden_layers
    assert len(calls) == layers * len(PROMPTS) * 11  # 11 decode steps per prompt, every layer
    assert ops.paged_decode_attention is original


def test_a_wrong_function_changes_the_tokens(llm, expected):
    def unscaled(query, k_cache, v_cache, block_table, context_len):
        k = reference.gather_kv(k_cache, block_table, context_len)
        v = reference.gather_kv(v_cache, block_table, context_len)
        group = query.shape[0] // k.shape[1]
        k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
        scores = torch.einsum("hd,thd->ht", query, k)          # forgot 1/sqrt(head_dim)
        return torch.einsum("ht,thd->hd", scores.softmax(-1), v)

    with ops.use_decode_attention(unscaled):
        assert generate(llm) != expected


def test_restored_after_an_error_and_bad_results_are_named(llm):
    original = ops.paged_decode_attention

    def wrong_shape(query, *args):
        return query[:1]

    with pytest.raises(ValueError, match=r"expected a tensor of shape \(4, 64\)"), \
            ops.use_decode_attention(wrong_shape):
        generate(llm, max_tokens=3)
    assert ops.paged_decode_attention is original
    with pytest.raises(TypeError, match="needs a function"), ops.use_decode_attention(3):
        pass


def test_options_it_cannot_express_are_refused():
    q = torch.zeros(1, 4, 64)
    cache = torch.zeros(2, 4, 2, 64)
    tables = torch.zeros(1, 1, dtype=torch.int32)
    lens = torch.ones(1, dtype=torch.int32)
    with ops.use_decode_attention(per_sequence):
        with pytest.raises(NotImplementedError, match="sliding_window"):
            ops.paged_decode_attention(q, cache, cache, tables, lens, sliding_window=8)
        with pytest.raises(NotImplementedError, match=r"scales scores by 0\.5"):
            ops.paged_decode_attention(q, cache, cache, tables, lens, 0.5)
