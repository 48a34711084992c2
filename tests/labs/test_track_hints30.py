"""Newcomer 30, N5, N7 and N8: a track verdict says the mistake, not only a
symptom or another mistake's hint.

- N7: an append_slots without the all-or-nothing test raised in the probe
  with a bare "raised IndexError"; a `>=` for `>` (or a fixed block size) was
  told to "count the room left in the last block" of an empty table.
- N5: top_p answers with 0, probabilities, a mask or a list where -inf
  belongs, or changed kept logits, were told about the lab's tie (>= not >);
  the hint now is lab 08's `_top_p_mistake` (one rule, in lab 08).
- N8: min(free) in append_slots and a (dst, src) pair from copy_on_write
  gave only differing block tables / "block in use".
Each wrong piece is plugged in alone, both languages."""

import re

import pytest
import torch

from pagedkit.exercises import track
from pagedkit.i18n import _, ngettext

from .test_track_types import R


def _pieces_of(msgid: str | tuple[str, str]) -> list[str]:
    """The translated message's literal pieces (between its placeholders); of a
    (singular, plural) pair, those both forms have."""
    if isinstance(msgid, tuple):
        plural = _pieces_of(ngettext(*msgid, 2))
        return [p for p in _pieces_of(ngettext(*msgid, 1)) if p in plural]
    return [p for p in re.split(r"\{[^}]*\}", _(msgid)) if len(p.strip()) > 3]


