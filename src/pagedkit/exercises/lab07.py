"""Checks for lab 07 (sharing KV blocks: parallel sampling, beam search, prefix caching).

The expected answers come from `pagedkit.memory` itself wherever it can give
them: the hashes from a real `BlockTable`, the block counts from a real
`KVCacheManager` that forks and copies on write. So a check can only pass if
the learner's function agrees with the allocator the engine runs on.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

from ..i18n import N_, _
from ..memory import BlockAllocator, BlockTable, KVCacheManager
from . import Case, CheckResult, call_learner, check_function, require_function

__all__ = ["CHECKS", "check_chain_hashes", "check_copy_on_write", "check_sharing_blocks"]


# ------------------------------------------------------------ chain_hashes
def _table_hashes(token_ids: list[int], block_size: int) -> list[int]:
    """What pagedkit names the full blocks of `token_ids` (no cache needed)."""
    table = BlockTable(BlockAllocator(len(token_ids) // block_size + 1, block_size,
                                      enable_prefix_caching=True))
    table.append(token_ids)
    return table.block_hashes


def check_chain_hashes(fn: Callable) -> CheckResult:
    """`chain_hashes(token_ids, block_size)` must equal `BlockTable.block_hashes`."""
    shared = [5, 9, 2, 7, 1, 1, 3, 8]
    cases = [
        Case(([5, 9, 2, 7], 4), _table_hashes([5, 9, 2, 7], 4),
             _("one full block: its parent is ROOT_HASH")),
        Case(([5, 9, 2], 4), [],
             _("a partly filled block has no name yet: only full blocks are hashed")),
        Case((shared, 4), _table_hashes(shared, 4),
             _("the second block's parent is the first block's hash, not ROOT_HASH")),
        Case(([*shared, 6, 6], 4), _table_hashes([*shared, 6, 6], 4),
             _("the 2 leftover tokens do not make a block")),
        # same last block, different history: must get a different name
        Case(([1, 1, 3, 8, 1, 1, 3, 8], 4), _table_hashes([1, 1, 3, 8, 1, 1, 3, 8], 4),
             _("equal tokens after a different prefix must get a different hash: chain the "
               "parent")),
        Case((list(range(30, 43)), 3), _table_hashes(list(range(30, 43)), 3),
             _("block_size 3: 13 tokens make 4 full blocks")),
        Case(([4, 2], 1), _table_hashes([4, 2], 1), _("block_size 1: every token is a block")),
    ]
    return check_function("chain_hashes", fn, cases)


# ----------------------------------------------------------- copy_on_write
def _cow_case(ref_counts, free_blocks, table, expected_return, expected_state, hint):
    return (ref_counts, free_blocks, table, expected_return, expected_state, hint)


_COW_CASES = [
    # a block only this sequence holds: write in place
    _cow_case([1, 0, 0, 0], [1, 2, 3], [0], None, ([1, 0, 0, 0], [1, 2, 3], [0]),
              N_("ref count 1: nobody else reads the block, so no copy (return None, change "
                 "nothing)")),
    # shared by two: take the head of the free list
    _cow_case([2, 2, 0, 0, 0], [3, 2, 4], [0, 1], (1, 3),
              ([2, 1, 0, 1, 0], [2, 4], [0, 3]),
              N_("the last block (1) is shared: take the *first* free block (3), give it ref "
                 "count 1,"
              " drop one reference from block 1, and point the table's last entry at 3")),
    # shared by three: the others keep it, one reference fewer
    _cow_case([3, 1, 3, 0], [3], [1, 2], (2, 3), ([3, 1, 2, 1], [], [1, 3]),
              N_("only the table's LAST block is written; the others keep block 2 (ref 3 -> 2)")),
    # an earlier block is shared but the last is not: no copy
    _cow_case([4, 1, 0], [2], [0, 1], None, ([4, 1, 0], [2], [0, 1]),
              N_("a shared block earlier in the table is only read, never written: no copy")),
]


def check_copy_on_write(fn: Callable) -> CheckResult:
    """`copy_on_write(ref_counts, free_blocks, table)` updates a tiny pool in place."""
    name = "copy_on_write"
    require_function(name, fn)
    for ref_counts, free_blocks, table, want, (want_refs, want_free, want_table), hint in \
            _COW_CASES:
        hint = _(hint)
        args = (copy.deepcopy(ref_counts), copy.deepcopy(free_blocks), copy.deepcopy(table))
        call = f"copy_on_write({ref_counts}, {free_blocks}, {table})"
        got, failed = call_learner(name, fn, call, *args, hint=hint)
        if failed is not None:
            return failed
        got = tuple(got) if isinstance(got, list) else got
        if got != want:
            return CheckResult(name, False, _("{call} returned {got!r}, expected {want!r}.  "
                                              "Hint: {hint}")
                                             .format(call=call, got=got, want=want, hint=hint))
        state = (args[0], args[1], args[2])
        if state != (want_refs, want_free, want_table):
            return CheckResult(
                name, False,
                _("after {call}: ref_counts={got_refs}, free_blocks={got_free}, "
                  "table={got_table}; expected ref_counts={want_refs}, free_blocks={want_free}, "
                  "table={want_table}.  Hint: {hint}")
                .format(call=call, got_refs=args[0], got_free=args[1], got_table=args[2],
                        want_refs=want_refs, want_free=want_free, want_table=want_table,
                        hint=hint))
    # out of blocks: must refuse, and leave everything as it was
    ref_counts, free_blocks, table = [2, 2], [], [0, 1]
    call = "copy_on_write([2, 2], [], [0, 1])"
    try:
        got = fn(ref_counts, free_blocks, table)
    except NotImplementedError:
        return CheckResult(name, False, _("not written yet"))
    except Exception:
        if (ref_counts, free_blocks, table) != ([2, 2], [], [0, 1]):
            return CheckResult(name, False, _("{call} raised, but changed the pool first: "
                                              "ref_counts={ref_counts}, table={table}.  Hint: "
                                              "check for a free block before touching anything")
                                             .format(call=call, ref_counts=ref_counts, table=table))
        return CheckResult(name, True, _("all {n} cases pass")
                                   .format(n=len(_COW_CASES) + 1))
    return CheckResult(name, False, _("{call} returned {got!r}: block 1 is shared and no block "
                                      "is free, so the write cannot be made safe.  Hint: raise "
                                      "an error (say MemoryError) and change nothing")
                                     .format(call=call, got=got))


# ---------------------------------------------------------- sharing_blocks
def _blocks_by_pagedkit(prompt_len: int, output_lens: list[int], block_size: int
                        ) -> tuple[int, int]:
    """Blocks used by parallel samples with and without sharing, as the
    allocator counts them: one prompt, forked, then each sample's tokens."""
    alone = sum(-(-(prompt_len + o) // block_size) for o in output_lens)
    kv = KVCacheManager(num_blocks=alone + 1, block_size=block_size)
    kv.allocate_slots(0, list(range(prompt_len)))
    for i in range(1, len(output_lens)):
        kv.fork(0, i)
    for i, o in enumerate(output_lens):
        if o:
            kv.allocate_slots(i, [7] * o)
    return alone, kv.stats().used_blocks


def check_sharing_blocks(fn: Callable) -> CheckResult:
    """`sharing_blocks(prompt_len, output_lens, block_size)` -> (alone, shared)."""
    specs = [
        ((8, [1, 1], 4), _("the prompt fills 2 whole blocks; each sample's first token starts a "
                         "block of its own")),
        ((10, [3, 3, 3], 4), _("the prompt's last block is half full: each sample writing into it "
                             "needs its own copy (copy-on-write)")),
        ((10, [1, 6, 2, 9], 4), _("count each sample's blocks past the shared full prompt blocks")),
        ((13, [20, 1], 8), _("block_size 8: one full prompt block is shared")),
        ((3, [2, 2, 2], 4), _("a prompt shorter than a block: nothing is full, nothing stays "
                              "shared")),
        ((10, [0, 0, 0], 4), _("no sample has written yet: all still share every prompt block")),
        ((10, [0, 5, 0, 1], 4), _("samples that have not written still share the original partial "
                                "block; every sample that wrote got its own copy")),
    ]
    cases = [Case(args, _blocks_by_pagedkit(*args), hint) for args, hint in specs]
    return check_function("sharing_blocks", fn, cases,
                          equal=lambda got, want: tuple(got) == want
                          if isinstance(got, (tuple, list)) else False)


CHECKS = {
    "chain_hashes": check_chain_hashes,
    "copy_on_write": check_copy_on_write,
    "sharing_blocks": check_sharing_blocks,
}
