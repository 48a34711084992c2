"""`SamplingParams`' integer fields beside vLLM 0.32's, value by value.

Each field below is built with each value below on both systems.
vLLM's outcomes are recorded in tests/vllm/data/sampling_ints_vllm.json
(the test marked ``vllm`` checks the record against vLLM itself); to
re-record, in vLLM's venv::

    PYTHONPATH=src python tests/vllm/test_sampling_ints.py > tests/vllm/data/sampling_ints_vllm.json

The rule pagedkit keeps: a value both take means the same on both (the
stored field compares equal), and where one takes what the other refuses,
the case is one of `DIFFERENT`, which docs/api.md ("Compared with vLLM")
lists with the reason.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

RECORD = Path(__file__).parent / "data" / "sampling_ints_vllm.json"
FIELDS = ("n", "top_k", "max_tokens", "min_tokens", "logprobs", "prompt_logprobs", "seed",
          "stop_token_ids")
VALUES = {"5": 5, "5.0": 5.0, "5.5": 5.5, "True": True, "False": False, "'5'": "5",
          "np.int64(5)": np.int64(5), "np.float64(5.0)": np.float64(5.0), "-1": -1, "0": 0,
          "-2": -2, "None": None}

_BOOL = "a bool is refused (vLLM takes True as 1 and False as 0)"
_WHOLE = "a float must be a whole number (vLLM stops max_tokens=5.5 after 6 tokens)"
_ENGINE_FAILS = "refused when built (vLLM builds it, then its engine fails at the first step)"
_NUMPY = "a numpy integer is taken (vLLM wants a Python int)"
#: the cases where one system takes what the other refuses, or stores
#: another value: (field, value) -> why (docs/api.md says each)
DIFFERENT = {
    **{(f, "True"): _BOOL for f in ("n", "top_k", "max_tokens", "min_tokens", "seed",
                                    "stop_token_ids")},
    **{(f, "False"): _BOOL for f in ("top_k", "min_tokens", "seed", "stop_token_ids",
                                     "logprobs", "prompt_logprobs")},
    ("max_tokens", "5.5"): _WHOLE, ("min_tokens", "5.5"): _WHOLE,
    **{(f, v): _ENGINE_FAILS for f in ("logprobs", "prompt_logprobs", "seed")
       for v in ("5.0", "5.5", "np.float64(5.0)")},
    ("seed", "'5'"): _ENGINE_FAILS,
    ("seed", "-2"): "seed is in [0, 2**64 - 1], or -1 (no seed); vLLM serves seed=-2",
    ("stop_token_ids", "-1"): "refused when built (vLLM refuses it when the request is added)",
    ("stop_token_ids", "-2"): "refused when built (vLLM refuses it when the request is added)",
    **{(f, "np.int64(5)"): _NUMPY for f in ("n", "top_k", "stop_token_ids")},
}


def outcome(sampling_params, field: str, value_name: str) -> list:
    """``["taken", repr(stored value)]`` or ``["refused", error type]``."""
    value = VALUES[value_name]
    kwargs = {field: [value] if field == "stop_token_ids" else value}
    if field == "n":
        kwargs["temperature"] = 0.8  # n > 1 is refused with greedy decoding in vLLM
    try:
        return ["taken", repr(getattr(sampling_params(**kwargs), field))]
    except Exception as error:  # the outcome is what is recorded
        return ["refused", type(error).__name__]


def outcomes(sampling_params) -> dict[str, list]:
    return {f"{f}={v}": outcome(sampling_params, f, v) for f in FIELDS for v in VALUES}


def recorded() -> dict[str, list]:
    return json.loads(RECORD.read_text())


def stored(text: str):
    return eval(text, {"np": np})  # a repr of an int, float, bool, str, None or list


@pytest.mark.parametrize("field", FIELDS)
@pytest.mark.parametrize("value", VALUES)
def test_a_value_both_take_means_the_same_else_it_is_a_listed_difference(field, value):
    from pagedkit import SamplingParams

    ours, theirs = outcome(SamplingParams, field, value), recorded()[f"{field}={value}"]
    if ours[0] == theirs[0] == "refused":
        return
    if ours[0] == theirs[0] == "taken" and stored(ours[1]) == stored(theirs[1]):
        return
    assert (field, value) in DIFFERENT, (field, value, ours, theirs)


def test_the_listed_differences_are_differences():
    from pagedkit import SamplingParams

    ours, theirs = outcomes(SamplingParams), recorded()
    for field, value in DIFFERENT:
        key = f"{field}={value}"
        assert ours[key][0] != theirs[key][0] or stored(ours[key][1]) != stored(theirs[key][1]), key


def test_pagedkit_refuses_rather_than_takes_otherwise():
    """Where the two differ, pagedkit refuses (never takes a value to mean
    something vLLM does not), but for numpy integers."""
    from pagedkit import SamplingParams

    ours = outcomes(SamplingParams)
    taken = {k for k in DIFFERENT if ours[f"{k[0]}={k[1]}"][0] == "taken"}
    assert taken == {("n", "np.int64(5)"), ("top_k", "np.int64(5)"),
                     ("stop_token_ids", "np.int64(5)")}


@pytest.mark.vllm
def test_vllm_today_is_its_record():
    from vllm import SamplingParams

    assert outcomes(SamplingParams) == recorded()


if __name__ == "__main__":  # record vLLM's outcomes (in vLLM's venv)
    from vllm import SamplingParams

    json.dump(outcomes(SamplingParams), sys.stdout, indent=1)
    print()
