"""The engine's greedy picks, a whole step's in one argmax
(`pagedkit.engine.sampling.sample_step`), are `sample`'s greedy rule, row
for row, ties included, over the logits the step adjusts (``min_tokens``
masks stop ids and end-of-sequence; penalties) and never over the raw ones.

The steps are built as `LLMEngine._sampling_rows` builds them: groups in
scheduled order, each with its unfinished sequences and their rows of the
step's logits (rows in scheduled order, which need not be the groups')."""

import itertools

import pytest
import torch

from pagedkit import SamplingParams
from pagedkit.engine.sampling import StopRule, sample_step
from pagedkit.model.sampler import sample
from pagedkit.sequence import FinishReason, Sequence, SequenceGroup

GREEDY = SamplingParams(temperature=0)
EOS = 1
VOCAB = 50
RULE = StopRule(eos_token_ids={EOS}, max_model_len=10_000)


def make_group(request_id, params, seq_ids, prompt=(20, 21, 22), output=()):
    """A group whose sequences hold `prompt` then `output` (its first token
    already forked into ``len(seq_ids)`` samples when there are several)."""
    seqs = []
    for seq_id in seq_ids:
        seq = Sequence(list(prompt), seq_id=seq_id)
        seq.token_ids += output
        seqs.append(seq)
    group = SequenceGroup(request_id, None, list(prompt), params, seqs)
    if not params.greedy:
        group.generator = torch.Generator().manual_seed(params.seed or 0)
    return group


def step(groups, order):
    """`sample_step`'s rows: each group's sequences with the rows `order`
    gives them (seq_id -> row)."""
    return [(g, [(s, order[s.seq_id]) for s in g.unfinished_seqs()]) for g in groups]


def reference(seq, params, row):
    """`sample`'s greedy pick of one row, adjusted here by hand: -inf on the
    stop ids and end-of-sequence before ``min_tokens``; repetition penalty
    on the tokens seen."""
    row = row.clone()
    if seq.num_output_tokens < params.min_tokens:
        row[sorted({EOS, *params.stop_token_ids})] = float("-inf")
    if params.repetition_penalty != 1.0:
        for token in set(seq.token_ids):
            value = row[token]
            row[token] = (value / params.repetition_penalty if value > 0
                          else value * params.repetition_penalty)
    return sample(row, GREEDY, 1)[0]


def run(groups, order, logits):
    """Sample a step; return each sequence's new token and the reference's."""
    rows = step(groups, order)
    expected = {s.seq_id: reference(s, g.params, logits[r]) for g, rs in rows for s, r in rs}
    sampled = sample_step(rows, logits, RULE, itertools.count(1000).__next__)
    for _, rs in rows:
        for s, _ in rs:
            assert s.token_ids[-1] == sampled.new_tokens[s.seq_id]
    return sampled, expected


def shuffled_rows(seq_ids, seed):
    perm = torch.randperm(len(seq_ids), generator=torch.Generator().manual_seed(seed)).tolist()
    return dict(zip(seq_ids, perm, strict=True))


@pytest.mark.parametrize("num_groups", [1, 2, 7, 32])
def test_greedy_groups_equal_sample_each_row(num_groups):
    """Greedy groups of one or two sequences (n=2, already forked), their
    rows shuffled across the step's logits."""
    groups, ids = [], itertools.count()
    for i in range(num_groups):
        n = 2 if i % 3 == 1 else 1
        groups.append(make_group(f"r{i}", SamplingParams(temperature=0, n=n),
                                 [next(ids) for _ in range(n)], output=[30] if n > 1 else ()))
    seq_ids = [s.seq_id for g in groups for s in g.seqs]
    logits = torch.randn(len(seq_ids), VOCAB, generator=torch.Generator().manual_seed(num_groups))
    sampled, expected = run(groups, shuffled_rows(seq_ids, num_groups), logits)
    assert sampled.new_tokens == expected
    assert sampled.forks == []


def tied_logits():
    logits = torch.zeros(6, VOCAB)
    logits[0, [7, 3, 40]] = 2.0  # a three-way tie: the lowest id
    logits[1, :] = float("-inf")
    logits[1, [9, 30]] = -1.0  # a tie among the only finite values
    logits[2, [0, 49]] = 5.0  # first and last
    # row 3: all equal
    logits[4, [4, 12, 33]] = 3.0  # a tie whose lowest id is a stop id (masked below)
    logits[5, [EOS, 8]] = 3.0  # a tie whose lowest id is end-of-sequence (masked below)
    return logits


def test_sample_breaks_ties_at_the_lowest_id():
    logits = tied_logits()
    assert [sample(row, GREEDY, 1)[0] for row in logits[:4]] == [3, 9, 0, 0]


