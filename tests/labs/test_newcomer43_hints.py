"""Newcomer 43's wrong answers to lab 06's preemption_mode, each told its
mistake rather than the case's arithmetic:

* the right decision as a bool (``mode == "swap"``), or any value that is no
  str, where a word is expected: every check whose answer is a word says so;
* the costs compared with ``//``, which makes every time under a second 0.

Each of `_MODE_FORMULAS` is held to disagree with the lab's rule on one of the
cases it is tried on, so a right function is never told a formula's mistake."""

from __future__ import annotations

import pytest

from pagedkit.exercises import lab06

from .test_exercises import SOLUTIONS, load

RIGHT = load(SOLUTIONS / "lab06_preemption.py").preemption_mode


@pytest.mark.parametrize(("answer", "kind"), [(lambda m: m == "swap", "bool"),
                                              (lambda m: int(m == "swap"), "int"),
                                              (lambda m: [m], "list"),
                                              (lambda m: m.encode(), "bytes")])
def test_a_word_of_another_type_is_told_to_return_the_word(answer, kind):
    result = lab06.check_preemption_mode(lambda *args: answer(RIGHT(*args)))
    assert not result.passed
    assert result.message.endswith("the answer is a word, a str such as 'swap', never a value "
                                   f"of type {kind}: return the word itself"), result.message


def test_costs_compared_with_floor_division_are_told_so():
    def preemption_mode(tables, recompute_tokens, free_cpu_blocks, block_bytes,
                        link_bytes_per_s, prefill_tokens_per_s):
        blocks = len({b for table in tables for b in table})
        if blocks > free_cpu_blocks:
            return "recompute"
        swap = 2 * blocks * block_bytes // link_bytes_per_s   # the mistake: //
        return "swap" if swap < sum(recompute_tokens) // prefill_tokens_per_s else "recompute"

    result = lab06.check_preemption_mode(preemption_mode)
    assert not result.passed and "`//` rounds each time down" in result.message, result.message
    assert lab06.check_preemption_mode(RIGHT).passed


def test_each_mode_formula_is_a_mistake_on_the_cases_it_is_tried_on():
    cases = lab06.MODE_CASES + lab06.mode_grid()
    for formula, hint in lab06._MODE_FORMULAS:
        assert any(formula(*c.args) != c.expected for c in cases), hint
