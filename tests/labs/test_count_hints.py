"""A wrong answer's hint fits the answer, for the two checks whose answer is one
count and whose hints misled (issue #26 leftovers, in both languages):

* lab 01's max_batch (newcomer 28, N3): a float such as ``(g - n*b) / (s*k)``
  got the case's hint, ending "= 10.1", which read as confirming 10.10; it
  never said that a fraction of a sequence does not fit. A fraction gets that
  note now (round down, with ``//``); the cases whose quotient has a fraction
  say it and what it rounds down to (10.1, so 10), so an answer rounded up or
  to the nearest hears "round down" too;
* lab 09's best_num_drafts (newcomer 27, N4): every wrong answer was told
  "more drafts are not always better", also one that drafts too few; ``'3'``
  and ``True`` got no type note where ``8.0`` got the float one. The hint now
  says more or fewer than the best k (with both rates), or past the allowed
  range; text, a bool and a fraction get the type note of their kind, by
  `wrong_answer`'s notes (`pagedkit.exercises._count_notes`).

Each wrong answer is built from the reference solution, so it fails where the
mistake first shows. The last two of each table (None, the right value as a
float) passed before too: they hold what stays as it was.
"""

import math

import numpy as np
import pytest

from pagedkit.exercises import lab01, lab06, lab09

from .test_exercises import SOLUTIONS, load

REF_BATCH = load(next(SOLUTIONS.glob("lab01_*.py"))).max_batch
REF_DRAFTS = load(next(SOLUTIONS.glob("lab09_*.py"))).best_num_drafts

FLOOR = ("A sequence whose cache does not fit whole does not fit: round down",
         "缓存放不下一整份的序列就是放不下：向下取整")
FRACTION = ("a fraction of a sequence does not fit: a sequence's cache fits whole or not at all, "
            "so round down: divide with `//`, which keeps an int",
            "零点几个序列是放不下的：一个序列的缓存要么整份放下，要么放不下，"
            "所以要向下取整：用 `//` 来除，结果保持 int")
TEXT = ("text (a str) is not a count, even where it reads as one ('8' != 8): return the number "
        "itself, an int",
        "文本（str）不是个数，哪怕它读起来像一个数（'8' != 8）：返回数本身，一个 int")
BOOL = ("a comparison gives a bool (True or False), not a count, although True == 1: return the "
        "number itself, an int",
        "比较给出的是 bool（True 或 False），不是个数，尽管 True == 1：返回数本身，一个 int")
FLOAT = ("a count is an int, but `/` (and numpy's ceil) give floats, even 8 / 4 = 2.0: count with "
         "`//`, which keeps an int (to round up: -(-a // b))",
         "个数是 int，但 `/`（以及 numpy 的 ceil）给出的是 float，连 8 / 4 也得 2.0：用 `//` 来数，"
         "结果保持 int（向上取整：-(-a // b)）")
NO_RETURN = ("returned None — did you forget `return`?", "返回了 None——是不是忘了 `return`？")
VALUE_RIGHT = ("the value is right, its type is not.", "数值对了，类型不对。")


def quotient(g, n, b, k, s):
    return max(0, (g - n * b) / (s * k))


#: a wrong max_batch -> (en, zh): how its verdict's hint ends
BATCH = {
    "too_many": (lambda *a: REF_BATCH(*a) + 1, (
        "= 10.1, so 10. " + FLOOR[0], "= 10.1，所以是 10。" + FLOOR[1])),
    "too_few": (lambda *a: REF_BATCH(*a) - 1, (
        "= 10.1, so 10. " + FLOOR[0], "= 10.1，所以是 10。" + FLOOR[1])),
    "rounded_up": (lambda *a: math.ceil(quotient(*a)), (
        "= 10.1, so 10. " + FLOOR[0], "= 10.1，所以是 10。" + FLOOR[1])),
    "rounded_to_nearest": (lambda *a: round(quotient(*a)), (
        "35.7, so 35 sequences, not 2 x 10. " + FLOOR[0],
        "35.7，所以能放 35 个序列，而不是 2 × 10。" + FLOOR[1])),
    "kv_in_int8_too": (lambda g, n, b, k, s: REF_BATCH(g, n, b, k // 2 if b == 1 else k, s), (
        "the KV cache keeps its own dtype. 16.5, so 16",
        "KV Cache 保持它自己的 dtype。16.5，所以是 16")),
    "float_quotient": (quotient, FRACTION),
    "half_more": (lambda *a: REF_BATCH(*a) + 0.5, FRACTION),
    "numpy_float_quotient": (lambda *a: np.float64(quotient(*a)), FRACTION),
    "str_of_right": (lambda *a: str(REF_BATCH(*a)), TEXT),
    "str_3": (lambda *a: "3", TEXT),
    "true": (lambda *a: True, BOOL),
    "false": (lambda *a: False, BOOL),
    "none": (lambda *a: None, NO_RETURN),
    "right_as_float": (lambda *a: float(REF_BATCH(*a)), FLOAT),
}


