"""One step's sampling: logits in, each sequence's next token out.

Every group that computed its last tokens this step samples all its live
sequences together (the scheduler schedules a group whole). Greedy rows are
picked by one argmax over the whole step's logits; the
others are drawn row by row, a seeded request from its own generator, so its
tokens do not depend on its batch. The first token of a request with n > 1
forks it into n samples; beam search ranks all its beams at once
(`beam_step`).

vLLM's options cost only the requests that use them: penalties change a
copy of the step's logits (`adjust_logits`), ``logprobs`` are read from the
raw logits (vLLM's default, ``logprobs_mode="raw_logprobs"``), and stop
strings are matched in the decoded text of the requests that have them
(`stop_string`).

Sampling changes only `Sequence` objects — their tokens, and the group's
list of sequences (new forks, pruned beams). What that means for KV memory
(forked tables, freed blocks) is written by `Scheduler.update` from the
`Sampled` record returned here.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from ..model.sampler import sample
from ..sampling_params import SamplingParams
from ..scheduler import Sampled
from ..sequence import FinishReason, Sequence, SequenceGroup
from .beam_search import beam_step
from .outputs import Logprob


@dataclass
class StopRule:
    """What ends a sequence of a request: its stop ids (end-of-sequence
    included unless ignored), the model's length, and (for stop strings)
    the tokenizer that turns its tokens into text."""

    eos_token_ids: set[int]
    max_model_len: int
    tokenizer: Any = None

    def stop_ids(self, group: SequenceGroup) -> set[int]:
        """The tokens that end a sequence of `group`."""
        params = group.params
        if params.ignore_eos:
            return set(params.stop_token_ids)
        return self.eos_token_ids.union(params.stop_token_ids)

    def early_ids(self, group: SequenceGroup) -> set[int]:
        """The tokens a sequence cannot pick before ``min_tokens``: its stop
        tokens and end-of-sequence, even with ``ignore_eos`` (vLLM masks
        its ``all_stop_token_ids``, which always hold end-of-sequence)."""
        return self.eos_token_ids.union(group.params.stop_token_ids)

    def named_stop(self, params: SamplingParams, token: int) -> int | None:
        """What a sequence that `token` stopped names in ``stop_reason``: the
        token if it is one of the request's own ``stop_token_ids`` and not an
        end-of-sequence that ends it anyway (vLLM checks end-of-sequence first)."""
        eos = () if params.ignore_eos else self.eos_token_ids
        return token if token in params.stop_token_ids and token not in eos else None


def sample_step(rows: list[tuple[SequenceGroup, list[tuple[Sequence, int]]]],
                logits: torch.Tensor, rule: StopRule, new_seq_id: Callable[[], int]) -> Sampled:
    """Sample every group of `rows` — ``(group, [(sequence, its row of
    logits)])``, in scheduled order — each from its ``group.generator``
    (unseeded requests share the engine's, drawing in that order), and
    return what was decided.

    All or nothing: if anything raises part-way (a KeyboardInterrupt too),
    every group and generator is put back as it was (`_restore`), so the
    step can run again and sample what it would have sampled."""
    saved = ([(g, list(g.seqs), len(g.finished_beams),
               [(s, len(s.token_ids), [getattr(s, f) for f in _SAMPLED]) for s in g.seqs])
              for g, _ in rows],
             [(gen, gen.get_state()) for gen in
              {g.generator for g, _ in rows if not g.params.greedy}])
    try:
        raw = logits  # what logprobs report (vLLM's raw_logprobs)
        logits = adjust_logits(rows, logits, rule)
        # every greedy pick of the step in one op (a tie picks the lowest id, as `sample` does)
        greedy = (logits.argmax(-1).tolist()
                  if any(g.params.greedy and not g.params.use_beam_search for g, _ in rows) else [])
        sampled = Sampled()
        now = time.monotonic()
        for group, group_rows in rows:
            if group.metrics.first_token_time is None:
                group.metrics.first_token_time = now
            group.metrics.last_token_time = now
            if group.params.use_beam_search:
                _beam_group(group, group_rows, logits, rule, new_seq_id, sampled)
            else:
                _sample_group(group, group_rows, logits, raw, greedy, new_seq_id, sampled)
                _check_stops(group, rule, sampled)
        return sampled
    except BaseException:
        _restore(*saved)
        raise


#: what sampling writes on a sequence besides its tokens
_SAMPLED = ("cumulative_logprob", "logprobs", "text", "decoded", "stop_reason", "finish_reason")


def _restore(groups: list, generators: list) -> None:
    """Put the groups (their sequences, tokens, finished beams) and the
    generators back as `sample_step` found them."""
    for group, seqs, num_finished_beams, states in groups:
        group.seqs = seqs
        del group.finished_beams[num_finished_beams:]
        for seq, length, values in states:
            del seq.token_ids[length:]
            for name, value in zip(_SAMPLED, values, strict=True):
                setattr(seq, name, value)
    for gen, state in generators:
        gen.set_state(state)


def adjust_logits(rows: list[tuple[SequenceGroup, list[tuple[Sequence, int]]]],
                  logits: torch.Tensor, rule: StopRule) -> torch.Tensor:
    """The logits tokens are picked from, in a copy, for the rows that need
    one (vLLM's order): ``min_tokens`` first — a sequence that has generated
    fewer cannot pick a stop token or end-of-sequence (`StopRule.early_ids`),
    so those get -inf in its row — then
    the repetition, frequency and presence penalties (`penalize`). The rows
    of beam searches are left as they are: `beam_step` masks their
    log-probabilities itself. Without such rows the logits come back as
    they are."""
    early = []
    for group, group_rows in rows:
        params = group.params
        if params.use_beam_search:
            continue
        stop_ids = sorted(rule.early_ids(group)) if params.min_tokens else ()
        early += [(row, seq, params, stop_ids) for seq, row in group_rows
                  if params.penalized or (stop_ids and seq.num_output_tokens < params.min_tokens)]
    if not early:
        return logits
    logits = logits.clone()
    for row, seq, params, stop_ids in early:
        if stop_ids and seq.num_output_tokens < params.min_tokens:
            logits[row, stop_ids] = float("-inf")
        if params.penalized:
            logits[row] = penalize(logits[row], seq, params)
    return logits


def penalize(logits: torch.Tensor, seq: Sequence, params: SamplingParams) -> torch.Tensor:
    """vLLM's (and OpenAI's) penalties on one row of logits. Repetition: a
    token seen in the prompt or the output has its logit divided by the
    penalty if positive, multiplied if not (so it always loses ground for a
    penalty > 1). Frequency: minus the penalty times the token's count in
    the output. Presence: minus the penalty once for a token in the output."""
    logits = logits.clone()
    vocab = logits.numel()
    if params.repetition_penalty != 1.0:
        seen = torch.zeros(vocab, dtype=torch.bool)
        seen[torch.tensor(seq.token_ids)] = True
        penalty = torch.tensor(params.repetition_penalty, dtype=logits.dtype)
        scale = torch.where(logits > 0, 1.0 / penalty, penalty)
        logits = torch.where(seen.to(logits.device), logits * scale, logits)
    output = seq.output_token_ids
    if output and (params.frequency_penalty or params.presence_penalty):
        counts = torch.bincount(torch.tensor(output), minlength=vocab).to(logits)
        logits -= params.frequency_penalty * counts
        logits -= params.presence_penalty * (counts > 0).to(logits)
    return logits


def _sample_group(group: SequenceGroup, rows: list[tuple[Sequence, int]], logits: torch.Tensor,
                  raw: torch.Tensor, greedy: list[int], new_seq_id: Callable[[], int],
                  sampled: Sampled) -> None:
    """Greedy or random tokens for a request's rows; its first token forks n
    samples. `raw` is the step's logits before any adjustment, which
    ``logprobs`` report."""
    params = group.params
    for seq, row in rows:
        count = params.n if len(group.seqs) < params.n else 1  # first token: fork n
        tokens = ([greedy[row]] * count if params.greedy
                  else sample(logits[row], params, count, group.generator))
        children = [seq.fork(new_seq_id()) for _ in tokens[1:]]  # before seq has its token
        for child, token in zip([seq, *children], tokens, strict=True):
            child.token_ids.append(token)
            sampled.new_tokens[child.seq_id] = token
        if params.logprobs is not None:
            record_logprobs([seq, *children], tokens, raw[row], params.logprobs)
        group.seqs += children
        sampled.forks += [(group, seq, child) for child in children]


def record_logprobs(seqs: list[Sequence], tokens: list[int], raw: torch.Tensor,
                    k: int) -> None:
    """Each sequence's new position in vLLM's format: ``{token id: Logprob}``
    with its own token first (its rank counts the tokens at least as
    likely), then the `k` most likely in order (ranks 1..k; a chosen token
    among them takes that entry's rank); ``k = -1`` is the whole
    vocabulary. Adds the token's log-probability to `cumulative_logprob`."""
    logprobs = torch.log_softmax(raw.float(), dim=-1)
    for seq, token in zip(seqs, tokens, strict=True):
        position = position_logprobs(logprobs, token, k)
        seq.logprobs = [*(seq.logprobs or ()), position]
        seq.cumulative_logprob += position[token].logprob


def position_logprobs(logprobs: torch.Tensor, token: int, k: int) -> dict[int, Logprob]:
    """One position in vLLM's format, from its log-probabilities: `token`
    (the chosen or the prompt's) first, then the top `k` (-1: all)."""
    k = logprobs.numel() if k == -1 else k
    value = logprobs[token]
    position = {token: Logprob(float(value), int((logprobs >= value).sum()))}
    if k:
        top = torch.topk(logprobs, k)
        position.update({t: Logprob(lp, rank) for rank, (t, lp) in enumerate(
            zip(top.indices.tolist(), top.values.tolist(), strict=True), 1)})
    return position


def record_prompt_logprobs(group: SequenceGroup, logits: torch.Tensor, start: int) -> None:
    """``prompt_logprobs``: the logits of positions ``start, start + 1, ...``
    of the group's prompt predict its tokens ``start + 1, ...``; each one
    not recorded yet (a chunk computes a part, a recomputation repeats
    some) is added in vLLM's format, from the raw logits."""
    prompt, recorded = group.prompt_token_ids, group.prompt_logprobs
    logprobs = torch.log_softmax(logits.float(), dim=-1)
    for i in range(logits.shape[0]):
        target = start + i + 1  # the prompt token these logits predict
        if target == len(recorded) and target < len(prompt):
            recorded.append(position_logprobs(logprobs[i], prompt[target],
                                              group.params.prompt_logprobs))


def _beam_group(group: SequenceGroup, rows: list[tuple[Sequence, int]], logits: torch.Tensor,
                rule: StopRule, new_seq_id: Callable[[], int], sampled: Sampled) -> None:
    """One step of a beam search; when it is over, every live beam stops."""
    beams = beam_step(group, [(seq, logits[row]) for seq, row in rows], rule, new_seq_id)
    sampled.new_tokens.update(beams.new_tokens)
    sampled.forks += [(group, parent, child) for parent, child in beams.forks]
    sampled.dropped += [(group, seq) for seq in beams.dropped]
    if beams.done:
        sampled.stops += [(group, seq, FinishReason.STOP) for seq in group.seqs]
    else:
        _check_stops(group, rule, sampled)


def _check_stops(group: SequenceGroup, rule: StopRule, sampled: Sampled) -> None:
    """The engine's one stop rule, for the sequences of `group` that got a
    token: a stop token (end-of-sequence unless ``ignore_eos``, or one of
    ``stop_token_ids``, which vLLM names in `stop_reason`) once ``min_tokens``
    are out; else ``max_tokens`` or the model's length; else (or after the
    length, as in vLLM) a stop string in the text (`stop_string`). Beam
    search decides when a whole search is over itself (`beam_step`)."""
    params = group.params
    eos = () if params.ignore_eos else rule.eos_token_ids  # no call: the step's hot path
    for seq in group.unfinished_seqs():
        if seq.seq_id not in sampled.new_tokens:
            continue
        token, generated = seq.token_ids[-1], seq.num_output_tokens
        reason = None
        if (token in params.stop_token_ids or token in eos) and generated >= params.min_tokens:
            reason = FinishReason.STOP
            seq.stop_reason = rule.named_stop(params, token)
        elif len(seq.token_ids) >= rule.max_model_len or (
                params.max_tokens is not None and generated >= params.max_tokens):
            reason = FinishReason.LENGTH
        if params.stop and (reason is not FinishReason.STOP or params.include_stop_str_in_output):
            reason = stop_string(seq, params, rule.tokenizer) or reason
        if reason is not None:
            sampled.stops.append((group, seq, reason))


def stop_string(seq: Sequence, params: SamplingParams, tokenizer: Any) -> FinishReason | None:
    """vLLM's stop strings: once the output holds more than ``min_tokens``
    tokens, the text the newest token added is searched (with the last
    ``len(stop) - 1`` characters before it, so a string split across tokens
    is found) for the stop string that ends first. Found, the completion
    stops there: its text is cut before the string (after it with
    ``include_stop_str_in_output``), its tokens stay as generated, and
    `stop_reason` is the string. The text so far is kept on the sequence,
    so each step decodes only once."""
    before = seq.decoded
    text = output_text(tokenizer, seq.output_token_ids, params)
    seq.decoded = text
    if seq.num_output_tokens <= params.min_tokens:
        return None
    new = len(text) - _common_prefix_len(before, text)
    best = None  # (end, start, string)
    for stop in params.stop:
        start = text.find(stop, max(0, len(text) - new - len(stop) + 1))
        if start != -1 and (best is None or start + len(stop) < best[0]):
            best = (start + len(stop), start, stop)
    if best is None or not new:
        return None
    end, start, stop = best
    seq.text = text[:end] if params.include_stop_str_in_output else text[:start]
    seq.stop_reason = stop
    return FinishReason.STOP


def output_text(tokenizer: Any, ids: list[int], params: SamplingParams) -> str:
    """The text of output tokens as vLLM's detokenizer shows it: a text that
    ends in U+FFFD (the tokens so far end inside a multi-byte character,
    which byte-level tokenizers split) is held back to before it, until a
    later token completes the character."""
    return tokenizer.decode(ids, skip_special_tokens=params.skip_special_tokens).rstrip("\ufffd")


def _common_prefix_len(a: str, b: str) -> int:
    """How many leading characters `a` and `b` share (all of `a` as a rule:
    decoding one more token only appends, unless the last one ended inside
    a multi-byte character)."""
    if b.startswith(a):
        return len(a)
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n
