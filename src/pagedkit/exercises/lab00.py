"""Lab 00 warm-up: how an exercise and its check work.

The learner writes `blocks_for`; `check_blocks_for` runs it on known cases
and answers with a `CheckResult`. It is the simplest question about paged
memory (paper §4.2): how many fixed-size blocks hold a sequence.
"""

from __future__ import annotations

from collections.abc import Callable

from ..i18n import _
from . import Case, CheckResult, check_function, in_stub_order, is_count, same_items

__all__ = ["CHECKS", "check_blocks_for"]


@in_stub_order
def check_blocks_for(fn: Callable[[int, int], int]) -> CheckResult:
    """`blocks_for(num_tokens, block_size)`: blocks of `block_size` slots that hold
    `num_tokens` tokens (a partly filled last block counts as a whole one)."""
    round_up = _("a partly filled block still takes a whole block: round up, not down")
    cases = [
        Case((4, 4), 1, _("4 tokens exactly fill one block of 4")),
        Case((5, 4), 2, _("the 5th token needs a second block; {round_up}")
                         .format(round_up=round_up)),
        Case((1, 16), 1, round_up),
        Case((0, 16), 0, _("no tokens need no blocks")),
        Case((35, 4), 9, _("8 full blocks hold 32 tokens; 3 more need a 9th")),
        Case((2048, 16), 128, _("2048 / 16 divides exactly")),
        Case((2049, 16), 129, round_up),
    ]
    return check_function("blocks_for", fn, cases,  # a count: 2.0 is refused (is_count)
                          diagnose=_swapped)


def _swapped(fn: Callable, case: Case, got) -> str:
    """The arguments taken the other way round: block_size / num_tokens,
    rounded either way (newcomer 34 was told to round up, which it did).
    Where that value is also a plain mistake's (4 // 5 and ceil(5 / 4)...),
    one more call tells them apart: 1 token in blocks of 16 is 16 only
    the other way round."""
    num_tokens, block_size = case.args
    if not is_count(got):  # (an odd answer has its own verdict)
        return ""
    try:
        one_in_sixteen = fn(1, 16)
    except Exception:  # (its error is the case's to say, if any: this only explains)
        return ""
    if num_tokens and got in (block_size // num_tokens, -(-block_size // num_tokens)) \
            and same_items(one_in_sixteen, 16):
        return (_("{got} is {block_size} / {num_tokens} rounded: block_size divided by "
                  "num_tokens. blocks_for(num_tokens, block_size) takes the token count first: "
                  "divide num_tokens by block_size")
                .format(got=got, block_size=block_size, num_tokens=num_tokens))
    return ""


CHECKS = {"blocks_for": check_blocks_for}
