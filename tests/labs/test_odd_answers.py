"""The teacher's guide promises: "A check never raises on a wrong answer, so a
notebook always runs through." This is its guard: every exercise check of
labs 00-09 (04c too) is handed functions that return odd answers — numpy and
torch scalars and arrays of every rank, nan, inf, ints past a float's range,
None, text, bytes, sets, dicts, objects, functions, generators (endless too),
and pairs and lists of them — and each must answer with a verdict (a ❌ with a
message), never raise (newcomer 15, finding 1: a numpy scalar where a list
was expected crashed lab 05's finish_steps with "truth value of an array is
ambiguous"; lab 04's merge_states raised on a pair of them)."""

import importlib
import math

import numpy as np
import pytest
import torch

from pagedkit.exercises import CheckResult

LABS = ("lab00", "lab01", "lab02", "lab03", "lab04", "lab04c", "lab05", "lab06", "lab07",
        "lab08", "lab09")


def _once():
    yield 1


def _endless():
    while True:
        yield 1


ONE = {
    "np.int64": np.int64(28), "np.float64": np.float64(2.5), "np.nan": np.float64("nan"),
    "0-d array": np.array(3), "1-d array": np.array([1, 2, 3]), "2-d array": np.zeros((2, 3)),
    "empty array": np.array([]), "0-d tensor": torch.tensor(3), "1-d tensor": torch.tensor([1, 2]),
    "2-d tensor": torch.zeros(2, 2), "nan tensor": torch.tensor(math.nan),
    "bool tensor": torch.tensor([True]), "complex tensor": torch.zeros(2, dtype=torch.complex64),
    "half tensor": torch.zeros(4, 8, dtype=torch.float16), "4-d tensor": torch.zeros(1, 1, 1, 1),
    "nan": math.nan, "inf": math.inf, "-inf": -math.inf, "10**400": 10**400,
    "-10**400": -10**400, "complex": 1j, "-5": -5, "0": 0, "None": None, "str": "abc",
    "bytes": b"ab", "set": {1, 2}, "empty set": set(), "dict": {"a": 1}, "object": object(),
    "function": len, "nested list": [[1, 2], [3]],
}
ODD = {**ONE, **{f"({key}, {key})": (v, v) for key, v in ONE.items()},
       **{f"[{key}]": [v] for key, v in ONE.items()}}


def every_check():
    for lab in LABS:
        for name, check in importlib.import_module(f"pagedkit.exercises.{lab}").CHECKS.items():
            yield pytest.param(check, id=f"{lab}.{name}")


@pytest.mark.parametrize("check", list(every_check()))
def test_a_check_answers_every_odd_answer_with_a_verdict(check):
    answers = {key: (lambda *a, _v=v, **k: _v) for key, v in ODD.items()}
    answers["a generator"] = lambda *a, **k: _once()
    answers["an endless generator"] = lambda *a, **k: _endless()
    raised, passed = {}, []
    for key, fn in answers.items():
        try:
            result = check(fn)
        except Exception as err:  # the promise broken: say which answers, all at once
            raised[key] = f"{type(err).__name__}: {err}"
            continue
        assert isinstance(result, CheckResult), (key, result)
        if result.passed:
            passed.append(key)
        assert result.message, key
    assert not raised, raised
    assert not passed, passed  # no constant is a right answer to any exercise
