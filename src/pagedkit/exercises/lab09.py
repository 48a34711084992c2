"""Checks for lab 09 (beyond PagedAttention): two short calculations about
where serving goes next — a quantized KV cache, and how many tokens
speculative decoding should draft.

The KV-cache answers come from the engine's own `KVCacheSpec`, so the
learner's arithmetic is held against what `LLMEngine` sizes its cache with.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable
from functools import cache
from itertools import product

import torch

from ..i18n import N_, _
from ..model.kv_cache import KVCacheSpec
from . import (
    Case,
    CheckResult,
    _scalar,
    check_function,
    formula_mistake,
    in_stub_order,
    same_items,
)
from ._boundaries import grid_cases
from ._count_notes import never_a_count, one_count

__all__ = ["CHECKS", "check_best_num_drafts", "check_tokens_that_fit", "expected_tokens_per_step"]

_DTYPES = {1: torch.float8_e4m3fn, 2: torch.float16, 4: torch.float32}
GIB = 2**30


def _fit(memory_bytes, num_layers, num_kv_heads, head_dim, dtype_bytes, block_size) -> int:
    spec = KVCacheSpec(num_layers, num_kv_heads, head_dim, _DTYPES[dtype_bytes])
    return spec.num_blocks_for(memory_bytes, block_size) * block_size


@in_stub_order
def check_tokens_that_fit(fn: Callable) -> CheckResult:
    """`tokens_that_fit(memory_bytes, num_layers, num_kv_heads, head_dim, dtype_bytes,
    block_size)`: token slots in the whole blocks a budget holds."""
    specs = [
        ((20 * GIB, 32, 32, 128, 2, 16), _("Llama-2-7B in fp16: 2 x 32 x 32 x 128 x 2 bytes = "
                                         "512 KiB per token")),
        ((20 * GIB, 32, 32, 128, 1, 16), _("the same model with an FP8 (1-byte) KV cache")),
        ((20 * GIB, 32, 8, 128, 2, 16), _("Llama-3-8B: grouped-query attention stores 8 KV heads, "
                                        "not 32")),
        ((10**9, 40, 40, 128, 2, 16), _("OPT-13B-like in fp16 with 1 GB: count whole blocks only "
                                      "(round down), then multiply by block_size")),
        ((10**9, 40, 40, 128, 2, 32), _("the same with blocks of 32: a partial block is no use")),
        ((2 * 10**9, 40, 40, 128, 2, 16), _("the same model with 2 GB: 152.6 blocks' worth of "
                                          "bytes hold 152 whole blocks (round down, never to "
                                          "the nearest)")),
        ((8 * 2**20, 4, 2, 64, 4, 16), _("pagedkit's tiny model in float32 with 8 MiB")),
    ]
    cases = [Case(args, _fit(*args), hint) for args, hint in specs]
    return check_function("tokens_that_fit", fn, cases + fit_grid(), diagnose=lambda fn, case, got:
                          one_count(fn, case, got) or formula_mistake(fn, cases, _FIT_FORMULAS))


def _per_token(num_layers, num_kv_heads, head_dim, dtype_bytes) -> int:
    return 2 * num_layers * num_kv_heads * head_dim * dtype_bytes


#: Formulas newcomer 38 wrote for tokens_that_fit, each named where a function
#: follows it on every one of the lab's cases.
_FIT_FORMULAS = [
    (lambda m, nl, nh, hd, db, bs: m // (_per_token(nl, nh, hd, db) * bs),
     N_("your function counts whole blocks; the answer is token slots: multiply the blocks "
        "by block_size")),
    (lambda m, nl, nh, hd, db, bs: m // (_per_token(nl, nh, hd, db) // 2 * bs) * bs,
     N_("your function stores one tensor per token: each token keeps a key and a value in "
        "every layer, so a token takes 2 x num_layers x num_kv_heads x head_dim x dtype_bytes "
        "bytes")),
    (lambda m, nl, nh, hd, db, bs: m // _per_token(nl, nh, hd, db),
     N_("your function counts tokens, not whole blocks: the cache is allocated in blocks, so "
        "count the whole blocks the budget holds (round down), then multiply by block_size")),
]


def _fit_hint(memory_bytes, num_layers, num_kv_heads, head_dim, dtype_bytes, block_size) -> str:
    per_block = 2 * num_layers * num_kv_heads * head_dim * dtype_bytes * block_size
    blocks, spare = divmod(memory_bytes, per_block)
    if spare == 0:
        where = _("exactly")
    elif spare == per_block - 1:
        where = _("and one byte short of another: still not a block")
    else:
        where = _("and {spare} byte(s) more, not a whole block").format(spare=spare)
    big = (_(" — the budget is past 2^53 bytes, where a float division rounds: divide whole "
           "numbers with //") if memory_bytes > 2**53 else "")
    return (_("a block takes {block_size} (block_size) x 2 (K and V) x {num_layers} "
              "(num_layers) x {num_kv_heads} (num_kv_heads) x {head_dim} (head_dim) x "
              "{dtype_bytes} B = {per_block} B; the budget holds {blocks} whole block(s) "
              "{where}{big}")
              .format(block_size=block_size, num_layers=num_layers, num_kv_heads=num_kv_heads,
                      head_dim=head_dim, dtype_bytes=dtype_bytes, per_block=per_block,
                      blocks=blocks, where=where, big=big))


@cache
def fit_grid() -> list[Case]:
    """Budgets of one byte, one short of, exactly and one past one, two and a
    thousand blocks, and budgets past 2^53 bytes (where a float division rounds),
    for blocks of 1, 3 and 16 tokens of a few cache shapes (one head of 1 byte,
    a tiny model's, Llama-3-8B's)."""
    shapes = ((1, 1, 1, 1), (4, 2, 64, 4), (32, 8, 128, 2), (3, 5, 96, 1))
    def inputs():
        for (layers, heads, dim, dtype), bs in product(shapes, (1, 3, 16)):
            per_block = 2 * layers * heads * dim * dtype * bs
            budgets = {1}
            for k in (1, 2, 1000):
                budgets |= {k * per_block - 1, k * per_block, k * per_block + 1}
            k = 2**60 // per_block
            budgets |= {k * per_block - 1, k * per_block}
            for memory in sorted(b for b in budgets if b >= 1):
                yield memory, layers, heads, dim, dtype, bs
    return grid_cases(inputs(), _fit, _fit_hint)


def expected_tokens_per_step(alpha: float, k: int) -> float:
    """Tokens one target step yields with `k` drafts, each accepted with probability
    `alpha`: the formula the check holds `best_num_drafts` to (Leviathan et al. 2023,
    eq. 1). Lab 09 compares it with a simulation, off screen."""
    return float(k + 1) if alpha == 1 else (1 - alpha ** (k + 1)) / (1 - alpha)


_expected_tokens = expected_tokens_per_step


def _best_num_drafts(alpha: float, draft_cost: float, max_drafts: int,
                     expected_tokens: Callable[[float, int], float] = _expected_tokens) -> int:
    """The smallest k in 0..max_drafts with the most tokens per unit of time,
    E(alpha, k) / (1 + k * draft_cost); the tolerance only breaks float ties.
    `expected_tokens` is E (another formula: what a learner who used it gets)."""
    rate = [expected_tokens(alpha, k) / (1 + k * draft_cost) for k in range(max_drafts + 1)]
    best = max(rate)
    return next(k for k, r in enumerate(rate) if r >= best * (1 - 1e-12))


@in_stub_order
def check_best_num_drafts(fn: Callable) -> CheckResult:
    """`best_num_drafts(acceptance_rate, draft_cost, max_drafts)`: the number of
    draft tokens k (0..max_drafts) that gives speculative decoding the most
    tokens per unit of time, where a target-model step costs 1 and each draft
    token `draft_cost` (independent acceptances; the smallest k on a tie).

    A wrong answer's hint: text, a bool or a fraction gets the note for its
    kind (`never_a_count`); a k that is the best under a known wrong formula
    for E, that formula (`_wrong_expected_tokens`); any other whole number,
    whether it drafts more or fewer than the best k (`_more_or_fewer`), then
    the case's hint."""
    chain = (_("draft i counts only if drafts 1..i were all accepted, and the target model adds "
             "one token of its own: E(a, k) = 1 + a + a^2 + ... + a^k tokens per step"))
    cost = _("a step with k drafts costs 1 + k x draft_cost: maximize E(a, k) / (1 + k x "
             "draft_cost)")
    specs = [
        ((0.8, 0.05, 10), cost),
        ((0.8, 0.2, 10), _("dearer drafts (0.2 each): {chain}").format(chain=chain)),
        ((0.6, 0.1, 10), _("{chain}: E is not 1 + k x a (acceptances must chain)")
                          .format(chain=chain)),
        ((0.95, 0.1, 20), _("a good draft model: {chain}").format(chain=chain)),
        ((0.3, 0.05, 10), _("a poor draft model: {chain}").format(chain=chain)),
        ((0.9, 0.3, 10), _("{chain}; and the target's own token counts").format(chain=chain)),
        ((0.5, 0.5, 8), _("k = 0 and k = 1 give exactly 1 token per unit of time: on a tie take "
                          "the "
                        "smallest k (drafting costs work for nothing)")),
        ((0.0, 0.1, 5), _("nothing is ever accepted: drafting only costs time")),
        ((1.0, 0.1, 6), _("every draft accepted: E = k + 1 (mind a division by zero), so the most "
                        "drafts allowed win")),
        ((0.7, 0.0, 5), _("free drafts: as many as allowed")),
    ]
    cases = [Case(args, _best_num_drafts(*args), hint) for args, hint in specs] + drafts_grid()

    def diagnose(fn, case, got) -> str:
        return (never_a_count(got) or _wrong_expected_tokens(fn, got)
                or formula_mistake(fn, cases[:len(specs)], _DRAFTS_FORMULAS)
                or _more_or_fewer(got, case))

    return check_function("best_num_drafts", fn, cases, diagnose=diagnose)


