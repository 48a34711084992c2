"""Newcomer 30, N9: the track accepted a set of victims and None from admit
(``list(got or [])``), which labs 05 and 06's checks refuse ("a set has no
order"; "returned None — did you forget `return`?"). Now it refuses them too,
naming the piece, whatever the order a set happens to iterate in."""

import dataclasses

import pytest

from pagedkit.exercises import track

from .wrong_answers import _solution

LAB05, LAB06 = _solution("lab05_continuous_batching"), _solution("lab06_preemption")


def admit_none_for_nobody(waiting, tokens_left, seats_left, free_blocks, block_size,
                          chunked=False):
    return LAB05.admit(waiting, tokens_left, seats_left, free_blocks, block_size,
                       chunked) or None


def admit_a_set(waiting, tokens_left, seats_left, free_blocks, block_size, chunked=False):
    return set(LAB05.admit(waiting, tokens_left, seats_left, free_blocks, block_size, chunked))


def victims_a_set(running, free_blocks):
    return set(LAB06.choose_victims(running, free_blocks))


def victims_a_frozenset(running, free_blocks):
    return frozenset(LAB06.choose_victims(running, free_blocks))


def victims_none_for_nobody(running, free_blocks):
    return LAB06.choose_victims(running, free_blocks) or None


WRONG = [("admit", admit_none_for_nobody, "did you forget `return`"),
         ("admit", admit_a_set, "a set has no order"),
         ("choose_victims", victims_a_set, "a set has no order"),
         ("choose_victims", victims_a_frozenset, "a set has no order"),
         ("choose_victims", victims_none_for_nobody, "did you forget `return`")]


@pytest.mark.parametrize("name, fn, said", WRONG, ids=[fn.__name__ for _n, fn, _s in WRONG])
def test_none_and_sets_are_refused_as_the_labs_checks_refuse_them(name, fn, said):
    run = track.check(dataclasses.replace(track.Pieces(), **{name: fn}), log=lambda line: None)
    assert not run.passed, f"{fn.__name__} served every setting"
    assert run.divergence.pieces == [name] and said in run.divergence.what, repr(run)
