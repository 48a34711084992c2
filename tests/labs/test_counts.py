"""Two rules every exercise check follows, kept in `pagedkit.exercises`
(newcomer 13 finding 9, stop 38's "Left for #26"):

* a count is an int (`is_count`, applied by `same_items`): where the
  expected answer is an int, or holds ints (a list, a tuple, a dict), ``2.0``
  is refused as lab 00 refused it, and so is ``True``; ``np.int64(2)`` and a
  0-d integer tensor pass; a float expected stays any number of its value.
  Labs 01-09 accepted ``2.0`` (``2.0 == 2``) before;
* an endless generator fails its check, saying so, instead of hanging it: a
  check reads no more than one item past the expected answer's length.

Each is checked over every check of a Python function, on its reference
solution's answers made floats, bools, numpy and torch integers.
"""

import itertools

import numpy as np
import pytest
import torch

import pagedkit
from pagedkit.exercises import NOT_WRITTEN, is_count, lab04, lab07, lab08, same_items
from pagedkit.i18n import _

from .test_check_rules import check_of, function_checks
from .test_exercises import load

#: The checks whose reference answers hold an int (found by
#: `test_a_float_for_a_count_is_refused_by_its_type`, which records it for every check).
#: What a check says when a count came back as another type: alone, or inside an answer.
TYPE_MESSAGE = ("the value is right, its type is not.", "the values are right, not all their types")

INT_ANSWERS = {
    "lab00.blocks_for", "lab01.cached_kv_reads", "lab01.max_batch", "lab01.kv_bytes_per_token",
    "lab02.reservation_size", "lab02.first_fit", "lab02.waste_breakdown", "lab03.token_at",
    "lab03.blocks_needed", "lab03.append_slots", "lab05.finish_steps", "lab05.admit",
    "lab06.tokens_to_recompute", "lab07.copy_on_write", "lab07.sharing_blocks",
    "lab08.pack_step", "lab09.tokens_that_fit", "lab09.best_num_drafts",
}