def _more_or_fewer(got, case: Case) -> str:
    """The hint for a whole number `got` that is not `case`'s best k: whether
    it drafts more or fewer than the best (or more than allowed, or fewer than
    none), the two rates, then the case's own hint; '' for anything else."""
    got = _scalar(got)
    if not isinstance(got, numbers.Integral) and not (isinstance(got, numbers.Real)
                                                      and float(got).is_integer()):
        return ""
    (alpha, draft_cost, max_drafts), best, k = case.args, case.expected, int(got)
    hint = case.hint() if callable(case.hint) else case.hint
    if k < 0:
        return _("k counts drafts: 0 or more, not {k}; {hint}").format(k=k, hint=hint)
    if k > max_drafts:
        return (_("at most max_drafts = {most} drafts are allowed, not {k}; {hint}")
                .format(most=max_drafts, k=k, hint=hint))
    rate = {n: _expected_tokens(alpha, n) / (1 + n * draft_cost) for n in (k, best)}
    if k > best:
        text = _("more drafts are not always better: tokens per unit of time {k_rate:.4g} at "
                 "k = {k}, {best_rate:.4g} at k = {best}; {hint}")
    else:
        text = _("fewer drafts are not always better either: tokens per unit of time "
                 "{k_rate:.4g} at k = {k}, {best_rate:.4g} at k = {best}; {hint}")
    return text.format(k=k, k_rate=rate[k], best=best, best_rate=rate[best], hint=hint)


