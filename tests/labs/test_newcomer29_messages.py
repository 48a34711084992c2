"""Newcomer 29's findings on labs 02, 03 and 04c: wrong answers whose verdict
named another mistake, a pass message that was not true, a plural, and a
stride named two ways. Each wrong answer in English and in Chinese."""

import importlib.util
import json
from pathlib import Path

import pytest

from pagedkit.exercises import lab02, lab03, lab04c
from pagedkit.i18n import join_names

from .wrong_answers import _solution

ROOT = Path(__file__).resolve().parents[2]


# ------------------------------------------------ lab 02 exercise 3 (finding 13)
def _waste(reservations, capacity, next_size):
    return _solution("lab02_contiguous_waste").waste_breakdown(reservations, capacity, next_size)


def _without(key):
    def answer(reservations, capacity, next_size):
        parts = _waste(reservations, capacity, next_size)
        del parts[key]
        return parts
    answer.__name__ = f"waste_without_{key}"
    return answer


def _with_extra(key):
    def answer(reservations, capacity, next_size):
        return {**_waste(reservations, capacity, next_size), key: 0}
    answer.__name__ = f"waste_with_{key}"
    return answer


def waste_as_tuple(reservations, capacity, next_size):
    return tuple(_waste(reservations, capacity, next_size).values())


def waste_as_list(reservations, capacity, next_size):
    return list(_waste(reservations, capacity, next_size).values())


def waste_renamed(reservations, capacity, next_size):
    parts = _waste(reservations, capacity, next_size)
    parts["external"] = parts.pop("external_fragmentation")
    return parts


NOT_THE_KEYS = [*(_without(key) for key in lab02.PARTS), _with_extra("free"),
                _with_extra("total"), waste_as_tuple, waste_as_list, waste_renamed]


@pytest.mark.parametrize("answer", NOT_THE_KEYS, ids=lambda f: f.__name__)
def test_a_waste_breakdown_without_the_four_keys_hears_the_keys(answer, language):
    """A dict missing a key, one with a key too many, a renamed key, a tuple
    or a list of the four counts got the first case's arithmetic hint: now
    the keys to return, and which are missing or extra."""
    result = lab02.check_waste_breakdown(answer)
    assert not result.passed
    keys = join_names(repr(part) for part in lab02.PARTS)  # one quote, the language's comma
    assert keys in result.message, result.message
    assert "5 prompt tokens" not in result.message     # not the case's hint
    if language == "en":
        name = answer.__name__
        if name.startswith("waste_without_") or name == "waste_renamed":
            assert "missing '" in result.message
        if name.startswith("waste_with_") or name == "waste_renamed":
            assert "extra '" in result.message
        if name in ("waste_as_tuple", "waste_as_list"):
            assert "return a dict, not a " in result.message
    else:
        assert "恰好包含这 4 个键" in result.message


def test_a_waste_breakdown_with_the_four_keys_keeps_the_cases_hint():
    """A dict of the four keys gets no keys hint: the case's own (two parts
    wrong), or, with one part wrong, that part's rule (newcomer 37)."""
    def waste_wrong_two(reservations, capacity, next_size):
        return {**_waste(reservations, capacity, next_size), "internal_fragmentation": 0,
                "reservation": 0}
    result = lab02.check_waste_breakdown(waste_wrong_two)
    assert not result.passed and "5 prompt tokens" in result.message
    def waste_wrong_internal(reservations, capacity, next_size):
        return {**_waste(reservations, capacity, next_size), "internal_fragmentation": 0}
    result = lab02.check_waste_breakdown(waste_wrong_internal)
    assert not result.passed and result.message.endswith(
        "only internal_fragmentation is wrong here (0, expected 17): internal fragmentation is "
        "the slots a region will never use: size - need")
    assert lab02.check_waste_breakdown(_waste).passed


