"""Newcomer 40's wrong answers, each told its mistake rather than a case's
story (or the symptom only):

* a count returned as a fraction (``(n + k) / bs - n / bs`` for
  blocks_needed) was told "an empty sequence has no blocks"; any answer of a
  kind no count is (a fraction, text, a bool; newcomer 42: ``'1'`` for
  blocks_for) where a count is expected now gets the count notes of
  `_count_notes.never_a_count`, whatever the check;
* append_slots returning the tokens' logical positions was told the free
  list's head;
* choose_victims never taking a served request's blocks from the free count
  was told "your answer stops before C";
* chain_hashes hashing the whole prefix (from ROOT_HASH, or from the right
  parent) was told the second block's parent only; hash_block's arguments
  swapped with a list of tokens (not only a tuple) is told so.

And the right answers, and answers making other mistakes, are never told
these (every reference solution; the wrong-answer list's others)."""

from __future__ import annotations

import pytest

from pagedkit.exercises import FLOAT_FOR_INT, lab00, lab03, lab06, lab07
from pagedkit.memory import ROOT_HASH, hash_block

from .test_exercises import SOLUTIONS, load
from .wrong_answers import WRONG, victims_never_taking

LAB03 = load(SOLUTIONS / "lab03_paging.py")
LAB06 = load(SOLUTIONS / "lab06_preemption.py")
FRACTION = FLOAT_FOR_INT.split(":")[0]


@pytest.mark.parametrize("fraction", [
    lambda n, k, bs: (n + k) / bs - n / bs,
    lambda n, k, bs: k / bs,
    lambda n, k, bs: LAB03.blocks_needed(n, k, bs) + 0.5])
def test_a_fraction_where_a_count_is_expected_is_told_to_count_whole(fraction):
    def blocks_needed(num_tokens, num_new_tokens, block_size):
        return fraction(num_tokens, num_new_tokens, block_size)

    result = lab03.check_blocks_needed(blocks_needed)
    assert not result.passed and FRACTION in result.message, result.message


@pytest.mark.parametrize(("answer", "note"), [("1", "text (a str) is not a count"),
                                              (True, "a comparison gives a bool"),
                                              (1.5, FRACTION)])
def test_blocks_for_of_a_kind_no_count_is_gets_its_note(answer, note):
    result = lab00.check_blocks_for(lambda num_tokens, block_size: answer)
    assert not result.passed and note in result.message, result.message


@pytest.mark.parametrize("wrong", WRONG[("lab03", "blocks_needed")])
def test_whole_wrong_counts_keep_their_own_hints(wrong):
    result = lab03.check_blocks_needed(wrong)
    assert not result.passed and FRACTION not in result.message, result.message


def test_logical_positions_for_slots_are_told_so():
    def append_slots(block_table, num_tokens, num_new_tokens, block_size, free_blocks):
        if LAB03.append_slots(block_table, num_tokens, num_new_tokens, block_size,
                              free_blocks) is None:
            return None
        return list(range(num_tokens, num_tokens + num_new_tokens))

    result = lab03.check_append_slots(append_slots)
    assert not result.passed and "positions in the sequence (logical)" in result.message
    for wrong in WRONG[("lab03", "append_slots")]:
        assert "positions in the sequence" not in lab03.check_append_slots(wrong).message


def test_victims_never_taking_the_served_blocks_are_told_so():
    result = lab06.check_choose_victims(victims_never_taking)
    assert not result.passed and "your function never takes them" in result.message
    assert lab06.check_choose_victims(LAB06.choose_victims).passed
    for wrong in WRONG[("lab06", "choose_victims")]:
        if wrong is not victims_never_taking:
            assert "never takes them" not in lab06.check_choose_victims(wrong).message


def _names(token_ids, block_size, name):
    names, parent = [], ROOT_HASH
    for start in range(0, len(token_ids) // block_size * block_size, block_size):
        parent = name(parent, token_ids, start, start + block_size)
        names.append(parent)
    return names


@pytest.mark.parametrize(("name", "said"), [
    (lambda p, t, s, e: hash_block(ROOT_HASH, t[:e]), "the whole prefix from ROOT_HASH"),
    (lambda p, t, s, e: hash_block(p, t[:e]), "the parent is right, but each name hashes the "
                                              "whole prefix"),
    (lambda p, t, s, e: hash_block(t[s:e], p), "hash_block takes the parent's name first"),
    (lambda p, t, s, e: hash_block(tuple(t[s:e]), p), "hash_block takes the parent's name first"),
])
def test_chain_mistakes_are_each_told_their_own(name, said):
    result = lab07.check_chain_hashes(lambda token_ids, block_size: _names(token_ids, block_size,
                                                                           name))
    assert not result.passed and said in result.message, result.message
    for other in WRONG[("lab07", "chain_hashes")]:  # one of them makes the first mistake
        message = lab07.check_chain_hashes(other).message
        is_it = other.__name__ == "hashes_of_whole_prefix" and "ROOT_HASH" in said
        assert (said in message) == is_it, (other.__name__, message)
