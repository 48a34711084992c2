"""A warning names the user's line, not pagedkit's (fifth newcomer's N5).

Python prints a warning's file and line, and ``filterwarnings(module=...)``
matches them; a KVCacheTooSmallWarning (or the beam-search UserWarning) raised
deep inside pagedkit must be located at the user's call of `LLM.generate`,
`LLM.chat`, `LLM.beam_search` or `LLMEngine.step`, here this file's lines."""

import inspect
import warnings

import pytest

from pagedkit import LLM, BeamSearchParams, KVCacheTooSmallWarning, SamplingParams

SHORT = SamplingParams(temperature=0, max_tokens=5, ignore_eos=True)
LONG = SamplingParams(temperature=0, max_tokens=20, ignore_eos=True)
SAMPLES = SamplingParams(n=2, temperature=0.9, seed=3, max_tokens=10, ignore_eos=True)


def where(call):
    """Run `call` (a one-line lambda of this file); the (file, line) of each warning."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        call()
    return [(w.category, w.filename, w.lineno) for w in caught
            if issubclass(w.category, (KVCacheTooSmallWarning, UserWarning))
            and "pagedkit" not in str(w.message)[:9]]


def line_of(call):
    return call.__code__.co_firstlineno


@pytest.fixture(scope="module")
def llm():
    return LLM("tiny", num_blocks=4, block_size=4)  # max_model_len lowered to 16


CALLS = {
    # n=1, cut by the max_model_len the cache lowered
    "generate": lambda llm: llm.generate({"prompt_token_ids": [5] * 14}, SHORT, use_tqdm=False),
    # n=2 samples outgrowing the whole cache
    "generate n=2": lambda llm: llm.generate([[5] * 3], SAMPLES, use_tqdm=False),
    "chat": lambda llm: llm.chat([{"role": "user", "content": "Hi"}], LONG, use_tqdm=False),
    "beam_search": lambda llm: llm.beam_search([{"prompt_token_ids": [5] * 6}], BeamSearchParams(beam_width=2, max_tokens=20, ignore_eos=True)),  # noqa: E501
}


@pytest.mark.parametrize("name", CALLS)
def test_the_warning_points_at_the_users_call(llm, name):
    call = CALLS[name]
    found = where(lambda: call(llm))
    assert found, f"{name}: no warning to locate"
    for category, filename, lineno in found:
        assert (filename, lineno) == (__file__, line_of(call)), (name, category)


def test_a_direct_step_warns_at_the_users_step_call(llm):
    engine = llm.llm_engine
    engine.add_request("r", [5] * 3, SAMPLES)
    found = []
    while engine.has_unfinished_requests():
        line = inspect.currentframe().f_lineno + 1
        found += where(lambda: engine.step())
        if found:
            break
    while engine.has_unfinished_requests():
        engine.step()
    assert found and all((f, n) == (__file__, line) for _, f, n in found), (found, line)


@pytest.mark.parametrize("temperature", [1e-38, 1e-3, 0.009])
def test_a_raised_temperature_warns_at_the_users_sampling_params(temperature):
    make = lambda: SamplingParams(temperature=temperature)
    found = where(make)
    assert found == [(UserWarning, __file__, line_of(make))]
