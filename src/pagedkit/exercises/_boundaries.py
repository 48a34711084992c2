"""Walking the boundary states of an exercise, not only the cases a lab shows.

A check's hand-written cases teach: each carries the hint for the mistake it
catches. They cannot cover every state a learner forgets — a full pool and an
empty one, a block exactly filled, one token past it, a shared block and a
sole owner, a tie — so each check then walks a grid of small inputs built
around those boundaries (issue #27) and holds the answer to an oracle: a
plain simulation of the rule, written apart from the reference solution.

A grid case's hint says which boundary it sits on, so a learner reads what
was expected, what came back, and why that input is special.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from functools import partial

from . import Case

__all__ = ["Keywords", "around", "grid_cases"]


def around(*values: int, low: int = 0) -> list[int]:
    """Each value and its neighbours (v - 1, v, v + 1), at least `low`,
    without repeats, in order: the rounding boundaries of a block size."""
    out: list[int] = []
    for v in values:
        for x in (v - 1, v, v + 1):
            if x >= low and x not in out:
                out.append(x)
    return out


def grid_cases(inputs: Iterable[tuple | tuple[tuple, dict]], oracle: Callable,
               hint: Callable[..., str]) -> list[Case]:
    """One `Case` per input the oracle answers: ``oracle(*args, **kwargs)`` is
    expected, ``hint(*args, **kwargs)`` names the boundary. An input is an
    argument tuple, or ``(args, kwargs)`` when it is a `Keywords`. An input
    the oracle refuses (raises ValueError: outside the exercise's rules) is
    left out."""
    cases = []
    for item in inputs:
        args, extra = (item.args, item.kwargs) if isinstance(item, Keywords) else (item, {})
        try:
            want = oracle(*args, **extra)
        except ValueError:
            continue
        # the hint is made when a verdict shows it: a cached grid outlives a
        # change of language, and most of its cases are never shown
        cases.append(Case(tuple(args), want, partial(hint, *args, **extra), dict(extra)))
    return cases


class Keywords:
    """Arguments with keywords, for `grid_cases`."""

    def __init__(self, *args, **kwargs) -> None:
        self.args, self.kwargs = args, kwargs
