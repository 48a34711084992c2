"""The engine's greedy picks, a whole step's in one argmax
(`pagedkit.engine.sampling.sample_step`), are `sample`'s greedy rule, row
for row, ties included."""

import pytest
import torch

from pagedkit import SamplingParams
from pagedkit.model.sampler import sample

GREEDY = SamplingParams(temperature=0)


def greedy_tokens(logits):
    return logits.argmax(-1).tolist()  # what sample_step picks for its greedy rows


def row_by_row(logits):
    return [sample(row, GREEDY, 1)[0] for row in logits]


@pytest.mark.parametrize("rows", [1, 2, 7, 64])
def test_greedy_tokens_equal_sampling_each_row(rows):
    logits = torch.randn(rows, 1000, generator=torch.Generator().manual_seed(rows))
    assert greedy_tokens(logits) == row_by_row(logits)


def test_greedy_tokens_break_ties_like_sample():
    logits = torch.zeros(4, 50)
    logits[0, [7, 3, 40]] = 2.0  # a three-way tie: the lowest id
    logits[1, :] = float("-inf")
    logits[1, [9, 30]] = -1.0  # a tie among the only finite values
    logits[2, [0, 49]] = 5.0  # first and last
    # row 3: all equal
    assert greedy_tokens(logits) == row_by_row(logits) == [3, 9, 0, 0]


def test_greedy_tokens_of_a_masked_copy():
    """The engine masks stop tokens (min_tokens) on a copy of the step's logits."""
    logits = torch.randn(3, 20, generator=torch.Generator().manual_seed(0))
    masked = logits.clone()
    top = logits.argmax(-1).tolist()
    masked[1, top[1]] = float("-inf")
    picks = greedy_tokens(masked)
    assert picks[0] == top[0] and picks[2] == top[2] and picks[1] != top[1]
    assert picks == row_by_row(masked)
