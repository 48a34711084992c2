"""Newcomer 39's wrong answers in labs 01 and 04, each told its mistake:
kv_bytes_per_token off by one factor on every case (no K-and-V 2, bits, or
both); gather_kv rounding the block count down or returning its axes in
another order; online_softmax_update returning the right three values in
another order (every order tried)."""

from __future__ import annotations

import itertools

import pytest

from pagedkit.exercises import lab01, lab04

from .test_exercises import SOLUTIONS, load

LAB01 = load(SOLUTIONS / "lab01_kv_cache.py")
LAB04 = load(SOLUTIONS / "lab04_paged_attention.py")


@pytest.mark.parametrize("factor", list(lab01._SCALES))
def test_kv_bytes_off_by_one_factor_is_told_that_factor(factor):
    def kv_bytes_per_token(config, dtype_bytes):
        return int(LAB01.kv_bytes_per_token(config, dtype_bytes) * factor)

    result = lab01.check_kv_bytes_per_token(kv_bytes_per_token)
    assert not result.passed and result.message.endswith(lab01._SCALES[factor])


def test_an_answer_off_by_other_amounts_keeps_the_cases_hint():
    def kv_bytes_per_token(config, dtype_bytes):  # right on the tiny model only
        right = LAB01.kv_bytes_per_token(config, dtype_bytes)
        return right if config.num_hidden_layers == 4 else right * 2

    result = lab01.check_kv_bytes_per_token(kv_bytes_per_token)
    assert not result.passed and not any(h in result.message for h in lab01._SCALES.values())


def test_too_few_rows_are_told_to_round_up_and_swapped_axes_their_order():
    def rounded_down(cache, block_table, num_tokens):
        n = num_tokens // cache.shape[1]
        return cache[block_table[:n]].reshape(-1, *cache.shape[2:])[:num_tokens]

    def transposed(cache, block_table, num_tokens):
        return LAB04.gather_kv(cache, block_table, num_tokens).transpose(0, 1)

    def too_many(cache, block_table, num_tokens):
        n = -(-num_tokens // cache.shape[1])
        return cache[block_table[:n]].reshape(-1, *cache.shape[2:])

    down = lab04.check_gather_kv(rounded_down).message
    assert "4 rows for 5 tokens: each token needs its row, so read ceil(" in down

    def one_short(cache, block_table, num_tokens):  # (the reviewer's: a slice one short)
        return LAB04.gather_kv(cache, block_table, num_tokens)[:num_tokens - 1]

    assert "each token needs its row" in lab04.check_gather_kv(one_short).message
    assert lab04.check_gather_kv(transposed).message.endswith(
        "the axes are in another order: return [num_tokens, num_kv_heads, head_dim], one row "
        "per token")
    assert lab04.check_gather_kv(too_many).message.endswith(
        "keep only the first num_tokens rows")


def test_the_right_order_is_never_told_another_when_two_values_are_equal():
    import torch

    one = torch.tensor(1.0, dtype=torch.float64)
    acc = torch.zeros(4, dtype=torch.float64)
    assert lab04._returned_order((one, one, acc), (one, one, acc)) == ""
    assert lab04._returned_order((one, acc, one), (one, one, acc)) == "row_max, acc, row_sum"


@pytest.mark.parametrize("order", [o for o in itertools.permutations(range(3)) if o != (0, 1, 2)])
def test_the_softmax_state_in_another_order_is_told_its_order(order):
    def online_softmax_update(row_max, row_sum, acc, scores, v):
        values = LAB04.online_softmax_update(row_max, row_sum, acc, scores, v)
        return tuple(values[i] for i in order)

    result = lab04.check_online_softmax_update(online_softmax_update)
    names = ", ".join(("row_max", "row_sum", "acc")[i] for i in order)
    assert not result.passed
    assert result.message.endswith(f"returned the right values in another order, ({names}): "
                                   "return (row_max, row_sum, acc)"), result.message
