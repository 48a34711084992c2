"""Checks for lab 06 (when memory runs out): preemption, swap or recompute.

Each exercise is one decision of `pagedkit.scheduler` (or of a cost model
for it), small enough to reason about on paper: what a recompute must
compute again, whether to swap or recompute a group, and whom to preempt.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from fractions import Fraction
from functools import cache
from itertools import product

from ..i18n import N_, _, join_clauses, join_names
from . import (
    Case,
    CheckResult,
    check_function,
    formula_mistake,
    in_stub_order,
    is_sequence,
    parting,
    same_items,
    stranger_or_repeat,
)
from ._boundaries import around, grid_cases
from ._count_notes import one_count

__all__ = ["CHECKS", "check_choose_victims", "check_preemption_mode",
           "check_tokens_to_recompute"]

_LAST = (N_("a prompt never matches its own last token in the prefix cache (the model must compute "
         "at least one token to get logits), so at most (num_tokens - 1) // block_size blocks "
         "are reused"))

RECOMPUTE_CASES = [
    Case((25, 4, 0), 25, N_("with nothing cached, every token is computed again: the prompt, the "
         "generated tokens and the last sampled one, whose K/V were never computed")),
    Case((25, 4, 3), 13, N_("3 cached blocks of 4 tokens save 12 tokens")),
    Case((1, 16, 0), 1, N_("a single token is computed once")),
    Case((25, 4, 6), 1, N_("6 full blocks hold 24 tokens; only the 25th is left to compute")),
    Case((24, 4, 6), 4, _LAST),
    Case((16, 16, 1), 16, _LAST),
    Case((17, 16, 1), 1, N_("one full block of 16 is cached; the 17th token is computed")),
    Case((40, 8, 2), 24, N_("2 cached blocks of 8 save 16 of the 40 tokens")),
]


def _recompute_block_by_block(num_tokens: int, block_size: int, cached_blocks: int) -> int:
    """The oracle: walk the cached blocks in order; each saves its tokens while it
    is full and does not hold the last token."""
    saved = 0
    for j in range(cached_blocks):
        if (j + 1) * block_size > num_tokens - 1:
            break
        saved += block_size
    return num_tokens - saved


def _recompute_hint(num_tokens: int, block_size: int, cached_blocks: int) -> str:
    full = num_tokens // block_size
    if num_tokens % block_size == 0 and cached_blocks >= full:
        return (_("{num_tokens} tokens fill exactly {full} block(s) of {block_size}, and the "
                  "last one holds the last token: {last}")
                  .format(num_tokens=num_tokens, full=full, block_size=block_size, last=_(_LAST)))
    if num_tokens <= block_size:
        return (_("{num_tokens} token(s) fit in the first block: {last}")
                 .format(num_tokens=num_tokens, last=_(_LAST)))
    return _("each of the {cached_blocks} cached full block(s) saves {block_size} tokens; "
             "{last}").format(cached_blocks=cached_blocks, block_size=block_size, last=_(_LAST))


@cache
def recompute_grid() -> list[Case]:
    """Token counts around every multiple of the block size (one, a block exactly,
    one past, a block minus one), with no cached block to every full one cached."""
    return grid_cases(((n, bs, cached) for bs in (1, 2, 3, 4, 16)
                       for n in around(1, bs, 2 * bs, 3 * bs, low=1)
                       for cached in range(n // bs + 1)),
                      _recompute_block_by_block, _recompute_hint)


@in_stub_order
def check_tokens_to_recompute(tokens_to_recompute: Callable) -> CheckResult:
    """`tokens_to_recompute(num_tokens, block_size, cached_blocks)` -> tokens the
    re-admission prefill of a sequence preempted by recomputation computes.
    The lab's cases, then every count around a block boundary (`recompute_grid`)."""
    return check_function("tokens_to_recompute", tokens_to_recompute,
                          RECOMPUTE_CASES + recompute_grid(),
                          diagnose=lambda fn, case, got: one_count(fn, case, got)
                          or formula_mistake(fn, RECOMPUTE_CASES, _RECOMPUTE_FORMULAS))