def ints_made(value, make, changed):
    """`value` with each int in it (not a bool) replaced by `make(int)`, at every
    depth of lists, tuples and dicts; `changed` records each replacement."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        made = make(value)
        if made is not value:
            changed.append(value)
        return made
    if isinstance(value, (list, tuple)):
        return type(value)(ints_made(v, make, changed) for v in value)
    if isinstance(value, dict):
        return {k: ints_made(v, make, changed) for k, v in value.items()}
    return value


def run_with(lab, name, path, make):
    """The check run on the reference solution whose answers' ints are made
    by `make`: (result, the ints replaced)."""
    solution, changed = getattr(load(path), name), []
    result = check_of(lab, name)(
        lambda *a, **k: ints_made(solution(*a, **k), make, changed))
    return result, changed


@pytest.mark.parametrize("path, lab, name", list(function_checks()))
def test_a_float_for_a_count_is_refused_by_its_type(path, lab, name):
    result, changed = run_with(lab, name, path, float)
    assert bool(changed) == (f"{lab}.{name}" in INT_ANSWERS), \
        f"{lab}.{name}: its answers {'hold' if changed else 'hold no'} int"
    if changed:
        assert not result.passed, repr(result)
        assert any(said in result.message for said in TYPE_MESSAGE), repr(result)
        assert "Hint: a count is an int" in result.message and "`//`" in result.message, \
            repr(result)
    else:
        assert result.passed, repr(result)


@pytest.mark.parametrize("path, lab, name", list(function_checks()))
def test_a_bool_for_a_count_is_refused_by_its_type(path, lab, name):
    result, changed = run_with(lab, name, path, lambda n: bool(n) if n in (0, 1) else n)
    if changed:  # True and False stand for 1 and 0 in some case
        assert not result.passed, repr(result)
        assert any(said in result.message for said in TYPE_MESSAGE), repr(result)
        assert "Hint: a comparison gives a bool" in result.message, repr(result)
    else:
        assert result.passed, repr(result)


@pytest.mark.parametrize("make", [np.int64, np.uint64, torch.tensor],
                         ids=["np.int64", "np.uint64", "torch.tensor"])
@pytest.mark.parametrize("path, lab, name", [p for p in function_checks()
                                             if f"{p.values[1]}.{p.values[2]}" in INT_ANSWERS])
def test_a_numpy_or_torch_integer_is_a_count(path, lab, name, make):
    result, changed = run_with(lab, name, path, make)
    assert changed and result.passed, repr(result)


@pytest.mark.parametrize("path, lab, name", [p for p in function_checks()
                                             if f"{p.values[1]}.{p.values[2]}" in INT_ANSWERS])
def test_a_numpy_float_for_a_count_is_refused(path, lab, name):
    result, changed = run_with(lab, name, path, np.float64)
    assert changed and not result.passed, repr(result)
    assert any(said in result.message for said in TYPE_MESSAGE), repr(result)


@pytest.mark.parametrize("value, count", [
    (2, True), (0, True), (-3, True), (np.int64(2), True), (np.uint8(2), True),
    (np.array(2), True), (torch.tensor(2), True), (torch.tensor(2, dtype=torch.int32), True),
    (2.0, False), (np.float64(2.0), False), (np.float32(2), False), (torch.tensor(2.0), False),
    (True, False), (np.bool_(True), False), (torch.tensor(True), False),
    ("2", False), (None, False), ([2], False), (torch.tensor([2]), False), (2 + 0j, False),
])
def test_what_a_count_is(value, count):
    assert is_count(value) is count


@pytest.mark.parametrize("got, want, same", [
    (2, 2, True), (2.0, 2, False), (True, 1, False), (np.int64(2), 2, True),
    (2, 2.0, True), (2.0, 2.0, True), (np.float64(0.5), 0.5, True),   # a float expected
    ([1, 2.0], [1, 2], False), ((1, True), [1, 1], False), ([np.int64(1)], (1,), True),
    (torch.tensor([1, 2]), [1, 2], True), (torch.tensor([1.0, 2.0]), [1, 2], False),
    ({"a": 1.0}, {"a": 1}, False), ({"a": np.int64(1)}, {"a": 1}, True),
    ({"a": 1}, {"a": 1, "b": 2}, False), ([("a", 5.0)], [("a", 5)], False),
    ([1, 2], (1, 2, 3), False), (None, 0, False), (0, None, False),
])
def test_the_count_rule_in_same_items(got, want, same):
    assert same_items(got, want) is same


class Hung(Exception):
    pass


def endless(*args, **kwargs):
    """An endless generator over itertools.count(), as a check sees it; one
    that lists it is stopped after a million items (a check that hangs fails,
    and takes no more memory than that)."""
    def items():
        for n in itertools.count():
            if n == 10**6:
                raise Hung("the check read a million items: it would hang")
            yield n
    return items()


@pytest.mark.parametrize("path, lab, name", list(function_checks()))
def test_an_endless_generator_fails_without_hanging(path, lab, name):
    result = check_of(lab, name)(endless)
    assert not result.passed, repr(result)
    assert "Hung" not in result.message, repr(result)
    if lab != "lab04":  # lab 04's checks want tensors and never read an iterator
        assert (("returned an iterator that gives more than" in result.message
                 and "(an endless generator?)" in result.message)
                or "returned an iterator, expected " in result.message), repr(result)


@pytest.mark.parametrize("expected", [5, 2.5, None, True, "text"])
@pytest.mark.parametrize("items", [0, 1, 2])
def test_an_iterator_where_one_answer_is_expected_is_said_so(expected, items):
    """Review 41: with an answer that is not a sequence, a one-item generator
    was called "an iterator that gives more than 0 items (an endless
    generator?)"."""
    from pagedkit.exercises import call_learner

    result, failure = call_learner("x", lambda: iter([expected] * items), "f()",
                                   expected=expected)
    assert result is None and not failure.passed
    assert failure.message == f"f() returned an iterator, expected {expected!r}.", failure.message


_BARE_COUNT = """
import resource, sys
sys.path.insert(0, "tests")
from itertools import count
from labs.test_check_rules import check_of, function_checks
checks = [(lab, name) for _path, lab, name in (p.values for p in function_checks())]
for lab, name in checks:  # every grid built before the limit
    check_of(lab, name)(lambda *a, **k: None)
with open("/proc/self/status") as status:
    size = next(int(line.split()[1]) for line in status if line.startswith("VmSize:")) * 1024
resource.setrlimit(resource.RLIMIT_AS, (size + 2**30, size + 2**30))  # listing count(): MemoryError
for lab, name in checks:
    print(f"{lab}.{name}", repr(check_of(lab, name)(lambda *a, **k: count())), flush=True)
"""


