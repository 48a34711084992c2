"""Lab 08's `top_p_filter` check (newcomer 30, N4 and N6): an answer of another
dtype gets a ❌ naming its dtype, never a crash (float64 and the rest raised
"Double did not match Float" in `torch.allclose`), and a wrong answer's hint
names its mistake where the check can tell it, instead of the case's fixed hint
("sort by probability" to answers that sort right, a bool mask shown as
``tensor([1.00, ...])``). In English and in Chinese."""

import pytest
import torch

from pagedkit.exercises import hint_text, lab08

from .wrong_answers import top_p_drops_the_crossing_token, top_p_strictly_above


def right(logits, top_p):
    values, order = torch.sort(logits, descending=True)
    probs = values.softmax(-1)
    out = logits.clone()
    out[order[(probs.cumsum(-1) - probs) >= top_p]] = float("-inf")
    return out


def _filled(value):
    def answer(logits, top_p):
        out = right(logits, top_p)
        out[torch.isinf(out)] = value
        return out
    return answer


def keeps_one_more(logits, top_p):
    values, order = torch.sort(logits, descending=True)
    probs = values.softmax(-1)
    out = logits.clone()
    out[order[(probs.cumsum(-1) - 2 * probs) >= top_p]] = float("-inf")
    return out


def unsorted(logits, top_p):
    probs = logits.softmax(-1)
    out = logits.clone()
    out[(probs.cumsum(-1) - probs) >= top_p] = float("-inf")
    return out


def drops_all(logits, top_p):
    return torch.full_like(logits, float("-inf"))


def _hint(message):
    """The hint of a verdict, after the language's "Hint:"."""
    return message.split(hint_text("@").split("@")[0], 1)[1]


DTYPES = [torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.int8,
          torch.uint8]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_another_dtype_is_refused_by_name_never_a_crash(dtype, language):
    result = lab08.check_top_p_filter(lambda logits, top_p: right(logits, top_p).to(dtype))
    assert not result.passed
    name = str(dtype).removeprefix("torch.")
    assert f"dtype=torch.{name}" in result.message or name == "int64", result.message
    hint = _hint(result.message)
    assert name in hint and "float32" in hint, result.message
    if language == "en":
        assert hint == f"it returned {name} logits: return the logits' own dtype (float32)"
    else:
        assert "dtype" in hint and "it returned" not in hint, hint


#: wrong answer -> the start of its hint in English, and a piece of it in Chinese
MISTAKES = {
    "mask": (lambda logits, top_p: ~torch.isinf(right(logits, top_p)),
             "this is a mask (True where a token is kept)", "掩码"),
    "bool": (lambda logits, top_p: right(logits, top_p).to(torch.bool),
             "this is a mask (True where a token is kept)", "掩码"),
    "zero fill": (_filled(0.0), "a dropped token must be -inf, not 0.0", "不是 0.0"),
    "nan fill": (_filled(float("nan")), "a dropped token must be -inf, not nan", "不是 nan"),
    "-1e9 fill": (_filled(-1e9), "a dropped token must be -inf, not -1000000000.0",
                  "不是 -1000000000.0"),
    "probabilities": (lambda logits, top_p: right(logits, top_p).softmax(-1),
                      "these are probabilities (they sum to 1)", "概率"),
    "log_softmax": (lambda logits, top_p: right(logits, top_p).log_softmax(-1),
                    "the kept tokens' logits changed", "被改动"),
    "list": (lambda logits, top_p: right(logits, top_p).tolist(),
             "return a torch tensor, like the logits you were given (got list)", "list"),
    "numpy": (lambda logits, top_p: right(logits, top_p).numpy(),
              "return a torch tensor, like the logits you were given (got ndarray)", "ndarray"),
    "keeps all": (lambda logits, top_p: logits.clone(),
                  "token 3 (logit -1.00) is kept, but the tokens more likely than it already "
                  "hold 0.9697 of the probability, which reaches top_p = 0.9: drop it",
                  "0.9697"),
    "keeps one more": (keeps_one_more, "token 3 (logit 2.00) is kept, but the tokens more "
                       "likely than it already hold 0.6587", "0.6587"),
    "drops the crossing token": (top_p_drops_the_crossing_token, "token 2 (logit 0.50) is dropped, "
                                 "but the tokens more likely than it hold only 0.8337", "0.8337"),
    "> for >=": (top_p_strictly_above, "token 0 (logit 0.69) is kept, but the tokens more likely "
                 "than it already hold exactly top_p = 0.75", ">=，而不是 >"),
    "unsorted": (unsorted, "the tokens you keep are not the most likely ones", "排序"),
    "drops all": (drops_all, "the most likely token (token 0) is always kept", "总是保留"),
}


@pytest.mark.parametrize("mistake", MISTAKES)
def test_the_hint_names_the_mistake(mistake, language):
    answer, english, chinese = MISTAKES[mistake]
    result = lab08.check_top_p_filter(answer)
    assert not result.passed
    hint = _hint(result.message)
    if language == "en":
        assert hint.startswith(english), result.message
    else:
        assert chinese in hint and english not in hint, result.message
    if mistake != "unsorted":  # these all sort right: never told to sort
        assert "sort" not in hint and "排序" not in hint, result.message


def test_a_bool_answer_shows_as_bools():
    result = lab08.check_top_p_filter(MISTAKES["mask"][0])
    assert "returned tensor([ True,  True,  True, False])" in result.message, result.message


def test_the_right_answer_and_a_float32_numpy_round_trip_pass(language):
    assert lab08.check_top_p_filter(right).passed
    assert lab08.check_top_p_filter(
        lambda logits, top_p: torch.from_numpy(right(logits, top_p).numpy().copy())).passed
