"""Checks for lab 08 (the full engine: packing a step, filtering logits).

The expected answers come from the engine's own code: `pack_step`
packs the same scheduled sequences, and `pagedkit.model.sampler.filter_logits`
filters the same logits. A learner's function passes only if it agrees with
what the engine really runs.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from itertools import islice

import torch

from ..i18n import _
from ..memory import KVCacheManager
from ..model.runner import pack_step
from ..model.sampler import filter_logits
from ..sampling_params import SamplingParams
from ..scheduler.scheduler import ScheduledSeq, SchedulerOutput
from ..sequence import Sequence
from . import (
    Case,
    CheckResult,
    call_learner,
    fresh,
    function_name,
    in_stub_order,
    is_sequence,
    other_cases,
    require_function,
    same_items,
    same_values,
    wrong_answer,
)

__all__ = ["CHECKS", "check_pack_step", "check_top_p_filter", "engine_packing"]


# ------------------------------------------------------------ top_p_filter
def _same_logits(got, want: torch.Tensor) -> bool:
    """The same tensor of logits: dtype and shape, -inf where `want` drops a token,
    the kept values close (a float64 answer is refused by its dtype, never
    compared across dtypes: newcomer 30's crash)."""
    if (not isinstance(got, torch.Tensor) or got.dtype != want.dtype
            or got.shape != want.shape):
        return False
    dropped = torch.isinf(want)
    if not torch.equal(torch.isinf(got) & (got < 0), dropped):
        return False
    return torch.allclose(got[~dropped], want[~dropped])


class _Logits(torch.Tensor):
    """A tensor whose repr in a failure message stays short and readable
    (float32 alone: another dtype, a bool mask say, shows as torch writes it)."""

    def __repr__(self) -> str:
        if self.dtype != torch.float32:
            return repr(self.as_subclass(torch.Tensor))
        values = ", ".join("-inf" if v == float("-inf") else f"{v:.2f}" for v in self.tolist())
        return f"tensor([{values}])"

    def __deepcopy__(self, memo: dict) -> torch.Tensor:
        """A fresh copy for each call (`fresh`): a clone, still a `_Logits`."""
        return self.clone()


def _logits(values) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float32).as_subclass(_Logits)


def _top_p_mistake(got, logits: torch.Tensor, top_p: float, want: torch.Tensor) -> str:
    """The hint for a wrong `top_p_filter` answer where the check can tell the
    mistake ('' where it cannot: the case's hint stands): not a tensor, a mask,
    another dtype or shape, probabilities, changed kept logits, a wrong value in
    the dropped places, or a token too many or too few."""
    if not isinstance(got, torch.Tensor):
        return _("return a torch tensor, like the logits you were given (got {type})").format(
            type=type(got).__name__)
    if got.dtype == torch.bool:
        return _("this is a mask (True where a token is kept), not logits: return the logits, "
                 "with -inf where a token is dropped")
    if got.dtype != want.dtype:
        return _("it returned {got} logits: return the logits' own dtype ({want})").format(
            got=str(got.dtype).removeprefix("torch."), want=str(want.dtype).removeprefix("torch."))
    if got.shape != want.shape:
        return _("return one logit per token: shape {want}, not {got}").format(
            want=tuple(want.shape), got=tuple(got.shape))
    dropped = torch.isinf(want)
    if torch.isfinite(got).all() and (got >= 0).all() and abs(float(got.sum()) - 1) < 1e-4:
        return _("these are probabilities (they sum to 1), not logits: return the logits, with "
                 "-inf where a token is dropped")
    neg_inf = torch.isinf(got) & (got < 0)
    unchanged = torch.isclose(got, logits)
    if not (unchanged | neg_inf)[~dropped].all():
        return _("the kept tokens' logits changed: keep them as they were, and set only the "
                 "dropped ones to -inf")
    wrong_fill = dropped & ~neg_inf & ~unchanged
    if wrong_fill.any():
        return _("a dropped token must be -inf, not {value}: any other value is a logit that "
                 "can still be sampled").format(value=got[wrong_fill][0].item())
    # the cut: which tokens are kept (the others are -inf)
    values, order = torch.sort(logits, descending=True)
    probs = values.softmax(-1)
    before = probs.cumsum(-1) - probs  # the mass of the tokens more likely than each
    kept = ~neg_inf[order]  # in sorted order
    if kept.any() and not kept[:int(kept.sum())].all():
        return _("the tokens you keep are not the most likely ones: sort by probability, then "
                 "map the cut back to the original positions")
    n_got, n_want = int(kept.sum()), int((~dropped).sum())
    if n_got > n_want:
        token, mass = int(order[n_want]), float(before[n_want])
        text = (_("token {token} (logit {logit:.2f}) is kept, but the tokens more likely than it "
                  "already hold exactly top_p = {top_p} of the probability, and reaching top_p "
                  "is enough: drop it (>=, not >)") if bool(before[n_want] == top_p) else
                _("token {token} (logit {logit:.2f}) is kept, but the tokens more likely than it "
                  "already hold {mass} of the probability, which reaches top_p = {top_p}: "
                  "drop it"))
        return text.format(token=token, logit=float(logits[token]), mass=_apart(mass, top_p),
                           top_p=top_p)
    if n_got == 0:
        return _("the most likely token (token {token}) is always kept, however small "
                 "top_p").format(token=int(order[0]))
    if n_got < n_want:
        token = int(order[n_got])
        return _("token {token} (logit {logit:.2f}) is dropped, but the tokens more likely than "
                 "it hold only {mass} of the probability, less than top_p = {top_p}: keep "
                 "it").format(token=token, logit=float(logits[token]),
                              mass=_apart(float(before[n_got]), top_p), top_p=top_p)
    return ""


