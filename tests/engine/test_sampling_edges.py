"""Where vLLM's sampling options meet the engine's edges: a step whose
sampling raises part-way, ``min_tokens`` with ``ignore_eos``, text that ends
inside a character, values a step could not sample with, step outputs read
late. Each is checked against a run that did not meet the edge, or against
the rule written out."""

import itertools
import math

import pytest
import torch

from pagedkit import LLM, BeamSearchParams, LLMEngine, SamplingParams
from pagedkit.engine import sampling
from pagedkit.engine.sampling import StopRule, adjust_logits, output_text
from pagedkit.sequence import Sequence, SequenceGroup

PROMPTS = ["Once upon a time", "The little dog ran", "Tom and Lily"]


@pytest.fixture(scope="module")
def llm():
    return LLM("tiny", num_blocks=128, dtype="float32")


# -------------------------------------------------- a step that raises part-way
def requests():
    """Greedy, seeded and unseeded samples, n > 1 forks and logprobs in one batch."""
    return [
        ("greedy", PROMPTS[0], SamplingParams(temperature=0, max_tokens=6, ignore_eos=True)),
        ("n3", PROMPTS[1], SamplingParams(n=3, temperature=1.0, seed=7, max_tokens=6,
                                          ignore_eos=True, logprobs=2)),
        ("free", PROMPTS[2], SamplingParams(temperature=0.8, max_tokens=6, ignore_eos=True)),
        ("stop", PROMPTS[0], SamplingParams(temperature=1.0, seed=3, max_tokens=6,
                                            stop=["e"], ignore_eos=True)),
    ]


def run(engine, *, fail_at=None, error=RuntimeError, monkeypatch=None):
    """Every request to its end; the `fail_at`-th call of the sampler (counted
    over the run) raises `error` once, and the step is run again."""
    torch.manual_seed(0)
    for rid, prompt, params in requests():
        engine.add_request(rid, prompt, params)
    calls = itertools.count()
    if fail_at is not None:
        real = sampling.sample

        def flaky(*args, **kwargs):
            if next(calls) == fail_at:
                raise error("injected")
            return real(*args, **kwargs)

        monkeypatch.setattr(sampling, "sample", flaky)
    outputs, failures = {}, 0
    while engine.has_unfinished_requests():
        try:
            out = engine.step()
        except (RuntimeError, KeyboardInterrupt):
            failures += 1
            continue
        outputs.update({o.request_id: [(c.token_ids, c.text, c.logprobs) for c in o.outputs]
                        for o in out.finished})
    return outputs, failures


@pytest.fixture(scope="module")
def unbroken(llm):
    engine = LLMEngine(llm.llm_engine.runner.model, tokenizer=llm.get_tokenizer(),
                       num_blocks=64, seed=1)
    return run(engine)[0]


@pytest.mark.parametrize("error", [RuntimeError, KeyboardInterrupt])
@pytest.mark.parametrize("fail_at", [0, 1, 2, 4, 7, 11])
def test_a_sampling_step_that_raises_changes_nothing(llm, unbroken, monkeypatch, fail_at,
                                                     error):
    engine = LLMEngine(llm.llm_engine.runner.model, tokenizer=llm.get_tokenizer(),
                       num_blocks=64, seed=1)
    outputs, failures = run(engine, fail_at=fail_at, error=error, monkeypatch=monkeypatch)
    assert failures == 1
    assert outputs == unbroken  # same tokens, texts and logprobs as a run that never failed
    assert engine.memory_stats()["used_blocks"] == 0 and not engine.groups


# ------------------------------------------------ min_tokens with ignore_eos
@pytest.mark.parametrize("ignore_eos", [False, True])
@pytest.mark.parametrize("stop_token_ids", [(), (5,), (1, 5)])
def test_min_tokens_masks_eos_and_stop_tokens_even_when_eos_is_ignored(ignore_eos,
                                                                       stop_token_ids):
    # vLLM masks all_stop_token_ids, which always hold end-of-sequence
    params = SamplingParams(min_tokens=3, max_tokens=5, ignore_eos=ignore_eos,
                            stop_token_ids=stop_token_ids)
    seq = Sequence([9, 9], seq_id=0)
    group = SequenceGroup("r", None, [9, 9], params, [seq])
    rule = StopRule(eos_token_ids={1, 2}, max_model_len=64)
    logits = torch.zeros(1, 8)
    masked = adjust_logits([(group, [(seq, 0)])], logits, rule)
    expected = {1, 2, *stop_token_ids}
    assert {t for t in range(8) if masked[0, t] == -math.inf} == expected
    seq.token_ids += [3, 3, 3]  # min_tokens reached: nothing masked
    assert torch.equal(adjust_logits([(group, [(seq, 0)])], logits, rule), logits)


