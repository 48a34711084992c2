"""Newcomer 31, N4: lab 06's choose_victims and lab 07's copy_on_write chose
their hint per case, not per mistake. Now a wrong answer's hint names what
it got wrong. Enumerated: every case of each check's grid, each kind of
mistake made from the right answer there."""

from fractions import Fraction

import pytest

import pagedkit
from pagedkit.exercises import lab06, lab07

from .wrong_answers import WRONG

VICTIM_CASES = lab06.VICTIM_CASES + lab06.victims_grid()


def victims_hint(case, got):
    return lab06._victims_mistake(None, case, got)


def unserved_ids(case):
    return [rid for rid, _need, _held in case.args[0]]


def test_each_wrong_list_of_victims_is_told_where_it_parts_from_the_walk():
    for case in VICTIM_CASES:
        wrong_lists_are_told(case)


def wrong_lists_are_told(case):
    want = case.expected
    for k, victim in enumerate(want):  # stopping early, after each right victim
        hint = victims_hint(case, want[:k])
        assert hint.endswith(f"your answer stops before {victim}"), hint
        for other in unserved_ids(case):  # another victim in its place
            if other not in want:
                hint = victims_hint(case, [*want[:k], other, *want[k + 1:]])
                assert f"{victim}" in hint and f", not {other}: " in hint, hint
    for extra in set(unserved_ids(case)) - set(want):  # one victim too many
        hint = victims_hint(case, [*want, extra])
        assert f"nobody else needs to be preempted, so {extra} stays" in hint, hint
    if want:  # one listed twice, one not running
        assert victims_hint(case, [*want, want[0]]) == (
            f"{want[0]!r} is listed twice: a request is preempted once")
    assert victims_hint(case, [*want[:1], "Z"]).startswith("'Z' is not running")


def shared_pools():
    """Every pool of copy_on_write's grid whose last block is shared, with a
    block free: where a copy is made."""
    for refs, free, table, want, state, _hint in lab07._cow_cases():
        if want not in (None, lab07.RAISES):
            yield refs, free, table, want, state


def mistakes(refs, free, table, want, state):
    """(the learner's return, the pool after it, a phrase its hint must hold)
    for each mistake that can be made in this pool."""
    (old, new), (w_refs, w_free, w_table) = want, state
    n = refs[old]

    def pool(refs=w_refs, free=w_free, table=w_table):
        return list(refs), list(free), list(table)

    yield None, pool(refs, free, table), f"copies it into the first free block, {new}"
    if len(free) > 1:
        last = free[-1]
        r = list(w_refs)
        r[new], r[last] = 0, 1
        yield (old, last), pool(r, free[:-1], [*table[:-1], last]), "the last free block was taken"
    yield (old, new), pool(table=table), f"the table's last entry still reads {old}"
    if n > 2:
        yield (old, new), pool([1 if i == old else c for i, c in enumerate(w_refs)]), \
            f"count went to 1 ({n} -> 1)"
    yield (old, new), pool([n if i == old else c for i, c in enumerate(w_refs)]), \
        f"block {old}'s count is {n}"
    yield (old, new), pool([2 if i == new else c for i, c in enumerate(w_refs)]), \
        f"the copy, block {new}, has ref count 2"
    yield (old, new), pool(free=free), f"free_blocks loses its head, block {new}"
    yield (new, old), pool(), f"({old}, {new}), the block copied from first"
    yield old, pool(), f"return (source, destination) = ({old}, {new})"


def test_each_copy_on_write_mistake_is_named():
    pools = list(shared_pools())
    assert len(pools) >= 38  # the grid: tables of 1-3 blocks, 2 or 3 sharers, 1-3 free
    for refs, free, table, want, state in pools:
        for got, after, phrase in mistakes(refs, free, table, want, state):
            hint = lab07._cow_mistake(refs, free, table, got, after)
            assert phrase in hint, (refs, free, table, got, after, hint)


@pytest.mark.parametrize("language", ["en", "zh-CN"])
@pytest.mark.parametrize("wrong", WRONG[("lab06", "choose_victims")] + WRONG[("lab07",
                                                                            "copy_on_write")],
                         ids=lambda f: f.__name__)