# ---------------------------------------------------- lab 03 token_at (finding 11)
def _token_at_with(sentinel):
    def answer(table, block_size, num_tokens, slot):
        block, offset = divmod(slot, block_size)
        if block not in table:
            return sentinel
        position = table.index(block) * block_size + offset
        return position if position < num_tokens else sentinel
    answer.__name__ = f"token_at_sentinel_{sentinel}"
    return answer


@pytest.mark.parametrize("sentinel", [-1, -2, -100])
def test_token_at_with_a_negative_stand_in_hears_none(sentinel, language):
    result = lab03.check_token_at(_token_at_with(sentinel))
    assert not result.passed
    assert f"None, not {sentinel}" in result.message or f"None，而不是 {sentinel}" in \
        result.message, result.message
    assert "num_tokens" not in result.message.split("Hint")[-1].split("提示")[-1]


def test_token_at_other_mistakes_keep_their_hints():
    def no_tail(table, block_size, num_tokens, slot):
        block, offset = divmod(slot, block_size)
        return table.index(block) * block_size + offset if block in table else None
    result = lab03.check_token_at(no_tail)
    assert not result.passed and "check the position against num_tokens" in result.message
    assert "stand-in" not in result.message


# ------------------------------------------------ lab 03 append_slots (finding 7)
def _append(table, n, new, bs, free):
    return _solution("lab03_paging").append_slots(table, n, new, bs, free)


def append_copies_both(table, n, new, bs, free):
    return _append(list(table), n, new, bs, list(free))


def append_copies_the_table(table, n, new, bs, free):
    return _append(table[:], n, new, bs, free)


def append_copies_the_free_list(table, n, new, bs, free):
    return _append(table, n, new, bs, free.copy())


