"""`formula_mistake` names the wrong formula a function follows on every case.
A formula that raises on some case (a division by a zero the right answer
never divides by) is not the one followed, but the formulas after it are still
tried (review of stop 47: one raising formula silenced the whole table). A
function that raises itself gets no formula's hint: its error is the case's to
say. Every place of the raising formula in the table, before and after the
one followed."""

from __future__ import annotations

import itertools

import pytest

from pagedkit.exercises import Case, formula_mistake

CASES = [Case((a, b), a + b) for a, b in [(0, 1), (2, 0), (3, 4)]]


def raises_on_zero(a, b):
    return a // b


def doubled(a, b):
    return 2 * (a + b)


def minus(a, b):
    return a - b


TABLE = [(raises_on_zero, "divides"), (doubled, "doubles"), (minus, "subtracts")]


@pytest.mark.parametrize("order", list(itertools.permutations(range(3))))
@pytest.mark.parametrize(("fn", "hint"), [(doubled, "doubles"), (minus, "subtracts"),
                                          (lambda a, b: a + b, ""), (lambda a, b: a * b, "")])
def test_the_formula_followed_is_named_wherever_a_raising_one_stands(order, fn, hint):
    assert formula_mistake(fn, CASES, [TABLE[i] for i in order]) == hint


def test_a_function_that_raises_gets_no_hint():
    def broken(a, b):
        if a == 3:
            raise ValueError("three")
        return 2 * (a + b)

    assert formula_mistake(broken, CASES, TABLE) == ""