def test_min_tokens_with_ignore_eos_never_emits_eos(llm):
    eos = llm.get_tokenizer().eos_token_id
    params = SamplingParams(temperature=0, max_tokens=130, min_tokens=130, ignore_eos=True)
    plain = SamplingParams(temperature=0, max_tokens=130, ignore_eos=True)
    masked, free = (llm.generate([PROMPTS[2]], p, use_tqdm=False)[0].outputs[0].token_ids
                    for p in (params, plain))
    assert eos in free  # the prompt's greedy run does reach end-of-sequence ...
    assert eos not in masked  # ... which min_tokens forbids, ignore_eos or not


# --------------------------------------------------- text inside a character
def test_text_ending_inside_a_character_is_held_back(llm):
    tokenizer = llm.get_tokenizer()
    ids = tokenizer("Tom said \N{GRINNING FACE} ok, caf\N{LATIN SMALL LETTER E WITH ACUTE}",
                    add_special_tokens=False)["input_ids"]
    full = tokenizer.decode(ids)
    params = SamplingParams()
    held = 0
    for end in range(len(ids) + 1):
        text = output_text(tokenizer, ids[:end], params)
        assert "\ufffd" not in text and full.startswith(text)
        held += tokenizer.decode(ids[:end]).endswith("\ufffd")
    assert held  # the tokenizer does split a character here (the case is real)
    assert output_text(tokenizer, ids, params) == full


# ------------------------------------------------ values a step cannot sample with
@pytest.mark.parametrize("kwargs, message", [
    ({"temperature": math.inf}, "temperature must be a finite number >= 0, got inf"),
    ({"temperature": -math.inf}, "temperature must be a finite number >= 0, got -inf"),
    ({"temperature": math.nan}, "temperature must be a finite number >= 0, got nan"),
    ({"length_penalty": math.inf}, "length_penalty must be a finite number, got inf"),
    ({"length_penalty": -math.inf}, "length_penalty must be a finite number, got -inf"),
])
def test_values_no_step_can_sample_with_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SamplingParams(**kwargs)


@pytest.mark.parametrize("name", ["logprobs", "prompt_logprobs"])
def test_more_logprobs_than_the_vocabulary_are_refused_up_front(llm, name):
    engine = LLMEngine(llm.llm_engine.runner.model, tokenizer=llm.get_tokenizer(),
                       num_blocks=32, max_logprobs=-1)
    vocab = engine.runner.vocab_size
    with pytest.raises(ValueError, match=rf"{name}={vocab + 1} asks for more logprobs than the "
                                         rf"vocabulary has tokens \({vocab}\)"):
        engine.add_request("r", PROMPTS[0], SamplingParams(**{name: vocab + 1}))
    assert not engine.groups
    engine.add_request("r", PROMPTS[0], SamplingParams(max_tokens=2, **{name: vocab}))
    while engine.has_unfinished_requests():
        engine.step()


# -------------------------------------------------------- step outputs read late
def test_a_step_output_read_late_keeps_its_steps_counts(llm):
    engine = llm.llm_engine
    engine.add_request("late", PROMPTS[0], SamplingParams(temperature=0, max_tokens=5,
                                                          ignore_eos=True))
    steps = []
    while engine.has_unfinished_requests():
        steps.append(engine.step())
    counts = [out[0].metrics.num_generation_tokens for out in steps if len(out)]
    assert counts == [1, 2, 3, 4, 5]
    first = steps[0][0]
    assert first.metrics is not steps[-1][0].metrics and first.metrics.finish_time is None


# ------------------------------------------------------------------ beam search
def test_beam_search_beside_a_request_named_beam_search(llm):
    """A request queued under any id (here one a beam's could have had) is
    refused by name before beam search starts (newcomer 37: each beam step's
    generate would run it and return its output among the beams); once it
    is gone, beam search runs."""
    engine = llm.llm_engine
    engine.add_request("beam-search", PROMPTS[0], SamplingParams(max_tokens=2))
    try:
        with pytest.raises(ValueError, match="holds 1 request queued with add_request "
                                             r"\('beam-search'\)"):
            llm.beam_search([PROMPTS[1]], BeamSearchParams(beam_width=2, max_tokens=3))
    finally:
        engine.abort_request("beam-search", report=False)
    out = llm.beam_search([PROMPTS[1]], BeamSearchParams(beam_width=2, max_tokens=3))
    assert len(out[0].sequences) == 2
