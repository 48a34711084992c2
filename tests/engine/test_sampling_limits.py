"""Sampling options at the edge of float32 (fifth newcomer, N17): a tiny
temperature, top_p or repetition_penalty made torch's multinomial fail with
"probability tensor contains either inf, nan or element < 0". A temperature
below 0.01 is raised to 0.01 with a warning (vLLM 0.32's rule); a top_p
however small keeps the most likely token (vLLM's too); a repetition_penalty
whose scaling could overflow float32 is refused, naming the range."""

import re
import warnings

import pytest
import torch

from pagedkit import LLM, SamplingParams
from pagedkit.model.sampler import filter_logits, sample
from pagedkit.sampling_params import MIN_PENALTY, MIN_TEMPERATURE

PROMPT = "Once upon a time"


@pytest.fixture(scope="module")
def llm():
    return LLM("tiny", num_blocks=32)


@pytest.mark.parametrize("temperature", [1e-300, 1e-45, 1e-38, 1e-10, 0.005, 0.0099])
def test_a_temperature_below_the_floor_is_raised_to_it_with_a_warning(llm, temperature):
    said = rf"temperature={re.escape(repr(temperature))} is below 0\.01.*raised"
    with pytest.warns(UserWarning, match=said):
        params = SamplingParams(temperature=temperature, max_tokens=6, seed=3)
    assert params.temperature == MIN_TEMPERATURE
    at_floor = SamplingParams(temperature=MIN_TEMPERATURE, max_tokens=6, seed=3)
    got = llm.generate(PROMPT, params, use_tqdm=False)[0].outputs[0].token_ids
    assert got == llm.generate(PROMPT, at_floor, use_tqdm=False)[0].outputs[0].token_ids


@pytest.mark.parametrize("temperature", [0, 0.01, 0.5, 1.0, 2.0])
def test_other_temperatures_are_kept_without_a_warning(temperature):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert SamplingParams(temperature=temperature).temperature == temperature


@pytest.mark.parametrize("top_p", [1e-300, 1e-50, 1e-20, 1e-8, 1e-3])
def test_a_tiny_top_p_keeps_the_most_likely_token(llm, top_p):
    logits = torch.randn(1024, generator=torch.Generator().manual_seed(0))
    params = SamplingParams(top_p=top_p)
    kept = torch.isfinite(filter_logits(logits, params))
    assert kept.sum() == 1 and kept[logits.argmax()]
    assert sample(logits, params, 4) == [int(logits.argmax())] * 4
    greedy = SamplingParams(temperature=0, max_tokens=6)
    out = llm.generate(PROMPT, SamplingParams(top_p=top_p, max_tokens=6, seed=1), use_tqdm=False)
    assert (out[0].outputs[0].token_ids
            == llm.generate(PROMPT, greedy, use_tqdm=False)[0].outputs[0].token_ids)


@pytest.mark.parametrize("penalty", [1e-300, 1e-45, 1e-31, 1e31, 1e300])
def test_a_repetition_penalty_that_could_overflow_is_refused_naming_the_range(penalty):
    said = rf"repetition_penalty={re.escape(repr(penalty))} is outside \[1e-30, 1e\+30\]"
    with pytest.raises(ValueError, match=said):
        SamplingParams(repetition_penalty=penalty)


@pytest.mark.parametrize("penalty", [MIN_PENALTY, 1e-10, 0.5, 1.2, 1e10, 1 / MIN_PENALTY])
def test_a_repetition_penalty_in_range_samples(llm, penalty):
    params = SamplingParams(repetition_penalty=penalty, max_tokens=6, seed=5)
    out = llm.generate(PROMPT, params, use_tqdm=False)[0].outputs[0]
    assert len(out.token_ids) == 6 or out.finish_reason == "stop"
