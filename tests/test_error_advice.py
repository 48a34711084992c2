"""Second newcomer, finding 6: an audit of the errors a user can cause at the
front door (LLM, LLMEngine, SamplingParams, generate, chat, the command line).
Each message names the value and says what to do instead; these are the ones
that named the value only."""

from __future__ import annotations

import math
import re

import pytest
import torch

from pagedkit import LLM, SamplingParams
from pagedkit.model import loader


@pytest.fixture(scope="module")
def llm():
    return LLM("tiny", block_size=4, num_blocks=32, max_num_seqs=4)


def _engine_cases(llm):
    engine = llm.llm_engine
    vocab = engine.runner.vocab_size
    engine.add_request("taken", [1, 2], SamplingParams(max_tokens=1))
    return [
        ("empty prompt", lambda: engine.add_request("x", [], SamplingParams()),
         "give at least one token"),
        ("stop token outside the vocabulary",
         lambda: engine.add_request("x", [1], SamplingParams(stop_token_ids=[vocab + 3])),
         f"give stop_token_ids below {vocab}"),
        ("prompt token outside the vocabulary",
         lambda: engine.add_request("x", [1, vocab], SamplingParams()),
         f"give ids below {vocab}, from this model's tokenizer"),
        ("more samples than max_num_seqs",
         lambda: engine.add_request("x", [1], SamplingParams(n=6)),
         "lower n to 4 or less, or build the engine with max_num_seqs=6 or more"),
        ("more beams than max_num_seqs",
         lambda: engine.add_request("x", [1], SamplingParams(use_beam_search=True, n=1,
                                                              beam_width=5, temperature=0)),
         "lower beam_width to 4 or less, or build the engine with max_num_seqs=5 or more"),
        ("request id taken", lambda: engine.add_request("taken", [1], SamplingParams()),
         "give another id, or abort_request(['taken']) and step() first"),
        ("ids repeat", lambda: engine.add_requests([("a", [1], None), ("a", [2], None)]),
         "give each request an id of its own"),
        ("chat content parts", lambda: llm.chat([{"role": "user", "content": [
            {"type": "image_url", "image_url": "x"}]}]),
         "give the content as a string or as text parts"),
    ]


CASE_NAMES = ["empty prompt", "stop token outside the vocabulary",
              "prompt token outside the vocabulary", "more samples than max_num_seqs",
              "more beams than max_num_seqs", "request id taken", "ids repeat",
              "chat content parts"]


@pytest.mark.parametrize("case", CASE_NAMES)
def test_engine_errors_say_what_to_do(llm, case):
    _name, call, advice = next(c for c in _engine_cases(llm) if c[0] == case)
    try:
        with pytest.raises(ValueError) as refused:
            call()
        assert advice in str(refused.value), str(refused.value)
    finally:
        llm.llm_engine.abort_request("taken", report=False)


def test_chat_without_a_tokenizer_says_what_to_do():
    llm = LLM("tiny", num_blocks=8, skip_tokenizer_init=True)
    with pytest.raises(ValueError, match=re.escape(
            "build the LLM with one (LLM(model, tokenizer=...)), or call generate with "
            "token ids")):
        llm.chat([{"role": "user", "content": "hi"}])


@pytest.mark.parametrize("kwargs, advice", [
    ({"kv_cache_memory": 100}, "give kv_cache_memory={per_block} or more (one block)"),
    ({"num_blocks": 8, "preemption_mode": "swap", "swap_space": 1e-9},
     "give swap_space={per_block_gib:.3g} (GiB) or more"),
])
def test_a_memory_budget_below_one_block_says_how_much(kwargs, advice):
    from pagedkit.model.kv_cache import KVCacheSpec
    from pagedkit.models import load_tiny

    model, _ = load_tiny()
    per_block = KVCacheSpec.from_config(model.config, torch.float32).bytes_per_block(16)
    with pytest.raises(ValueError) as refused:
        LLM("tiny", **kwargs)
    # the GiB rounded up to 3 significant digits (fifth newcomer's N3): still one block
    gib = math.ceil(per_block / 2**30 * 1e7) / 1e7
    assert int(gib * 2**30) // per_block == 1
    assert advice.format(per_block=per_block, per_block_gib=gib) in str(refused.value)


def test_cuda_asked_for_without_cuda_says_what_to_use(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match=re.escape("use device='cpu', or 'auto'")):
        loader.resolve_device("cuda")