#: Formulas newcomers wrote for tokens_to_recompute, each named where a function
#: follows it on every one of the lab's cases.
_RECOMPUTE_FORMULAS = [
    (lambda n, bs, cached: max(1, n - bs * cached),  # newcomer 38
     N_("your function reuses every cached block and keeps at least one token, "
        "max(1, num_tokens - block_size x cached_blocks): but a cached block that holds the "
        "last token is not reused at all (the cache matches whole blocks, never the last "
        "token's), so that whole block is computed again")),
    (lambda n, bs, cached: n - bs * cached,
     N_("your function reuses every cached block, num_tokens - block_size x cached_blocks: "
        "a block that holds the last token is not reused (the model must compute at least "
        "that token), so that whole block is computed again")),
]


_DISTINCT = (N_("blocks shared inside the group travel once: count distinct block ids "
             "(KVCacheManager.swap_out does)"))
_BOTH_WAYS = (N_("a swapped group's blocks cross the link twice: out now, back in later"))

MODE_CASES = [
    # tables, recompute_tokens, free_cpu_blocks, block_bytes, link_bytes_per_s,
    # prefill_tokens_per_s
    Case(([[0, 1, 2]], [10], 8, 1000, 1e6, 1000), "swap",
         N_("swap: 2 x 3 blocks x 1000 B / 1e6 B/s = 6 ms; recompute: 10 tokens / 1000 tok/s = "
            "10 ms")),
    Case(([[0, 1, 2]], [10], 8, 1000, 1e6, 10_000), "recompute",
         N_("recompute: 10 tokens / 10,000 tok/s = 1 ms beats swapping's 6 ms")),
    Case(([[0, 1, 2]], [10], 2, 1000, 1e6, 1000), "recompute",
         N_("3 blocks do not fit in 2 free CPU blocks: swapping is impossible")),
    Case(([[0, 1, 2], [0, 1, 3], [0, 1, 4]], [10, 10, 10], 5, 1000, 1e6, 1000), "swap",
         N_("blocks shared inside the group travel once: count distinct block ids "
            "(KVCacheManager.swap_out does): 5 blocks fit in 5 free CPU blocks")),
    Case(([[0, 1, 2], [0, 1, 3], [0, 1, 4]], [10, 10, 10], 4, 1000, 1e6, 1000), "recompute",
         N_("blocks shared inside the group travel once: count distinct block ids "
            "(KVCacheManager.swap_out does): 5 blocks do not fit in 4")),
    Case(([[5, 6, 7, 8]], [7], 10, 1000, 1e6, 1000), "recompute",
         N_("a swapped group's blocks cross the link twice: out now, back in later: 2 x 4 ms = "
            "8 ms > 7 ms of recompute")),
    Case(([[0, 1], [0, 2]], [6, 6], 8, 2000, 1e6, 1000), "recompute",
         N_("recomputing the group costs the tokens of all its sequences (6 + 6 = 12 tokens = "
            "12 ms), and swapping its 3 distinct blocks out and back costs the same (2 x 3 x "
            "2000 B / 1e6 B/s = 12 ms): swap only if strictly cheaper")),
    Case(([[0, 1], [0, 2]], [7, 6], 8, 2000, 1e6, 1000), "swap",
         N_("13 tokens to recompute (13 ms) against 12 ms of swapping")),
]


def _mode_costs(tables, recompute_tokens, free_cpu_blocks, block_bytes, link_bytes_per_s,
                prefill_tokens_per_s, *, distinct=True, both_ways=2, tokens=sum,
                divide=lambda a, b: Fraction(a) / Fraction(b)):
    """(distinct blocks, swap seconds out and back, recompute seconds), exactly;
    the keywords vary the rule as `_MODE_FORMULAS`' mistakes do."""
    blocks = len(set().union(*map(set, tables))) if distinct else sum(map(len, tables))
    swap = divide(both_ways * blocks * block_bytes, link_bytes_per_s)
    recompute = divide(tokens(recompute_tokens), prefill_tokens_per_s)
    return blocks, swap, recompute


def _mode_oracle(*args) -> str:
    distinct, swap, recompute = _mode_costs(*args)
    if swap == recompute and distinct <= args[2]:
        raise ValueError("an exact tie: left to the lab's own case, whose float arithmetic is "
                         "exact")
    return "swap" if distinct <= args[2] and swap < recompute else "recompute"


