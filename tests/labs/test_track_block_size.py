"""Newcomer 30, N12: pieces that use a notebook constant (``BS = 4``) in place
of their ``block_size`` argument passed every scenario of `track.check`, all
in blocks of 4 where those pieces are asked (the "pair" setting, in blocks of
8, has no prefix cache and admits 2-token prompts). "budget" now has blocks
of 8 and a prefix cache: each such piece is stopped, naming it."""

import dataclasses

import pytest

from pagedkit.exercises import track

from .wrong_answers import _solution

LAB03, LAB05, LAB07 = (_solution(s) for s in ("lab03_paging", "lab05_continuous_batching",
                                              "lab07_sharing"))
BS = 4  # the notebook's constant


def append_slots(block_table, num_tokens, num_new_tokens, block_size, free_blocks):
    return LAB03.append_slots(block_table, num_tokens, num_new_tokens, BS, free_blocks)


def admit(waiting, tokens_left, seats_left, free_blocks, block_size, chunked=False):
    return LAB05.admit(waiting, tokens_left, seats_left, free_blocks, BS, chunked)


def chain_hashes(token_ids, block_size):
    return LAB07.chain_hashes(token_ids, BS)


def test_a_setting_with_a_prefix_cache_has_other_blocks_than_4():
    sizes = {s["block_size"] for s in track.SCENARIOS.values() if s.get("enable_prefix_caching")}
    assert len(sizes) > 1, sizes


@pytest.mark.parametrize("fn", [append_slots, admit, chain_hashes], ids=lambda fn: fn.__name__)
def test_a_piece_ignoring_its_block_size_is_stopped(fn):
    pieces = dataclasses.replace(track.Pieces(), **{fn.__name__: fn})
    run = track.check(pieces, log=lambda line: None)
    assert not run.passed, f"{fn.__name__} with block size {BS} served every setting"
    assert run.divergence.pieces == [fn.__name__], repr(run)
