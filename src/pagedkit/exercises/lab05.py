"""Checks for lab 05 (continuous batching).

Both exercises model a rule of `pagedkit.scheduler` small enough to reason
about on paper: how many steps requests take under static and continuous
batching, and which waiting requests a step admits (first come, first
served, under a token budget, a sequence cap and the free blocks).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from functools import cache
from itertools import product

from ..i18n import N_, _, join_clauses, join_names, ngettext
from . import (
    Case,
    CheckResult,
    check_function,
    in_stub_order,
    is_sequence,
    parting,
    same_items,
    stranger_or_repeat,
)
from ._boundaries import Keywords, around, grid_cases

__all__ = ["CHECKS", "check_admit", "check_finish_steps"]

_STATIC = (N_("a static batch starts only when every request of the previous batch has "
           "finished: its longest request sets the pace"))
_CONTINUOUS = (N_("with continuous batching a request takes a seat at the first step after one "
               "frees up (the oldest waiting request first); nobody waits for a whole batch"))

FINISH_CASES = [
    Case(([3, 1, 2], 3, "static"), [3, 1, 2], N_("one batch holds everyone: each finishes after "
         "as many steps as it has tokens")),
    Case(([5, 1, 1, 1], 2, "static"), [5, 1, 6, 6], _STATIC),
    Case(([5, 1, 1, 1], 2, "continuous"), [5, 1, 2, 3], _CONTINUOUS),
    Case(([2, 2, 2], 1, "static"), [2, 4, 6], N_("one seat: requests run one after another")),
    Case(([2, 2, 2], 1, "continuous"), [2, 4, 6], N_("one seat: requests run one after another")),
    Case(([1, 8, 3, 2, 2, 6], 2, "static"), [1, 8, 11, 10, 13, 17], _STATIC),
    Case(([1, 8, 3, 2, 2, 6], 2, "continuous"), [1, 8, 4, 6, 8, 14], _CONTINUOUS),
    Case(([4, 4], 8, "continuous"), [4, 4], N_("more seats than requests: all start at once")),
    Case(([], 4, "static"), [], N_("no requests, no steps")),
]


def _finish_by_stepping(output_lens: list[int], seats: int, policy: str) -> list[int]:
    """The oracle: run the steps one by one. Before each step the seats are
    filled from the queue, oldest first — every free seat at every step
    (continuous), or only once the whole batch has finished (static)."""
    left, finish = list(output_lens), [0] * len(output_lens)
    queue, seated, step = deque(range(len(output_lens))), [], 0
    while queue or seated:
        if policy == "continuous" or not seated:
            while queue and len(seated) < seats:
                seated.append(queue.popleft())
        step += 1
        for i in seated:
            left[i] -= 1
            if left[i] == 0:
                finish[i] = step
        seated = [i for i in seated if left[i]]
    return finish


def _finish_hint(output_lens: list[int], seats: int, policy: str) -> str:
    rule = _(_STATIC) if policy == "static" else _(_CONTINUOUS)
    freed = _finish_by_stepping(output_lens, seats, policy)
    if policy == "continuous" and len(freed) != len(set(freed)):
        rule += (_("; when several seats free up in the same step, all of them are filled before "
                 "the next step (not one a step)"))
    return rule


# Every queue of up to five requests of 1 to 3 tokens, on 1 to 3 seats or more seats
#: than requests: seats freeing together, a last batch not full, ties in length.
@cache
def finish_grid() -> list[Case]:
    return grid_cases(((list(lens), seats, policy)
                       for k in range(6) for lens in product((1, 2, 3), repeat=k)
                       for seats in (1, 2, 3, 6) for policy in ("static", "continuous")),
                      _finish_by_stepping, _finish_hint)


@in_stub_order
def check_finish_steps(finish_steps: Callable) -> CheckResult:
    """`finish_steps(output_lens, max_num_seqs, policy)` -> for each request,
    the number of steps run when it produced its last token ("static" or
    "continuous"), with `max_num_seqs` seats (sequences per step); everyone
    arrives before the first step, in order. The lab's cases first, then
    every small queue (`finish_grid`)."""
    return check_function("finish_steps", finish_steps, FINISH_CASES + finish_grid())


_FCFS = (N_("first come, first served: when the head of the queue does not fit, the step admits "
         "no one behind it either (else a long prompt could wait forever)"))
_BLOCKS = N_("a prompt of n tokens needs ceil(n / block_size) blocks")

ADMIT_CASES = [
    Case(([("a", 5), ("b", 7), ("c", 2)], 12, 8, 10, 4), [("a", 5), ("b", 7)],
         N_("each prompt takes its tokens from the step's budget; c finds none left")),
    Case(([("a", 10), ("b", 2)], 8, 8, 10, 4), [], _FCFS),
    Case(([("a", 5), ("b", 9), ("c", 1)], 100, 8, 4, 4), [("a", 5)],
         N_("a prompt of n tokens needs ceil(n / block_size) blocks: a takes 2 of the 4 free "
            "blocks and b needs 3; first come, first served: when the head of the queue does "
            "not fit, the step admits no one behind it either (else a long prompt could wait "
            "forever)")),
    Case(([("a", 1), ("b", 1), ("c", 1)], 100, 2, 10, 4), [("a", 1), ("b", 1)],
         N_("each admitted request takes one of the seats left")),
    Case(([("a", 8)], 8, 1, 2, 4), [("a", 8)], N_("exactly enough is enough; a prompt of n "
                                                  "tokens needs ceil(n / block_size) blocks")),
    Case(([], 16, 4, 4, 4), [], N_("nobody waiting, nobody admitted")),
    Case(([("a", 3)], 0, 4, 4, 4), [], N_("no tokens left in the budget: nobody is admitted")),
    Case(([("a", 2), ("b", 3)], 16, 0, 10, 4), [],
         N_("no seat left (the running requests hold every one): nobody is admitted — check the "
         "seats before admitting, not only after")),
    Case(([("a", 10), ("b", 3)], 6, 8, 10, 4), [("a", 6)],
         N_("with chunked prefill the head takes what the budget allows (6 of its 10 tokens); "
         "then the budget is spent"), {"chunked": True}),
    Case(([("a", 3), ("b", 10)], 8, 8, 10, 4), [("a", 3), ("b", 5)],
         N_("chunked: a takes 3, b takes the 5 tokens left (its first chunk)"), {"chunked": True}),
    Case(([("a", 10)], 10, 8, 2, 4), [],
         N_("chunked: the chunk is sized by the token budget; if its blocks do not fit, the "
            "request "
         "waits (10 tokens need 3 blocks, 2 are free)"), {"chunked": True}),
    Case(([("a", 40), ("b", 2)], 8, 8, 2, 4), [("a", 8)],
         N_("chunked: the first chunk (8 tokens) needs 2 blocks, not the 10 the whole 40-token "
         "prompt will need later: blocks are taken for the tokens scheduled now"),
         {"chunked": True}),
    Case(([("a", 10), ("b", 3)], 6, 8, 10, 4), [],
         N_("without chunked prefill a prompt longer than the budget left waits whole; first "
            "come, first served: when the head of the queue does not fit, the step admits no one "
            "behind it either (else a long prompt could wait forever)")),
    Case(([("a", 2), ("b", 2), ("c", 2)], 16, 2, 10, 4), [("a", 2), ("b", 2)],
         N_("chunked prefill splits tokens, not seats: each admitted request still takes one of "
         "the seats left"), {"chunked": True}),
]


def _admit_walk(waiting, tokens, seats, blocks, block_size, chunked=False):
    """The oracle: ``(admitted, why the walk stopped, whether the head of the
    queue stopped it)``, the head tried against each limit in turn: the head
    stops it when its own tokens or blocks do not fit (first come, first
    served then holds back the rest), not when no seat or budget is left."""
    admitted = []
    for rid, prompt_len in waiting:
        if seats <= 0:
            return admitted, _("no seat is left"), False
        if tokens <= 0:  # a group run whole past the budget leaves it below 0
            return admitted, _("the step's token budget is spent"), False
        take = min(prompt_len, tokens) if chunked else prompt_len
        if take > tokens:
            return admitted, (_("{rid!r} needs all {prompt_len} of its tokens at once (no "
                                "chunked prefill) and {tokens} are left in the budget")
                                .format(rid=rid, prompt_len=prompt_len, tokens=tokens)), True
        need = -(-take // block_size)
        if need > blocks:
            return admitted, (ngettext("{rid!r} needs ceil({take} / {block_size}) = {need} "
                                       "blocks for its {take} tokens and {blocks} is free",
                                       "{rid!r} needs ceil({take} / {block_size}) = {need} "
                                       "blocks for its {take} tokens and {blocks} are free",
                                       blocks)
                              .format(rid=rid, take=take, block_size=block_size, need=need,
                                      blocks=blocks)), True
        admitted.append((rid, take))
        tokens, seats, blocks = tokens - take, seats - 1, blocks - need
    return admitted, _("every waiting request fits"), False


def _admit_oracle(*args, **kwargs):
    return _admit_walk(*args, **kwargs)[0]


def _after(n: int) -> str:
    """The words that place a step of the walk: after how many admitted."""
    return _("after {n} admitted, ").format(n=n) if n else ""


def _admit_hint(*args, **kwargs) -> str:
    """Why the walk admits what it does; the first-come rule only where the
    head of the queue not fitting is why the others wait too."""
    admitted, why, head_stopped = _admit_walk(*args, **kwargs)
    why = _after(len(admitted)) + why
    return join_clauses([why, _(_FCFS)] if head_stopped else [why])


def _admit_parting(got, waiting, tokens, seats, blocks, block_size, chunked=False) -> str:
    """Where `got`, a wrong list of ``(request_id, tokens)``, parts from the
    walk: an id that is not waiting, a request admitted past where the walk
    stops, one the walk admits that it left out, a request's tokens, or one
    taken out of queue order; '' for an answer of another shape."""
    ids = [rid for rid, _n in waiting]
    shape = _ids_alone(got, waiting, tokens, seats, blocks, block_size, chunked)
    if shape:
        return shape
    if not is_sequence(got) or not all(is_sequence(x) and len(x) == 2 for x in got):
        return ""
    got = [tuple(x) for x in got]
    found = stranger_or_repeat([rid for rid, _n in got], ids)
    if found is not None:
        rid, twice = found
        return (_("{rid!r} is listed twice: a request is admitted once a step").format(rid=rid)
                if twice else _("{rid!r} is not waiting (the queue: {ids})")
                .format(rid=rid, ids=join_names(map(repr, ids)) or _("empty")))
    want, why, head_stopped = _admit_walk(waiting, tokens, seats, blocks, block_size, chunked)
    k = parting(got, want)
    if k == len(got) == len(want):  # every pair alike, the answer not: its container
        return ""
    after = _after(k)
    if k == len(want):  # admitted past the walk's stop
        rid = got[k][0]
        if head_stopped and not same_items(rid, waiting[k][0]):
            return _("{after}{why}; {rule}").format(after=after, why=why, rule=_(_FCFS))
        return (_("{after}{why}, so {rid!r} is not admitted this step")
                .format(after=after, why=why, rid=rid))
    rid, take = want[k]
    if k == len(got):
        return (ngettext("{after}{rid!r} fits ({take} token, ceil({take} / {block_size}) "
                         "blocks): your answer stops before it",
                         "{after}{rid!r} fits ({take} tokens, ceil({take} / {block_size}) "
                         "blocks): your answer stops before it", take)
                .format(after=after, rid=rid, take=take, block_size=block_size))
    if not same_items(got[k][0], rid):
        return (_("{after}the head of the queue, {rid!r}, comes next, not {got!r}: requests "
                  "are admitted in queue order").format(after=after, rid=rid, got=got[k][0]))
    prompt_len = dict(waiting)[rid]
    how = (ngettext("with chunked prefill, its {prompt_len} token or the budget left, "
                    "whichever is less",
                    "with chunked prefill, its {prompt_len} tokens or the budget left, "
                    "whichever is less", prompt_len) if chunked
           else ngettext("without chunked prefill, its {prompt_len} token",
                         "without chunked prefill, all {prompt_len} of its tokens", prompt_len)
           ).format(prompt_len=prompt_len)
    return (ngettext("{after}{rid!r} takes {take} token ({how}), not {got!r}",
                     "{after}{rid!r} takes {take} tokens ({how}), not {got!r}", take)
            .format(after=after, rid=rid, take=take, how=how, got=got[k][1]))


def admit_mistake(got: list, waiting, tokens, seats, blocks, block_size, chunked=False) -> str:
    """'' if `got` is lab 05's answer to ``admit(waiting, tokens, seats, blocks,
    block_size, chunked)``; else why it is not, naming the mistake where it can
    (an answer made as if `chunked` were the other way), else the walk's hint.
    The build track holds a plugged-in `admit` to it on every call."""
    if got == _admit_oracle(waiting, tokens, seats, blocks, block_size, chunked):
        return ""
    if got == _admit_oracle(waiting, tokens, seats, blocks, block_size, not chunked):
        return (_("that is the answer without chunked prefill: with chunked=True a prompt "
                  "longer than the budget left does not wait, it takes what the budget allows "
                  "(its first chunk)") if chunked else
                _("that is the answer with chunked prefill: with chunked=False a prompt is "
                  "scheduled whole, and one longer than the budget left waits"))
    return (_admit_parting(got, waiting, tokens, seats, blocks, block_size, chunked)
            or _admit_hint(waiting, tokens, seats, blocks, block_size, chunked))


def _admit_grid():
    """Queues of up to three prompts of lengths around the block size (bs - 1, bs,
    bs + 1, 2 bs), budgets and free blocks from none to exactly enough to more, no
    seat to plenty, blocks of 1, 3 and 4, with and without chunked prefill."""
    for bs in (1, 3, 4):
        lengths = sorted({n for n in around(bs, 2 * bs, low=1)})
        for k in range(4):
            for lens in product(lengths, repeat=k):
                waiting = [(chr(97 + i), n) for i, n in enumerate(lens)]
                for tokens, seats, blocks, chunked in product(
                        (0, 1, bs, 2 * bs + 1, 64), (0, 1, 2, 8), (0, 1, 2, 3, 64),
                        (False, True)):
                    yield Keywords(waiting, tokens, seats, blocks, bs, chunked=chunked)


@cache
def admit_grid() -> list[Case]:
    return grid_cases(_admit_grid(), _admit_oracle, _admit_hint)


@in_stub_order
def check_admit(admit: Callable) -> CheckResult:
    """`admit(waiting, tokens_left, seats_left, free_blocks, block_size, chunked=False)`
    -> ``[(request_id, tokens scheduled), ...]`` in admission order. The lab's
    cases first, then every small queue and limit around the boundaries
    (`admit_grid`)."""
    return check_function("admit", admit, ADMIT_CASES + admit_grid(), diagnose=_grid_mistake)


def _grid_mistake(_fn: Callable, case: Case, got: object) -> str:
    """A grid case's wrong answer is told where it parts from the walk
    (`admit_mistake`); the lab's own cases keep their written hints, each
    naming the mistake the case is there to catch, but for an answer of ids
    without their tokens, which no case is there to catch."""
    if any(case is mine for mine in ADMIT_CASES):
        return _ids_alone(got, *case.args, **case.kwargs)
    return admit_mistake(got, *case.args, **case.kwargs)


def _ids_alone(got, waiting, tokens, seats, blocks, block_size, chunked=False) -> str:
    """Newcomer 35 returned the admitted ids alone and was told about the
    budget: say the shape, with the walk's first pair as the example."""
    ids = [rid for rid, _n in waiting]
    if not (is_sequence(got) and len(got) and all(
            not is_sequence(x) and any(same_items(x, r) for r in ids) for x in got)):
        return ""
    want = _admit_walk(waiting, tokens, seats, blocks, block_size, chunked)[0]
    pair = want[0] if want else (got[0], dict(waiting)[got[0]])
    return (_("return a (request_id, tokens) pair for each admitted request, e.g. {pair!r}, "
              "not the ids alone").format(pair=tuple(pair)))


CHECKS = {
    "finish_steps": check_finish_steps,
    "admit": check_admit,
}