def _mode_hint(tables, recompute_tokens, free_cpu_blocks, *rest) -> str:
    distinct, swap, recompute = _mode_costs(tables, recompute_tokens, free_cpu_blocks, *rest)
    room = (_("{distinct} distinct block(s) fit in {free} free CPU block(s)")
            if distinct <= free_cpu_blocks else
            _("{distinct} distinct block(s) do not fit in {free} free CPU block(s)")
            ).format(distinct=distinct, free=free_cpu_blocks)
    return (_("{room} ({why}); swapping out and back takes {swap_ms:g} ms, recomputing the "
              "group's {tokens} tokens {recompute_ms:g} ms")
            .format(room=room, why=_(_DISTINCT), swap_ms=float(swap) * 1e3,
                    tokens=sum(recompute_tokens), recompute_ms=float(recompute) * 1e3))


_GROUPS = ([[0]], [[0, 1, 2]], [[0, 1], [0, 2]], [[0, 1], [0, 1]], [[4, 5], [6]],
           [[0, 1, 2], [0, 1, 3], [0, 1, 4]],
           [[0, 1, 2], [0, 1, 3], [0, 4]])  # beams forked at different steps


@cache
def mode_grid() -> list[Case]:
    """Groups of one to three sequences, sharing blocks or not, with the CPU room
    around their distinct blocks (one short, exactly, one spare) and token counts
    on both sides of the swap cost (2 ms a block out and back, 1 ms a token)."""
    def inputs():
        for tables in _GROUPS:
            distinct = len({b for t in tables for b in t})
            for each in (1, 3, 4, 7):
                tokens = [each + i for i in range(len(tables))]
                for cpu in around(distinct, low=0):
                    yield tables, tokens, cpu, 1000, 1e6, 1000
    return grid_cases(inputs(), _mode_oracle, _mode_hint)


@in_stub_order
def check_preemption_mode(preemption_mode: Callable) -> CheckResult:
    """`preemption_mode(tables, recompute_tokens, free_cpu_blocks, block_bytes,
    link_bytes_per_s, prefill_tokens_per_s)` -> ``"swap"`` or ``"recompute"``.
    `recompute_tokens` are what each sequence computes again if the group is
    recomputed, counted as the engine does (a group's later sequences share
    its prompt's full blocks again: lab 06, section 3), so recomputing costs
    their sum. The lab's cases, then groups around the CPU room and the cost
    (`mode_grid`)."""
    cases = MODE_CASES + mode_grid()
    return check_function("preemption_mode", preemption_mode, cases,
                          diagnose=lambda fn, _case, _got: formula_mistake(fn, cases,
                                                                           _MODE_FORMULAS))


def _mode(*args, fits=int.__le__, cheaper=Fraction.__lt__, **costs) -> str:
    """The lab's rule on `_mode_costs`, and (by its keywords) the mistakes
    `_MODE_FORMULAS` names."""
    blocks, swap, recompute = _mode_costs(*args, **costs)
    return "swap" if fits(blocks, args[2]) and cheaper(swap, recompute) else "recompute"


