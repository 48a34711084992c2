"""Checks for lab 04 (PagedAttention): attention through a block table.

Every check builds paged caches like the engine's — a sequence's blocks
scattered over the cache in shuffled order — with two traps for stray reads:
the block table is padded past its last block with ids out of range (the
engine pads with 0, a valid id; padding is never read, so an answer that
reads only the sequence's blocks works with either), and every slot that
does not hold one of the sequence's tokens is NaN. Expected values come from
`torch.nn.functional.scaled_dot_product_attention` (or a plain softmax) on
the un-paged K/V, never from the code under test.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from itertools import pairwise, permutations

import torch
import torch.nn.functional as F

from ..i18n import N_, _, join_clauses, ngettext
from . import (
    EXPECTED_LATER,
    Case,
    CheckResult,
    call_learner,
    full_stop,
    function_name,
    hint_text,
    in_stub_order,
    require_function,
    wrong_answer,
)

__all__ = [
    "CHECKS",
    "check_gather_kv",
    "check_merge_states",
    "check_online_softmax_update",
    "check_paged_decode_attention",
    "check_paged_kernel",
    "paged_example",
]


@dataclass(frozen=True)
class PagedExample:
    """One sequence's K/V, contiguous and paged."""

    key: torch.Tensor            # [context_len, num_kv_heads, head_dim], contiguous
    value: torch.Tensor
    k_cache: torch.Tensor        # [num_blocks, block_size, num_kv_heads, head_dim]
    v_cache: torch.Tensor
    block_table: torch.Tensor    # [max_blocks] int32; padding past the last block
    context_len: int

    def describe(self) -> str:
        """The cache and the block table as a check's message shows them."""
        nb, bs, h, d = self.k_cache.shape
        return (f"cache [{nb} blocks x {bs} slots x {h} KV heads x {d}], "
                f"block_table={self.block_table.tolist()}")