@pytest.mark.parametrize("seed", range(4))
def test_greedy_ties_and_min_tokens_masked_rows(seed):
    """Ties pick the lowest id; before ``min_tokens`` a tie's lowest id that
    is a stop id or end-of-sequence is masked, so the next tied id wins."""
    early = SamplingParams(temperature=0, min_tokens=3, stop_token_ids=[4])
    groups = [make_group(f"t{i}", GREEDY, [i]) for i in range(4)]
    groups += [make_group("m4", early, [4], output=[30]), make_group("m5", early, [5])]
    order = shuffled_rows(list(range(6)), seed)
    logits = torch.empty(6, VOCAB)
    logits[list(order.values())] = tied_logits()[list(order)]  # sequence i reads tied row i
    sampled, expected = run(groups, order, logits)
    assert sampled.new_tokens == expected == dict(enumerate([3, 9, 0, 0, 12, 8]))
    assert sampled.stops == []


def test_past_min_tokens_the_stop_id_wins_its_tie_and_stops():
    done = SamplingParams(temperature=0, min_tokens=1, stop_token_ids=[4])
    groups = [make_group("a", done, [0], output=[30]), make_group("b", GREEDY, [1])]
    logits = tied_logits()[[4, 0]]
    sampled, expected = run(groups, {0: 0, 1: 1}, logits)
    assert sampled.new_tokens == expected == {0: 4, 1: 3}
    assert [(g.request_id, s.seq_id, r) for g, s, r in sampled.stops] == [
        ("a", 0, FinishReason.STOP)]
    assert groups[0].seqs[0].stop_reason == 4


@pytest.mark.parametrize("seed", range(6))
def test_masked_rows_pick_from_the_adjusted_logits_not_the_raw(seed):
    """Each min_tokens row's raw argmax is a stop id or end-of-sequence; the
    masked pick differs from it and is the reference's. Plain rows beside
    them keep their raw argmax."""
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(6, VOCAB, generator=gen)
    logits[1, 17] = logits[1].max() + 1  # stop id 17 on top
    logits[3, EOS] = logits[3].max() + 1  # end-of-sequence on top
    logits[4, 17] = logits[4].max() + 1  # past min_tokens: 17 stays on top
    early = SamplingParams(temperature=0, min_tokens=2, stop_token_ids=[17])
    groups = [make_group("g0", GREEDY, [0]), make_group("m1", early, [1], output=[30]),
              make_group("g2", GREEDY, [2]), make_group("m3", early, [3]),
              make_group("m4", early, [4], output=[30, 31])]
    order = {0: 0, 1: 1, 2: 2, 3: 3, 4: 4}
    raw = logits.argmax(-1).tolist()
    sampled, expected = run(groups, order, logits)
    assert sampled.new_tokens == expected
    assert sampled.new_tokens[1] != raw[1] == 17 and sampled.new_tokens[3] != raw[3] == EOS
    assert [sampled.new_tokens[i] for i in (0, 2, 4)] == [raw[0], raw[2], raw[4]] and raw[4] == 17
    assert [s.seq_id for _, s, _ in sampled.stops] == [4]


def test_penalized_greedy_row_picks_from_the_penalized_logits():
    """A repetition penalty turns a seen token's lead into a loss; the pick
    is the penalized row's argmax."""
    logits = torch.zeros(2, VOCAB)
    logits[:, 21] = 4.0  # a prompt token, on top of the raw logits
    logits[:, 35] = 3.0
    penalized = SamplingParams(temperature=0, repetition_penalty=2.0)
    groups = [make_group("p", penalized, [0]), make_group("g", GREEDY, [1])]
    sampled, expected = run(groups, {0: 1, 1: 0}, logits)
    assert sampled.new_tokens == expected == {0: 35, 1: 21}


def test_greedy_rows_beside_a_seeded_random_group():
    """A seeded random group between greedy ones draws from its own
    generator; the greedy rows around it keep their own picks."""
    logits = torch.randn(4, VOCAB, generator=torch.Generator().manual_seed(3))
    seeded = SamplingParams(temperature=1.0, seed=7)
    groups = [make_group("g0", GREEDY, [0]), make_group("s", seeded, [1]),
              make_group("g2", SamplingParams(temperature=0, n=2), [2, 3], output=[30])]
    order = {0: 2, 1: 0, 2: 3, 3: 1}
    rows = step(groups, order)
    greedy = {s.seq_id: reference(s, g.params, logits[r])
              for g, rs in rows if g.params.greedy for s, r in rs}
    drawn = sample(logits[order[1]], seeded, 1, torch.Generator().manual_seed(7))[0]
    sampled = sample_step(rows, logits, RULE, itertools.count(1000).__next__)
    assert sampled.new_tokens == {**greedy, 1: drawn}