def append_rebinds_the_free_list(table, n, new, bs, free):
    need = -(-(n + new) // bs) - len(table)
    if need > len(free):
        return None
    slots = []
    for i in range(n, n + new):
        if i % bs == 0 and i // bs >= len(table):
            table.append(free[0])
            free = free[1:]                        # a new list: the caller's keeps its head
        slots.append(table[i // bs] * bs + i % bs)
    return slots


COPIES = {append_copies_both: ("block_table", "free_blocks"),
          append_copies_the_table: ("block_table",),
          append_copies_the_free_list: ("free_blocks",),
          append_rebinds_the_free_list: ("free_blocks",)}


@pytest.mark.parametrize("answer", COPIES, ids=lambda f: f.__name__)
def test_append_slots_that_changes_a_copy_hears_in_place(answer, language):
    """The slots are right, the caller's lists are not: the hint says which
    list came back unchanged and to change both in place, not the case's
    arithmetic (which the answer got right)."""
    result = lab03.check_append_slots(answer)
    assert not result.passed
    untouched = COPIES[answer]
    if language == "en":
        assert "change block_table and free_blocks in place" in result.message
        if len(untouched) == 2:
            assert "left block_table and free_blocks as the caller passed them" in result.message
        else:
            assert f"left {untouched[0]} as the caller passed it" in result.message
    else:
        assert "请原地修改 block_table 和 free_blocks" in result.message
        assert all(name in result.message for name in untouched)
    assert "head of the free list" not in result.message


# ------------------------------------------------------------ lab 04c, no Triton
def test_merge_cases_speak_of_one_split_and_one_head_in_the_singular(language):
    """ "2 splits for 1 heads", "1 splits for 2 heads": each count by ngettext."""
    for case in lab04c.PUZZLES["merge"]:
        text = lab04c._DESCRIBE["merge"](case)
        assert "1 heads" not in text and "1 splits" not in text, text
        if language == "en":
            heads, splits = case[0], case[1]
            assert text.startswith(f"{splits} split{'s' * (splits != 1)} for "
                                   f"{heads} head{'s' * (heads != 1)}"), text


@pytest.mark.parametrize("puzzle", sorted(lab04c.PUZZLES))
def test_the_pass_message_claims_only_what_the_puzzle_has(puzzle, language):
    """The merge has no strides and no blocks (its inputs are contiguous)."""
    cases = lab04c.PUZZLES[puzzle]
    result = lab04c._verdict(puzzle, [{"max_diff": 0.0, "nan": False}] * len(cases), 0, "")
    assert result.passed
    padded = "padded strides" in result.message or "带填充的 stride" in result.message
    assert padded == (puzzle != "merge"), result.message


def test_an_unscaled_decode_hears_to_multiply_by_scale(language):
    results = [{"nan": False, "max_diff": 0.9, "lse_diff": 1.0, "unscaled_right": True}]
    result = lab04c._verdict("decode", results, 0, "")
    assert not result.passed
    assert "scale" in result.message and "1/sqrt(HEAD_DIM)" in result.message
    if language == "en":
        assert "matches the attention over unscaled scores" in result.message


def test_every_decode_hint_ladder_starts_with_the_scale():
    assert "q . k * scale" in lab04c.hint("decode", 1)


@pytest.mark.parametrize("result, specific", [
    ({"error": "NameError: name 'x' is not defined"}, False),
    ({"max_diff": 0.5, "nan": False}, False),
    ({"max_diff": 0.0, "nan": False, "tail_written": True}, True),
    ({"max_diff": 0.0, "nan": True}, True)])
def test_the_first_rung_says_it_is_a_general_hint(result, specific, language):
    """Every failure ends with rung 1 of the ladder, which may not be about
    the failure: it says so."""
    verdict = lab04c._verdict("gather", [result], 1, "")
    assert not verdict.passed
    assert ("general hint, not drawn from this failure" in verdict.message
            or "本谜题的通用提示" in verdict.message), verdict.message


def test_lab04c_names_the_token_stride_as_lab_04_does():
    """Lab 04's kernel calls the cache's per-token stride stride_token; 04c
    called it stride_slot, so lab 04's lookup pasted into puzzle 3 raised a
    NameError."""
    for path in ("labs/04c_triton_puzzles.ipynb", "labs/zh-CN/04c_triton_puzzles.ipynb",
                 "labs/solutions/lab04c_triton_puzzles.py", "src/pagedkit/exercises/lab04c.py"):
        text = (ROOT / path).read_text()
        assert "stride_slot" not in text, path
        assert "stride_token" in text, path
    lab04 = json.loads((ROOT / "labs/04_paged_attention.ipynb").read_text())
    assert any("stride_token" in "".join(cell["source"]) for cell in lab04["cells"])
    assert all("stride_token" in rung for rung in (lab04c.hint("store_kv", 2),
                                                     lab04c.hint("gather", 3)))


# --------------------------------------------------- lab 04c, in the interpreter
needs_triton = pytest.mark.skipif(importlib.util.find_spec("triton") is None,
                                  reason="Triton is not installed")


@needs_triton
def test_decode_kernels_with_the_wrong_scale_in_the_interpreter():
    """A decode kernel without `* scale` hears to multiply by scale; one that
    scales twice is not told it forgot the scale (it is off, not unscaled)."""
    from .wrong_answers import _puzzle_variant

    line = "scores = tl.sum(q[None, :] * k.to(tl.float32), 1) * scale"
    unscaled = _puzzle_variant("decode_kernel", "decode_nc29_without_the_scale",
                               (line, "scores = tl.sum(q[None, :] * k.to(tl.float32), 1)"))
    twice = _puzzle_variant("decode_kernel", "decode_nc29_scaled_twice",
                            (line, line + " * scale"))
    result = lab04c.check("decode", unscaled)
    assert not result.passed
    assert "matches the attention over unscaled scores: multiply q . k by scale" in \
        result.message, result.message
    result = lab04c.check("decode", twice)
    assert not result.passed and "unscaled" not in result.message, result.message


@needs_triton
def test_the_right_merge_kernel_passes_without_strides_or_blocks():
    result = lab04c.check("merge", _solution("lab04c_triton_puzzles").merge_kernel)
    assert result.passed, result.message
    assert "padded strides" not in result.message and "empty splits" in result.message