def _apart(mass: float, top_p: float) -> str:
    """`mass` in 4 significant digits, or as many more as it takes not to read
    as `top_p` (newcomer 35: "hold only 0.9 ..., less than top_p = 0.9")."""
    for digits in (4, 6, 8, 10, 17):
        text = f"{mass:.{digits}g}"
        if mass == top_p or float(text) != top_p:
            return text
    return repr(mass)


@in_stub_order
def check_top_p_filter(fn: Callable) -> CheckResult:
    """`top_p_filter(logits, top_p)` must match `filter_logits` at temperature 1.

    A wrong answer's hint names its mistake where the check can tell it
    (`_top_p_mistake`), else the case's (newcomer 30: every answer was told
    its case's hint, "sort by probability" to answers that sort)."""
    g = torch.Generator().manual_seed(8)
    rows = [
        ([2.0, 1.0, 0.5, -1.0], 0.9, _("sort by probability; keep tokens until the kept mass "
                                     "reaches top_p")),
        ([2.0, 1.0, 0.5, -1.0], 1.0, _("top_p = 1 keeps every token")),
        ([0.5, 3.0, -1.0, 2.0, 0.0], 0.5, _("the most likely token is not first: sort first, then "
                                          "map the cut back to the original positions")),
        ([0.5, 3.0, -1.0, 2.0, 0.0], 0.01, _("a tiny top_p still keeps the most likely token")),
        ([0.1, 0.2, 0.3, 0.4, 0.5, 0.6], 0.6, _("a token is dropped once the mass of the tokens "
                                              "*before* it already reaches top_p")),
        ([math.log(2), math.log(8), 0.0, math.log(4), 0.0], 0.75,
         _("probabilities 1/2, 1/4, 1/8, 1/16, 1/16 (in sorted order): the mass before the third "
         "is exactly 0.75 = top_p, which *reaches* top_p, so it is dropped (>=, not >)")),
        (torch.randn(50, generator=g).tolist(), 0.8, _("50 logits: use softmax probabilities")),
        (torch.randn(50, generator=g).mul(4).tolist(), 0.95, _("keep the dropped logits at -inf, "
                                                             "the kept ones unchanged")),
    ]
    name = "top_p_filter"
    require_function(name, fn)
    cases = [Case((_logits(v), p), filter_logits(_logits(v), SamplingParams(top_p=p)).as_subclass(
        _Logits), hint) for v, p, hint in rows]
    for case in cases:
        call = case.call_text(function_name(fn, name))
        logits, top_p = fresh(case.args)
        got, failed = call_learner(name, fn, call, logits, top_p, expected=case.expected,
                                   hint=case.hint, elsewhere=other_cases(cases, case))
        if failed is not None:
            return failed
        if not _same_logits(got, case.expected):
            hint = "" if got is None else _top_p_mistake(got, case.args[0], top_p, case.expected)
            return wrong_answer(name, call, got, case.expected, hint or case.hint)
    logits = _logits([1.0, 2.0, 3.0])
    call = f"{function_name(fn, name)}({logits!r}, 0.5)"
    _got, failed = call_learner(name, fn, call, logits, 0.5)
    if failed is not None:
        return failed
    if not torch.equal(logits, torch.tensor([1.0, 2.0, 3.0])):
        return CheckResult(name, False, _("your function changed the logits it was "
                                          "given; return a new tensor (e.g. clone first)"))
    return CheckResult(name, True, _("all {n} cases pass").format(n=len(cases)))


