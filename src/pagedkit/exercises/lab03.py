"""Lab 03 exercises: blocks, block tables and slots (paper §4.2, Figure 6).

* `token_at` — which token of a sequence a physical slot holds, if any: the
  block table read backwards.
* `blocks_needed` — how many fresh blocks appending tokens takes.
* `append_slots` — a block table that grows on block boundaries from a free
  list, all or nothing: the heart of `pagedkit.memory.BlockTable.append`.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable

from ..i18n import N_, _
from . import (
    Case,
    CheckResult,
    call_learner,
    check_function,
    formula_mistake,
    fresh,
    function_name,
    in_stub_order,
    other_cases,
    require_function,
    same_items,
    wrong_answer,
)

__all__ = ["CHECKS", "check_append_slots", "check_blocks_needed", "check_token_at"]


@in_stub_order
def check_token_at(fn: Callable[[list[int], int, int, int], int | None]) -> CheckResult:
    """`token_at(block_table, block_size, num_tokens, slot)`: the position of the
    sequence's token whose K/V sit in physical `slot`, or ``None`` if that slot
    holds none of its `num_tokens` tokens — what a debugger of the paged cache
    (or the kernel's bounds check) must answer, the block table read backwards."""
    find = (_("Here slot // block_size is a *physical* block: find where it sits in the table — "
            "that index is the logical block — then position = logical x block_size + offset"))
    tail = (_("The last block's slots past num_tokens hold no token yet: check the position "
            "against num_tokens"))
    table, big = [7, 2, 5], [3, 0, 5]
    cases = [
        Case((table, 4, 10, 28), 0, _("slot 28 = block 7, offset 0; block 7 is logical block "
                                      "0. {find}").format(find=find)),
        Case((table, 4, 10, 31), 3, _("slot 31 = block 7, offset 3")),
        Case((table, 4, 10, 9), 5, _("slot 9 = block 2, offset 1; block 2 is logical block 1, "
                                     "so position 4 + 1. {find}").format(find=find)),
        Case((table, 4, 10, 21), 9, _("slot 21 = block 5 (logical 2), offset 1: position 9")),
        Case((table, 4, 10, 22), None, _("slot 22 would be position 10, but the sequence holds "
                                         "10 tokens (0..9). {tail}").format(tail=tail)),
        Case((table, 4, 10, 12), None, _("slot 12 is in block 3, which is not in this sequence's "
                                       "table: none of its tokens")),
        Case((big, 16, 40, 88), None, _("block 5 is logical 2, offset 8: position 40, one past "
                                        "the last of 40 tokens. {tail}").format(tail=tail)),
        Case((big, 16, 40, 84), 36, _("block 5 is logical 2, offset 4: position 36")),
        Case((big, 16, 40, 4), 20, _("block 0 is logical block 1 (not 0!), offset 4. {find}")
                                    .format(find=find)),
        Case(([1, 0], 1, 2, 0), 1, _("block_size 1: slot 0 is block 0, logical block 1")),
    ]
    return check_function("token_at", fn, cases, diagnose=_sentinel)


def _sentinel(_fn: Callable, _case: Case, got: object) -> str:
    """A negative position (-1 and its kind) stands for "no token": the
    exercise answers None there, and says so (newcomer 29, finding 11). No
    case expects a negative position, so the hint fits every case that
    gets one."""
    if isinstance(got, numbers.Integral) and not isinstance(got, bool) and got < 0:
        return _("a slot that holds none of the sequence's tokens gives None, not {got} (or "
                 "any other stand-in number): return None there").format(got=got)
    return ""


@in_stub_order
def check_blocks_needed(fn: Callable[[int, int, int], int]) -> CheckResult:
    """`blocks_needed(num_tokens, num_new_tokens, block_size)`: fresh blocks a
    sequence holding `num_tokens` tokens takes to append `num_new_tokens` more."""
    room = _("the last block may still have free slots: fill them before taking a new block")
    cases = [
        Case((0, 1, 4), 1, _("an empty sequence has no blocks: its first token takes one")),
        Case((0, 4, 4), 1, _("4 tokens fill exactly one block of 4")),
        Case((0, 5, 4), 2, _("5 tokens need 2 blocks of 4 (round up)")),
        Case((5, 3, 4), 0, room + _(": 5 tokens in blocks of 4 leave 3 free slots")),
        Case((5, 4, 4), 1, room + _(": 3 fit in the last block, the 4th needs a new one")),
        Case((4, 1, 4), 1, _("a full last block has no room: the next token starts a new block")),
        Case((7, 0, 16), 0, _("appending nothing takes nothing")),
        Case((100, 60, 16), 3, _("blocks for 160 tokens (10) minus blocks held for 100 (7)")),
    ]
    return check_function("blocks_needed", fn, cases,
                          diagnose=lambda fn, _case, _got: formula_mistake(fn, cases,
                                                                           _BLOCKS_FORMULAS))


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


#: Formulas newcomer 35 wrote for blocks_needed, each told the first case's
#: story; the hint names the one a function follows on every case.
_BLOCKS_FORMULAS = [
    (lambda n, k, bs: (n + k) // bs - n // bs,  # (round() gives the same on every case)
     N_("your function rounds down, as (num_tokens + num_new_tokens) // block_size - "
        "num_tokens // block_size does: a partly filled block takes a whole one, so round up "
        "both counts (ceil)")),
    (lambda n, k, bs: _ceil(n + k, bs),
     N_("your function counts every block the sequence holds after the append, "
        "ceil((num_tokens + num_new_tokens) / block_size): it already holds "
        "ceil(num_tokens / block_size) of them, so subtract those")),
    (lambda n, k, bs: _ceil(k, bs),
     N_("your function counts blocks for the new tokens alone, ceil(num_new_tokens / "
        "block_size): the last block may still have free slots, so count from the blocks held, "
        "ceil((num_tokens + num_new_tokens) / block_size) - ceil(num_tokens / block_size)")),
]


# (block_table, num_tokens, num_new_tokens, block_size, free_blocks)
#   -> (returned slots, table after, free list after, hint)
_APPEND_CASES = [
    (([], 0, 3, 4, [5, 1, 7]), [20, 21, 22], [5], [1, 7],
     N_("an empty table takes the head of the free list (block 5) for its first token; "
     "3 tokens fit in it: slots 5 x 4 + 0, 1, 2")),
    (([5], 3, 1, 4, [1, 7]), [23], [5], [1, 7],
     N_("the last block (5) holds 3 of 4 tokens: the new token takes its free slot, no new block")),
    (([5], 4, 1, 4, [1, 7]), [4], [5, 1], [7],
     N_("block 5 is full: take the next free block (1) from the FRONT of the free list")),
    (([5], 3, 6, 4, [1, 7]), [23, 4, 5, 6, 7, 28], [5, 1, 7], [],
     N_("fill block 5's last slot, then block 1 (4 tokens), then block 7")),
    (([5], 3, 5, 4, [1]), [23, 4, 5, 6, 7], [5, 1], [],
     N_("block 5's free slot takes the first new token, so 5 tokens need only 1 fresh block, and "
     "1 is free: count the room in the last block before deciding there is not enough")),
    (([5], 4, 9, 4, [1, 7]), None, [5], [1, 7],
     N_("9 more tokens need 3 blocks but only 2 are free: return None and change NOTHING "
     "(all or nothing: check before you pop any block)")),
    (([5, 1], 6, 0, 4, [7]), [], [5, 1], [7], N_("appending no tokens returns no slots")),
    (([2], 16, 17, 16, [0, 9, 3]), [*range(0, 16), 144], [2, 0, 9], [3],
     N_("16 tokens fill block 2; the next 16 fill block 0, the 17th starts block 9")),
]


def _call_text(fn_name: str, args: tuple) -> str:
    table, num_tokens, new, block_size, free = args
    return f"{fn_name}({table}, {num_tokens}, {new}, {block_size}, {free})"


@in_stub_order
def check_append_slots(fn: Callable[[list[int], int, int, int, list[int]], list[int] | None]
                       ) -> CheckResult:
    """`append_slots(block_table, num_tokens, num_new_tokens, block_size, free_blocks)`:
    give `num_new_tokens` token slots after the `num_tokens` the sequence holds,
    appending blocks popped from the front of `free_blocks` to `block_table` (both
    lists are changed in place), and return the new tokens' slots. If the free list
    is too short, return ``None`` and change nothing."""
    name = "append_slots"
    require_function(name, fn)
    cases = [Case(args, slots) for args, slots, *_after in _APPEND_CASES]
    for case, (args, slots, table_after, free_after, hint) in zip(cases, _APPEND_CASES,
                                                                  strict=True):
        hint = _(hint)
        table, free = fresh(args[0]), fresh(args[4])  # the lists it changes, read after
        call = _call_text(function_name(fn, name), args)
        got, failed = call_learner(name, fn, call, table, args[1], args[2], args[3], free,
                                   expected=slots, hint=hint, elsewhere=other_cases(cases, case))
        if failed is not None:
            return failed
        if not same_items(got, slots):
            blocks, held, count, size, given = args
            needed = _ceil(held + count, size) - len(blocks)
            if got is None and slots is not None and needed == len(given):  # newcomer 35
                hint = _("exactly enough is enough: {count} tokens need {needed} fresh "
                         "block(s) and {needed} are free; refuse only when more blocks are "
                         "needed than are free (>, not >=)").format(count=count, needed=needed)
            elif same_items(got, list(range(held, held + count))) and slots is not None:
                hint = _("{got} are the new tokens' positions in the sequence (logical); a "
                         "slot is where one lies in physical memory: the block the table "
                         "maps its logical block to, times {size}, plus its offset, "
                         "block_table[pos // {size}] * {size} + pos % {size}").format(
                             got=got, size=size)  # newcomer 40
            return wrong_answer(name, call, got, slots, hint, none_is_an_answer=True)
        if table != table_after or free != free_after:
            hint = _copied(args, table, free, table_after, free_after) or hint
            return CheckResult(name, False,
                               _("after {call} the block table is {table} and the free list "
                                 "{free}; expected {table_after} and {free_after}.  Hint: "
                                 "{hint}")
                                .format(call=call, table=table, free=free, table_after=table_after,
                                        free_after=free_after, hint=hint))
    return CheckResult(name, True, _("all {n} cases pass").format(n=len(_APPEND_CASES)))


def _copied(args: tuple, table: list, free: list, table_after: list, free_after: list) -> str:
    """The hint for an answer that left a list it had to change as it was
    (it changed a copy, `list(block_table)` or `free_blocks[1:]`, that the
    caller never sees; newcomer 29, finding 7); "" if it changed both."""
    untouched = [name for name, now, before, after in
                 (("block_table", table, args[0], table_after),
                  ("free_blocks", free, args[4], free_after)) if now == before != after]
    if not untouched:
        return ""
    left = (_("your function left block_table and free_blocks as the caller passed them")
            if len(untouched) == 2 else
            _("your function left {name} as the caller passed it").format(name=untouched[0]))
    return (left
            + _(": change block_table and free_blocks in place (block_table.append(...), "
                "free_blocks.pop(0)); a copy such as list(free_blocks) or free_blocks[1:] "
                "changes only the copy, which the caller never sees"))


CHECKS = {
    "token_at": check_token_at,
    "blocks_needed": check_blocks_needed,
    "append_slots": check_append_slots,
}
