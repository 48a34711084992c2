"""Newcomer 16, finding 7: an answer that raised got the case's hint run into the
error ("...name 'num_tokns' is not defined  Hint: 4 tokens exactly fill one block
of 4"): a typo's NameError has nothing to do with the case's idea. Every check of
labs 00-09 that calls a Python function answers one that raises with the call and
the error alone."""

import importlib

import pytest

LABS = ("lab00", "lab01", "lab02", "lab03", "lab04", "lab05", "lab06", "lab07", "lab08", "lab09")
#: checks that take a Triton kernel (@triton.jit), not a Python function: they refuse one
KERNELS = {("lab04", "paged_kernel")}


def every_check():
    for lab in LABS:
        for name, check in importlib.import_module(f"pagedkit.exercises.{lab}").CHECKS.items():
            if (lab, name) not in KERNELS:
                yield pytest.param(name, check, id=f"{lab}.{name}")


def _typo(*args, **kwargs):
    return num_tokns  # noqa: F821 -- the learner's typo


@pytest.mark.parametrize("name, check", list(every_check()))
def test_an_answer_that_raises_gets_its_error_and_no_case_hint(name, check):
    result = check(_typo)
    assert not result.passed
    assert result.message.endswith("raised NameError: name 'num_tokns' is not defined"), \
        result.message
    assert "Hint" not in result.message