def test_a_bare_itertools_count_fails_every_check():
    """``itertools.count()`` itself, whose listing no alarm interrupts (C code):
    run in a process whose memory is capped 1 GiB above what it holds, so
    that a check that lists it fails with MemoryError instead of taking the
    machine's memory."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    run = subprocess.run([sys.executable, "-c", _BARE_COUNT], cwd=root, capture_output=True,
                         text=True, timeout=600, env={**os.environ, "PYTHONPATH": os.pathsep.join(
                             [str(root / "src"), os.environ.get("PYTHONPATH", "")])})
    assert run.returncode == 0, run.stderr[-2000:]
    lines = run.stdout.splitlines()
    assert len(lines) == len(list(function_checks())), run.stdout
    for line in lines:
        assert "❌" in line and "MemoryError" not in line, line
        if not line.startswith("lab04."):
            assert ("returned an iterator that gives more than" in line
                    or "returned an iterator, expected " in line), line


@pytest.mark.parametrize("path, lab, name", list(function_checks()))
def test_a_finite_generator_of_the_answer_passes(path, lab, name):
    """The bound is one item past the answer: a generator of the right items
    is as right as their list (and one of more items is not)."""
    solution = getattr(load(path), name)

    def generated(*args, **kwargs):
        got = solution(*args, **kwargs)
        return (item for item in got) if isinstance(got, list) else got

    assert check_of(lab, name)(generated).passed


def test_one_item_too_many_is_said_with_the_expected_length():
    def one_more(output_lens, max_num_seqs, policy):
        yield from [*output_lens, 0]  # right for a batch of everyone, one item too many

    message = check_of("lab05", "finish_steps")(one_more).message
    assert message == ("one_more([3, 1, 2], 3, 'static') returned an iterator that gives more "
                       "than 3 items (an endless generator?), expected [3, 1, 2]."), message


def test_an_endless_generator_inside_an_answer_ends_the_comparison():
    assert not same_items([endless()], [[0, 1, 2]])
    assert not same_items({"a": endless()}, {"a": [0, 1]})

    def endless_fields(scheduled, block_size):
        return tuple(endless() for _ in range(4))

    message = lab08.check_pack_step(endless_fields).message
    assert "positions is [0, 1, 2, 3, 4, 5, 6], expected [0, 1, 2, 3, 4, 5]" in message, message


def test_pack_step_takes_tensors_of_counts_and_refuses_floats():
    solution = load(next(p for p in function_checks() if p.values[2] == "pack_step").values[0])

    def as_tensors(dtype):
        return lambda *a: tuple(torch.tensor(f, dtype=dtype) for f in solution.pack_step(*a))

    assert lab08.check_pack_step(as_tensors(torch.int64)).passed
    assert lab08.check_pack_step(as_tensors(torch.int32)).passed
    message = lab08.check_pack_step(as_tensors(torch.float32)).message
    assert "the values are right, not all their types: tensor(0.) (Tensor) stands where 0 " \
           "(int) is expected" in message and "`//`" in message, message


@pytest.mark.parametrize("language", ["en", "zh-CN"])
def test_a_type_message_inside_an_answer_in_both_languages(language):
    pagedkit.set_language(language)
    try:
        message = check_of("lab05", "finish_steps")(
            lambda lens, seats, policy: [float(n) for n in lens]).message
        hint = _("a count is an int, but `/` (and numpy's ceil) give floats, even 8 / 4 = "
                 "2.0: count with `//`, which keeps an int (to round up: -(-a // b))")
    finally:
        pagedkit.set_language("en")
    assert hint in message, message
    if language == "en":
        assert "the values are right, not all their types: 3.0 (float) stands where 3 (int) " \
               "is expected." in message, message
    else:
        assert "3.0（float）" in message and "types" not in message, message


# ------------------------------------------ lab 04 and lab 07 through the shared helpers
@pytest.mark.parametrize("name", ["gather_kv", "paged_decode_attention", "online_softmax_update"])
def test_lab04_says_a_missing_return_through_wrong_answer(name, monkeypatch):
    said = []
    real = lab04.wrong_answer

    def spy(*args, **kwargs):
        said.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(lab04, "wrong_answer", spy)
    message = lab04.CHECKS[name](lambda *args: None).message
    assert said and said[0][2] is None, said
    assert " returned None — did you forget `return`?" in message, message


@pytest.mark.parametrize("language", ["en", "zh-CN"])
def test_lab07_copy_on_write_says_not_written_through_not_written(language, monkeypatch):
    """A learner's NotImplementedError where the pool is full (the case that must
    raise) reads as every other check's "not written yet"."""
    solution = load(next(p for p in function_checks() if p.values[2] == "copy_on_write")
                    .values[0]).copy_on_write

    def copy_on_write(ref_counts, free_blocks, table):
        if ref_counts[table[-1]] > 1 and not free_blocks:
            raise NotImplementedError
        return solution(ref_counts, free_blocks, table)

    said = []
    real = lab07.not_written
    monkeypatch.setattr(lab07, "not_written", lambda *a: said.append(a) or real(*a))
    pagedkit.set_language(language)
    try:
        message, want = lab07.check_copy_on_write(copy_on_write).message, _(NOT_WRITTEN)
    finally:
        pagedkit.set_language("en")
    assert said and message == want, message


