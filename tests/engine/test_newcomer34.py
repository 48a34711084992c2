"""Newcomer 34's findings on the vLLM-shaped API (issue #26)."""

import warnings

import numpy as np
import pytest

from pagedkit import LLMEngine, SamplingParams


def engine_with(*request_ids):
    engine = LLMEngine("tiny", block_size=4, num_blocks=64)
    for rid in request_ids:
        engine.add_request(rid, "Once upon a time",
                           SamplingParams(temperature=0, max_tokens=8, ignore_eos=True))
    engine.step()
    return engine


@pytest.mark.parametrize("ids", [0, 5, None, 1.5, True, np.int64(0), object()],
                         ids=repr)
def test_an_id_that_is_no_list_and_no_string_is_refused_naming_it(ids):
    """vLLM 0.32 raises TypeError ("not iterable") for abort_request(0) and
    abort_request(None), run there; pagedkit aborted request '0' for the 0."""
    engine = engine_with("0", "5")
    with pytest.raises(TypeError) as refused:
        engine.abort_request(ids)
    assert repr(ids) in str(refused.value) and "list of request ids" in str(refused.value)
    assert engine.get_num_unfinished_requests() == 2


@pytest.mark.parametrize("ids", [[0], ["0", 5], [None], [b"0"], ["0", ["5"]], (0,)],
                         ids=repr)
def test_a_list_with_an_id_that_is_not_a_string_aborts_nothing_and_says_which(ids):
    """vLLM 0.32 takes abort_request([0]) and ["0", 5] and aborts no request by
    the 0 (the 5), run there: a script would silently leave it running."""
    engine = engine_with("0", "5")
    wrong = next(i for i in ids if not isinstance(i, str))
    with pytest.raises(TypeError) as refused:
        engine.abort_request(ids)
    message = str(refused.value)
    assert f"got {wrong!r}" in message and "nothing aborted" in message, message
    assert engine.get_num_unfinished_requests() == 2  # not even the "0" of ["0", 5]


@pytest.mark.parametrize("make", [list, tuple, set, iter, lambda ids: dict.fromkeys(ids)],
                         ids=["list", "tuple", "set", "iterator", "dict"])
def test_any_iterable_of_strings_aborts_each(make):
    engine = engine_with("0", "5", "9")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert engine.abort_request(make(["0", "5"])) is True
    assert engine.get_num_unfinished_requests() == 1
    assert engine.abort_request(make(["9", "not-there"])) is False  # one was not in the engine
    assert engine.get_num_unfinished_requests() == 0


@pytest.mark.parametrize("num_blocks, block_size", [(64, 16), (30, 32), (200, 16)])
def test_the_prompt_length_a_refusal_advises_is_served(num_blocks, block_size):
    """Newcomer 36: a 3,000-token prompt was told to shorten to 2,047 tokens
    (the model's limit) by an engine whose cache holds 1,024; the 2,047 were
    refused in turn. Every refusal's "shorten the prompt to N tokens or
    fewer" is served at N, and refused at N + 1, for lengths around each limit."""
    import re

    from pagedkit import LLM

    llm = LLM("tiny", num_blocks=num_blocks, block_size=block_size)
    capacity, model_limit = num_blocks * block_size, 2048
    params = SamplingParams(temperature=0, max_tokens=1)
    for n in sorted({capacity - 1, capacity, capacity + 1, model_limit - 1, model_limit,
                     model_limit + 1, 3000}):
        try:
            llm.generate([[5] * n], params, use_tqdm=False)
            assert n < min(capacity, model_limit), n  # served: within both limits
            continue
        except ValueError as refused:
            message = str(refused)
        said = re.search(r"shorten the prompt to (\d+) tokens? or fewer", message)
        assert said, message
        advised = int(said.group(1))
        assert advised == min(capacity, model_limit) - 1, message
        llm.generate([[5] * advised], params, use_tqdm=False)  # the advice is served
        with pytest.raises(ValueError):
            llm.generate([[5] * (advised + 1)], params, use_tqdm=False)