def _rates(k, best):
    """What the lab 09 hint says of k against the best k on (0.8, 0.05, 10)."""
    def rate(n):
        return sum(0.8 ** i for i in range(n + 1)) / (1 + n * 0.05)
    return (f"tokens per unit of time {rate(k):.4g} at k = {k}, {rate(best):.4g} at k = {best}; ",
            f"每单位时间的 token 数，k = {k} 时为 {rate(k):.4g}，"
            f"k = {best} 时为 {rate(best):.4g}；")


COST = ("a step with k drafts costs 1 + k x draft_cost: maximize E(a, k) / (1 + k x draft_cost)",
        "带 k 个草稿的一步耗费 1 + k × draft_cost：要最大化 E(a, k) / (1 + k × draft_cost)")
MORE = ("more drafts are not always better: ", "草稿并不是越多越好：")
FEWER = ("fewer drafts are not always better either: ", "草稿也并不是越少越好：")


def _directed(words, k, best=8):
    rates = _rates(k, best)
    return tuple(w + r + c for w, r, c in zip(words, rates, COST, strict=True))


#: a wrong best_num_drafts -> (en, zh): how its verdict's hint begins (on its first case,
#: (0.8, 0.05, 10), best k = 8, but for the grid's)
DRAFTS = {
    "one_more": (lambda *a: REF_DRAFTS(*a) + 1, _directed(MORE, 9)),
    "one_fewer": (lambda *a: REF_DRAFTS(*a) - 1, _directed(FEWER, 7)),
    "numpy_one_more": (lambda *a: np.int64(REF_DRAFTS(*a) + 1), _directed(MORE, 9)),
    "whole_float_one_fewer": (lambda *a: float(REF_DRAFTS(*a) - 1), _directed(FEWER, 7)),
    "always_0": (lambda *a: 0, _directed(FEWER, 0)),
    "always_1": (lambda *a: 1, _directed(FEWER, 1)),
    "always_9": (lambda *a: 9, _directed(MORE, 9)),
    "always_20": (lambda *a: 20, (
        "at most max_drafts = 10 drafts are allowed, not 20; " + COST[0],
        "最多只允许 max_drafts = 10 个草稿，不能是 20；" + COST[1])),
    "always_minus_1": (lambda *a: -1, (
        "k counts drafts: 0 or more, not -1; " + COST[0],
        "k 是草稿的个数：0 或更多，不能是 -1；" + COST[1])),
    # right on the lab's cases, one too many on the grid's first with max_drafts 3,
    # (0.0, 0.0, 3): best k = 0 (every k gives 1 token per unit of time)
    "one_more_in_the_grid": (lambda a, c, m: REF_DRAFTS(a, c, m) + (m == 3), (
        "more drafts are not always better: tokens per unit of time 1 at k = 1, 1 at k = 0; "
        "no draft is ever accepted: ",
        "草稿并不是越多越好：每单位时间的 token 数，k = 1 时为 1，k = 0 时为 1；")),
    "str_3": (lambda *a: "3", TEXT),
    "str_of_right": (lambda *a: str(REF_DRAFTS(*a)), TEXT),
    "true": (lambda *a: True, BOOL),
    "false": (lambda *a: False, BOOL),
    "half_more": (lambda *a: REF_DRAFTS(*a) + 0.5, FLOAT),
    "numpy_half_fewer": (lambda *a: np.float64(REF_DRAFTS(*a) - 0.5), FLOAT),
    "none": (lambda *a: None, NO_RETURN),
    "right_as_float": (lambda *a: float(REF_DRAFTS(*a)), FLOAT),
}


