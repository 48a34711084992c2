"""Newcomer 30, N2: with every piece plugged in (lab 08's build-track cell),
an answer of a type the track cannot read is blamed on the piece that gave
it, never on all seven (lockstep used to turn the TypeError the track's own
code raised into a verdict naming every plugged piece)."""

import dataclasses
import importlib.util
from pathlib import Path

import pytest

from pagedkit.exercises import track

SOLUTIONS = Path(__file__).resolve().parents[2] / "labs" / "solutions"
TRACK_LABS = ("lab03_paging", "lab04_paged_attention", "lab05_continuous_batching",
              "lab06_preemption", "lab07_sharing", "lab08_full_engine")


def _reference() -> track.Pieces:
    namespace = {}
    for stem in TRACK_LABS:
        spec = importlib.util.spec_from_file_location(f"types_{stem}", SOLUTIONS / f"{stem}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        namespace.update(vars(module))
    return track.Pieces.from_namespace(namespace)


R = _reference()


def chain_hashes_a_generator(token_ids, block_size):
    yield from R.chain_hashes(token_ids, block_size)


def chain_hashes_a_set(token_ids, block_size):
    return set(R.chain_hashes(token_ids, block_size))


def top_p_float64(logits, top_p):
    return R.top_p_filter(logits.double(), top_p)


def top_p_a_mask(logits, top_p):
    return ~R.top_p_filter(logits, top_p).isinf()


def copy_on_write_the_copy_only(ref_counts, free_blocks, table):
    got = R.copy_on_write(ref_counts, free_blocks, table)
    return None if got is None else got[1]


def copy_on_write_a_triple(ref_counts, free_blocks, table):
    got = R.copy_on_write(ref_counts, free_blocks, table)
    return None if got is None else (*got, "copied")


def append_slots_a_count(block_table, num_tokens, num_new_tokens, block_size, free_blocks):
    got = R.append_slots(block_table, num_tokens, num_new_tokens, block_size, free_blocks)
    return None if got is None else len(got)


def append_slots_pairs(block_table, num_tokens, num_new_tokens, block_size, free_blocks):
    got = R.append_slots(block_table, num_tokens, num_new_tokens, block_size, free_blocks)
    return None if got is None else [(s // block_size, s % block_size) for s in got]


def admit_a_count(waiting, tokens_left, seats_left, free_blocks, block_size, chunked=False):
    return len(R.admit(waiting, tokens_left, seats_left, free_blocks, block_size, chunked)) or 1


def admit_ids_in_lists(waiting, tokens_left, seats_left, free_blocks, block_size,
                       chunked=False):
    return [([rid], n) for rid, n in R.admit(waiting, tokens_left, seats_left, free_blocks,
                                             block_size, chunked)]


def choose_victims_a_count(running, free_blocks):
    return len(R.choose_victims(running, free_blocks)) or 3


def choose_victims_in_lists(running, free_blocks):
    return [[v] for v in R.choose_victims(running, free_blocks)]


WRONG_TYPES = [("chain_hashes", chain_hashes_a_generator), ("chain_hashes", chain_hashes_a_set),
               ("top_p_filter", top_p_float64), ("top_p_filter", top_p_a_mask),
               ("copy_on_write", copy_on_write_the_copy_only),
               ("copy_on_write", copy_on_write_a_triple),
               ("append_slots", append_slots_a_count), ("append_slots", append_slots_pairs),
               ("admit", admit_a_count), ("admit", admit_ids_in_lists),
               ("choose_victims", choose_victims_a_count),
               ("choose_victims", choose_victims_in_lists)]


@pytest.mark.parametrize("name, wrong", WRONG_TYPES, ids=[fn.__name__ for _n, fn in WRONG_TYPES])
def test_a_wrong_type_is_blamed_on_its_piece_alone(name, wrong):
    pieces = dataclasses.replace(R, **{name: wrong})
    run = track.check(pieces, scenarios=("sampling", "recompute"), log=lambda line: None)
    assert not run.passed, f"{wrong.__name__} served like pagedkit"
    assert run.divergence.pieces == [name], repr(run)
    assert "your engine raised" not in repr(run), repr(run)


def append_slots(block_table, num_tokens, num_new_tokens, block_size, free_blocks):
    return R.append_slots(block_table, num_tokens, num_new_tokens, block_size, free_blocks)


@pytest.mark.parametrize("given, example", [
    (append_slots, r"track.Pieces\(append_slots=append_slots\)"),
    (R.admit, r"track.Pieces\(admit=admit\)"),
    ({"admit": R.admit}, r"track.Pieces\(append_slots=append_slots\)"),
    ([R.admit], r"track.Pieces\(append_slots=append_slots\)")])
@pytest.mark.parametrize("call", ["check", "lockstep", "plug_in"])
def test_a_bare_function_is_refused_saying_what_to_pass(call, given, example):
    """Newcomer 30, N10: track.check(append_slots) raised AttributeError ('function'
    object has no attribute 'plugged'); check, lockstep and plug_in each say
    what to pass."""
    from pagedkit import LLM

    run = {"check": lambda: track.check(given, log=lambda line: None),
           "lockstep": lambda: track.lockstep(given, track.pair_requests(),
                                              **track.SCENARIOS["pair"]),
           "plug_in": lambda: track.plug_in(LLM("tiny", num_blocks=16, block_size=4), given)}
    with pytest.raises(TypeError, match=rf"^{call} needs a Pieces, got .*: pass track.load\(\) "
                                        rf".*, or {example} for a function of this notebook"):
        run[call]()
