"""Checks for lab 07 (sharing KV blocks: parallel sampling, beam search, prefix caching).

The expected answers come from `pagedkit.memory` itself wherever it can give
them: the hashes from a real `BlockTable`, the block counts from a real
`KVCacheManager` that forks and copies on write. So a check can only pass if
the learner's function agrees with the allocator the engine runs on.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from itertools import product

from ..i18n import N_, _
from ..memory import BlockAllocator, BlockTable, KVCacheManager
from ..memory.block_hash import ROOT_HASH, hash_block, short_hash
from . import (
    Case,
    CheckResult,
    call_learner,
    check_function,
    fresh,
    function_name,
    in_stub_order,
    is_count,
    is_sequence,
    not_written,
    require_function,
    same_items,
    wrong_answer,
)
from ._boundaries import around, grid_cases

__all__ = ["CHECKS", "check_chain_hashes", "check_copy_on_write", "check_sharing_blocks"]


# ------------------------------------------------------------ chain_hashes
def _table_hashes(token_ids: list[int], block_size: int) -> list[int]:
    """What pagedkit names the full blocks of `token_ids` (no cache needed)."""
    table = BlockTable(BlockAllocator(len(token_ids) // block_size + 1, block_size,
                                      enable_prefix_caching=True))
    table.append(token_ids)
    return table.block_hashes


@in_stub_order
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
    return check_function("chain_hashes", fn, cases + hashes_grid(), show=_show_hashes,
                          diagnose=_hashes_mistake)


def _hashes_mistake(_fn: Callable, case: Case, got: object) -> str:
    """The mistake a wrong list of names shows, where one does (newcomer 35:
    three mistakes were all told the first case's story): names that are no
    hash_block names, the last full block left out, or hash_block's
    arguments swapped; '' otherwise (the case's hint)."""
    token_ids, block_size = case.args
    want = case.expected
    if not isinstance(got, (list, tuple)):
        return ""
    got = list(got)
    if want and got and not all(isinstance(h, type(want[0])) for h in got):
        return (_("each name is what hash_block(parent, block_tokens) returns ({kind}), not "
                  "{got_kind}: Python's hash() of a tuple is not the prefix cache's name")
                .format(kind=type(want[0]).__name__, got_kind=type(got[0]).__name__))
    if len(got) < len(want) and same_items(got, want[:len(got)]):
        return (_("{n} tokens make {full} full block(s) of {block_size}, and your answer names "
                  "{k}: the last full block is named too (it ends at token {end})")
                .format(n=len(token_ids), full=len(want), block_size=block_size, k=len(got),
                        end=len(want) * block_size - 1))
    for hashed, hint in _CHAIN_MISTAKES:
        if same_items(got, _chained(token_ids, len(want), block_size, hashed)):
            return _(hint)
    return ""


def _chained(token_ids: list[int], full: int, block_size: int,
             hashed: Callable[[bytes, list[int], int, int], bytes]) -> list[bytes]:
    """The names of the `full` blocks, each `hashed(parent, token_ids, start, end)`
    from the name before it (ROOT_HASH for the first)."""
    names, parent = [], ROOT_HASH
    for start in range(0, full * block_size, block_size):
        parent = hashed(parent, token_ids, start, start + block_size)
        names.append(parent)
    return names


_SWAPPED = N_("hash_block takes the parent's name first, then the block's tokens: "
              "hash_block(parent, block_tokens)")

#: Ways newcomers chained the names wrong, each with what it says (the arguments
#: swapped name a tuple and a list of tokens apart: both are tried).
_CHAIN_MISTAKES = [
    (lambda parent, t, start, end: hash_block(tuple(t[start:end]), parent), _SWAPPED),
    (lambda parent, t, start, end: hash_block(list(t[start:end]), parent), _SWAPPED),
    (lambda parent, t, start, end: hash_block(ROOT_HASH, tuple(t[:end])),  # newcomer 40
     N_("each name hashes the whole prefix from ROOT_HASH: a block's name hashes only its own "
        "tokens, token_ids[start:start + block_size], with the name before it as the parent "
        "(that chain is what stands for the prefix)")),
    (lambda parent, t, start, end: hash_block(parent, tuple(t[:end])),
     N_("the parent is right, but each name hashes the whole prefix: a block's name hashes "
        "only its own tokens, token_ids[start:start + block_size] (its parent's name already "
        "stands for the tokens before them)")),
]


def _show_hashes(value: object) -> str:
    """A list of block names as `BlockKey` shows one (``1d487a7abc78…``), not
    as 32 raw bytes each; anything else as ``repr`` writes it."""
    if not isinstance(value, (list, tuple)):
        return repr(value)
    items = [short_hash(h) if isinstance(h, bytes) else repr(h) for h in value]
    if isinstance(value, tuple):
        return f"({', '.join(items)}{',' if len(items) == 1 else ''})"
    return f"[{', '.join(items)}]"


def _hashes_hint(token_ids: list[int], block_size: int) -> str:
    full, rest = divmod(len(token_ids), block_size)
    if not token_ids:
        return _("no tokens, no block, no name")
    tail = (_(" and {rest} token(s) that do not make a block (no name yet)").format(rest=rest)
            if rest else _(", the last one filled exactly: it is full, so it is named too"))
    return (_("{n} tokens in blocks of {block_size}: {full} full block(s){tail}; each name "
              "chains its parent's (ROOT_HASH for the first)")
              .format(n=len(token_ids), block_size=block_size, full=full, tail=tail))


@cache
def hashes_grid() -> list[Case]:
    """Prompts of no token, one, and one short of, exactly and one past one to three
    blocks, in blocks of 1 to 5 tokens; token ids repeat across blocks (so only the
    chain tells equal blocks apart) and run up to a large vocabulary's ids."""
    def tokens(n: int) -> list[int]:
        return [(7 * i) % 5 if i % 3 else 151_000 + i for i in range(n)]
    return grid_cases(((tokens(n), bs) for bs in range(1, 6)
                       for n in around(0, bs, 2 * bs, 3 * bs, low=0)),
                      _table_hashes, _hashes_hint)


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


#: What `copy_on_write` must do when the last block is shared and no block is free.
RAISES = "raise"


def _cow_by_the_rules(ref_counts: list[int], free_blocks: list[int], table: list[int]):
    """The oracle: ``(returned, (ref_counts, free_blocks, table) after)``, on copies."""
    refs, free, table = list(ref_counts), list(free_blocks), list(table)
    last = table[-1]
    if refs[last] == 1:
        return None, (refs, free, table)
    if not free:
        return RAISES, (refs, free, table)
    new = free.pop(0)
    refs[new], refs[last], table[-1] = 1, refs[last] - 1, new
    return (last, new), (refs, free, table)


def _cow_hint(ref_counts, free_blocks, table) -> str:
    last = table[-1]
    shared = ref_counts[last] > 1
    owner = ((_("the last block ({last}) has ref count {ref_counts}: ")
               .format(last=last, ref_counts=ref_counts[last]))
             + (_("shared, so the write needs a copy") if shared else
                _("this sequence is its sole owner, so it writes in place (return None, change "
                "nothing)")))
    earlier = [b for b in table[:-1] if ref_counts[b] > 1]
    if earlier:
        owner += (_("; block(s) {earlier} earlier in the table are shared but only read")
                   .format(earlier=earlier))
    if not free_blocks:
        pool = (_("no block is free: raise (say MemoryError) and change nothing") if shared else
                _("no block is free, and none is needed: a full pool does not stop a sole "
                "owner's write"))
    else:
        pool = ((_("free blocks {free_blocks}: take the first ({free_blocks2}), not the last")
                  .format(free_blocks=free_blocks, free_blocks2=free_blocks[0]))
                if shared else (_("free blocks {free_blocks} stay free")
                                 .format(free_blocks=free_blocks)))
    return f"{owner}; {pool}"


def _counts(values: object) -> list[int] | None:
    """`values` as a list of plain ints if it is a sequence of counts, else None."""
    if not is_sequence(values) or not all(is_count(v) for v in values):
        return None
    return [int(v) for v in values]


def _cow_mistake(ref_counts, free_blocks, table, got, after) -> str:
    """What `got`, a wrong answer to a pool whose last block is shared and a
    block is free, and the pool `after` the call got wrong: the first of the
    block taken, the table, the two counts, the free list, the return value;
    '' where the answer or the pool is not made of block ids and counts, or
    changed in another way (the case's hint then speaks)."""
    refs, free, new_table = (_counts(part) for part in after)
    pair = _counts(got) if is_sequence(got) else []  # None, a number: no pair returned
    if (refs is None or free is None or new_table is None or pair is None
            or len(refs) != len(ref_counts) or len(new_table) != len(table)):
        return ""
    last, first, n = table[-1], free_blocks[0], ref_counts[table[-1]]
    if new_table[-1] != last and new_table[-1] not in free_blocks:
        return (_("the table's last entry reads {entry}, which is no free block: the copy goes "
                  "to the first free block, {first}").format(entry=new_table[-1], first=first))
    copy = new_table[-1] if new_table[-1] != last else None
    if copy is None and len(pair) == 2 and pair[1] in free_blocks:
        copy = pair[1]  # returned the block it took, left the table
    if copy is None:
        return (_("block {last} has ref count {n}: {others} other sequence(s) read it too, so "
                  "this sequence copies it into the first free block, {first}, and writes there")
                .format(last=last, n=n, others=n - 1, first=first))
    if copy != first:
        taken = (_("the last free block") if copy == free_blocks[-1] else _("block {copy}")
                 .format(copy=copy))
        return (_("{taken} was taken; take the first free block, {first}: free_blocks is a "
                  "queue, taken from its head").format(taken=taken, first=first))
    if new_table[-1] != first:
        return (_("the table's last entry still reads {last}: point it at the copy, {first}")
                .format(last=last, first=first))
    if new_table[:-1] != table[:-1]:
        return _("only the table's last entry changes: the blocks before it are only read")
    if refs[last] != n - 1:
        kept = (_("block {last}'s count went to 1 ({n} -> 1); it drops by one, {n} -> {left}: "
                  "{left} other sequence(s) still read it") if refs[last] == 1 else
                _("block {last}'s count is {got}; this sequence stopped reading it, so it drops "
                  "by one: {n} -> {left}"))
        return kept.format(last=last, n=n, left=n - 1, got=refs[last])
    if refs[first] != 1:
        return (_("the copy, block {first}, has ref count {got}: this sequence alone reads it, "
                  "so 1").format(first=first, got=refs[first]))
    if [r for i, r in enumerate(refs) if i not in (last, first)] != [
            r for i, r in enumerate(ref_counts) if i not in (last, first)]:
        return (_("only blocks {last} and {first} change their counts")
                .format(last=last, first=first))
    if free != list(free_blocks[1:]):
        return (_("free_blocks loses its head, block {first}, and nothing else: {left}")
                .format(first=first, left=list(free_blocks[1:])))
    if pair == [first, last]:
        return (_("the pair is (source, destination): ({last}, {first}), the block copied from "
                  "first").format(last=last, first=first))
    return (_("return (source, destination) = ({last}, {first}): the shared block, then its "
              "copy").format(last=last, first=first))


def _cow_grid():
    """Tables of one to three blocks whose last block is held once, twice or three
    times, earlier blocks shared or not, with no, one, two or three free blocks
    (listed out of id order, so the head of the queue is not the smallest id)."""
    for table, last_refs, earlier_refs, free in product(
            ([2], [0, 2], [3, 0, 2]), (1, 2, 3), (1, 2), ([], [4], [5, 1], [1, 5, 4])):
        refs = [1] * 6
        for b in table[:-1]:
            refs[b] = earlier_refs
        refs[table[-1]] = last_refs
        for b in free:
            refs[b] = 0
        yield refs, free, table


def _cow_cases() -> list[tuple]:
    cases = [(refs, free, table, want, state, _(hint))
             for refs, free, table, want, state, hint in _COW_CASES]
    cases.append(([2, 2], [], [0, 1], RAISES, ([2, 2], [], [0, 1]),
                  _("block 1 is shared and no block is free, so the write cannot be made safe: "
                  "raise an error (say MemoryError) and change nothing")))
    seen = {repr(c[:3]) for c in cases}
    for refs, free, table in _cow_grid():
        if repr((refs, free, table)) not in seen:
            want, state = _cow_by_the_rules(refs, free, table)
            cases.append((refs, free, table, want, state, _cow_hint(refs, free, table)))
    return cases


@in_stub_order
def check_copy_on_write(fn: Callable) -> CheckResult:
    """`copy_on_write(ref_counts, free_blocks, table)` updates a tiny pool in place:
    the lab's cases, then every small pool around the boundaries (`_cow_grid`):
    sole owner or shared, full pool or not."""
    name = "copy_on_write"
    require_function(name, fn)
    cases = _cow_cases()
    returning = [Case(case[:3], case[3]) for case in cases if case[3] is not RAISES]
    for ref_counts, free_blocks, table, want, (want_refs, want_free, want_table), hint in cases:
        args = fresh((ref_counts, free_blocks, table))  # the pool it changes, read after
        call = f"{function_name(fn, name)}({ref_counts}, {free_blocks}, {table})"
        if want is RAISES:
            try:
                got = fn(*args)
            except NotImplementedError as err:
                return not_written(name, fn, err)
            except Exception:
                if not same_items(args, (ref_counts, free_blocks, table)):
                    return CheckResult(name, False, _("{call} raised, but changed the pool first: "
                                                      "ref_counts={ref_counts}, table={table}.  "
                                                      "Hint: check for a free block before "
                                                      "touching anything")
                                       .format(call=call, ref_counts=args[0], table=args[2]))
                continue
            if (ref_counts, free_blocks, table) == ([2, 2], [], [0, 1]):  # the lab's own case
                return CheckResult(name, False, _("{call} returned {got!r}: block 1 is shared and "
                                                  "no block is free, so the write cannot be made "
                                                  "safe.  Hint: raise an error (say MemoryError) "
                                                  "and change nothing").format(call=call, got=got))
            return CheckResult(name, False, (_("{call} returned {got!r}, expected it to raise "
                                              "an error and change nothing.  Hint: {hint}")
                                              .format(call=call, got=got, hint=hint)))
        elsewhere = (c for c in returning if c.args != (ref_counts, free_blocks, table))
        got, failed = call_learner(name, fn, call, *args, expected=want, hint=hint,
                                   elsewhere=elsewhere)
        if failed is not None:
            return failed
        if want is not None and (not same_items(got, want)
                                 or not same_items(args, (want_refs, want_free, want_table))):
            hint = _cow_mistake(ref_counts, free_blocks, table, got, args) or hint
        if not same_items(got, want):
            return wrong_answer(name, call, got, want, hint, none_is_an_answer=True)
        if not same_items(args, (want_refs, want_free, want_table)):
            return CheckResult(
                name, False,
                _("after {call}: ref_counts={got_refs}, free_blocks={got_free}, "
                  "table={got_table}; expected ref_counts={want_refs}, free_blocks={want_free}, "
                  "table={want_table}.  Hint: {hint}")
                .format(call=call, got_refs=args[0], got_free=args[1], got_table=args[2],
                        want_refs=want_refs, want_free=want_free, want_table=want_table,
                        hint=hint))
    return CheckResult(name, True, _("all {n} cases pass").format(n=len(cases)))


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


@in_stub_order
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
    return check_function("sharing_blocks", fn, cases + sharing_grid(), diagnose=_pair_order)


def _pair_order(_fn: Callable, case: Case, got: object) -> str:
    """Newcomer 35 returned (shared, alone) and was told the case's story."""
    want = case.expected
    if isinstance(got, (list, tuple)) and len(got) == 2 and want[0] != want[1] \
            and same_items(list(got), [want[1], want[0]]):
        return (_("the pair is (alone, shared): {alone} blocks without sharing first, then "
                  "{shared} with it; yours has them the other way round")
                .format(alone=want[0], shared=want[1]))
    return ""


def _sharing_hint(prompt_len: int, output_lens: list[int], block_size: int) -> str:
    full, rest = divmod(prompt_len, block_size)
    writers = sum(1 for o in output_lens if o)
    prompt = ((_("the prompt fills exactly {full} block(s): no partial block to copy")
                .format(full=full)) if not rest
              else (_("the prompt's last block holds {rest} of {block_size} tokens")
                     .format(rest=rest, block_size=block_size)))
    return (_("{prompt}; {writers} of {n} sample(s) wrote, each into blocks of its own past "
              "the shared full ones; the original partial block stays while a sample that has "
              "not written reads it (the last writer to copy leaves it to them, or writes into "
              "it itself when nobody else holds it)")
              .format(prompt=prompt, writers=writers, n=len(output_lens)))


@cache
def sharing_grid() -> list[Case]:
    """One to three samples of no token, one, a block, or one past it, after a prompt
    one short of, exactly and one past one and two blocks, in blocks of 1, 2 and 4."""
    return grid_cases(((p, list(outs), bs) for bs in (1, 2, 4)
                       for p in around(bs, 2 * bs, low=1)
                       for k in (1, 2, 3) for outs in product((0, 1, bs, bs + 1), repeat=k)),
                      _blocks_by_pagedkit, _sharing_hint)


CHECKS = {
    "chain_hashes": check_chain_hashes,
    "copy_on_write": check_copy_on_write,
    "sharing_blocks": check_sharing_blocks,
}
