"""Lab 09's `best_num_drafts` check names a wrong formula for the expected
tokens per step before anything else; every other wrong answer keeps its hint,
one that raises too: the closed form divides by zero at a = 1 alone, so by the
one rule for raised answers (tests/labs/test_raised_answers.py) it gets that
case's hint, which says to mind the division (``(1.0, 0.1, 6) raised
ZeroDivisionError: ...  Hint: every draft accepted: ...``)."""

import pytest

from pagedkit.exercises import lab09

from . import wrong_answers as w

# wrong answer -> the E formula it used ("" for the right E, another mistake)
_WRONG_E = {w.drafts_linear_acceptance: "1 + k x a",
            w.drafts_without_own_token: "a + a^2 + ... + a^k"}


@pytest.mark.parametrize("wrong", w.WRONG[("lab09", "best_num_drafts")],
                         ids=lambda f: f.__name__)
def test_a_wrong_expected_tokens_formula_is_named_first(wrong):
    message = lab09.check_best_num_drafts(wrong).message
    formula = _WRONG_E.get(wrong, "")
    if " raised " in message:
        assert not formula, message
        assert message.endswith("(1.0, 0.1, 6) raised ZeroDivisionError: float division by "
                                "zero.  Hint: every draft accepted: E = k + 1 (mind a division "
                                "by zero), so the most drafts allowed win"), message
        return
    hint = message.split("Hint: ", 1)[1]
    if formula:
        assert hint.startswith(f"{message.split(' returned ')[1].split(',')[0]} is the best k "
                               f"if E(a, k) = {formula}, but that is not the expected")
        assert "E(a, k) = 1 + a + a^2 + ... + a^k = (1 - a^(k+1)) / (1 - a)" in hint
    else:
        assert "is the best k if E(a, k)" not in hint


def test_every_wrong_formula_the_check_knows_is_among_the_wrong_answers():
    assert set(lab09.WRONG_EXPECTED_TOKENS) == set(_WRONG_E.values())
