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