def _best_of_some_drafts(alpha: float, draft_cost: float, max_drafts: int) -> int:
    """`_best_num_drafts` searched over 1..max_drafts, leaving out k = 0."""
    rate = {k: _expected_tokens(alpha, k) / (1 + k * draft_cost)
            for k in range(1, max_drafts + 1)}
    best = max(rate.values())
    return next(k for k, r in rate.items() if r >= best * (1 - 1e-12))


#: Searches newcomer 38 wrote for best_num_drafts, each named where a function
#: follows it on every one of the lab's cases.
_DRAFTS_FORMULAS = [
    (_best_of_some_drafts,
     N_("your function never answers k = 0: drafting nothing is allowed, and it is the best "
        "choice where drafts cost more than they bring (search k in 0..max_drafts)")),
]


# Formulas for E(a, k) that a learner may take for the expected tokens per step,
# each with what it gets wrong.
WRONG_EXPECTED_TOKENS = {
    "1 + k x a": (lambda a, k: 1 + k * a,
                  N_("each draft is counted as if accepted on its own")),
    "a + a^2 + ... + a^k": (lambda a, k: _expected_tokens(a, k) - 1,
                            N_("the target model's own token is left out")),
}


def _wrong_expected_tokens(fn: Callable, got) -> str:
    """If `fn` gives the best k under a known wrong E on every probe (drafts
    dearer and cheaper than acceptance is likely: so not by chance), say which
    formula, and what E is."""
    cases = [(0.8, 0.05, 10), (0.8, 0.2, 10), (0.6, 0.1, 10), (0.95, 0.1, 20),
             (0.3, 0.05, 10), (0.9, 0.3, 10), (0.3, 0.5, 8), (0.0, 0.1, 5)]
    try:
        answers = [fn(*args) for args in cases]
    except Exception:  # its error shows on its own case
        return ""
    for formula, (wrong, why) in WRONG_EXPECTED_TOKENS.items():
        if same_items(answers, [_best_num_drafts(*args, wrong) for args in cases]):
            return (_("{k} is the best k if E(a, k) = {formula}, but that is not the expected "
                      "number of tokens per step ({why}). Draft i counts only if drafts 1..i "
                      "were all accepted, and the target model adds one token of its own: "
                      "E(a, k) = 1 + a + a^2 + ... + a^k = (1 - a^(k+1)) / (1 - a)")
                    .format(k=got, formula=formula, why=_(why)))
    return ""