def test_the_catalogued_wrong_answers_fail_with_a_whole_hint(wrong, language):
    check = (lab06.check_choose_victims if wrong in WRONG[("lab06", "choose_victims")]
             else lab07.check_copy_on_write)
    pagedkit.set_language(language)
    try:
        result = check(wrong)
    finally:
        pagedkit.set_language("en")
    assert not result.passed
    assert ("Hint:" in result.message or "提示" in result.message), result.message
    assert "{" not in result.message.split("Hint:")[-1], result.message
    _a_sentence_ends_before_the_hint(result.message)


def _a_sentence_ends_before_the_hint(message: str) -> None:
    """The verdict before "  Hint:" ends as a sentence does (the last
    newcomer read "... from the expected values  Hint: ...")."""
    for marker in ("  Hint:", "  提示："):
        if marker in message:
            verdict = message.split(marker)[0].rstrip()
            assert verdict.endswith((".", "。", "?", "？", "!", "！")), message


def test_a_catalogued_mistake_is_named_not_the_case():
    """Two of the catalogue's: the old block's count set to 1 (right only for
    two sharers) and the last free block taken."""
    message = lab07.check_copy_on_write(WRONG[("lab07", "copy_on_write")][0]).message
    assert "the last free block was taken" in message, message
    sets_one = next(w for w in WRONG[("lab07", "copy_on_write")]
                    if w.__name__ == "cow_sets_the_old_block_to_one")
    assert "count went to 1 (3 -> 1)" in lab07.check_copy_on_write(sets_one).message


def test_each_wrong_admission_is_told_where_it_parts_from_the_walk():
    """Lab 05's admit, as the build track holds a plugged-in one on every call
    (`lab05.admit_mistake`) and as its check tells a grid case: newcomer 32
    was told first come, first served where no seat was left."""
    from pagedkit.exercises import lab05

    fcfs = "first come, first served"
    parting = lab05._admit_parting  # admit_mistake's text, unless the answer is the other
    #                                   chunked mode's (which it names first)

    for case in lab05.admit_grid():
        args, kw = case.args, case.kwargs
        waiting = args[0]
        want, why, head_stopped = lab05._admit_walk(*args, **kw)
        assert (fcfs in lab05._admit_hint(*args, **kw)) == head_stopped, case
        for k, (rid, take) in enumerate(want):
            hint = parting(want[:k], *args, **kw)
            assert hint.endswith("your answer stops before it") and repr(rid) in hint, hint
            assert (f"({take} token," in hint) == (take == 1), hint
            hint = parting([*want[:k], (rid, take + 1), *want[k + 1:]], *args, **kw)
            tokens = "token" if take == 1 else "tokens"  # "'a' takes 1 tokens" no more
            assert f"{rid!r} takes {take} {tokens} (" in hint, hint
        if len(want) < len(waiting):
            rid = waiting[len(want)][0]  # the head the walk stops at, admitted anyway
            hint = parting([*want, (rid, waiting[len(want)][1])], *args, **kw)
            assert why in hint and (fcfs in hint) == False, hint  # noqa: E712
            if len(want) + 1 < len(waiting):  # one behind the head, taken past it
                behind = waiting[len(want) + 1][0]
                hint = parting([*want, (behind, 1)], *args, **kw)
                assert why in hint and (fcfs in hint) == head_stopped, hint


@pytest.mark.parametrize("language", ["en", "zh-CN"])
def test_attention_over_the_whole_padded_table_is_told_the_table_is_padded(language):
    """Newcomer 32: lab 04's gather_kv told a whole-table read that the table
    is padded; paged_decode_attention, for the same mistake, only showed the
    IndexError."""
    from pagedkit.exercises import lab04

    def whole_table(query, k_cache, v_cache, block_table, context_len):
        keys = k_cache[block_table].reshape(-1, *k_cache.shape[2:])[:context_len]
        return query + 0 * keys.sum()

    pagedkit.set_language(language)
    try:
        message = lab04.check_paged_decode_attention(whole_table).message
        padded = lab04._padding_hint(IndexError(), "context_len")
    finally:
        pagedkit.set_language("en")
    assert "IndexError" in message and padded in message and "ceil(context_len /" in padded


