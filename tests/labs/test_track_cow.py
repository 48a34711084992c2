"""Newcomer 30, N1: a copy_on_write that never copies a shared block (or
copies only above ref count 2) was told to "raise (say MemoryError)": the
track asked its no-free-block question before the real one. The real
question comes first now: such a piece is told that the write would change
the other sequences' block; one that copies right but returns None when no
block is free is still told to raise."""

import importlib.util
from pathlib import Path

import pytest

from pagedkit.exercises import track

SOLUTIONS = Path(__file__).resolve().parents[2] / "labs" / "solutions"
_spec = importlib.util.spec_from_file_location("cow_lab07", SOLUTIONS / "lab07_sharing.py")
LAB07 = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(LAB07)


def never_copies(ref_counts, free_blocks, table):
    return None


def copies_above_two(ref_counts, free_blocks, table):
    if ref_counts[table[-1]] > 2:
        return LAB07.copy_on_write(ref_counts, free_blocks, table)
    return None


def none_when_out_of_blocks(ref_counts, free_blocks, table):
    if not free_blocks:
        return None
    return LAB07.copy_on_write(ref_counts, free_blocks, table)


def _verdict(fn):
    run = track.lockstep(track.Pieces(copy_on_write=fn), track.bench_requests(),
                         **track.SCENARIOS["recompute"])
    assert not run.passed and run.divergence.pieces == ["copy_on_write"], repr(run)
    return run.divergence.what


@pytest.mark.parametrize("fn", [never_copies, copies_above_two], ids=lambda fn: fn.__name__)
def test_a_piece_that_does_not_copy_is_told_so(fn):
    what = _verdict(fn)
    assert "its write would change theirs" in what and "MemoryError" not in what, what


def test_none_with_no_free_block_is_told_to_raise():
    what = _verdict(none_when_out_of_blocks)
    assert "with no free block" in what and "MemoryError" in what, what
