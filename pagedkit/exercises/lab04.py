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

from collections.abc import Callable
from dataclasses import dataclass
from itertools import pairwise

import torch
import torch.nn.functional as F

from . import CheckResult, not_written, require_function

__all__ = ["CHECKS", "check_gather_kv", "check_merge_splits", "check_online_softmax_update",
           "check_paged_decode_attention", "paged_example"]


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
        nb, bs, h, d = self.k_cache.shape
        return (f"cache [{nb} blocks x {bs} slots x {h} KV heads x {d}], "
                f"block_table={self.block_table.tolist()}, context_len={self.context_len}")


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
        return CheckResult(name, False, f"{call} returned None — did you forget `return`?")
    if not isinstance(got, torch.Tensor):
        return CheckResult(name, False, f"{call} returned {_shape(got)}; expected a tensor of "
                                        f"shape {list(want.shape)}")
    if got.shape != want.shape:
        return CheckResult(name, False, f"{call} returned shape {list(got.shape)}, expected "
                                        f"{list(want.shape)}")
    if torch.isnan(got).any():
        return CheckResult(name, False, f"{call} returned NaN. Every slot that does not hold one "
                                        "of the sequence's tokens is NaN in these checks: you "
                                        "read a slot past the context (or a padding entry of "
                                        "the block table)")
    same = torch.equal(got, want) if exact else torch.allclose(got.to(want.dtype), want,
                                                               atol=atol, rtol=atol)
    if not same:
        diff = (got.to(want.dtype) - want).abs().max().item()
        return CheckResult(name, False, f"{call} is off by up to {diff:.3g} from the expected "
                                        "values")
    return None


def _run(name: str, fn: Callable, body: Callable[[], CheckResult]) -> CheckResult:
    require_function(name, fn)
    try:
        return body()
    except NotImplementedError as err:
        return not_written(name, fn, err)


def _call(name: str, fn: Callable, call: str, *args,
          hint: Callable[[Exception], str] | None = None):
    """(result, None), or (None, failing CheckResult) if `fn` raised; `hint(err)`
    may add a hint for a particular exception."""
    try:
        return fn(*args), None
    except NotImplementedError:
        raise
    except Exception as err:  # the learner's bug, reported instead of raised
        extra = hint(err) if hint else ""
        return None, CheckResult(name, False, f"{call} raised {type(err).__name__}: {err}{extra}")


# ------------------------------------------------------------------ gather_kv
GATHER_CASES = (  # (context_len, block_size)
    (5, 4), (8, 4), (1, 16), (3, 1), (33, 16), (16, 16),
)


def check_gather_kv(gather_kv: Callable) -> CheckResult:
    """`gather_kv(cache, block_table, num_tokens)` -> the sequence's first
    `num_tokens` vectors, contiguous: ``[num_tokens, num_kv_heads, head_dim]``."""
    name = "gather_kv"

    def body() -> CheckResult:
        for seed, (n, bs) in enumerate(GATHER_CASES):
            ex = paged_example(n, bs, seed=seed)
            call = f"gather_kv({ex.describe()}, num_tokens={n})"
            for cache, want in ((ex.k_cache, ex.key), (ex.v_cache, ex.value)):
                got, failed = _call(name, gather_kv, call, cache.clone(), ex.block_table.clone(),
                                    n, hint=_padding_hint)
                if failed is not None:
                    return failed
                problem = _first_problem(name, got, want, call, exact=True)
                if problem is not None:
                    hint = ("  Hint: token i lives in block block_table[i // block_size] at "
                            "offset i % block_size; after gathering whole blocks, keep only "
                            "the first num_tokens rows")
                    return CheckResult(name, False, problem.message + hint)
        return CheckResult(name, True, f"all {len(GATHER_CASES)} cases pass (shuffled blocks, "
                                       "padded tables, block sizes 1 to 16)")
    return _run(name, gather_kv, body)


def _padding_hint(err: Exception) -> str:
    if isinstance(err, IndexError):
        return ("  Hint: the table is padded past the sequence's last block with ids outside "
                "the cache; read only the ceil(num_tokens / block_size) blocks that hold its "
                "tokens")
    return ""


# -------------------------------------------------------- paged_decode_attention
DECODE_CASES = (  # (context_len, block_size, num_q_heads, num_kv_heads)
    (5, 4, 2, 2), (12, 4, 4, 2), (1, 8, 4, 2), (17, 8, 8, 2), (40, 16, 4, 4), (3, 1, 4, 1),
)


