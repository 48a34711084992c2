"""The rules every exercise check follows, each kept in one place
(`pagedkit.exercises`), checked over every check (newcomer 11):

* a `None` from a function whose answers include `None` ("return None if
  there is none") is a wrong value like any other: the message says what was
  expected and gives the case's hint, not "did you forget `return`?"
  (finding 1: first_fit);
* a sequence answer is judged by its items, a tuple as a list (finding 2:
  chain_hashes refused a tuple of the right hashes, with a hint about
  ROOT_HASH);
* a message calls the learner's function by its own name, with the
  exercise's arguments only (finding 5: gather_kv showed `context_len=`);
* a hint's sentences begin with a capital letter (finding 6).
"""

import importlib
import inspect
import re

import numpy as np
import pytest
import torch

import pagedkit
from pagedkit.exercises import (
    CheckResult,
    as_items,
    is_sequence,
    lab02,
    lab04,
    same_items,
    stub_name,
)

from .test_exercises import load, pairs

#: The checks whose reference solution returns None for some case: found by
#: `test_a_sequence_in_another_container_passes`, which records it for every check.
NONE_IS_AN_ANSWER = {("lab02", "first_fit"), ("lab03", "token_at"), ("lab03", "append_slots"),
                     ("lab07", "copy_on_write")}


def function_checks():
    """Every check of a Python function (the Triton kernels' checks take kernels)."""
    for param in pairs():
        _path, lab, name = param.values
        if lab != "lab04c" and not name.endswith("kernel"):
            yield param


def check_of(lab, name):
    return importlib.import_module(f"pagedkit.exercises.{lab}").CHECKS[name]


def other_container(value):
    """Lists made tuples and tuples lists, at every depth; anything else as it is."""
    if isinstance(value, list):
        return tuple(other_container(v) for v in value)
    if isinstance(value, tuple):
        return [other_container(v) for v in value]
    return value


@pytest.mark.parametrize("path, lab, name", list(function_checks()))
def test_a_sequence_in_another_container_passes(path, lab, name):
    reference = getattr(load(path), name)
    returned_none = []

    def swapped(*args, **kwargs):
        got = reference(*args, **kwargs)
        returned_none.append(got is None)
        return other_container(got)

    result = check_of(lab, name)(swapped)
    assert result.passed, repr(result)
    assert any(returned_none) == ((lab, name) in NONE_IS_AN_ANSWER), \
        f"{lab}.{name}: None is {'' if any(returned_none) else 'not '}one of its answers"


@pytest.mark.parametrize("language", ["en", "zh-CN"])
@pytest.mark.parametrize("lab, name", sorted(NONE_IS_AN_ANSWER))
def test_a_wrong_none_shows_the_expected_value_and_the_hint(lab, name, language):
    pagedkit.set_language(language)
    try:
        message = check_of(lab, name)(lambda *args: None).message
    finally:
        pagedkit.set_language("en")
    assert "return`" not in message, message
    if language == "en":
        assert re.search(r"returned None, expected .+\.  Hint: \w", message), message
    else:
        assert re.search(r"返回了 None，应为 .+。  提示：\S", message), message


def test_first_fit_none_for_a_hole_that_fits():
    """Newcomer 11's answer: `>` for `>=` at the end of the space."""
    def ff_first_hole_any(regions, cap, size):
        cursor = 0
        for s, length in sorted(regions):
            if s - cursor >= size:
                return cursor
            cursor = s + length
        return cursor if cap - cursor > size else None

    message = lab02.check_first_fit(ff_first_hole_any).message
    assert message.startswith("ff_first_hole_any([(0, 90)], 100, 10) returned None, expected 90."
                              "  Hint: "), message


@pytest.mark.parametrize("path, lab, name", [p for p in function_checks()
                                             if tuple(p.values[1:]) not in NONE_IS_AN_ANSWER])
def test_none_where_it_is_never_an_answer_asks_for_return(path, lab, name):
    message = check_of(lab, name)(lambda *args: None).message
    assert "None" in message, message
    if "expected four lists" not in message and "two values" not in message:
        assert "did you forget `return`?" in message, message


