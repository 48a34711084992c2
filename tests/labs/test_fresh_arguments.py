"""Each call of a learner's function gets a fresh copy of its case's arguments
(`pagedkit.exercises.fresh`), newcomer 12's finding 1.

Enumerated over every check of labs 00-09 that takes a Python function (lab
04c and lab 04's `paged_kernel` take Triton kernels, run in another process):
the reference solution passes; then a correct answer that spoils what it was
given after answering (clears every list, dict and set, fills every tensor
with NaN) passes too; then the reference passes again in the same process —
so no case was changed for a later call. The checks whose contract is to
change their input (`MUTATES`) keep checking that change, and lab 08's
`top_p_filter`, whose contract is to leave its logits alone, keeps refusing a
change. A wrong answer's message shows the arguments as they were before the
call, whatever the function did to its copy.
"""

import copy
import importlib

import pytest
import torch

from .test_exercises import load, solution_modules

#: Checks whose exercise must change its arguments in place (read after the call).
MUTATES = {"lab03.append_slots", "lab07.copy_on_write"}
#: Checks whose exercise must leave its arguments unchanged, and check that.
KEEPS = {"lab08.top_p_filter"}
#: Checks given a Triton kernel, not a Python function.
KERNELS = {"lab04.paged_kernel"}


def python_checks(leave_out=frozenset()):
    for path in solution_modules():
        lab = path.stem.split("_")[0]  # lab03_paging -> lab03
        if lab == "lab04c":
            continue
        for name in importlib.import_module(f"pagedkit.exercises.{lab}").CHECKS:
            if f"{lab}.{name}" not in KERNELS | leave_out:
                yield pytest.param(path, lab, name, id=f"{lab}.{name}")


def check_and_solution(path, lab, name):
    check = importlib.import_module(f"pagedkit.exercises.{lab}").CHECKS[name]
    return check, getattr(load(path), name)


def spoil(value) -> None:
    """Change `value` in place as far as it can be: lists, dicts and sets
    emptied (what they hold spoiled first), tensors filled with NaN (or -1)."""
    if isinstance(value, torch.Tensor):
        value.fill_(float("nan") if value.is_floating_point() else -1)
    elif isinstance(value, (list, tuple, set)):
        for item in list(value):
            spoil(item)
        if not isinstance(value, tuple):
            value.clear()
    elif isinstance(value, dict):
        for item in list(value.values()):
            spoil(item)
        value.clear()


def spoiling(solution):
    """`solution`'s answer, computed from a copy of the arguments; then the
    arguments it was given are spoiled."""
    def answer(*args, **kwargs):
        result = solution(*copy.deepcopy(args), **copy.deepcopy(kwargs))
        spoil(args)
        spoil(kwargs)
        return result
    answer.__name__ = solution.__name__
    return answer


def not_changing(solution):
    """`solution` run on a copy: its answer right, its arguments untouched."""
    def answer(*args, **kwargs):
        return solution(*copy.deepcopy(args), **copy.deepcopy(kwargs))
    answer.__name__ = solution.__name__
    return answer


@pytest.mark.parametrize("path, lab, name", list(python_checks()))
def test_an_answer_that_changes_its_arguments_changes_no_case(path, lab, name):
    check, solution = check_and_solution(path, lab, name)
    first = check(solution)
    assert first.passed, repr(first)
    if f"{lab}.{name}" in MUTATES:
        again = check(solution)  # it changed its lists: the cases are as they were
        assert again.passed, repr(again)
        unchanged = check(not_changing(solution))  # right answers, no change: refused
        assert not unchanged.passed and "after " in repr(unchanged), repr(unchanged)
    elif f"{lab}.{name}" in KEEPS:
        spoiled = check(spoiling(solution))
        assert not spoiled.passed and "changed the logits" in repr(spoiled), repr(spoiled)
    else:
        spoiled = check(spoiling(solution))
        assert spoiled.passed, f"a correct answer that changes its arguments: {spoiled!r}"
    last = check(solution)
    assert last.passed, f"the reference after the other answers: {last!r}"


class _Wrong:
    """A wrong answer that every check refuses, the same text each run."""

    def __repr__(self) -> str:
        return "WRONG"


@pytest.mark.parametrize("path, lab, name", list(python_checks(leave_out=MUTATES)))
def test_a_message_shows_the_arguments_before_the_call(path, lab, name):
    """Right on every call but the last the reference makes, then wrong: the
    verdict is the same whether or not the function spoiled its arguments on
    the way (the same case, its arguments, expected value and hint). (The
    `MUTATES` exercises must change their arguments: the test above.)"""
    check, solution = check_and_solution(path, lab, name)
    calls = []

    def counted(*args, **kwargs):
        calls.append(1)
        return solution(*args, **kwargs)
    counted.__name__ = solution.__name__
    assert check(counted).passed
    last = len(calls)

    def wrong_at(call: int, spoils: bool):
        seen = []

        def answer(*args, **kwargs):
            seen.append(1)
            result = solution(*copy.deepcopy(args), **copy.deepcopy(kwargs))
            if spoils:
                spoil(args)
                spoil(kwargs)
            return _Wrong() if len(seen) == call else result
        answer.__name__ = solution.__name__
        return answer

    while check(wrong_at(last, spoils=False)).passed:  # top_p_filter's last call checks
        last -= 1                                      # only that the logits stay unchanged
    assert last > 1
    plain = check(wrong_at(last, spoils=False))
    spoiled = check(wrong_at(last, spoils=True))
    assert not plain.passed, repr(plain)
    assert repr(spoiled) == repr(plain)