def test_odd_answers_get_a_verdict_not_an_exception():
    """The reviewer's: arrays, tensors and floats where ids and counts are
    expected reached comparisons that raise (numpy's ambiguous truth value);
    each check gives a verdict instead."""
    import numpy as np
    import torch

    from pagedkit.exercises import lab05

    def cow(kind):
        def copy_on_write(refs, free, table):
            if refs[table[-1]] == 1:
                return None
            new = free.pop(0)
            refs[new], refs[table[-1]], old, table[-1] = 1, refs[table[-1]] - 1, table[-1], new
            if kind == "table":
                table[-1] = np.array([new, 1])
                return old, new
            return kind(np.array([old])), kind(np.array([new]))
        return copy_on_write

    for kind in (np.asarray, torch.as_tensor, "table"):
        assert not lab07.check_copy_on_write(cow(kind)).passed
    assert not lab06.check_choose_victims(lambda r, f: [np.array([1, 2])] * len(r)).passed

    def floats(*args, **kwargs):
        return [[r, float(n)] for r, n in lab05._admit_oracle(*args, **kwargs)]

    assert "(float)" in lab05.check_admit(floats).message
    assert lab05.admit_mistake([["a", 1.0]], [("a", 1)], 1, 1, 1, 1)  # a sentence, no IndexError
    assert lab05.admit_mistake([("zz", 1)], [], 1, 1, 1, 1) == (
        "'zz' is not waiting (the queue: empty)")
    assert lab05.admit_mistake([("a", 1), ("a", 1)], [("a", 1)], 5, 3, 5, 1) == (
        "'a' is listed twice: a request is admitted once a step")
    assert "'c': requests are admitted in queue order" in lab05.admit_mistake(
        [("c", 2)], [("a", 5), ("b", 20), ("c", 2)], 12, 8, 10, 4)


def test_a_copy_into_a_block_that_is_not_free_is_named():
    hint = lab07._cow_mistake([2, 2, 0, 0, 0], [3, 2, 4], [0, 1], (1, 51),
                              ([2, 1, 0, 0, 0], [3, 2, 4], [0, 51]))
    assert hint.startswith("the table's last entry reads 51, which is no free block"), hint


def _decode(scale=None, softmax_over_heads=False, drop_last=False, kv_head_0=False):
    """Lab 04's paged_decode_attention with one of newcomer 33's mistakes."""
    import math

    from pagedkit.kernels.reference import gather_kv

    def paged_decode_attention(query, k_cache, v_cache, block_table, context_len):
        n = context_len - 1 if drop_last else context_len
        k, v = gather_kv(k_cache, block_table, n), gather_kv(v_cache, block_table, n)
        hq, d = query.shape
        if kv_head_0:
            k, v = k[:, :1].expand(-1, hq, -1), v[:, :1].expand(-1, hq, -1)
        else:
            group = hq // k.shape[1]
            k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
        scores = (query[None] * k).sum(-1).T * (scale(d) if scale else 1 / math.sqrt(d))
        weights = scores.softmax(0 if softmax_over_heads else -1)
        return (weights[..., None] * v.transpose(0, 1)).sum(1)
    return paged_decode_attention


@pytest.mark.parametrize("mistake, advice", [
    (dict(), None),
    (dict(scale=lambda d: 1.0), "scale the scores by 1 / sqrt(head_dim) before the softmax"),
    (dict(scale=lambda d: 1.0 / d), "scale the scores by 1 / sqrt(head_dim), not 1 / head_dim"),
    (dict(softmax_over_heads=True), "take the softmax over the tokens"),
    (dict(drop_last=True), "attend to all context_len cached tokens, not context_len - 1"),
    (dict(kv_head_0=True), "query head h reads KV head h // (num_q_heads // num_kv_heads), not "
                           "KV head 0"),
])
def test_lab04_decode_mistakes_are_named(mistake, advice):
    """Newcomer 33: four of ten wrong attentions got the generic recipe."""
    from pagedkit.exercises import lab04

    result = lab04.check_paged_decode_attention(_decode(**mistake))
    assert result.passed == (advice is None), result.message
    if advice:
        assert f"Hint: {advice}" in result.message, result.message
        _a_sentence_ends_before_the_hint(result.message)