#: Newcomer 35's two mistakes were both told to count distinct block ids: the
#: hint names the one a function follows on every case.
_MODE_FORMULAS = [
    (lambda *a: _mode(*a, tokens=lambda t: t[0] if t else 0),
     N_("recomputing the group costs every sequence's recompute_tokens: sum them, not the "
        "first sequence's alone")),
    (lambda *a: _mode(*a, fits=int.__lt__),
     N_("exactly enough free CPU blocks is enough: the group fits when its blocks <= "
        "free_cpu_blocks, not <")),
    (lambda *a: _mode(*a, distinct=False),
     N_("blocks shared inside the group travel once: count distinct block ids, not every "
        "table entry")),
    (lambda *a: _mode(*a, both_ways=1),
     N_("swapping moves the blocks twice: out now and back in later (2 x blocks x "
        "block_bytes / link_bytes_per_s)")),
    (lambda *a: _mode(*a, cheaper=Fraction.__le__),
     N_("swap only where it is strictly cheaper: on a tie, recompute")),
    (lambda *a: _mode(*a, divide=lambda x, y: Fraction(x // y)),  # newcomer 43
     N_("`//` rounds each time down to whole seconds, and times under a second all become 0: "
        "divide with `/`, which keeps the fraction")),
]


_NEWEST = (N_("the newest running request is preempted first (it has waited least; first come, "
           "first served), whatever it holds or needs"))
_ITSELF = (N_("when no request newer than the one being served is left, and older ones hold the "
           "memory, it steps aside itself"))

VICTIM_CASES = [
    Case(([("A", 1, 5), ("B", 1, 3), ("C", 1, 2)], 3), [], N_("3 free blocks cover the 3 needed")),
    Case(([("A", 1, 5), ("B", 1, 3), ("C", 1, 2)], 2), ["C"], _ITSELF),
    Case(([("A", 2, 5), ("B", 1, 3), ("C", 1, 2)], 1), ["C"],
         N_("the newest running request is preempted first (it has waited least; first come, "
            "first served), whatever it holds or needs; C's 2 blocks then cover A and B")),
    Case(([("A", 1, 8), ("B", 1, 1)], 0), ["B"],
         N_("the newest running request is preempted first (it has waited least; first come, "
            "first served), whatever it holds or needs — even if an older one holds far more "
            "blocks")),
    Case(([("A", 1, 1), ("B", 1, 8)], 0), ["B"], _NEWEST),
    Case(([("A", 1, 4), ("B", 2, 4), ("C", 1, 1), ("D", 1, 1)], 0), ["D", "C", "B"],
         N_("D frees a block for A; for B, C goes, and then: when no request newer than the one "
            "being served is left, and older ones hold the memory, it steps aside itself")),
    Case(([("A", 0, 3), ("B", 1, 2), ("C", 0, 1)], 0), ["C"],
         N_("B needs a block: C is newest, so C goes, although C itself needed none this step")),
    Case(([], 4), [], N_("nobody running, nobody preempted")),
    Case(([("A", 3, 4), ("B", 1, 1), ("C", 1, 1), ("D", 1, 1)], 1), ["D", "C", "B"],
         N_("A needs 3 blocks and 1 is free: D's block is not enough, so keep preempting (C "
            "too) until A fits; then for B: when no request newer than the one being served is "
            "left, and older ones hold the memory, it steps aside itself")),
    Case(([("A", 1, 4), ("B", 1, 2), ("C", 0, 1)], 0), ["C", "B"],
         N_("the newest running request is preempted first (it has waited least; first come, "
            "first served), whatever it holds or needs: C goes for A though C needs nothing "
            "this step; then for B: when no request newer than the one being served is left, "
            "and older ones hold the memory, it steps aside itself")),
    Case(([("A", 1, 4), ("B", 1, 3), ("C", 0, 2)], 2), [],
         N_("exactly enough is enough: A and B take the 2 free blocks, C needs none this step (its "
         "last block has room), so nobody is preempted — preempt only while a request needs "
         "MORE blocks than are free")),
]


def _victims_walk(running, free_blocks, *, takes: bool = True
                  ) -> tuple[list, list[str], list[int]]:
    """The oracle: ``(victims, what happened, at)``, ``at[i]`` being the line
    of the story that preempts ``victims[i]``. The unserved requests wait in
    a deque, oldest at the left; each is served in turn, the newest unserved
    one leaving while it does not fit; with none left, it leaves itself.
    (With `takes` false, a served request's blocks are never taken from the
    free count: a mistake `_victims_mistake` names.)"""
    unserved, victims, story, at, served = deque(running), [], [], [], 0
    while unserved:
        rid, need, _held = unserved.popleft()
        while need > free_blocks and unserved:
            victim, _needed, held = unserved.pop()
            victims.append(victim)
            at.append(len(story))
            free_blocks += held
            story.append(_("{rid} needs {need}: preempt {victim} (newest, frees {held})")
                           .format(rid=rid, need=need, victim=victim, held=held))
        if need <= free_blocks:
            free_blocks -= need if takes else 0
            served += 1
            story.append(_("{rid} takes {need}, {free_blocks} left")
                           .format(rid=rid, need=need, free_blocks=free_blocks))
        elif served:
            victims.append(rid)
            at.append(len(story))
            story.append(_("{rid} needs {need}, {free_blocks} free, nobody newer left: {rid} "
                           "steps aside").format(rid=rid, need=need, free_blocks=free_blocks))
        else:
            raise ValueError(f"{rid} does not fit even alone")
    return victims, story, at


def _victims_hint(running, free_blocks) -> str:
    story = _victims_walk(running, free_blocks)[1]
    if not story:
        return _("nobody running, nobody preempted")
    return _("{story} ({rule})").format(story=join_clauses(story), rule=_(_NEWEST))


def _victims_mistake(_fn: Callable, case: Case, got: object) -> str:
    """Where `got`, a wrong list of victims, parts from the walk: an id that is
    not running or is listed twice, else the walk up to there and the step it
    got wrong (another victim, stopping early, or preempting when nobody else
    needs to be); '' for an answer that is no list."""
    if not is_sequence(got):
        return ""
    got, (running, free_blocks) = list(got), case.args
    ids = [rid for rid, _need, _held in running]
    entry = next((x for x in got if is_sequence(x) and len(x) == 3
                  and any(same_items(x[0], r) for r in ids)), None)
    if entry is not None:  # newcomer 35: told ('C', 1, 2) "is not running"
        return (_("return the ids of the requests to preempt ({rid!r}), not their (request_id, "
                  "blocks_needed, blocks_held) entries ({entry!r})")
                .format(rid=entry[0], entry=tuple(entry)))
    found = stranger_or_repeat(got, ids)
    if found is not None:
        rid, twice = found
        return (_("{rid!r} is listed twice: a request is preempted once").format(rid=rid)
                if twice else _("{rid!r} is not running (the running requests: {ids})")
                .format(rid=rid, ids=join_names(ids) or _("none")))
    said = formula_mistake(_fn, VICTIM_CASES + victims_grid(), _VICTIMS_FORMULAS)
    if said:
        return said.format(walk=join_clauses(_victims_walk(running, free_blocks)[1]))
    want, story, at = _victims_walk(running, free_blocks)
    k = parting(got, want)
    if k < len(want):
        done = story[:at[k]]
        step = (_("{done}; then {step}").format(done=join_clauses(done), step=story[at[k]])
                if done else story[at[k]])
        if k < len(got):
            return (_("{step}, not {got}: {rule}")
                    .format(step=step, got=got[k], rule=_(_NEWEST)))
        return _("{step}: your answer stops before {victim}").format(step=step, victim=want[k])
    if k == len(got):
        return ""
    return (_("{walk}: nobody else needs to be preempted, so {extra} stays; preempt only while "
              "a request needs MORE blocks than are free")
            .format(walk=join_clauses(story), extra=got[k]))


#: choose_victims never taking a served request's blocks (newcomer 40)
_VICTIMS_FORMULAS = [(lambda running, free: _victims_walk(running, free, takes=False)[0],
                      N_("{walk}: each request served takes the blocks it needs from the free "
                         "count (free_blocks -= blocks_needed); your function never takes "
                         "them, so later requests seem to fit"))]


@cache
def victims_grid() -> list[Case]:
    """Every line of up to four running requests needing 0 to 2 blocks and holding
    1 or 2, with 0 to 3 free blocks: exact fits, requests that need nothing,
    victims that free too little, a request stepping aside."""
    def inputs():
        kinds = list(product((0, 1, 2), (1, 2)))
        for k in range(5):
            for line in product(kinds, repeat=k):
                running = [(chr(65 + i), need, held) for i, (need, held) in enumerate(line)]
                for free in range(4):
                    yield running, free
    return grid_cases(inputs(), lambda r, f: _victims_walk(r, f)[0], _victims_hint)


@in_stub_order
def check_choose_victims(choose_victims: Callable) -> CheckResult:
    """`choose_victims(running, free_blocks)` with running ``[(request_id,
    blocks_needed, blocks_held), ...]`` oldest first -> the preempted request
    ids in the order they are preempted. The lab's cases, then every small line
    of running requests (`victims_grid`)."""
    return check_function("choose_victims", choose_victims, VICTIM_CASES + victims_grid(),
                          diagnose=_victims_mistake)


CHECKS = {
    "tokens_to_recompute": check_tokens_to_recompute,
    "preemption_mode": check_preemption_mode,
    "choose_victims": check_choose_victims,
}