def paged_example(context_len: int, block_size: int, num_kv_heads: int = 2, head_dim: int = 8,
                  *, spare_blocks: int = 3, padding: int = 2, seed: int = 0) -> PagedExample:
    """A random sequence of `context_len` tokens stored in shuffled blocks.

    Slots outside the sequence hold NaN, and the table has `padding` extra
    entries pointing past the end of the cache (as a padded batch's would)."""
    gen = torch.Generator().manual_seed(seed)
    key = torch.randn(context_len, num_kv_heads, head_dim, generator=gen)
    value = torch.randn(context_len, num_kv_heads, head_dim, generator=gen)
    used = -(-context_len // block_size)
    num_blocks = used + spare_blocks
    k_cache = torch.full((num_blocks, block_size, num_kv_heads, head_dim), float("nan"))
    v_cache = k_cache.clone()
    blocks = torch.randperm(num_blocks, generator=gen)[:used]
    for i in range(context_len):
        b, off = blocks[i // block_size], i % block_size
        k_cache[b, off] = key[i]
        v_cache[b, off] = value[i]
    table = torch.cat([blocks, torch.full((padding,), num_blocks + 7)]).to(torch.int32)
    return PagedExample(key, value, k_cache, v_cache, table, context_len)


def _sdpa(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
    """Decode attention of query ``[Hq, D]`` over contiguous K/V ``[T, Hkv, D]``
    with SDPA; query head h reads KV head ``h // (Hq // Hkv)``."""
    group = query.shape[0] // key.shape[1]
    k = key.repeat_interleave(group, dim=1).transpose(0, 1)       # [Hq, T, D]
    v = value.repeat_interleave(group, dim=1).transpose(0, 1)
    return F.scaled_dot_product_attention(query[:, None, :], k, v)[:, 0, :]


def _shape(x) -> str:
    return f"shape {list(x.shape)}" if isinstance(x, torch.Tensor) else f"a {type(x).__name__}"


def _first_problem(name: str, got, want: torch.Tensor, call: str, *, exact: bool = False,
                   atol: float = 1e-5) -> CheckResult | None:
    """None if `got` matches `want`; else a failing result saying how it differs."""
    if got is None:
        return wrong_answer(name, call, got, want)  # "did you forget `return`?"
    if not isinstance(got, torch.Tensor):
        return CheckResult(name, False, (_("{call} returned {shape}; expected a tensor of shape "
                                          "{list}")
                                          .format(call=call, shape=_shape(got),
                                                  list=list(want.shape))))
    if got.shape != want.shape:
        return CheckResult(name, False, (_("{call} returned shape {list}, expected {list2}")
                                          .format(call=call, list=list(got.shape),
                                                  list2=list(want.shape))))
    if torch.isnan(got).any():
        return CheckResult(name, False, _("{call} returned NaN. Every slot that does not hold "
                                          "one of the sequence's tokens is NaN in these "
                                          "checks: you read a slot past the context (or a "
                                          "padding entry of the block table)").format(call=call))
    same = torch.equal(got, want) if exact else torch.allclose(got.to(want.dtype), want,
                                                               atol=atol, rtol=atol)
    if not same:
        diff = (got.to(want.dtype) - want).abs().max().item()
        return CheckResult(name, False, _("{call} is off by up to {diff:.3g} from the expected "
                                          "values").format(call=call, diff=diff))
    return None


def _dtype_problem(name: str, got, want: torch.Tensor, call: str,
                   what: str | None = None) -> CheckResult | None:
    """A failing result when `got` is a tensor of a less precise floating dtype
    than `want` and agrees with it to that dtype's precision: the dtype is the
    mistake, not the values (newcomer 29, findings 2 and 8); else None."""
    if not isinstance(got, torch.Tensor) or not got.is_floating_point() \
            or got.shape != want.shape or got.dtype == want.dtype \
            or torch.finfo(got.dtype).eps <= torch.finfo(want.dtype).eps:
        return None
    tol = 10 * torch.finfo(got.dtype).eps
    if not torch.allclose(got.to(want.dtype), want, rtol=tol, atol=tol, equal_nan=True):
        return None
    dtype, expected = str(got.dtype).removeprefix("torch."), str(want.dtype).removeprefix("torch.")
    lead = (_("{call} returned {dtype}") if what is None else
            _("{call}: {what} is {dtype}")).format(call=call, what=what, dtype=dtype)
    return CheckResult(name, False, lead + _(
        ": the values agree with the expected ones only to {dtype}'s precision, and the check "
        "compares {expected} values. Keep the inputs' dtype, {expected} (drop the .float() / "
        ".half() / .to(...))").format(dtype=dtype, expected=expected))


# ------------------------------------------------------------------ gather_kv
GATHER_CASES = (  # (context_len, block_size)
    (5, 4), (8, 4), (1, 16), (3, 1), (33, 16), (16, 16),
)


@in_stub_order
def check_gather_kv(gather_kv: Callable) -> CheckResult:
    """`gather_kv(cache, block_table, num_tokens)` -> the sequence's first
    `num_tokens` vectors, contiguous: ``[num_tokens, num_kv_heads, head_dim]``."""
    name = "gather_kv"

    def body() -> CheckResult:
        for seed, (n, bs) in enumerate(GATHER_CASES):
            ex = paged_example(n, bs, seed=seed)
            call = f"{function_name(gather_kv, name)}({ex.describe()}, num_tokens={n})"
            for cache, want in ((ex.k_cache, ex.key), (ex.v_cache, ex.value)):
                got, failed = call_learner(name, gather_kv, call, cache.clone(),
                                           ex.block_table.clone(), n, error_hint=_padding_hint)
                if failed is not None:
                    return failed
                problem = _first_problem(name, got, want, call, exact=True)
                if problem is not None:
                    precision = _dtype_problem(name, got, want, call)
                    if precision is not None:
                        return precision
                    return CheckResult(name, False, full_stop(problem.message)
                                       + hint_text(_gather_hint(got, want, bs)))
        return CheckResult(name, True, _("all {n} cases pass (shuffled blocks, padded tables, "
                                         "block sizes 1 to 16)").format(n=len(GATHER_CASES)))
    require_function(name, gather_kv)
    return body()


def _returned_order(got: tuple, want: tuple) -> str:
    """The names of (row_max, row_sum, acc) in the order `got` holds them, where
    it is the right three values in another order (newcomer 39 returned
    (row_max, acc, row_sum) and was told to sum with .sum()); '' otherwise."""
    names = ("row_max", "row_sum", "acc")
    for order in permutations(range(3)):  # the right order, (0, 1, 2), is tried first
        if all(x.numel() == want[i].numel()
               and torch.allclose(x.reshape(want[i].shape), want[i], rtol=1e-6, atol=1e-9)
               for x, i in zip(got, order, strict=True)):
            return "" if order == (0, 1, 2) else ", ".join(names[i] for i in order)
    return ""


def _gather_hint(got, want: torch.Tensor, block_size: int) -> str:
    """What a wrong gather shows by its shape (newcomer 39: whole blocks only,
    rounded down, and swapped axes were both told to keep only the first
    num_tokens rows)."""
    shape = list(got.shape) if isinstance(got, torch.Tensor) else None
    if shape is not None and shape != list(want.shape):
        if sorted(shape) == sorted(want.shape) and shape[1:] != list(want.shape[1:]):
            return _("the axes are in another order: return [num_tokens, num_kv_heads, "
                     "head_dim], one row per token")
        if shape[1:] == list(want.shape[1:]) and shape[0] < want.shape[0] \
                and shape[0] == want.shape[0] // block_size * block_size:
            return (_("{got} rows for {n} tokens: each token needs its row, so read "
                      "ceil(num_tokens / block_size) blocks (round up: the last block may be "
                      "partly filled), then keep the first num_tokens rows")
                    .format(got=shape[0], n=want.shape[0]))
    return _("token i lives in block block_table[i // block_size] at offset i % block_size; "
             "after gathering whole blocks, keep only the first num_tokens rows")


def _padding_hint(err: Exception, count: str = "num_tokens") -> str:
    """The hint for an IndexError, on any case: every table has padding.
    `count` names the argument that holds the sequence's length."""
    if isinstance(err, IndexError):
        return (_("the table is padded past the sequence's last block with ids outside the "
                  "cache; read only the ceil({count} / block_size) blocks that hold its tokens")
                .format(count=count))
    return ""


# -------------------------------------------------------- paged_decode_attention
DECODE_CASES = (  # (context_len, block_size, num_q_heads, num_kv_heads)
    (5, 4, 2, 2), (12, 4, 4, 2), (1, 8, 4, 2), (17, 8, 8, 2), (40, 16, 4, 4), (3, 1, 4, 1),
)


def decode_grid() -> list[tuple]:
    """``(context_len, block_size, num_q_heads, num_kv_heads, head_dim, score_scale)``:
    one token, a block minus one, exactly one and two blocks, one past, in blocks of
    1, 3 and 16; query groups of 1, 3 and 4 (three query heads on one KV head is
    not a power of two), head_dim 8 and 12; then scores large enough that
    exp(score) overflows float32 unless the maximum is subtracted first."""
    cases = []
    for bs in (1, 3, 16):
        for n in sorted({1, bs - 1, bs, bs + 1, 2 * bs} - {0}):
            for hq, hkv in ((1, 1), (3, 1), (8, 2)):
                cases.append((n, bs, hq, hkv, 8 if hq != 3 else 12, 1.0))
    cases += [(9, 4, 4, 2, 8, 60.0), (16, 16, 2, 1, 12, 60.0)]
    return cases


def decode_cases() -> list[tuple]:
    """Every case `check_paged_decode_attention` runs, in order: the lab's
    `DECODE_CASES` (head_dim 8), then `decode_grid`."""
    return [(n, bs, hq, hkv, 8, 1.0) for n, bs, hq, hkv in DECODE_CASES] + decode_grid()


def _decode_label(n: int, bs: int, hq: int, hkv: int, d: int, big: float) -> str:
    parts = []
    if n % bs == 0:
        parts.append(_("the context fills exactly {value} block(s)").format(value=n // bs))
    elif n < bs:
        parts.append(_("the context is shorter than one block"))
    if hq != hkv:
        parts.append(_("{value} query heads share each KV head").format(value=hq // hkv))
    if d & (d - 1):
        parts.append(_("head_dim {d} is not a power of two").format(d=d))
    if big > 1:
        parts.append(_("the scores reach the hundreds: exp(score) overflows float32 (inf / inf "
                     "= NaN) unless you subtract the largest score first, or use "
                     "torch.softmax"))
    return join_clauses(parts)


@in_stub_order
def check_paged_decode_attention(paged_decode_attention: Callable) -> CheckResult:
    """`paged_decode_attention(query, k_cache, v_cache, block_table, context_len)`:
    one sequence's new token (query ``[num_q_heads, head_dim]``) attending to
    its `context_len` cached tokens; returns ``[num_q_heads, head_dim]``.
    Checked against SDPA on the un-paged K/V: the lab's cases, then the
    boundaries of `decode_grid`."""
    name = "paged_decode_attention"
    cases = decode_cases()

    def body() -> CheckResult:
        for seed, (n, bs, hq, hkv, d, big) in enumerate(cases):
            ex, query = _decode_inputs(seed, cases[seed])
            label = _decode_label(n, bs, hq, hkv, d, big)
            call = (f"{function_name(paged_decode_attention, name)}(query [{hq} heads x {d}], "
                    f"{ex.describe()}, context_len={n})")
            got, failed = call_learner(name, paged_decode_attention, call, query.clone(),
                                       ex.k_cache.clone(), ex.v_cache.clone(),
                                       ex.block_table.clone(), n, hint=label,
                                       elsewhere=_decode_calls(cases, skip=seed),
                                       error_hint=lambda err: _padding_hint(err, "context_len"))
            if failed is not None:
                return failed
            want = _sdpa(query, ex.key, ex.value)
            if big > 1 and isinstance(got, torch.Tensor) and got.shape == want.shape \
                    and not torch.isfinite(got).all():
                return CheckResult(name, False, (_("{call} returned inf or NaN where every "
                                                  "expected value is finite: {label}")
                                                  .format(call=call, label=label)))
            problem = _first_problem(name, got, want, call, atol=1e-5 if big == 1 else 1e-4)
            if problem is not None:
                precision = _dtype_problem(name, got, want, call)
                if precision is not None:
                    return precision
                where = _(" (this case: {label})").format(label=label) if label else ""
                return CheckResult(name, False, full_stop(problem.message + where)
                                   + _decode_hint(got, query, ex))
        return CheckResult(name, True, (_("all {n} cases match SDPA on the un-paged K/V (GQA "
                                         "groups of 1 to 4, head_dim 8 and 12, huge scores)")
                                         .format(n=len(cases))))
    require_function(name, paged_decode_attention)
    return body()


def _decode_inputs(seed: int, case: tuple) -> tuple[PagedExample, torch.Tensor]:
    """Decode case number `seed`'s paged K/V and query."""
    n, bs, hq, hkv, d, big = case
    ex = paged_example(n, bs, num_kv_heads=hkv, head_dim=d, seed=100 + seed)
    return ex, torch.randn(hq, d, generator=torch.Generator().manual_seed(seed)) * big


def _decode_calls(cases: list[tuple], skip: int) -> Iterator[Case]:
    """The decode cases but number `skip`, as calls (made one at a time, when
    asked for): where `call_learner` tries an answer that raised on that one."""
    for seed, case in enumerate(cases):
        if seed != skip:
            ex, query = _decode_inputs(seed, case)
            yield Case((query, ex.k_cache, ex.v_cache, ex.block_table, case[0]), EXPECTED_LATER)


def _decode_hint(got, query: torch.Tensor, ex: PagedExample) -> str:
    """Name the usual mistake when the answer matches it."""
    if not isinstance(got, torch.Tensor) or got.shape != query.shape or torch.isnan(got).any():
        return ""
    hq, hkv = query.shape[0], ex.key.shape[1]
    group = hq // hkv
    if group > 1:
        k = ex.key.repeat(1, group, 1).transpose(0, 1)
        v = ex.value.repeat(1, group, 1).transpose(0, 1)
        wrong = F.scaled_dot_product_attention(query[:, None], k, v)[:, 0]
        if torch.allclose(got.to(wrong.dtype), wrong, atol=1e-5):
            return (_("  Hint: query head h reads KV head h // (num_q_heads // num_kv_heads): "
                    "consecutive query heads share a KV head. `repeat` tiles the heads "
                    "(0,1,0,1); `repeat_interleave` gives (0,0,1,1)"))
    k = ex.key.repeat_interleave(group, dim=1).transpose(0, 1)  # [hq, n, d]
    v = ex.value.repeat_interleave(group, dim=1).transpose(0, 1)
    d = query.shape[-1]

    def attend(keys, values, scale=None):
        return F.scaled_dot_product_attention(query[:, None], keys, values, scale=scale)[:, 0]

    scores = (query[:, None] * k).sum(-1) / math.sqrt(d)  # [hq, n]
    mistakes = [  # (what that mistake gives, what to do instead)
        (lambda: attend(k, v, scale=1.0),
         N_("scale the scores by 1 / sqrt(head_dim) before the softmax")),
        (lambda: attend(k, v, scale=1.0 / d),
         N_("scale the scores by 1 / sqrt(head_dim), not 1 / head_dim")),
        (lambda: (scores.softmax(0)[..., None] * v).sum(1),
         N_("take the softmax over the tokens (the last axis of the scores), not over the "
            "heads")),
        (lambda: attend(k[:, :-1], v[:, :-1]) if k.shape[1] > 1 else None,
         N_("attend to all context_len cached tokens, not context_len - 1: the new token's own "
            "K/V is already in the cache, at position context_len - 1")),
        (lambda: attend(ex.key[:, :1].expand(-1, hq, -1).transpose(0, 1),
                        ex.value[:, :1].expand(-1, hq, -1).transpose(0, 1)) if hkv > 1 else None,
         N_("query head h reads KV head h // (num_q_heads // num_kv_heads), not KV head 0 for "
            "every query head")),
    ]
    for wrong, advice in mistakes:
        out = wrong()
        if out is not None and torch.allclose(got.to(out.dtype), out, atol=1e-5):
            return _("  Hint: {advice}").format(advice=_(advice))
    return (_("  Hint: gather the K and V of the first context_len tokens (your gather_kv, or "
            "pagedkit.kernels.reference.gather_kv), then softmax(q . k / sqrt(head_dim)) over "
            "the tokens, weighted sum of v"))


# ------------------------------------------------------- online_softmax_update
def _tiles(n: int, size: int) -> list[slice]:
    return [slice(s, min(s + size, n)) for s in range(0, n, size)]


_NEG = float("-inf")
SOFTMAX_CASES = (  # (description, scores, tile size); -inf marks a masked position
    (N_("rising scores"), torch.linspace(-3.0, 3.0, 10), 3),
    (N_("falling scores"), torch.linspace(3.0, -3.0, 10), 4),
    (N_("one token per tile"), torch.tensor([0.5, 2.0, -1.0, 4.0, 1.0]), 1),
    (N_("one tile"), torch.tensor([1.0, -2.0, 0.25]), 8),
    (N_("huge scores (exp would overflow)"), torch.tensor([900.0, 1000.0, 950.0, 1001.0, 20.0]), 2),
    (N_("masked positions inside a tile"), torch.tensor([1.0, _NEG, 2.0, _NEG, -1.0, 0.5]), 3),
    (N_("a fully masked FIRST tile"), torch.tensor([_NEG, _NEG, 0.5, 3.0, -2.0]), 2),
    (N_("a fully masked tile in the middle"), torch.tensor([2.0, 1.0, _NEG, _NEG, 4.0, 0.0]), 2),
    (N_("masked tiles only at the end"), torch.tensor([0.3, -0.7, 1.2, _NEG, _NEG, _NEG]), 3),
)


def _softmax_state(seen: torch.Tensor, v: torch.Tensor):
    """(row_max, row_sum, acc) after the scores `seen` — (-inf, 0, zeros) while
    every score seen so far is masked."""
    m = seen.max()
    if m == _NEG:
        return m, torch.tensor(0.0, dtype=seen.dtype), torch.zeros(v.shape[1], dtype=v.dtype)
    p = torch.exp(seen - m)
    return m, p.sum(), p @ v


@in_stub_order
def check_online_softmax_update(online_softmax_update: Callable) -> CheckResult:
    """`online_softmax_update(row_max, row_sum, acc, scores, v)` -> the new
    ``(row_max, row_sum, acc)`` after one tile; folded over the tiles from
    ``(-inf, 0, zeros)``, ``acc / row_sum`` must be ``softmax(scores) @ V``.
    Scores of ``-inf`` are masked positions; a tile may be masked entirely,
    even the first one (the state then stays ``(-inf, 0, zeros)``, no NaN)."""
    name = "online_softmax_update"

    def body() -> CheckResult:
        for i, (label, scores, size) in enumerate(SOFTMAX_CASES):
            label = _(label)
            scores = scores.double()
            v = torch.randn(len(scores), 4, generator=torch.Generator().manual_seed(i)).double()
            m, s, acc = torch.tensor(float("-inf"), dtype=torch.float64), \
                torch.tensor(0.0, dtype=torch.float64), torch.zeros(4, dtype=torch.float64)
            for t, tile in enumerate(_tiles(len(scores), size)):
                call = (_("{fn}(...) on tile {t} ({label}: scores {value}, tiles of {size})")
                        .format(fn=function_name(online_softmax_update, name), t=t, label=label,
                                value=[round(x, 2) for x in scores.tolist()], size=size))
                got, failed = call_learner(name, online_softmax_update, call, m.clone(),
                                           s.clone(), acc.clone(), scores[tile].clone(),
                                           v[tile].clone())
                if failed is not None:
                    return failed
                want_m, want_s, want_acc = _softmax_state(scores[:tile.stop], v[:tile.stop])
                if got is None:
                    return wrong_answer(name, call, got, (want_m, want_s, want_acc))
                if not isinstance(got, tuple | list) or len(got) != 3:
                    return CheckResult(name, False, (_("{call} returned {name}; return the "
                                                      "three new values (row_max, row_sum, acc)")
                                                      .format(call=call, name=type(got).__name__)))
                try:
                    gm, gs, gacc = (torch.as_tensor(x, dtype=torch.float64) for x in got)
                except (TypeError, ValueError, RuntimeError, OverflowError):
                    return CheckResult(name, False, (_("{call} returned {value}; return the "
                                                      "three new values (row_max, row_sum, "
                                                      "acc) as tensors")
                                                      .format(call=call,
                                                              value=[_brief(x) for x in got])))
                order = _returned_order((gm, gs, gacc), (want_m, want_s, want_acc))
                if order:
                    return CheckResult(name, False, _(
                        "{call} returned the right values in another order, ({order}): "
                        "return (row_max, row_sum, acc)").format(call=call, order=order))
                for what, x, reduce in (
                        ("row_max", gm, _("take the tile's largest score, scores.max(), then "
                                          "the larger of it and row_max")),
                        ("row_sum", gs, _("sum the tile's exp(score - new_max) with .sum() "
                                          "before adding it to row_sum * alpha"))):
                    if x.numel() != 1:
                        return CheckResult(name, False, _(
                            "{call}: {what} has shape {shape}; it must be one number for the "
                            "whole row, not one per score.  Hint: reduce the tile to one "
                            "number: {reduce}").format(call=call, what=what,
                                                       shape=list(x.shape), reduce=reduce))
                if gacc.shape != want_acc.shape:
                    return CheckResult(name, False, _(
                        "{call}: acc has shape {shape}, expected {shape2}: one running sum per "
                        "dimension of v (acc * alpha + p @ v keeps it that shape)").format(
                            call=call, shape=list(gacc.shape), shape2=list(want_acc.shape)))
                for what, x, want in zip(("row_max", "row_sum", "acc"), got,
                                         (want_m, want_s, want_acc), strict=True):
                    if isinstance(x, torch.Tensor) and x.shape != want.shape:
                        x = x.reshape(want.shape)  # one number as [1]: fine
                    precision = _dtype_problem(name, x, want, call, what)
                    if precision is not None and not torch.allclose(
                            x.double(), want, rtol=1e-6, atol=1e-9, equal_nan=True):
                        return precision
                if any(torch.isnan(x).any() for x in (gm, gs, gacc)):
                    return CheckResult(name, False, _("{call} returned NaN.  Hint: while every "
                                                      "score seen is -inf, row_max stays -inf "
                                                      "and exp(row_max - new_max) is exp(-inf "
                                                      "- (-inf)) = NaN; subtract a finite "
                                                      "stand-in (say 0) when the new maximum "
                                                      "is still -inf").format(call=call))
                if not (gm == want_m or torch.allclose(gm, want_m)):
                    return CheckResult(name, False, (_("{call}: row_max is {item:.4g}, expected "
                                                      "{item2:.4g}, the largest score seen so "
                                                      "far")
                                                      .format(call=call, item=gm.item(),
                                                              item2=want_m.item())))
                if not torch.allclose(gs, want_s, rtol=1e-6, atol=1e-9):
                    hint = (_("when the maximum grows, multiply what was summed so far by "
                            "exp(old_max - new_max)") if t else
                            _("row_sum is the sum of exp(score - row_max) over the scores seen"))
                    return CheckResult(name, False, (_("{call}: row_sum is {item:.6g}, expected "
                                                      "{item2:.6g}.  Hint: {hint}")
                                                      .format(call=call, item=gs.item(),
                                                              item2=want_s.item(), hint=hint)))
                if not torch.allclose(gacc, want_acc, rtol=1e-6, atol=1e-9):
                    return CheckResult(name, False, (_("{call}: acc is {value}, expected "
                                                      "{value2}.  Hint: acc is the sum of "
                                                      "exp(score - row_max) * v, not yet "
                                                      "divided by row_sum; rescale it like "
                                                      "row_sum")
                                                      .format(call=call,
                                                              value=[round(x, 4) for x in
                                                                     gacc.flatten().tolist()],
                                                              value2=[round(x, 4) for x in
                                                                      want_acc.tolist()])))
                m, s, acc = gm, gs, gacc
            out, want = acc / s, torch.softmax(scores, 0) @ v
            if not torch.allclose(out, want, rtol=1e-6, atol=1e-9):
                return CheckResult(name, False, _("{label}: acc / row_sum after the last tile "
                                                  "is not softmax(scores) @ v").format(label=label))
        return CheckResult(name, True, (_("all {n} cases pass, tile by tile (huge scores and "
                                         "fully masked tiles included)")
                                         .format(n=len(SOFTMAX_CASES))))
    require_function(name, online_softmax_update)
    return body()


# ----------------------------------------------------------------- merge_states
def _state(scores: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A split's (normalized output, log-sum-exp); an empty split is (zeros, -inf)."""
    if len(scores) == 0:
        return torch.zeros(v.shape[1], dtype=v.dtype), torch.tensor(_NEG, dtype=v.dtype)
    return torch.softmax(scores, 0) @ v, torch.logsumexp(scores, 0)


def _out_and_lse(got) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """A merge's two returned values as float64 tensors, the lse one number;
    ``(None, None)`` where they are not (text, None, complex, a list of lse's ...)."""
    try:
        out, lse = (torch.as_tensor(x) for x in got)
    except (TypeError, ValueError, RuntimeError, OverflowError):
        return None, None
    if out.is_complex() or lse.is_complex() or lse.numel() != 1:
        return None, None
    return out.double(), lse.double()


def _brief(x) -> str:
    """A returned value in a few words: an array's or tensor's shape, else its
    repr, cut short."""
    if isinstance(getattr(x, "shape", None), tuple):  # torch.Size is a tuple
        return f"shape {list(x.shape)}"
    text = repr(x)
    return text if len(text) <= 40 else text[:37] + "..."


MERGE_CASES = (  # (description, scores, split boundaries, merge order)
    (N_("two splits"), torch.linspace(-2.0, 2.0, 9), (0, 5, 9), "left"),
    (N_("four splits, merged left to right"), torch.tensor([3.0, 1.0, -2.0, 0.0, 5.0, 4.0, -1.0,
                                                        2.0]), (0, 2, 4, 6, 8), "left"),
    (N_("four splits, merged as a tree ((0, 1), (2, 3))"),
     torch.tensor([3.0, 1.0, -2.0, 0.0, 5.0, 4.0, -1.0, 2.0]), (0, 2, 4, 6, 8), "tree"),
    (N_("the same two splits, b merged into a"), torch.tensor([0.3, -1.0, 2.0, 0.7, 1.5]),
     (0, 3, 5), "right"),
    (N_("an empty split last (it started past the context)"), torch.tensor([1.0, 2.0, 0.5]),
     (0, 3, 3), "left"),
    (N_("an empty split first"), torch.tensor([1.0, 2.0, 0.5]), (0, 0, 3), "left"),
    (N_("two empty splits merged together, then a full one"), torch.tensor([0.5, -0.5]),
     (0, 0, 0, 2), "left"),
    (N_("huge scores (exp would overflow)"), torch.tensor([800.0, 1000.0, 990.0, 1002.0]),
     (0, 2, 4), "left"),
    (N_("uneven splits: 1 token and 6"), torch.tensor([4.0, -1.0, 0.0, 1.0, 2.0, 0.5, -3.0]),
     (0, 1, 7), "left"),
)


def _merge_order(states: list, order: str, emit: Callable) -> object:
    """Fold `emit` (the merge) over the split states: left to right, right to left, or as a tree."""
    if order == "tree":
        left = emit(states[0], states[1])
        right = emit(states[2], states[3])
        return emit(left, right)
    if order == "right":
        return emit(states[1], states[0])
    acc = states[0]
    for state in states[1:]:
        acc = emit(acc, state)
    return acc


@in_stub_order
def check_merge_states(merge_states: Callable) -> CheckResult:
    """`merge_states(out_a, lse_a, out_b, lse_b)` -> ``(out, lse)``: two partial
    attention results for one query row — each normalized over its own keys,
    ``[D]``, with the log-sum-exp of its scores (``-inf`` for no keys) — merged
    into the result over the keys of both, with its own log-sum-exp, so that
    merges can be chained in any order."""
    name = "merge_states"

    class _Failed(Exception):
        def __init__(self, result: CheckResult) -> None:
            self.result = result

    def body() -> CheckResult:
        for i, (label, scores, bounds, order) in enumerate(MERGE_CASES):
            label = _(label)
            scores = scores.double()
            v = torch.randn(len(scores), 4, generator=torch.Generator().manual_seed(i)).double()
            states = [_state(scores[a:b], v[a:b]) for a, b in pairwise(bounds)]
            keys_of = {id(st): (a, b) for st, (a, b) in zip(states, pairwise(bounds), strict=True)}

            def emit(x, y, label=label, scores=scores, v=v, keys_of=keys_of):
                (oa, la), (ob, lb) = x, y
                call = (_("{fn}(out_a, lse_a={item:.4g}, out_b, lse_b={item2:.4g})  # {label}")
                        .format(fn=function_name(merge_states, name), item=la.item(),
                                item2=lb.item(), label=label))
                got, failed = call_learner(name, merge_states, call, oa.clone(), la.clone(),
                                           ob.clone(), lb.clone())
                if failed is not None:
                    raise _Failed(failed)
                if not isinstance(got, tuple | list) or len(got) != 2:
                    raise _Failed(CheckResult(name, False, (_("{call} returned {shape}; return "
                                                             "two values: (out, lse)")
                                                             .format(call=call,
                                                                     shape=_shape(got)))))
                out, lse = _out_and_lse(got)
                if out is None:
                    raise _Failed(CheckResult(name, False, _(
                        "{call} returned ({out}, {lse}); return two values: (out, lse), out "
                        "a tensor of shape [D] and lse one number").format(
                            call=call, out=_brief(got[0]), lse=_brief(got[1]))))
                a0, a1 = keys_of[id(x)]
                b0, b1 = keys_of[id(y)]
                lo, hi = min(a0, b0), max(a1, b1)
                want_out, want_lse = _state(scores[lo:hi], v[lo:hi])
                if torch.isnan(out).any() or torch.isnan(lse).any():
                    raise _Failed(CheckResult(name, False, _("{call} returned NaN.  Hint: "
                                                             "subtract the larger lse before "
                                                             "exp (exp(1000) overflows); and "
                                                             "when both sides are empty (both "
                                                             "lse -inf) there is nothing to "
                                                             "weigh: return (zeros, -inf), as "
                                                             "an empty split is")
                                                          .format(call=call)))
                if not (lse == want_lse or torch.allclose(lse, want_lse, atol=1e-9)):
                    raise _Failed(CheckResult(name, False, (_("{call}: lse is {item:.6g}, "
                                                             "expected {item2:.6g}.  Hint: the "
                                                             "merged lse is the log of the "
                                                             "total softmax mass exp(lse_a) + "
                                                             "exp(lse_b), computed stably; "
                                                             "later merges weigh this result "
                                                             "by it")
                                                             .format(call=call, item=lse.item(),
                                                                     item2=want_lse.item()))))
                if out.shape != want_out.shape or not torch.allclose(out, want_out, atol=1e-9):
                    raise _Failed(CheckResult(name, False, (_("{call}: out is off from the "
                                                             "attention over both sides' keys. "
                                                             " Hint: side a holds exp(lse_a) "
                                                             "of the total mass exp(lse); "
                                                             "weight out_a by exp(lse_a - lse)")
                                                             .format(call=call))))
                merged = (out, lse)
                keys_of[id(merged)] = (lo, hi)
                return merged

            try:
                _merge_order(states, order, emit)
            except _Failed as failed:
                return failed.result
        return CheckResult(name, True, _("all {n} cases pass (chained and tree merges, empty "
                                         "splits, huge scores)").format(n=len(MERGE_CASES)))
    require_function(name, merge_states)
    return body()





# ------------------------------------------------------ paged_kernel (Triton)
KERNEL_CASES = (  # (context_len, block_size, num_heads, head_dim, seed, far)
    (5, 4, 2, 16, 0, False), (37, 16, 2, 16, 1, False), (1, 8, 1, 16, 2, False),
    (70, 4, 2, 16, 3, False), (33, 3, 2, 16, 4, False), (16, 16, 1, 16, 5, False),
    (9, 1, 2, 16, 6, False),
    (40, 32, 2, 16, 8, False),  # a block longer than a tile: a tile reads part of one block
    (32, 16, 3, 16, 9, False),  # three heads; the context is exactly two tiles and two blocks
    (11, 5, 3, 16, 10, False),  # a block size that divides neither a tile nor a power of two
    (20, 8, 2, 16, 7, True),  # far: every block of the sequence starts past 2^32 elements
)
KERNEL_BLOCK_N = 16  # tokens per tile: tiles span several blocks, or part of one


def check_paged_kernel(kernel: Callable, *, timeout: float = 600.0) -> CheckResult:
    """`kernel`: a ``@triton.jit`` paged decode attention kernel with the
    signature of lab 04's skeleton, one program per head, whose block-table
    lookup the learner wrote. It runs in Triton's interpreter in a fresh
    process (the interpreter must be on before Triton is imported; see
    `_kernel_runner`) on shuffled blocks of 1 to 32 tokens, in a cache whose
    blocks and heads are padded (so a block's stride is not block_size x a
    token's, nor a head's head_dim), with a block table that ends where
    unreadable memory begins (an unmasked table load faults), blocks longer
    than a tile, three heads, once in a cache so big that its blocks start
    past 2^32 elements (block ids multiplied in 32 bits, signed or unsigned,
    wrap around), and is compared with float64 attention on the un-paged K/V."""
    import signal
    import subprocess

    from ._interpreter import kernel_source, no_triton, run_in_interpreter

    name = "paged_kernel"
    missing = no_triton(name, _("this exercise needs"))  # first: without Triton, @jit is no jit
    if missing is not None:  # a CheckResult that failed is falsy
        return missing
    source = kernel_source(name, kernel, _kernel_unwritten)
    if isinstance(source, CheckResult):
        return source
    spec = {"source": source[0], "name": source[1], "cases": KERNEL_CASES,
            "block_n": KERNEL_BLOCK_N}
    try:
        results, code, stderr = run_in_interpreter("pagedkit.exercises._kernel_runner", spec,
                                                   timeout)  # one result line per case run
    except subprocess.TimeoutExpired:
        return CheckResult(name, False, (_("your kernel ran for over {timeout:.0f} s in the "
                                          "interpreter: does a loop never end?")
                                          .format(timeout=timeout)))
    hint = (_("token n sits in physical block block_table[n // BLOCK_SIZE], at offset "
            "n % BLOCK_SIZE; its row starts at block * stride_block + offset * stride_token + "
            "head * stride_head (use the strides: the cache's blocks and heads are padded)"))
    far_hint = (_("block * stride_block is past 2^32 here, as in any big cache: 32-bit "
                "arithmetic (int32 or uint32) wraps around to a wrong offset. Cast the block ids "
                "to tl.int64 before multiplying"))
    if code in (-signal.SIGSEGV, 128 + signal.SIGSEGV):
        struck = KERNEL_CASES[min(len(results), len(KERNEL_CASES) - 1)]
        if struck[5]:
            return CheckResult(name, False, (_("{kernel_call} read memory outside its tensors: "
                                              "the interpreter process died of a segmentation "
                                              "fault.  Hint: {far_hint}")
                                              .format(kernel_call=_kernel_call(struck),
                                                      far_hint=far_hint)))
        return CheckResult(name, False, _("your kernel read memory outside its tensors: the "
                                        "interpreter process died of a segmentation fault. Most "
                                        "likely it read the block table past its end (here the "
                                        "table ends where unreadable memory begins): load it "
                                        "with mask=n_mask, so that lanes past the context read "
                                        "nothing"))
    if code != 0 or not results:
        return CheckResult(name, False, _("the interpreter process failed: ")
                                        + (stderr.strip()[-600:] or _("no output")))
    skipped = []
    for case, result in zip(KERNEL_CASES, results, strict=False):
        call = _kernel_call(case)
        case_hint = far_hint if case[5] else hint
        if "skipped" in result:
            skipped.append(result["skipped"])
            continue
        if "error" in result:
            return CheckResult(name, False, _("{call} raised {error}.  Hint: {error_hint}")
                               .format(call=call, error=result["error"],
                                       error_hint=_kernel_error_hint(result["error"], case_hint)))
        if result["nan"]:
            return CheckResult(name, False, _("{call} returned NaN: every slot outside the "
                                              "sequence is NaN here (a padding element of a "
                                              "block or a head too), so you read one.  Hint: "
                                              "{case_hint}").format(call=call, case_hint=case_hint))
        if result["max_diff"] > 1e-4:
            return CheckResult(name, False, (_("{call} is off by up to {result:.3g} from "
                                              "attention on the un-paged K/V.  Hint: "
                                              "{case_hint}")
                                              .format(call=call, result=result['max_diff'],
                                                      case_hint=case_hint)))
    if len(results) < len(KERNEL_CASES):
        first = results[0] if results else {}
        return CheckResult(name, False, (_("your kernel could not be run: {error}")
                                          .format(error=first.get('error'))))
    far = (_(" (the cache past 2^32 elements could not be mapped here, so 64-bit offsets went "
             "unchecked: {skipped})").format(skipped=skipped[0])
           if skipped else _(", a cache past 2^32 elements"))
    return CheckResult(name, True, (_("all {value} cases match attention on the un-paged K/V "
                                     "(Triton's interpreter; block sizes 1 to 32, padded "
                                     "blocks and heads{far})")
                                     .format(value=len(KERNEL_CASES) - len(skipped), far=far)))


def _kernel_error_hint(error: str, hint: str) -> str:
    """What an error the interpreter raised usually means in this exercise."""
    if error.startswith("NameError") or "NameError" in error.split(":", 1)[0]:
        return _("use only the kernel's arguments (block_table_ptr, stride_block, "
                 "stride_token, stride_head, BLOCK_SIZE ...) and the names above your lines "
                 "(head, tile_start, n, n_mask); then: {hint}").format(hint=hint)
    return _("an error here usually means your lines mix one number with a tile of "
             "numbers: n holds the BLOCK_N token positions of the tile and n_mask their mask, "
             "so block and row must each be BLOCK_N values computed from n (a tile can span "
             "several blocks: one lookup from tile_start is not enough), e.g. a load from "
             "block_table_ptr + n // BLOCK_SIZE with mask=n_mask. {hint}").format(hint=hint)


def _kernel_unwritten(source: str) -> str | None:
    """Lab 04's kernel is written once the block-table lines hold no `...` (the
    committed lab) and no ``raise NotImplementedError`` (nbgrader's released copy)."""
    from ._interpreter import still_a_stub

    region = source.split("# ---- your code ends here", 1)[0].split("YOUR CODE", 1)[-1]
    if still_a_stub(region):
        return _("not written yet: replace the `...` / NotImplementedError in the "
                 "block-table lines with your code")
    return None


def _kernel_call(case: tuple) -> str:
    n, bs, heads, d, _seed, far = case
    where = _(", in a cache so big that its blocks start past 2^32 elements") if far else ""
    return ngettext("your kernel on {n} tokens in shuffled blocks of {bs} ({heads} head, "
                    "head_dim {d}, tiles of {tile}{where})",
                    "your kernel on {n} tokens in shuffled blocks of {bs} ({heads} heads, "
                    "head_dim {d}, tiles of {tile}{where})", heads
                    ).format(n=n, bs=bs, heads=heads, d=d, tile=KERNEL_BLOCK_N, where=where)


CHECKS = {
    "gather_kv": check_gather_kv,
    "paged_decode_attention": check_paged_decode_attention,
    "online_softmax_update": check_online_softmax_update,
    "merge_states": check_merge_states,
    "paged_kernel": check_paged_kernel,
}