# --------------------------------------------------------------- pack_step
def engine_packing(seqs: list[tuple[int, int]], block_size: int
                   ) -> tuple[list[tuple[list[int], int, int]], tuple[list[int], ...]]:
    """A step as the engine packs it.

    `seqs` gives each scheduled sequence's ``(total_tokens, start)``: its
    tokens ``start..total_tokens-1`` are computed this step (decodes first).
    Their slots come from a real block pool, handed out round-robin a block
    at a time so the tables interleave as in a busy engine. Returns the
    learner's input — ``(block_table, start, num_tokens)`` per sequence — and
    what the engine's `pack_step` makes of the same step: positions,
    slot_mapping, cu_seqlens and context_lens (it needs no model for that).
    """
    kv = KVCacheManager(num_blocks=sum(-(-n // block_size) for n, _start in seqs),
                        block_size=block_size)
    sequences = [Sequence(list(range(100, 100 + n)), seq_id=f"s{i}")
                 for i, (n, _start) in enumerate(seqs)]
    for first in range(0, max(n for n, _start in seqs), block_size):
        for seq in sequences:
            chunk = seq.token_ids[first:first + block_size]
            if chunk:
                kv.allocate_slots(seq.seq_id, chunk)
    step = SchedulerOutput(step=0)
    learner = []
    for seq, (n, start) in zip(sequences, seqs, strict=True):
        step.scheduled.append(ScheduledSeq(None, seq, n - start, start,
                                           computes_last_token=True))  # up to its end
        learner.append((kv.block_ids(seq.seq_id), start, n - start))
    _step, positions, meta, _kv = pack_step(step, kv)
    return learner, (positions.tolist(), meta.slot_mapping.tolist(), meta.cu_seqlens_q.tolist(),
                     meta.context_lens.tolist())


@in_stub_order
def check_pack_step(fn: Callable) -> CheckResult:
    """`pack_step(scheduled, block_size)` must pack like the engine's `pack_step`."""
    specs = [
        ([(6, 0)], 4, _("one prompt of 6 tokens from position 0: token i sits in block "
                      "table[i // block_size] at offset i % block_size")),
        ([(10, 9), (3, 2)], 4, _("two decodes: each has one new token, at position start")),
        ([(11, 10), (4, 3), (7, 0)], 4, _("two decodes then a prompt: cu_seqlens starts at 0 and "
                                        "adds each sequence's new tokens")),
        ([(11, 8)], 4, _("a prefix-cache hit: the first 8 tokens are cached, only positions 8..10 "
                       "are new; context_lens counts all 11")),
        ([(8, 7), (12, 4)], 4, _("a chunk of a longer prompt (chunked prefill): positions 4..11 "
                               "only")),
        ([(5, 2), (2, 1)], 1, _("block_size 1: every token has its own block")),
        ([(40, 39), (17, 16), (25, 0)], 16, _("block_size 16, a busy step")),
    ]
    name = "pack_step"
    require_function(name, fn)
    fields = {
        "positions": _("only the new tokens' positions: start .. start + num_tokens - 1"),
        "slot_mapping": _("slot = table[pos // block_size] * block_size + pos % block_size"),
        "cu_seqlens": _("starts at 0 and adds each sequence's num_tokens (one more entry than "
                      "sequences)"),
        "context_lens": _("every token in the cache once this step is done: start + num_tokens"),
    }
    cases = []
    for seqs, block_size, hint in specs:
        learner, expected = engine_packing(seqs, block_size)
        cases.append(Case((learner, block_size), expected, hint))
    for case in cases:
        (learner, block_size), expected, hint = case.args, case.expected, case.hint
        call = case.call_text(function_name(fn, name))
        got, failed = call_learner(name, fn, call, fresh(learner), block_size,
                                   expected=expected, hint=hint,
                                   elsewhere=other_cases(cases, case))
        if failed is not None:
            return failed
        if not isinstance(got, (tuple, list)) or len(got) != 4:
            return CheckResult(name, False, _("{call} returned {got!r}; expected four lists: "
                                              "{items}")
                                             .format(call=call, got=got, items=', '.join(fields)))
        # each list read no further than one item past its expected length (an endless
        # generator ends there), then judged by the one rule (`same_items`): counts, not floats
        got = tuple(list(islice(g, len(want) + 1)) if is_sequence(g) else g
                    for g, want in zip(got, expected, strict=True))
        for (field, field_hint), g, want in zip(fields.items(), got, expected, strict=True):
            if not same_values(g, want):
                return CheckResult(name, False, _("{call}: {field} is {got}, expected {want}. "
                                                  " Hint: {field_hint}. ({hint})")
                                                 .format(call=call, field=field, got=g,
                                                         want=want, field_hint=field_hint,
                                                         hint=hint))
        if not same_items(got, expected):  # right values, but a float (or bool) for a count
            return wrong_answer(name, call, got, expected)
    return CheckResult(name, True, _("all {n} cases pass").format(n=len(specs)))


CHECKS = {
    "top_p_filter": check_top_p_filter,
    "pack_step": check_pack_step,
}
