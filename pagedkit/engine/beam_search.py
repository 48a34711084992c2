"""Beam search on shared blocks (paper §4.4, Figure 9).

Each step every live beam proposes its best next tokens; the best
``beam_width`` candidates overall survive. A beam chosen several times is
*forked* — the copies share all its KV blocks by reference count, and
copy-on-write splits only the last block when they diverge — and a beam
chosen by nobody is freed at once. Most blocks of most beams stay shared,
which is where the paper's large beam-search savings come from.

The candidate rule follows transformers' ``generate(num_beams=...)``: the
top ``2 x beam_width`` (beam, token) pairs by cumulative log-probability; an
end-of-sequence candidate ranking in the first ``beam_width`` becomes a
finished hypothesis, the first ``beam_width`` others continue.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from ..sequence import FinishReason, Sequence, SequenceGroup


def length_normalized(seq: Sequence, length_penalty: float) -> float:
    return seq.cumulative_logprob / max(seq.num_output_tokens, 1) ** length_penalty


@dataclass
class BeamStep:
    """What one step of beam search decided; the scheduler frees what it drops."""

    new_tokens: dict[int, int]  # seq_id -> the token appended to it
    dropped: list[Sequence]  # beams chosen by nobody (already out of group.seqs)
    done: bool  # the search is over: every live beam stops


def beam_step(group: SequenceGroup, rows: list[tuple[Sequence, torch.Tensor]],
              stop_ids: set[int], fork: Callable[[Sequence], Sequence],
              new_seq_id: Callable[[], int]) -> BeamStep:
    """Advance the group's beams by one token.

    `fork(parent)` makes a new beam of the group sharing all of `parent`'s
    blocks; `new_seq_id()` names a finished hypothesis. Freeing the dropped
    beams and finishing the search are the scheduler's (`Scheduler.update`)."""
    params = group.params
    width = params.beam_width
    candidates: list[tuple[float, int, int, Sequence]] = []
    for rank, (seq, logits) in enumerate(rows):
        logprobs = torch.log_softmax(logits, dim=-1)
        if seq.num_output_tokens < params.min_tokens and stop_ids:
            logprobs[sorted(stop_ids)] = float("-inf")  # too early to stop
        top = torch.topk(logprobs, min(2 * width, logprobs.numel()))
        for lp, tok in zip(top.values.tolist(), top.indices.tolist(), strict=True):
            candidates.append((seq.cumulative_logprob + lp, rank, tok, seq))
    candidates.sort(key=lambda c: (-c[0], c[1], c[2]))

    chosen: list[tuple[float, int, Sequence]] = []
    for position, (score, _, tok, parent) in enumerate(candidates):
        if score == float("-inf"):  # only masked tokens are left
            break
        if tok in stop_ids:
            if position < width:  # a finished hypothesis
                done = parent.fork(new_seq_id())
                done.token_ids.append(tok)
                done.cumulative_logprob = score
                done.finish_reason = FinishReason.STOP
                group.finished_beams.append(done)
            continue
        chosen.append((score, tok, parent))
        if len(chosen) == width:
            break

    new_tokens: dict[int, int] = {}
    used: set[int] = set()
    survivors: list[Sequence] = []
    for score, tok, parent in chosen:
        if parent.seq_id in used:  # chosen again: a new beam sharing all its blocks
            beam = fork(parent)
        else:
            beam = parent
            used.add(parent.seq_id)
        survivors.append((beam, tok, score))
    for beam, tok, score in survivors:
        beam.token_ids.append(tok)
        beam.cumulative_logprob = score
        new_tokens[beam.seq_id] = tok
    dropped = [seq for seq, _ in rows if seq.seq_id not in used]
    live = {b.seq_id for b, _, _ in survivors}
    group.seqs = [s for s in group.seqs if s.seq_id in live]
    return BeamStep(new_tokens, dropped, _search_is_done(group, width))


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
