"""Newcomer 48: beam search inside one request (``use_beam_search=True``).

* A beam that one of the request's ``stop_token_ids`` ends names it in
  ``stop_reason``, as a sampled sequence does (the rule is one:
  `StopRule.named_stop`); one that end-of-sequence ends names nothing.
  Enumerated over stop sets drawn from each prompt's likely next tokens,
  with and without ``ignore_eos``.
* Every option beam search leaves out is refused by name and value, alone
  and together; their defaults, and the options it does apply, are taken.
"""

import itertools

import pytest
import torch

from pagedkit import LLM, SamplingParams
from pagedkit.models import load_tiny
from pagedkit.sampling_params import BEAM_DEFAULTS

TEXTS = ("Once upon a time", "The little robot looked at the sky and", "She said")


@pytest.fixture(scope="module")
def tiny():
    model, tokenizer = load_tiny()
    return model, tokenizer, LLM(model, tokenizer, block_size=4, num_blocks=256)


def likely_tokens(model, prompt, k=6):
    with torch.inference_mode():
        logits = model(torch.tensor([prompt])).logits[0, -1]
    return logits.topk(k).indices.tolist()


def stop_sets(model, tokenizer):
    """(prompt, stop ids) pairs: each prompt's likely next tokens taken one and
    two at a time, plus end-of-sequence among them."""
    for text in TEXTS:
        prompt = tokenizer(text).input_ids
        likely = likely_tokens(model, prompt)
        pairs = [list(p) for p in itertools.combinations(likely[:4], 2)]
        for stop in [[t] for t in likely] + pairs:
            yield prompt, stop
        yield prompt, [likely[0], tokenizer.eos_token_id]


@pytest.mark.parametrize("ignore_eos", [False, True])
def test_a_beam_a_stop_token_ends_names_it(tiny, ignore_eos):
    model, tokenizer, llm = tiny
    eos = tokenizer.eos_token_id
    named = unnamed = 0
    for prompt, stop in stop_sets(model, tokenizer):
        params = SamplingParams(use_beam_search=True, n=2, beam_width=3, temperature=0,
                                max_tokens=6, stop_token_ids=stop, ignore_eos=ignore_eos)
        for out in llm.generate([prompt], params, use_tqdm=False)[0].outputs:
            last = out.token_ids[-1]
            if out.finish_reason != "stop":
                assert out.stop_reason is None, (prompt, stop, out)
                continue
            ended_by_eos = last == eos and not ignore_eos
            assert last in stop or ended_by_eos, (prompt, stop, out)
            expected = None if ended_by_eos else last
            assert out.stop_reason == expected, (prompt, stop, out)
            named, unnamed = named + (expected is not None), unnamed + (expected is None)
    assert named >= 10  # the enumeration reaches the case it is about


def test_beams_and_samples_name_the_same_stop(tiny):
    """The greedy beam of width 1 is the greedy sample: same tokens, same reason."""
    model, tokenizer, llm = tiny
    for prompt, stop in stop_sets(model, tokenizer):
        common = dict(temperature=0, max_tokens=6, stop_token_ids=stop)
        beam = llm.generate([prompt], SamplingParams(use_beam_search=True, **common),
                            use_tqdm=False)[0].outputs[0]
        sample = llm.generate([prompt], SamplingParams(**common), use_tqdm=False)[0].outputs[0]
        assert (beam.token_ids, beam.finish_reason, beam.stop_reason) == (
            sample.token_ids, sample.finish_reason, sample.stop_reason), (prompt, stop)


#: a value of each left-out option that is not its default
NOT_DEFAULT = {"top_p": 0.5, "top_k": 3, "min_p": 0.1, "presence_penalty": 0.5,
               "frequency_penalty": -0.5, "repetition_penalty": 1.2, "stop": ["."],
               "logprobs": 0, "prompt_logprobs": 1}


def test_every_left_out_option_is_enumerated():
    assert set(NOT_DEFAULT) == set(BEAM_DEFAULTS)


@pytest.mark.parametrize("name", sorted(NOT_DEFAULT))
def test_a_left_out_option_is_refused_by_name_and_value(name):
    value = NOT_DEFAULT[name]
    with pytest.raises(ValueError) as err:
        SamplingParams(use_beam_search=True, temperature=0, **{name: value})
    assert f"{name}={value!r}" in str(err.value)
    assert "use_beam_search=True" in str(err.value) and "docs/api.md" in str(err.value)
    SamplingParams(temperature=0, **{name: value})  # fine without beams


@pytest.mark.parametrize("pair", list(itertools.combinations(sorted(NOT_DEFAULT), 2)))
def test_two_left_out_options_are_both_named(pair):
    with pytest.raises(ValueError) as err:
        SamplingParams(use_beam_search=True, temperature=0, **{n: NOT_DEFAULT[n] for n in pair})
    for name in pair:
        assert f"{name}={NOT_DEFAULT[name]!r}" in str(err.value)
    assert "them" in str(err.value)


@pytest.mark.parametrize("options", [
    {}, {"top_k": -1}, {"top_k": 0}, {"top_p": 1.0}, {"stop": None}, {"stop": []},
    {"repetition_penalty": 1.0}, {"min_p": 0.0}, {"logprobs": None},
    {"stop_token_ids": [5, 6], "min_tokens": 2, "ignore_eos": True, "length_penalty": 0.5},
])
def test_defaults_and_the_options_beams_apply_are_taken(options):
    params = SamplingParams(use_beam_search=True, n=2, temperature=0, **options)
    assert params.beam_width == 2
