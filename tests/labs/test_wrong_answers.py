"""Every check rejects the plausible wrong answers listed in `wrong_answers.py`
— at least three per exercise — with a message, never an exception. If a
check is loosened until a listed mistake passes, this fails."""

import importlib

import pytest

from .wrong_answers import WRONG


def every_exercise():
    for lab in [*(f"lab0{i}" for i in range(10)), "lab04c"]:
        for name in importlib.import_module(f"pagedkit.exercises.{lab}").CHECKS:
            yield lab, name


def test_every_exercise_has_three_wrong_answers():
    missing = [f"{lab}.{name}" for lab, name in every_exercise()
               if len(WRONG.get((lab, name), [])) < 3]
    assert not missing, f"fewer than three wrong answers for {missing}"
    stale = sorted(set(WRONG) - set(every_exercise()))
    assert not stale, f"wrong answers for exercises that no longer exist: {stale}"


@pytest.mark.parametrize("lab, name, wrong", [
    pytest.param(lab, name, fn, id=f"{lab}.{name}.{fn.__name__}")
    for (lab, name), fns in WRONG.items() for fn in fns])
def test_check_rejects_wrong_answer(lab, name, wrong):
    check = importlib.import_module(f"pagedkit.exercises.{lab}").CHECKS[name]
    result = check(wrong)
    assert not result.passed, f"{lab}.{name} accepts the wrong answer {wrong.__name__}"
    assert repr(result).startswith("❌") and result.message
