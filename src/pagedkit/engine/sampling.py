"""One step's sampling: logits in, each sequence's next token out.

Every group that computed its last tokens this step samples all its live
sequences together (the scheduler schedules a group whole). Greedy rows are
picked by one argmax over the whole step's logits (`greedy_tokens`); the
others are drawn row by row, a seeded request from its own generator, so its
tokens do not depend on its batch. The first token of a request with n > 1
forks it into n samples; beam search ranks all its beams at once
(`beam_step`).

Sampling changes only `Sequence` objects — their tokens, and the group's
list of sequences (new forks, pruned beams). What that means for KV memory
(forked tables, freed blocks) is written by `Scheduler.update` from the
`Sampled` record returned here.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from ..model.sampler import greedy_tokens, sample
from ..scheduler import Sampled
from ..sequence import FinishReason, Sequence, SequenceGroup, stop_reason
from .beam_search import beam_step


@dataclass
class StopRule:
    """What ends a sequence of a request: its stop ids (end-of-sequence
    included unless ignored) and the model's length."""

    eos_token_ids: set[int]
    max_model_len: int

    def stop_ids(self, group: SequenceGroup) -> set[int]:
        params = group.params
        if params.ignore_eos:
            return set(params.stop_token_ids)
        return self.eos_token_ids.union(params.stop_token_ids)


def sample_step(rows: list[tuple[SequenceGroup, list[tuple[Sequence, int]]]],
                logits: torch.Tensor, rule: StopRule,
                generator: Callable[[SequenceGroup], torch.Generator],
                new_seq_id: Callable[[], int]) -> Sampled:
    """Sample every group of `rows` — ``(group, [(sequence, its row of
    logits)])``, in scheduled order (unseeded requests draw from the engine's
    generator in that order) — and return what was decided."""
    logits = suppress_early_stops(rows, logits, rule)
    greedy = (greedy_tokens(logits)
              if any(g.params.greedy and not g.params.use_beam_search for g, _ in rows) else [])
    sampled = Sampled()
    for group, group_rows in rows:
        if group.metrics.first_token_time is None:
            group.metrics.first_token_time = time.monotonic()
        if group.params.use_beam_search:
            _beam_group(group, group_rows, logits, rule, new_seq_id, sampled)
        else:
            _sample_group(group, group_rows, logits, greedy, generator(group), new_seq_id,
                          sampled)
            _check_stops(group, rule, sampled)
    return sampled


def suppress_early_stops(rows: list[tuple[SequenceGroup, list[tuple[Sequence, int]]]],
                         logits: torch.Tensor, rule: StopRule) -> torch.Tensor:
    """``min_tokens``: a sequence that has generated fewer cannot pick a
    stop token, so its row's stop tokens get -inf, in a copy of the logits
    (the rows of beam searches are left as they are: `beam_step` masks
    their log-probabilities itself)."""
    early = []
    for group, group_rows in rows:
        params = group.params
        stop_ids = sorted(rule.stop_ids(group))
        if params.min_tokens and not params.use_beam_search and stop_ids:
            early += [(row, stop_ids) for seq, row in group_rows
                      if seq.num_output_tokens < params.min_tokens]
    if not early:
        return logits
    logits = logits.clone()
    for row, stop_ids in early:
        logits[row, stop_ids] = float("-inf")
    return logits


def _sample_group(group: SequenceGroup, rows: list[tuple[Sequence, int]], logits: torch.Tensor,
                  greedy: list[int], generator: torch.Generator,
                  new_seq_id: Callable[[], int], sampled: Sampled) -> None:
    """Greedy or random tokens for a request's rows; its first token forks n samples."""
    params = group.params
    for seq, row in rows:
        count = params.n if len(group.seqs) < params.n else 1  # first token: fork n
        tokens = ([greedy[row]] * count if params.greedy
                  else sample(logits[row], params, count, generator))
        children = [seq.fork(new_seq_id()) for _ in tokens[1:]]  # before seq has its token
        for child, token in zip([seq, *children], tokens, strict=True):
            child.token_ids.append(token)
            sampled.new_tokens[child.seq_id] = token
        group.seqs += children
        sampled.forks += [(group, seq, child) for child in children]


def _beam_group(group: SequenceGroup, rows: list[tuple[Sequence, int]], logits: torch.Tensor,
                rule: StopRule, new_seq_id: Callable[[], int], sampled: Sampled) -> None:
    """One step of a beam search; when it is over, every live beam stops."""
    beams = beam_step(group, [(seq, logits[row]) for seq, row in rows], rule.stop_ids(group),
                      new_seq_id)
    sampled.new_tokens.update(beams.new_tokens)
    sampled.forks += [(group, parent, child) for parent, child in beams.forks]
    sampled.dropped += [(group, seq) for seq in beams.dropped]
    if beams.done:
        sampled.stops += [(group, seq, FinishReason.STOP) for seq in group.seqs]
    else:
        _check_stops(group, rule, sampled)


def _check_stops(group: SequenceGroup, rule: StopRule, sampled: Sampled) -> None:
    """The sequences of `group` that got a token and stop after it."""
    stop_ids = rule.stop_ids(group)
    for seq in group.unfinished_seqs():
        if seq.seq_id in sampled.new_tokens:
            reason = stop_reason(seq, group.params, stop_ids, rule.max_model_len)
            if reason is not None:
                sampled.stops.append((group, seq, reason))