def check_paged_decode_attention(paged_decode_attention: Callable) -> CheckResult:
    """`paged_decode_attention(query, k_cache, v_cache, block_table, context_len)`:
    one sequence's new token (query ``[num_q_heads, head_dim]``) attending to
    its `context_len` cached tokens; returns ``[num_q_heads, head_dim]``.
    Checked against SDPA on the un-paged K/V."""
    name = "paged_decode_attention"

    def body() -> CheckResult:
        for seed, (n, bs, hq, hkv) in enumerate(DECODE_CASES):
            ex = paged_example(n, bs, num_kv_heads=hkv, head_dim=8, seed=100 + seed)
            query = torch.randn(hq, 8, generator=torch.Generator().manual_seed(seed))
            call = (f"paged_decode_attention(query [{hq} heads x 8], {ex.describe()})")
            got, failed = _call(name, paged_decode_attention, call, query.clone(),
                                ex.k_cache.clone(), ex.v_cache.clone(), ex.block_table.clone(), n)
            if failed is not None:
                return failed
            want = _sdpa(query, ex.key, ex.value)
            problem = _first_problem(name, got, want, call)
            if problem is not None:
                return CheckResult(name, False, problem.message + _decode_hint(got, query, ex))
        return CheckResult(name, True, f"all {len(DECODE_CASES)} cases match SDPA on the "
                                       "un-paged K/V (GQA groups of 1, 2 and 4)")
    return _run(name, paged_decode_attention, body)


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
            return ("  Hint: query head h reads KV head h // (num_q_heads // num_kv_heads): "
                    "consecutive query heads share a KV head. `repeat` tiles the heads "
                    "(0,1,0,1); `repeat_interleave` gives (0,0,1,1)")
    k = ex.key.repeat_interleave(group, dim=1).transpose(0, 1)
    v = ex.value.repeat_interleave(group, dim=1).transpose(0, 1)
    unscaled = F.scaled_dot_product_attention(query[:, None], k, v, scale=1.0)[:, 0]
    if torch.allclose(got.to(unscaled.dtype), unscaled, atol=1e-5):
        return "  Hint: scale the scores by 1 / sqrt(head_dim) before the softmax"
    return ("  Hint: gather the K and V of the first context_len tokens (your gather_kv, or "
            "pagedkit.kernels.reference.gather_kv), then softmax(q . k / sqrt(head_dim)) over "
            "the tokens, weighted sum of v")


# ------------------------------------------------------- online_softmax_update
def _tiles(n: int, size: int) -> list[slice]:
    return [slice(s, min(s + size, n)) for s in range(0, n, size)]


SOFTMAX_CASES = (  # (description, scores, tile size)
    ("rising scores", torch.linspace(-3.0, 3.0, 10), 3),
    ("falling scores", torch.linspace(3.0, -3.0, 10), 4),
    ("one token per tile", torch.tensor([0.5, 2.0, -1.0, 4.0, 1.0]), 1),
    ("one tile", torch.tensor([1.0, -2.0, 0.25]), 8),
    ("huge scores (exp would overflow)", torch.tensor([900.0, 1000.0, 950.0, 1001.0, 20.0]), 2),
)


def check_online_softmax_update(online_softmax_update: Callable) -> CheckResult:
    """`online_softmax_update(row_max, row_sum, acc, scores, v)` -> the new
    ``(row_max, row_sum, acc)`` after one tile; folded over the tiles from
    ``(-inf, 0, zeros)``, ``acc / row_sum`` must be ``softmax(scores) @ V``."""
    name = "online_softmax_update"

    def body() -> CheckResult:
        for i, (label, scores, size) in enumerate(SOFTMAX_CASES):
            scores = scores.double()
            v = torch.randn(len(scores), 4, generator=torch.Generator().manual_seed(i)).double()
            m, s, acc = torch.tensor(float("-inf"), dtype=torch.float64), \
                torch.tensor(0.0, dtype=torch.float64), torch.zeros(4, dtype=torch.float64)
            for t, tile in enumerate(_tiles(len(scores), size)):
                call = (f"online_softmax_update(...) on tile {t} ({label}: scores "
                        f"{[round(x, 2) for x in scores.tolist()]}, tiles of {size})")
                got, failed = _call(name, online_softmax_update, call, m.clone(), s.clone(),
                                    acc.clone(), scores[tile].clone(), v[tile].clone())
                if failed is not None:
                    return failed
                if got is None:
                    return CheckResult(name, False, f"{call} returned None — did you forget "
                                                    "`return`?")
                if not isinstance(got, tuple | list) or len(got) != 3:
                    return CheckResult(name, False, f"{call} returned {type(got).__name__}; "
                                       "return the three new values (row_max, row_sum, acc)")
                seen = scores[:tile.stop]
                want_m = seen.max()
                want_s = torch.exp(seen - want_m).sum()
                want_acc = torch.exp(seen - want_m) @ v[:tile.stop]
                gm, gs, gacc = (torch.as_tensor(x, dtype=torch.float64) for x in got)
                if not torch.allclose(gm, want_m):
                    return CheckResult(name, False, f"{call}: row_max is {gm.item():.4g}, "
                                       f"expected {want_m.item():.4g}, the largest score seen so "
                                       "far")
                if not torch.allclose(gs, want_s, rtol=1e-6, atol=1e-9):
                    hint = ("when the maximum grows, multiply what was summed so far by "
                            "exp(old_max - new_max)" if t else
                            "row_sum is the sum of exp(score - row_max) over the scores seen")
                    return CheckResult(name, False, f"{call}: row_sum is {gs.item():.6g}, "
                                       f"expected {want_s.item():.6g}.  Hint: {hint}")
                if gacc.shape != want_acc.shape or not torch.allclose(gacc, want_acc, rtol=1e-6,
                                                                      atol=1e-9):
                    return CheckResult(name, False, f"{call}: acc is "
                                       f"{[round(x, 4) for x in gacc.flatten().tolist()]}, "
                                       f"expected {[round(x, 4) for x in want_acc.tolist()]}. "
                                       " Hint: acc is the sum of exp(score - row_max) * v, not "
                                       "yet divided by row_sum; rescale it like row_sum")
                m, s, acc = gm, gs, gacc
            out, want = acc / s, torch.softmax(scores, 0) @ v
            if not torch.allclose(out, want, rtol=1e-6, atol=1e-9):
                return CheckResult(name, False, f"{label}: acc / row_sum after the last tile is "
                                                "not softmax(scores) @ v")
        return CheckResult(name, True, f"all {len(SOFTMAX_CASES)} cases pass, tile by tile "
                                       "(huge scores included)")
    return _run(name, online_softmax_update, body)


