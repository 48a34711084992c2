"""A rotary embedding that changes per forward caps a model's positions
(`pagedkit.model.support.position_limit`).

transformers' longrope picks its short or long factor per forward by the
longest position in it; pagedkit packs every sequence of a step into one
forward. Past ``original_max_position_embeddings`` one long sequence would
switch the factor for the short ones beside it (a Phi-3 LongRoPE request's
tokens depended on the batch, from its first token), so the limit is
``original_max_position_embeddings``: every request, in any batch, gives
transformers' greedy tokens for it alone, and a longer max_model_len is
refused. Dynamic NTK scaling changes only past ``max_position_embeddings``,
the limit already.
"""

from __future__ import annotations

import warnings

import pytest
import torch
import transformers

from pagedkit import LLM, SamplingParams, TokensPrompt
from pagedkit.model import support

POSITIONS = 64  # max_position_embeddings
ORIGINAL_MAX = (8, 12, 16)  # original_max_position_embeddings: the factor switches past it
SETTINGS = {"whole prefill": {}, "chunked prefill": dict(enable_chunked_prefill=True,
                                                         max_num_batched_tokens=5)}


def _model(config):
    """Random weights of std 0.2 (as tiny_configs.py): at the default 0.02 the tiny model's
    greedy tokens settle on one token whichever factor rotates them, and hide the switch."""
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()


def longrope_phi3(original_max: int):
    """A tiny random Phi-3 with LongRoPE, as Phi-3-mini-128k's config (factors 1 and 4)."""
    return _model(transformers.Phi3Config(
        vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=POSITIONS,
        original_max_position_embeddings=original_max, pad_token_id=0, bos_token_id=None,
        eos_token_id=None, initializer_range=0.2, rope_parameters={
            "rope_type": "longrope", "rope_theta": 10000.0, "short_factor": [1.0] * 8,
            "long_factor": [4.0] * 8, "original_max_position_embeddings": original_max}))


def dynamic_llama():
    return _model(transformers.LlamaConfig(
        vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=16,
        pad_token_id=0, bos_token_id=None, eos_token_id=None, initializer_range=0.2,
        rope_parameters={"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0}))


def alone(model, prompt: list[int], n: int) -> list[int]:
    """transformers' greedy tokens for `prompt`, the only sequence in its batch."""
    with torch.inference_mode():
        out = model.generate(torch.tensor([prompt]), max_new_tokens=n, min_new_tokens=n,
                             do_sample=False, eos_token_id=None, pad_token_id=0)
    return out[0, len(prompt):].tolist()


def batch(limit: int) -> list[list[int]]:
    """Short and long prompts together: 1 token, a third, and all but one of the limit."""
    g = torch.Generator().manual_seed(limit)
    return [torch.randint(3, 128, (n,), generator=g).tolist() for n in (1, limit // 3, limit - 2)]


def check_every_request_alone(model, limit: int, settings: dict) -> None:
    llm = LLM(model, block_size=4, device="cpu", num_blocks=64, **settings)
    assert llm.llm_engine.max_model_len == limit
    prompts = batch(limit)
    # max_tokens runs every request to the limit (and, before the cap, past it)
    outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts],
                        SamplingParams(temperature=0, max_tokens=limit, ignore_eos=True),
                        use_tqdm=False)
    for p, out in zip(prompts, outs, strict=True):
        got = list(out.outputs[0].token_ids)
        assert len(got) == limit - len(p), f"{len(p)}-token prompt: {len(got)} tokens"
        assert got == alone(model, p, len(got)), f"{len(p)}-token prompt in a batch"


@pytest.mark.parametrize("setting", SETTINGS)
@pytest.mark.parametrize("original_max", ORIGINAL_MAX)
def test_longrope_requests_in_a_batch_are_transformers_alone(original_max, setting):
    check_every_request_alone(longrope_phi3(original_max), original_max, SETTINGS[setting])


@pytest.mark.parametrize("original_max", ORIGINAL_MAX)
def test_a_longer_max_model_len_is_refused_naming_why(original_max):
    model = longrope_phi3(original_max)
    for asked in (original_max + 1, POSITIONS):
        with pytest.raises(ValueError) as err:
            LLM(model, block_size=4, device="cpu", num_blocks=64, max_model_len=asked)
        text = str(err.value)
        for part in (f"max_model_len={asked} ", f"limit of {original_max} positions",
                     "original_max_position_embeddings", "longrope", "per forward",
                     "packs every sequence", f"give max_model_len={original_max} or less",
                     "one sequence at a time"):
            assert part in text, f"{part!r} not in {text!r}"
    assert LLM(model, block_size=4, device="cpu", num_blocks=64,
               max_model_len=original_max).llm_engine.max_model_len == original_max


def test_the_limit_is_the_rule_in_support():
    """One rule: longrope below max_position_embeddings caps; otherwise the config's limit."""
    assert support.position_limit(longrope_phi3(12).config) == (12, support.LONGROPE_LIMIT)
    wide = transformers.Phi3Config(max_position_embeddings=16, rope_parameters={
        "rope_type": "longrope", "rope_theta": 1e4, "short_factor": [1.0] * 48,
        "long_factor": [4.0] * 48, "original_max_position_embeddings": 16})
    assert support.position_limit(wide)[0] == 16
    assert support.position_limit(dynamic_llama().config) == (
        16, "max_position_embeddings in its config")


@pytest.mark.parametrize("setting", SETTINGS)
def test_dynamic_ntk_is_exact_up_to_its_limit(setting):
    """Dynamic NTK rebuilds its frequencies only past max_position_embeddings."""
    check_every_request_alone(dynamic_llama(), 16, SETTINGS[setting])


@pytest.mark.parametrize("original_max", ORIGINAL_MAX)
def test_the_longrope_limit_is_said_where_it_shows(original_max):
    """Left unset, the limit is original_max_position_embeddings, below the
    config's positions: the repr says so, and a prompt past it is refused with
    the reason and what to do (generate), as a larger max_model_len is."""
    llm = LLM(longrope_phi3(original_max), block_size=4, num_blocks=64)
    engine = llm.llm_engine
    assert (f"max_model_len={original_max} (the longrope limit: "
            "original_max_position_embeddings)") in repr(engine)
    for n in (original_max, original_max + 1, POSITIONS - 1):
        with pytest.raises(ValueError) as error:
            llm.generate(TokensPrompt(prompt_token_ids=[5] * n), SamplingParams(max_tokens=1),
                         use_tqdm=False)
        message = str(error.value)
        assert f"max_model_len is {original_max} ({support.LONGROPE_LIMIT}); " in message
        assert message.endswith("or serve it with transformers' generate, one sequence at a time")
        assert not engine.has_unfinished_requests()


@pytest.mark.parametrize("asked", [None, 12])
def test_a_plain_limit_reads_as_before(asked):
    """A limit the user asked for, or the config's own positions, is not a longrope one."""
    llm = LLM(dynamic_llama(), block_size=4, num_blocks=64, max_model_len=asked)
    limit = asked or 16
    assert f"max_model_len={limit}, " in repr(llm.llm_engine)
    with pytest.raises(ValueError, match=rf"max_model_len is {limit}; shorten the prompt to "
                       rf"{limit - 1} tokens or fewer, or "
                       + ("give a larger max_model_len" if asked else "use a model with a")):
        llm.generate(TokensPrompt(prompt_token_ids=[5] * limit), SamplingParams(max_tokens=1),
                     use_tqdm=False)