#: the checks whose first case expects one answer (not a sequence, not lab 04's tensors): a
#: generator there fails unread, with GENERATOR_HINT (14 of the 26)
ONE_ANSWER = {("lab00", "blocks_for"), ("lab01", "cached_kv_reads"), ("lab01", "max_batch"),
              ("lab01", "kv_bytes_per_token"), ("lab02", "reservation_size"),
              ("lab02", "first_fit"), ("lab02", "waste_breakdown"), ("lab03", "token_at"),
              ("lab03", "blocks_needed"), ("lab06", "tokens_to_recompute"),
              ("lab06", "preemption_mode"), ("lab07", "copy_on_write"),
              ("lab09", "tokens_that_fit"), ("lab09", "best_num_drafts")}


@pytest.mark.parametrize("path, lab, name", list(function_checks()))
def test_a_generator_where_one_answer_is_expected_says_why_it_never_ran(path, lab, name):
    """Newcomer 28 (N5): lab 03's append_slots written with ``yield`` got "returned an
    iterator, expected None." and no hint, though the learner's ``return`` never ran.
    Every check, given the solution's answer yielded: where one answer is expected, the
    verdict ends with the hint about ``yield``; elsewhere the hint is not said."""
    from pagedkit.exercises import GENERATOR_HINT, hint_text

    solution = getattr(load(path), name)

    def yielded(*args, **kwargs):
        yield solution(*args, **kwargs)

    message = check_of(lab, name)(yielded).message
    said = message.endswith(hint_text(GENERATOR_HINT))
    assert said is ((lab, name) in ONE_ANSWER), message
    assert said is ("returned an iterator, expected " in message), message


def test_append_slots_as_a_generator_gets_the_yield_hint_where_none_is_expected():
    """Newcomer 28's shape: the slots yielded (right where slots are expected), and the
    refusal's ``return None`` never run."""
    from pagedkit.exercises import GENERATOR_HINT, hint_text, lab03

    (path,) = (p for p, lab, name in (q.values for q in function_checks())
               if (lab, name) == ("lab03", "append_slots"))
    solution = load(path).append_slots

    def append_slots(*args, **kwargs):
        slots = solution(*args, **kwargs)
        if slots is not None:
            yield from slots

    message = lab03.check_append_slots(append_slots).message
    assert "returned an iterator, expected None." in message, message
    assert message.endswith(hint_text(GENERATOR_HINT)), message
    from pagedkit.i18n import speaking
    with speaking("zh-CN"):
        message = lab03.check_append_slots(append_slots).message
    assert "生成器函数" in message and "`yield`" in message, message


def test_the_yield_hint_is_for_a_generator_function_alone():
    """``iter(...)`` and a generator expression have no ``yield`` the learner wrote."""
    from pagedkit.exercises import GENERATOR_HINT, call_learner, hint_text

    for answer in (lambda: iter([5]), lambda: (n for n in [5])):
        _result, failure = call_learner("x", answer, "f()", expected=5)
        assert failure.message == "f() returned an iterator, expected 5.", failure.message

    def gives():
        yield 5
    _result, failure = call_learner("x", gives, "f()", expected=5)
    assert failure.message == ("f() returned an iterator, expected 5."
                               + hint_text(GENERATOR_HINT)), failure.message