@pytest.mark.parametrize("language", ["en", "zh-CN"])
def test_a_wrong_gather_and_a_wrong_decode_end_their_verdict_before_the_hint(language):
    """Lab 04's value mismatches: "... from the expected values.  Hint: ...",
    with the case's label or without."""
    from pagedkit.exercises import lab04

    def gather_reversed(k_cache, block_table, num_tokens):  # its blocks in reverse order
        used = block_table[:-(-num_tokens // k_cache.shape[1])].flip(0)
        return k_cache[used].reshape(-1, *k_cache.shape[2:])[:num_tokens]

    pagedkit.set_language(language)
    try:
        messages = [lab04.check_gather_kv(gather_reversed).message,
                    lab04.check_paged_decode_attention(_decode(drop_last=True)).message,
                    lab04.check_paged_decode_attention(_decode(scale=lambda d: 2.0)).message]
    finally:
        pagedkit.set_language("en")
    for message in messages:
        assert "Hint:" in message or "提示：" in message, message
        _a_sentence_ends_before_the_hint(message)


@pytest.mark.parametrize("wrong, named", [
    (lambda n, b: -(-b // n), "block_size divided by num_tokens"),   # swapped, rounded up
    (lambda n, b: b // n, "block_size divided by num_tokens"),       # swapped, rounded down
    (lambda n, b: n // b, "round up, not down"),                     # the classic slip
    (lambda n, b: round(n / b), "round up, not down"),
])
def test_lab00_swapped_arguments_are_named_not_told_to_round_up(wrong, named):
    """Newcomer 34: blocks_for with its arguments swapped (it rounded up) was
    told to round up, not down; 4 // 5 and ceil(4 / 5) are both 1, so the
    hint asks the function once more."""
    from pagedkit.exercises import lab00

    message = lab00.check_blocks_for(wrong).message
    assert named in message, message
    assert ("round up" in message) == (named == "round up, not down"), message


@pytest.mark.parametrize("wrong, named", [
    (lambda p, n: p * n, "every step reads the prompt's 5 positions alone"),
    (lambda p, n: p * (n - 1), "every step reads the prompt's 5 positions alone"),
    (lambda p, n: p, "one new token comes from the prefill alone"),
    (lambda p, n: sum(range(p, p + n)), "one new token comes from the prefill alone"),
])
def test_lab01_a_product_of_prompt_and_steps_is_named(wrong, named):
    """Newcomer 34: p * n was told the first case's story (the prefill), not
    that it reads the prompt alone at every step."""
    from pagedkit.exercises import lab01

    message = lab01.check_cached_kv_reads(wrong).message
    assert named in message, message


# ------------------------------------------------------------ newcomer 35
def _solution(module: str):
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "labs" / "solutions" / f"{module}.py"
    spec = importlib.util.spec_from_file_location(module, path)
    loaded = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loaded)
    return loaded


def _ceil(a, b):
    return -(-a // b)


@pytest.mark.parametrize("wrong, named", [
    (lambda n, k, bs: (n + k) // bs - n // bs, "rounds down"),
    (lambda n, k, bs: round((n + k) / bs) - round(n / bs), "rounds down"),  # as // on each
    (lambda n, k, bs: _ceil(n + k, bs), "counts every block the sequence holds after"),
    (lambda n, k, bs: _ceil(k, bs), "counts blocks for the new tokens alone"),
    (lambda n, k, bs: 1 if n == 0 else (n + k) // bs - n // bs, "2 blocks of 4 (round up)"),
])
def test_lab03_blocks_needed_names_the_formula_a_function_follows(wrong, named):
    """Newcomer 35: four formulas were told the first case's story (an empty
    sequence), or the room left in the last block."""
    from pagedkit.exercises import lab03

    message = lab03.check_blocks_needed(wrong).message
    assert named in message, message


def test_lab03_append_slots_refusing_exactly_enough_is_told_so():
    from pagedkit.exercises import lab03

    reference = _solution("lab03_paging").append_slots

    def ge_for_gt(block_table, num_tokens, num_new_tokens, block_size, free_blocks):
        needed = _ceil(num_tokens + num_new_tokens, block_size) - len(block_table)
        if needed >= len(free_blocks) and needed:
            return None
        return reference(block_table, num_tokens, num_new_tokens, block_size, free_blocks)

    message = lab03.check_append_slots(ge_for_gt).message
    assert "exactly enough is enough" in message and "(>, not >=)" in message, message


@pytest.mark.parametrize("mistake, named", [
    (dict(tokens=lambda t: t[0] if t else 0), "sum them, not the first sequence's alone"),
    (dict(fits=int.__lt__), "blocks <= free_cpu_blocks, not <"),
    (dict(distinct=False), "count distinct block ids"),
    (dict(both_ways=1), "out now and back in later"),
    (dict(cheaper=Fraction.__le__), "strictly cheaper"),
])
def test_lab06_preemption_mode_names_the_mistake_a_function_makes(mistake, named):
    """Newcomer 35: summing the first sequence's tokens alone and `<` for `<=`
    were both told to count distinct block ids."""
    from pagedkit.exercises import lab06

    assert lab06.check_preemption_mode(lab06._mode).passed  # the rule the mistakes vary
    assert lab06.check_preemption_mode(_solution("lab06_preemption").preemption_mode).passed
    message = lab06.check_preemption_mode(lambda *a: lab06._mode(*a, **mistake)).message
    assert named in message, message
    for other in ("sum them", "not <", "count distinct", "back in later", "strictly cheaper"):
        assert (other in message) == (other in named), message


def test_shape_mistakes_are_named_admit_ids_victim_entries_and_a_swapped_pair():
    """Newcomer 35: ids without their tokens (lab 05), (id, need, held)
    entries for ids (lab 06: "is not running") and (shared, alone) for
    (alone, shared) (lab 07) were told a case's story."""
    from pagedkit.exercises import lab05, lab06, lab07

    s5, s6, s7 = (_solution(m) for m in ("lab05_continuous_batching", "lab06_preemption",
                                         "lab07_sharing"))
    message = lab05.check_admit(lambda *a, **k: [r for r, _n in s5.admit(*a, **k)]).message
    assert "return a (request_id, tokens) pair for each admitted request" in message, message
    message = lab06.check_choose_victims(
        lambda running, free: [e for e in running if e[0] in s6.choose_victims(running, free)]
    ).message
    assert "return the ids of the requests to preempt" in message, message
    assert "is not running" not in message
    message = lab07.check_sharing_blocks(lambda *a: tuple(reversed(s7.sharing_blocks(*a)))
                                         ).message
    assert "the pair is (alone, shared)" in message, message


def test_lab07_chain_hashes_mistakes_are_named():
    """Newcomer 35: Python's hash(), hash_block's arguments swapped and the
    last full block left out were all told "its parent is ROOT_HASH"."""
    from pagedkit.exercises import lab07
    from pagedkit.memory.block_hash import ROOT_HASH, hash_block

    def chain(token_ids, block_size, name, stop=0):
        names, parent = [], ROOT_HASH
        for start in range(0, len(token_ids) - block_size + 1 - stop, block_size):
            parent = name(parent, tuple(token_ids[start:start + block_size]))
            names.append(parent)
        return names

    assert lab07.check_chain_hashes(lambda t, b: chain(t, b, hash_block)).passed
    for wrong, named in [
        (lambda t, b: chain(t, b, lambda p, blk: hash((p, blk))), "Python's hash()"),
        (lambda t, b: chain(t, b, lambda p, blk: hash_block(blk, p)),
         "hash_block takes the parent's name first"),
        (lambda t, b: chain(t, b, hash_block, stop=1), "the last full block is named too"),
    ]:
        message = lab07.check_chain_hashes(wrong).message
        assert named in message, message


def test_a_mass_that_reads_as_top_p_is_shown_with_the_digits_that_tell_them_apart():
    from pagedkit.exercises import lab08

    assert lab08._apart(0.89997, 0.9) == "0.89997"
    assert lab08._apart(0.8337, 0.9) == "0.8337"
    assert lab08._apart(0.9, 0.9) == "0.9"
    assert float(lab08._apart(0.9 - 2 ** -40, 0.9)) != 0.9
