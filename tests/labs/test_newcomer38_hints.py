"""Newcomer 38's wrong answers, each told its mistake rather than a case's
story: tokens_that_fit counting blocks, or one tensor per token; best_num_drafts
leaving out k = 0; tokens_to_recompute reusing the last token's block;
preemption_mode's word in another case. Each formula table is also held to
disagree with the right answer on at least one of the cases it is checked on,
so that a function right on those cases is never told a formula's mistake."""

from __future__ import annotations

import pytest

from pagedkit.exercises import lab06, lab09
from pagedkit.exercises import same_items as same

from .test_exercises import SOLUTIONS, load

SOLUTION = load(SOLUTIONS / "lab06_preemption.py").preemption_mode


@pytest.mark.parametrize("formulas, cases, oracle", [
    (lab09._FIT_FORMULAS, "fit", lab09._fit),
    (lab09._DRAFTS_FORMULAS, "drafts", lab09._best_num_drafts),
    (lab06._RECOMPUTE_FORMULAS, lab06.RECOMPUTE_CASES, lab06._recompute_block_by_block)])
def test_each_formula_is_a_mistake_on_the_cases_it_is_tried_on(formulas, cases, oracle):
    if cases == "fit":
        cases = _cases_of(lab09.check_tokens_that_fit, 7)
    elif cases == "drafts":
        cases = _cases_of(lab09.check_best_num_drafts, 11)
    for formula, hint in formulas:
        assert any(not same(formula(*c.args), oracle(*c.args)) for c in cases), hint


def _cases_of(check, count):
    """The first `count` cases `check` hands check_function (the lab's own)."""
    captured = []
    real = lab09.check_function
    lab09.check_function = lambda name, fn, cases, **kw: captured.extend(cases[:count]) or \
        lab09.CheckResult(name, True, "")
    try:
        check.__wrapped__(lambda *a: 0)
    finally:
        lab09.check_function = real
    return captured


@pytest.mark.parametrize("check, formulas", [
    (lab09.check_tokens_that_fit, lab09._FIT_FORMULAS),
    (lab09.check_best_num_drafts, lab09._DRAFTS_FORMULAS),
    (lab06.check_tokens_to_recompute, lab06._RECOMPUTE_FORMULAS)])
def test_a_function_following_a_formula_is_told_it(check, formulas):
    for formula, hint in formulas:
        result = check(formula)
        assert not result.passed and result.message.endswith(hint), result.message


CAPITALS, BLANKS = "written with other capitals", "with blank characters around it"
FORMS = {"Swap": CAPITALS, "SWAP": CAPITALS, " swap": BLANKS, "swap\n": BLANKS,
         "\trecompute": BLANKS, "Recompute": CAPITALS, "RECOMPUTE ": f"{CAPITALS} and {BLANKS}",
         "\nSwap\n": f"{CAPITALS} and {BLANKS}"}


@pytest.mark.parametrize("word", FORMS)
def test_the_right_word_in_another_form_is_told_which(word):
    def preemption_mode(tables, recompute_tokens, free_cpu_blocks, block_bytes,
                        link_bytes_per_s, prefill_tokens_per_s):
        right = SOLUTION(tables, recompute_tokens, free_cpu_blocks, block_bytes,
                         link_bytes_per_s, prefill_tokens_per_s)
        return word if word.strip().lower() == right else right

    result = lab06.check_preemption_mode(preemption_mode)
    assert not result.passed
    assert result.message.endswith(f"returned {word!r}, expected {word.strip().lower()!r}: "
                                   f"the word is right, {FORMS[word]}; return it exactly as "
                                   "the exercise writes it.")