def _blocks_needed(num_tokens, n, bs):
    return -(-(num_tokens + n) // bs) - -(-num_tokens // bs)


# ------------------------------------------------------------- append_slots
def append_pops_until_empty(block_table, num_tokens, n, bs, free):  # no all-or-nothing test
    slots = []
    for p in range(num_tokens, num_tokens + n):
        if p % bs == 0:
            block_table.append(free.pop(0))
        slots.append(block_table[p // bs] * bs + p % bs)
    return slots


def append_ge_for_gt(block_table, num_tokens, n, bs, free):
    if _blocks_needed(num_tokens, n, bs) >= len(free):
        return None
    return R.append_slots(block_table, num_tokens, n, bs, free)


def append_ignores_room(block_table, num_tokens, n, bs, free):  # ceil(n / bs) new blocks
    if -(-n // bs) > len(free):
        return None
    return R.append_slots(block_table, num_tokens, n, bs, free)


def append_never_fits(block_table, num_tokens, n, bs, free):
    if len(free) < (num_tokens + n) * bs:  # slots counted as blocks
        return None
    return R.append_slots(block_table, num_tokens, n, bs, free)


REFUSED = ("returned None for {count} token of sequence {seq} (table {table}, {num_tokens} "
           "tokens) with {n} free blocks, exactly the {needed} it needs: {why}",
           "returned None for {count} tokens of sequence {seq} (table {table}, {num_tokens} "
           "tokens) with {n} free blocks, exactly the {needed} it needs: {why}")


def append_fixed_block_size(block_table, num_tokens, n, bs, free):
    return R.append_slots(block_table, num_tokens, n, 4, free)


def append_smallest_free(block_table, num_tokens, n, bs, free):
    if _blocks_needed(num_tokens, n, bs) > len(free):
        return None
    slots = []
    for p in range(num_tokens, num_tokens + n):
        if p % bs == 0:
            b = min(free)
            free.remove(b)
            block_table.append(b)
        slots.append(block_table[p // bs] * bs + p % bs)
    return slots


def append_largest_free(block_table, num_tokens, n, bs, free):
    if _blocks_needed(num_tokens, n, bs) > len(free):
        return None
    slots = []
    for p in range(num_tokens, num_tokens + n):
        if p % bs == 0:
            block_table.append(free.pop())
        slots.append(block_table[p // bs] * bs + p % bs)
    return slots


def cow_dst_src(ref_counts, free_blocks, table):
    got = R.copy_on_write(ref_counts, free_blocks, table)
    return None if got is None else (got[1], got[0])


# -------------------------------------------------------------- top_p_filter
def top_p_zero(logits, top_p):
    out = R.top_p_filter(logits, top_p)
    out[torch.isinf(out)] = 0.0
    return out


def top_p_large_negative(logits, top_p):
    out = R.top_p_filter(logits, top_p)
    out[torch.isinf(out)] = -1e9
    return out


def top_p_probabilities(logits, top_p):
    return R.top_p_filter(logits, top_p).softmax(-1)


def top_p_mask(logits, top_p):
    return ~torch.isinf(R.top_p_filter(logits, top_p))


def top_p_list(logits, top_p):
    return R.top_p_filter(logits, top_p).tolist()


def top_p_log_softmax(logits, top_p):
    return R.top_p_filter(logits, top_p).log_softmax(-1)


def top_p_gt_for_ge(logits, top_p):  # keeps the token the tie reaches
    values, order = torch.sort(logits, descending=True)
    probs = values.softmax(-1)
    out = logits.clone()
    out[order[probs.cumsum(-1) - probs > top_p]] = float("-inf")
    return out


TIE = "the lab's tie (the mass before the third token is exactly top_p)"
CASES = {  # name: (piece, fn, scenarios, messages the verdict holds, words it must not hold)
    "append_pops_until_empty": (
        "append_slots", append_pops_until_empty, ["recompute"],
        ["raised {name}: {err}",
         "with {n} free blocks for {count} tokens of sequence {seq} that need {needed} (table "
         "{table}, {num_tokens} tokens) {message}: an append that does not fit returns None and "
         "changes nothing (check before popping)"], []),
    # newcomer 33: each refusal of exactly enough is told its own mistake, not
    # the >= sentence beside a guess at another
    "append_ge_for_gt": (
        "append_slots", append_ge_for_gt, ["recompute"],
        [REFUSED, "exactly enough is enough (refuse only when more blocks are needed than are "
                  "free: >, not >=)"], ["the last block", "block_size argument"]),
    "append_fixed_block_size": (
        "append_slots", append_fixed_block_size, ["pair"],
        [REFUSED, "it takes them only with {fewest} free blocks, but {count} tokens after "
                  "{num_tokens} in blocks of block_size={size} need {needed}: count them from "
                  "the block_size argument"], ["the last block", ">="]),
    "append_ignores_room": (
        "append_slots", append_ignores_room, ["recompute"],
        [REFUSED, "the last block still has room for {room} tokens: count it"],
        [">=", "block_size argument"]),
    "append_never_fits": (
        "append_slots", append_never_fits, ["recompute"],
        [REFUSED, "it returns None with {plenty} free blocks too: an append refuses only when "
                  "more blocks are needed than are free"], [">=", "block_size argument"]),
    "append_smallest_free": (
        "append_slots", append_smallest_free, ["recompute"],
        ["took blocks {taken} for sequence {seq} from the free list {free}: take them from its "
         "front, in order (free_blocks.pop(0)), as the pool does"], []),
    "append_largest_free": (
        "append_slots", append_largest_free, ["recompute"],
        ["took blocks {taken} for sequence {seq} from the free list {free}: take them from its "
         "front, in order (free_blocks.pop(0)), as the pool does"], []),
    "cow_dst_src": (
        "copy_on_write", cow_dst_src, ["recompute"],
        ["for sequence {seq}'s shared last block {last} returned {got!r}: the pair is (src, "
         "dst), the shared block first, then its copy"], ["in use"]),
    "top_p_zero": (
        "top_p_filter", top_p_zero, ["sampling"],
        [TIE, "a dropped token must be -inf, not {value}: any other value is a logit that can "
         "still be sampled"], [">="]),
    "top_p_large_negative": (
        "top_p_filter", top_p_large_negative, ["sampling"],
        [TIE, "a dropped token must be -inf, not {value}: any other value is a logit that can "
         "still be sampled"], [">="]),
    "top_p_probabilities": (
        "top_p_filter", top_p_probabilities, ["sampling"],
        [TIE, "these are probabilities (they sum to 1), not logits: return the logits, with "
         "-inf where a token is dropped"], [">="]),
    "top_p_mask": (
        "top_p_filter", top_p_mask, ["sampling"],
        [TIE, "this is a mask (True where a token is kept), not logits: return the logits, "
         "with -inf where a token is dropped"], [">="]),
    "top_p_list": (
        "top_p_filter", top_p_list, ["sampling"],
        [TIE, "return a torch tensor, like the logits you were given (got {type})"],
        [">=", "kept"]),
    "top_p_log_softmax": (
        "top_p_filter", top_p_log_softmax, ["sampling"],
        [TIE, "the kept tokens' logits changed: keep them as they were, and set only the "
         "dropped ones to -inf"], [">="]),
    "top_p_gt_for_ge": (  # the one mistake the tie is about: it still says so
        "top_p_filter", top_p_gt_for_ge, ["sampling"],
        [TIE, "token {token} (logit {logit:.2f}) is kept, but the tokens more likely than it "
         "already hold exactly top_p = {top_p} of the probability, and reaching top_p is "
         "enough: drop it (>=, not >)"], []),
}


# ------------------------------------------------------------------ admit (N8)
def admit_lifo(waiting, tokens_left, seats_left, free_blocks, block_size, chunked=False):
    return R.admit(list(reversed(waiting)), tokens_left, seats_left, free_blocks, block_size,
                   chunked)


def admit_skips_the_head(waiting, tokens_left, seats_left, free_blocks, block_size,
                         chunked=False):
    return R.admit(list(waiting[1:]), tokens_left, seats_left, free_blocks, block_size, chunked)


FCFS = ("admitted {ids} from the waiting list {order}: first come, first served: admit from its "
        "head, in order, and stop at the first request that does not fit")
CASES["admit_lifo"] = ("admit", admit_lifo, ["recompute"], [FCFS], ["block tables"])
CASES["admit_skips_the_head"] = ("admit", admit_skips_the_head, ["recompute"], [FCFS],
                                 ["block tables"])


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_verdict_names_the_mistake(name, language):
    piece, fn, scenarios, messages, absent = CASES[name]
    run = track.check(track.Pieces(**{piece: fn}), scenarios=scenarios, log=lambda _: None)
    assert not run.passed
    div = run.divergence
    assert div.pieces == [piece], (name, div)
    for msgid in messages:
        for part in _pieces_of(msgid):
            assert part in div.what, (name, part, div.what)
    if language == "en":
        for word in absent:
            assert word not in div.what, (name, word, div.what)
    else:  # the new messages are translated
        for msgid in messages:
            assert (ngettext(*msgid, 2) != msgid[1] if isinstance(msgid, tuple)
                    else _(msgid) != msgid), msgid