def hint_of(message: str, language: str) -> str:
    return message.split("Hint: " if language == "en" else "提示：", 1)[1]


@pytest.mark.parametrize("wrong", BATCH)
def test_max_batch_hint_fits_the_answer(wrong, language):
    fn, said = BATCH[wrong]
    result = lab01.check_max_batch(fn)
    assert not result.passed, repr(result)
    expected = said[language != "en"]
    if said is NO_RETURN:
        assert result.message.endswith(expected), repr(result)
        return
    if said is FLOAT:  # the right value: wrong_answer's own type note, as before
        assert VALUE_RIGHT[language != "en"] in result.message, repr(result)
    assert hint_of(result.message, language).endswith(expected), repr(result)


@pytest.mark.parametrize("wrong", DRAFTS)
def test_best_num_drafts_hint_fits_the_answer(wrong, language):
    fn, said = DRAFTS[wrong]
    result = lab09.check_best_num_drafts(fn)
    assert not result.passed, repr(result)
    expected = said[language != "en"]
    if said is NO_RETURN:
        assert result.message.endswith(expected), repr(result)
        return
    if wrong == "right_as_float":
        assert VALUE_RIGHT[language != "en"] in result.message, repr(result)
    assert hint_of(result.message, language).startswith(expected), repr(result)
    if said in (TEXT, BOOL, FLOAT):  # the note alone: no direction for what is no count
        assert hint_of(result.message, language) == expected, repr(result)


def test_the_right_answers_still_pass():
    assert lab01.check_max_batch(REF_BATCH).passed
    assert lab09.check_best_num_drafts(REF_DRAFTS).passed


#: the other checks of labs 01, 06 and 09 whose answer is one count: the same type notes
#: (`one_count`) for what no count can be; their cases' hints explain a value and
#: claim no direction, so a wrong whole number keeps them
ONE_COUNT = {
    "lab01.cached_kv_reads": (lab01.check_cached_kv_reads, "lab01_*.py", "cached_kv_reads"),
    "lab01.kv_bytes_per_token": (lab01.check_kv_bytes_per_token, "lab01_*.py",
                                 "kv_bytes_per_token"),
    "lab06.tokens_to_recompute": (lab06.check_tokens_to_recompute, "lab06_*.py",
                                  "tokens_to_recompute"),
    "lab09.tokens_that_fit": (lab09.check_tokens_that_fit, "lab09_*.py", "tokens_that_fit"),
}
KINDS = {
    "str_of_right": (str, TEXT),
    "str_3": (lambda n: "3", TEXT),
    "true": (lambda n: True, BOOL),
    "false": (lambda n: False, BOOL),
    "half_more": (lambda n: n + 0.5, FLOAT),
    "numpy_half_fewer": (lambda n: np.float64(n - 0.5), FLOAT),
    "none": (lambda n: None, NO_RETURN),
    "right_as_float": (float, FLOAT),
}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("check", ONE_COUNT)
def test_a_count_of_another_kind_gets_its_type_note(check, kind, language):
    run, pattern, name = ONE_COUNT[check]
    reference = getattr(load(next(SOLUTIONS.glob(pattern))), name)
    make, said = KINDS[kind]
    result = run(lambda *a, **k: make(reference(*a, **k)))
    assert not result.passed, repr(result)
    expected = said[language != "en"]
    if said is NO_RETURN:
        assert result.message.endswith(expected), repr(result)
        return
    if kind == "right_as_float" or (kind == "false" and reference_is_zero(result)):
        assert VALUE_RIGHT[language != "en"] in result.message, repr(result)
    assert hint_of(result.message, language) == expected, repr(result)


def reference_is_zero(result) -> bool:
    """False where 0 is expected is refused by its type alone (the case says so)."""
    return "(bool)" in result.message