@pytest.mark.parametrize("got, want, same", [
    ((1, 2), [1, 2], True),
    ([(1, "a"), (2, "b")], [[1, "a"], [2, "b"]], True),
    (((1, 2), [3]), [[1, 2], (3,)], True),
    (range(3), [0, 1, 2], True),
    ((x for x in [4, 5]), [4, 5], True),
    (np.array([1, 2]), [1, 2], True),
    (torch.tensor([1, 2]), (1, 2), True),
    ((b"ab", b"cd"), [b"ab", b"cd"], True),
    ([2, 1], [1, 2], False),               # order counts
    ({1, 2}, [1, 2], False),               # a set has no order
    ("ab", ["a", "b"], False),             # text is not a sequence of answers
    (b"ab", [97, 98], False),              # nor are bytes (a block's name)
    ({"a": 1}, ["a"], False),
    (3, [3], False),
])
def test_the_sequence_rule(got, want, same):
    assert same_items(got, want) is same


def test_a_generator_that_raises_is_a_failed_call():
    def blocks_per_request(output_lens, max_num_seqs, policy):
        yield 1
        raise ValueError("boom")

    message = check_of("lab05", "finish_steps")(blocks_per_request).message
    assert " raised ValueError: boom" in message, message


def test_the_sequence_rule_keeps_what_is_not_a_sequence():
    assert not is_sequence(torch.tensor(3)) and not is_sequence(np.int64(3))
    assert as_items({"a": (1, 2)}) == {"a": (1, 2)}


@pytest.mark.parametrize("path, lab, name", list(function_checks()))
def test_a_message_calls_the_learners_function_by_its_name(path, lab, name):
    def learners_own_name(*args, **kwargs):
        raise ValueError("boom")

    message = check_of(lab, name)(learners_own_name).message
    assert "learners_own_name(" in message, message
    call = message.split(" raised ")[0]
    parameters = inspect.signature(getattr(load(path), name)).parameters
    if lab == "lab04":  # its calls write tensors in words, and name the other arguments
        said = re.findall(r"\b(\w+)=", call)
        assert set(said) <= set(parameters), (said, list(parameters))


def test_gather_kv_shows_its_own_arguments():
    """Newcomer 11's wrong answer: reads the whole table, then trims."""
    def gather_wrong(cache, table, n):
        return cache[table.long()].reshape(-1, *cache.shape[2:])[:n]

    message = lab04.check_gather_kv(gather_wrong).message
    assert message.startswith("gather_wrong(cache [5 blocks x 4 slots x 2 KV heads x 8], "
                              "block_table=[0, 3, 12, 12], num_tokens=5) raised IndexError"), \
        message


def every_hint():
    """Every hint a check built on `check_function` can show (each case's), and
    those of the checks with cases of their own (append_slots, copy_on_write)."""
    from pagedkit.exercises import lab03, lab07

    for lab, name in {(p.values[1], p.values[2]) for p in function_checks()}:
        module = importlib.import_module(f"pagedkit.exercises.{lab}")
        cases = []
        real = getattr(module, "check_function", None)
        if real is None:
            continue
        module.check_function = (lambda name, fn, given, cases=cases, **kw:
                                 cases.extend(given) or CheckResult(name, True, ""))
        try:
            module.CHECKS[name](lambda *args: None)
        finally:
            module.check_function = real
        for case in cases:
            yield f"{lab}.{name}", case.hint() if callable(case.hint) else case.hint
    for *_, hint in lab03._APPEND_CASES:
        yield "lab03.append_slots", hint
    for *_, hint in lab07._cow_cases():
        yield "lab07.copy_on_write", hint


def test_every_hint_begins_its_sentences_with_a_capital():
    """Newcomer 11: "... no decode step. the prefill pass yields ..." — a
    shared sentence put after another's full stop began in lower case."""
    bad = sorted({(where, hint) for where, hint in every_hint()
                  if re.search(r"\w[.!?] +[a-z]", hint)})
    assert not bad, bad[:5]


def test_stub_name_names_the_stub_that_raised():
    def gather_kv(cache, table, n):
        raise NotImplementedError

    def paged_decode_attention(*args):
        return gather_kv(*args)

    def own(*args):
        raise NotImplementedError

    for fn, stub in ((paged_decode_attention, "gather_kv"), (own, "own")):
        try:
            fn(1, 2, 3)
        except NotImplementedError as err:
            assert stub_name(fn, err) == stub



@pytest.mark.parametrize("got, want, hint", [(2.0, 2, True), (np.float64(3.0), 3, True),
                                             (2, 2.0, False), (True, 1, False)])
def test_the_division_hint_only_for_a_float_where_an_int_is_expected(got, want, hint):
    from pagedkit.exercises import wrong_answer

    message = wrong_answer("f", "f()", got, want).message
    assert "its type is not" in message
    assert ("`//`" in message) is hint, message