# ----------------------------------------------------------------- merge_splits
MERGE_CASES = (  # (description, scores, split boundaries)
    ("one split", torch.tensor([0.3, -1.0, 2.0, 0.7]), (0, 4)),
    ("two splits", torch.linspace(-2.0, 2.0, 9), (0, 5, 9)),
    ("four splits", torch.tensor([3.0, 1.0, -2.0, 0.0, 5.0, 4.0, -1.0, 2.0]), (0, 2, 4, 6, 8)),
    ("an empty last split (it started past the context)", torch.tensor([1.0, 2.0, 0.5]),
     (0, 2, 3, 3)),
    ("huge scores (exp would overflow)", torch.tensor([800.0, 1000.0, 990.0, 1002.0]),
     (0, 2, 4)),
)


def check_merge_splits(merge_splits: Callable) -> CheckResult:
    """`merge_splits(outs, lses)`: outs ``[S, D]`` each split's normalized
    output, lses ``[S]`` each split's log-sum-exp of scores (``-inf`` for a
    split with no tokens) -> the attention output over all tokens, ``[D]``."""
    name = "merge_splits"

    def body() -> CheckResult:
        for i, (label, scores, bounds) in enumerate(MERGE_CASES):
            scores = scores.double()
            v = torch.randn(len(scores), 4, generator=torch.Generator().manual_seed(i)).double()
            outs, lses = [], []
            for a, b in pairwise(bounds):
                if a == b:
                    outs.append(torch.zeros(4, dtype=torch.float64))
                    lses.append(torch.tensor(float("-inf"), dtype=torch.float64))
                else:
                    outs.append(torch.softmax(scores[a:b], 0) @ v[a:b])
                    lses.append(torch.logsumexp(scores[a:b], 0))
            outs, lses = torch.stack(outs), torch.stack(lses)
            call = (f"merge_splits(outs [{len(outs)} x 4], lses="
                    f"{[round(x, 3) for x in lses.tolist()]})  # {label}")
            got, failed = _call(name, merge_splits, call, outs.clone(), lses.clone())
            if failed is not None:
                return failed
            want = torch.softmax(scores, 0) @ v
            problem = _first_problem(name, got, want, call, atol=1e-9)
            if problem is not None:
                if isinstance(got, torch.Tensor) and torch.isnan(got).any():
                    return CheckResult(name, False, f"{call} returned NaN.  Hint: subtract "
                                       "max(lses) before exp (exp(1000) overflows), and let an "
                                       "empty split (lse = -inf) simply get weight 0")
                return CheckResult(name, False, problem.message + "  Hint: split i holds "
                                   "exp(lse_i) of the softmax's total mass exp(logsumexp(lses));"
                                   " weight its output by exp(lse_i - logsumexp(lses))")
        return CheckResult(name, True, f"all {len(MERGE_CASES)} cases pass (empty splits and "
                                       "huge scores included)")
    return _run(name, merge_splits, body)


CHECKS = {
    "gather_kv": check_gather_kv,
    "paged_decode_attention": check_paged_decode_attention,
    "online_softmax_update": check_online_softmax_update,
    "merge_splits": check_merge_splits,
}

