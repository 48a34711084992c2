"""Beam search on shared blocks (paper §4.4, Figure 9).

Each step every live beam proposes its best next tokens; the best
``beam_width`` candidates overall survive. A beam chosen several times is
*forked* — the copies share all its KV blocks by reference count, and
copy-on-write splits only the last block when they diverge — and a beam
chosen by nobody is freed at once. Most blocks of most beams stay shared,
which is where the paper's large beam-search savings come from.

The candidate rule follows transformers' ``generate(num_beams=...)``: the
top ``max(2, 1 + number of stop ids) x beam_width`` (beam, token) pairs by
cumulative log-probability — enough that ``beam_width`` of them do not stop
even if every beam's best tokens are stop tokens; a stop candidate ranking
in the first ``beam_width`` becomes a finished hypothesis, the first
``beam_width`` others continue.

The beams of a group are ranked against each other, so a step must bring
all of them: the scheduler schedules a group whole.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from ..sequence import FinishReason, Sequence, SequenceGroup

if TYPE_CHECKING:
    from .sampling import StopRule


def length_normalized(seq: Sequence, length_penalty: float) -> float:
    return seq.cumulative_logprob / max(seq.num_output_tokens, 1) ** length_penalty


@dataclass
class BeamStep:
    """What one step of beam search decided; the scheduler writes its memory
    side (`Scheduler.update`: forks share their parent's blocks, dropped
    beams are freed)."""

    new_tokens: dict[int, int]  # seq_id -> the token appended to it
    forks: list[tuple[Sequence, Sequence]]  # (parent, new beam), already in group.seqs
    dropped: list[Sequence]  # beams chosen by nobody (already out of group.seqs)
    done: bool  # the search is over: every live beam stops


Candidate = tuple[float, int, int, Sequence]  # (cumulative logprob, beam rank, token, beam)


def beam_step(group: SequenceGroup, rows: list[tuple[Sequence, torch.Tensor]],
              rule: StopRule, new_seq_id: Callable[[], int]) -> BeamStep:
    """Advance the group's beams by one token. `rows` pairs every live beam
    with its logits; `rule` says which tokens stop a beam; `new_seq_id()`
    names a new beam or a finished hypothesis."""
    live = group.unfinished_seqs()
    if [seq.seq_id for seq, _ in rows] != [seq.seq_id for seq in live]:
        raise RuntimeError(f"beam search of request {group.request_id} got logits for "
                           f"{len(rows)} of its {len(live)} beams: a group samples whole")
    stop_ids = rule.stop_ids(group)
    chosen = _choose(group, _candidates(group, rows, stop_ids), stop_ids, rule, new_seq_id)
    # every parent first keeps its own place; one chosen again forks (before it
    # has its new token: the fork copies its tokens)
    beams: list[Sequence] = []
    forks: list[tuple[Sequence, Sequence]] = []
    for _, _, parent in chosen:
        if parent in beams:
            forks.append((parent, parent.fork(new_seq_id())))
            beams.append(forks[-1][1])
        else:
            beams.append(parent)
    new_tokens: dict[int, int] = {}
    for beam, (score, tok, _) in zip(beams, chosen, strict=True):
        beam.token_ids.append(tok)
        beam.cumulative_logprob = score
        new_tokens[beam.seq_id] = tok
    dropped = [seq for seq in live if seq not in beams]
    group.seqs = [seq for seq in live if seq in beams] + [child for _, child in forks]
    return BeamStep(new_tokens, forks, dropped, _search_is_done(group, group.params.beam_width))


def _candidates(group: SequenceGroup, rows: list[tuple[Sequence, torch.Tensor]],
                stop_ids: set[int]) -> list[Candidate]:
    """Each beam's best ``max(2, 1 + len(stop_ids)) x beam_width`` next tokens
    (transformers' number: at least ``beam_width`` of the best overall do not
    stop), best first overall; ties go to the earlier beam, then the lower token."""
    params = group.params
    keep = max(2, 1 + len(stop_ids)) * params.beam_width
    candidates: list[Candidate] = []
    for rank, (seq, logits) in enumerate(rows):
        logprobs = torch.log_softmax(logits, dim=-1)
        if seq.num_output_tokens < params.min_tokens and stop_ids:
            logprobs[sorted(stop_ids)] = float("-inf")  # too early to stop
        top = torch.topk(logprobs, min(keep, logprobs.numel()))
        for lp, tok in zip(top.values.tolist(), top.indices.tolist(), strict=True):
            candidates.append((seq.cumulative_logprob + lp, rank, tok, seq))
    candidates.sort(key=lambda c: (-c[0], c[1], c[2]))
    return candidates[:keep]


def _choose(group: SequenceGroup, candidates: list[Candidate], stop_ids: set[int],
            rule: StopRule, new_seq_id: Callable[[], int]) -> list[tuple[float, int, Sequence]]:
    """The first ``beam_width`` candidates that do not stop, as ``(score,
    token, parent)``; a stop candidate among the first ``beam_width`` overall
    becomes a finished hypothesis."""
    width = group.params.beam_width
    chosen: list[tuple[float, int, Sequence]] = []
    for position, (score, _, tok, parent) in enumerate(candidates):
        if score == float("-inf") or len(chosen) == width:  # only masked tokens are left
            break
        if tok not in stop_ids:
            chosen.append((score, tok, parent))
        elif position < width:  # a finished hypothesis
            done = parent.fork(new_seq_id())
            done.token_ids.append(tok)
            done.cumulative_logprob = score
            done.finish_reason = FinishReason.STOP
            done.stop_reason = rule.named_stop(group.params, tok)
            group.finished_beams.append(done)
    return chosen


def _search_is_done(group: SequenceGroup, width: int) -> bool:
    """Enough finished hypotheses, and no live beam can still beat the worst of them."""
    if not group.seqs:
        return True
    if len(group.finished_beams) < width:
        return False
    lp = group.params.length_penalty
    worst = sorted(length_normalized(s, lp) for s in group.finished_beams)[-width]
    best_live = max(length_normalized(s, lp) for s in group.seqs)
    return best_live < worst


def best_beams(group: SequenceGroup) -> list[Sequence]:
    """The n best hypotheses, finished or still live, best first."""
    pool = group.finished_beams + list(group.seqs)
    lp = group.params.length_penalty
    return sorted(pool, key=lambda s: length_normalized(s, lp), reverse=True)[:group.params.n]