def _drafts_oracle(alpha: float, draft_cost: float, max_drafts: int) -> int:
    """`_best_num_drafts`, refusing (ValueError) a near-tie that float arithmetic
    could break either way; exact ties (nothing or everything accepted) stay."""
    rate = [_expected_tokens(alpha, k) / (1 + k * draft_cost) for k in range(max_drafts + 1)]
    best = _best_num_drafts(alpha, draft_cost, max_drafts)
    close = [k for k, r in enumerate(rate)
             if k != best and abs(r - rate[best]) <= 1e-9 * rate[best]]
    if close and alpha not in (0.0, 1.0):
        raise ValueError("a near-tie")
    return best


def _drafts_hint(alpha: float, draft_cost: float, max_drafts: int) -> str:
    rate = [_expected_tokens(alpha, k) / (1 + k * draft_cost) for k in range(max_drafts + 1)]
    shown = ", ".join(f"k={k}: {r:.4g}" for k, r in enumerate(rate[:6]))
    more = ", ..." if len(rate) > 6 else ""
    edge = ""
    if alpha == 1.0:
        edge = (_("every draft is accepted, yet each still costs time: it pays only while it "
                "is cheap; "))
    elif alpha == 0.0:
        edge = _("no draft is ever accepted: ")
    if draft_cost == 0.0:
        edge += _("free drafts help only if some are accepted; ")
    return (_("{edge}tokens per unit of time E(a, k) / (1 + k x {draft_cost}) = {shown}{more} "
              "(k from 0 to {max_drafts}, the smallest k on a tie)")
              .format(edge=edge, draft_cost=draft_cost, shown=shown, more=more,
                      max_drafts=max_drafts))


@cache
def drafts_grid() -> list[Case]:
    """Acceptance from never to always, drafts free to dearer than a target step,
    up to 0, 1, 3 and 8 drafts allowed."""
    return grid_cases(product((0.0, 0.1, 0.3, 0.5, 0.8, 0.95, 1.0),
                              (0.0, 0.05, 0.2, 0.5, 1.0, 2.0), (0, 1, 3, 8)),
                      _drafts_oracle, _drafts_hint)


CHECKS = {
    "tokens_that_fit": check_tokens_that_fit,
    "best_num_drafts": check_best_num_drafts,
}
