"""The track holds each call of a plugged-in piece to the rule on the inputs it
got. `admit` is held to lab 05's rule on every call (newcomer 30's
leftover): an `admit` that ignores ``chunked`` was told only "the sequences
scheduled: [] in your engine, [0] in pagedkit's"; now the call, lab 05's
answer and the mistake are named (`lab05.admit_mistake`).

The rule is checked over lab 05's whole grid of small queues first, then in
the engine: each wrong admit plugged in alone, and in `track.check`. Last,
lab 04's attention that changes its arguments in place (newcomer 31, N1), and
lab 07's copy-on-write right only for two sharers (N3)."""

import pytest

from pagedkit.exercises import lab05, track
from pagedkit.i18n import _

from .test_track_hints30 import _pieces_of
from .test_track_types import R
from .wrong_answers import cow_sets_the_old_block_to_one

NO_CHUNKS = ("that is the answer without chunked prefill: with chunked=True a prompt longer "
             "than the budget left does not wait, it takes what the budget allows (its first "
             "chunk)")
ALWAYS_CHUNKS = ("that is the answer with chunked prefill: with chunked=False a prompt is "
                 "scheduled whole, and one longer than the budget left waits")


def admit_ignores_chunked(waiting, tokens_left, seats_left, free_blocks, block_size,
                          chunked=False):
    return R.admit(waiting, tokens_left, seats_left, free_blocks, block_size, False)


def admit_always_chunks(waiting, tokens_left, seats_left, free_blocks, block_size,
                        chunked=False):
    return R.admit(waiting, tokens_left, seats_left, free_blocks, block_size, True)


def test_admit_mistake_over_lab_05s_grid():
    """Every small queue of lab 05's grid: its answer passes; the answer of the
    other ``chunked`` is named as such where it differs; any other wrong answer
    (one admission dropped) gets the walk's hint, never the chunked one."""
    named = 0
    for case in lab05.admit_grid():
        waiting, tokens, seats, blocks, bs = case.args
        chunked = case.kwargs["chunked"]
        want = lab05._admit_oracle(waiting, tokens, seats, blocks, bs, chunked)
        assert lab05.admit_mistake(want, waiting, tokens, seats, blocks, bs, chunked) == ""
        other = lab05._admit_oracle(waiting, tokens, seats, blocks, bs, not chunked)
        if other != want:
            named += 1
            assert lab05.admit_mistake(other, waiting, tokens, seats, blocks, bs, chunked) \
                == _(NO_CHUNKS if chunked else ALWAYS_CHUNKS)
        if want and want[:-1] != other:
            why = lab05.admit_mistake(want[:-1], waiting, tokens, seats, blocks, bs, chunked)
            assert why and why not in (_(NO_CHUNKS), _(ALWAYS_CHUNKS))
    assert named > 100, named  # the grid does reach both mistakes
    # a group run whole past the budget leaves it below 0: nobody more is admitted
    assert lab05._admit_oracle([("a", 5)], -3, 4, 4, 4, True) == []
    assert lab05.admit_mistake([], [("a", 5)], -3, 4, 4, 4, True) == ""


def test_an_id_that_is_not_waiting_is_named_as_such_not_held_to_the_rule():
    """An answer naming an id the waiting list does not hold gets `_admit_one`'s
    message (not waiting), not lab 05's walk hint."""
    def admit_int_ids(waiting, tokens_left, seats_left, free_blocks, block_size,
                      chunked=False):
        return [(int(rid), n) for rid, n in R.admit(waiting, tokens_left, seats_left,
                                                     free_blocks, block_size, chunked)]

    run = track.check(track.Pieces(admit=admit_int_ids), log=lambda line: None)
    assert run.divergence is not None and run.divergence.pieces == ["admit"]
    assert "which is not waiting" in run.divergence.what, run.divergence.what


@pytest.mark.parametrize("wrong, scenario, hint", [
    (admit_ignores_chunked, "chunked", NO_CHUNKS),
    (admit_always_chunks, "whole", ALWAYS_CHUNKS),
], ids=["ignores chunked", "always chunks"])
def test_a_wrong_admit_alone_stops_at_its_call_naming_the_mistake(wrong, scenario, hint):
    """Plugged into one engine alone (no lockstep), the engine stops at the first
    call whose answer is not lab 05's, before it admits anyone."""
    from pagedkit import LLM

    llm = track.plug_in(LLM("tiny", **track.SCENARIOS[scenario]), track.Pieces(admit=wrong))
    requests = track.bench_requests()
    with pytest.raises(track.TrackError) as err:
        llm.generate([p for p, _params in requests], [params for _p, params in requests],
                     use_tqdm=False)
    assert err.value.piece == "admit"
    for piece in _pieces_of(hint):
        assert piece in err.value.message, err.value.message
    assert "lab 05" in err.value.message and "chunked=" in err.value.message


def test_track_check_names_the_mistake_and_the_right_admit_passes():
    lines = []
    run = track.check(track.Pieces(admit=admit_ignores_chunked), log=lines.append)
    assert run.divergence is not None and run.divergence.pieces == ["admit"]
    assert _(NO_CHUNKS) in run.divergence.what, run.divergence.what
    assert track.check(track.Pieces(admit=R.admit), log=lines.append).divergence is None


# ------------------------------------------- newcomer 31, N1: lab 04's piece
def scales_its_query_in_place(query, k_cache, v_cache, block_table, context_len):
    """Right, but it changes its `query` argument (lab 04's check passes it)."""
    query /= query.shape[-1] ** 0.5
    return R.paged_decode_attention(query * query.shape[-1] ** 0.5, k_cache, v_cache,
                                    block_table, context_len)


def changes_its_table_in_place(query, k_cache, v_cache, block_table, context_len):
    out = R.paged_decode_attention(query, k_cache, v_cache, block_table, context_len)
    block_table.zero_()
    return out


@pytest.mark.parametrize("fn", [scales_its_query_in_place, changes_its_table_in_place])
def test_an_attention_that_changes_its_arguments_in_place_is_held_to_the_inputs_it_got(fn):
    """Newcomer 31, N1: the track computed pagedkit's answer after the learner's
    function had scaled the query in place, and called a right answer "off by up
    to 0.388". Each call now gets its own query and table; the answer is held to
    pagedkit's on the engine's, and the engine serves pagedkit's tokens."""
    run = track.lockstep(track.Pieces(paged_decode_attention=fn), track.bench_requests(),
                         **track.SCENARIOS["recompute"])
    assert run.passed, repr(run)


# ------------------------------------------- newcomer 31, N3: lab 07's piece
def test_a_copy_on_write_right_only_for_two_sharers_is_stopped():
    """Newcomer 31, N3: the bench workload forked 2 samples, where ``= 1`` and
    ``-= 1`` agree, so this piece passed every setting. Its last request now
    forks 3 (`bench_requests(samples=3)`), and every setting still serves
    transformers' tokens with pagedkit's pieces (tests/labs/test_track.py)."""
    assert track.bench_requests()[-1][1].n == 3
    run = track.check(track.Pieces(copy_on_write=cow_sets_the_old_block_to_one),
                      log=lambda line: None)
    assert run.divergence is not None and run.divergence.pieces == ["copy_on_write"]
    assert "held by 3" in run.divergence.what, run.divergence.what
