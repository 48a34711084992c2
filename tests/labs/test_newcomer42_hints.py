"""Newcomer 42's wrong answers in labs 00 and 02, each told its mistake:

* waste_breakdown walking the regions in the order given was right on every
  case (all came sorted by start); a case lists them last first now, and an
  answer right once they are sorted is told to sort them;
* reservation_size with one policy's branch missing its ``return`` was asked
  "did you forget `return`?" although it returned for the cases before; it
  is told the path this call takes ends without one (every policy's branch);
* an error with no message read "raised MemoryError: ."."""

from __future__ import annotations

import pytest

from pagedkit.exercises import lab00, lab02

from .test_exercises import SOLUTIONS, load

LAB02 = load(SOLUTIONS / "lab02_contiguous_waste.py")


def _unsorted_walk(reservations, capacity, next_size):
    right = LAB02.waste_breakdown(sorted(reservations, key=lambda r: r.start), capacity,
                                  next_size)
    holes, cursor = [], 0
    for r in reservations:  # the mistake: no sort
        holes.append(r.start - cursor)
        cursor = r.start + r.size
    holes.append(capacity - cursor)
    free = capacity - sum(r.size for r in reservations)
    return {**right, "external_fragmentation": free if next_size > max(holes) else 0}


def test_regions_walked_in_the_order_given_are_told_to_sort():
    result = lab02.check_waste_breakdown(_unsorted_walk)
    assert not result.passed
    assert result.message.endswith("come in another order here (D, C, A): the list is in no "
                                   "order, so sort it by start before measuring the free runs "
                                   "between regions"), result.message
    assert lab02.check_waste_breakdown(LAB02.waste_breakdown).passed


@pytest.mark.parametrize(("policy", "call"), [("pow2", "('pow2', 10, 25, 2048)"),
                                              ("oracle", "('oracle', 10, 25, 2048)")])
def test_one_policys_missing_return_is_told_it_is_that_path(policy, call):
    def reservation_size(p, prompt_len, output_len, max_len):
        if p == policy:
            return None
        return LAB02.reservation_size(p, prompt_len, output_len, max_len)

    result = lab02.check_reservation_size(reservation_size)
    assert not result.passed
    assert result.message.endswith(f"reservation_size{call} returned None, where your function "
                                   "returned a value for the cases before it: the path this "
                                   "call takes ends without `return`."), result.message


def test_a_missing_return_in_the_first_cases_path_keeps_the_plain_question():
    def reservation_size(p, prompt_len, output_len, max_len):
        if p == "max":  # the first case's policy: nothing returned before it
            return None
        return LAB02.reservation_size(p, prompt_len, output_len, max_len)

    result = lab02.check_reservation_size(reservation_size)
    assert result.message.endswith("returned None — did you forget `return`?"), result.message


def test_none_from_the_first_case_keeps_the_plain_question():
    result = lab00.check_blocks_for(lambda num_tokens, block_size: None)
    assert result.message.endswith("returned None — did you forget `return`?"), result.message


@pytest.mark.parametrize("error", [MemoryError, ValueError, KeyError])
def test_an_error_without_a_message_is_said_without_a_colon(error):
    def blocks_for(num_tokens, block_size):
        raise error

    message = lab00.check_blocks_for(blocks_for).message
    assert message.endswith(f"raised {error.__name__}"), message
