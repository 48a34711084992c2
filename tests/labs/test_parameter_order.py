"""Newcomer 36: a student who wrote ``token_at(block_table, num_tokens,
block_size, slot)`` (the stub's names, two swapped) was told a case's hint
and hunted a mistake in the body. A check calls the function by position, so
each value landed under the other name. Now every exercise's check says so:
`exercises.SIGNATURES` is each stub (held here to both editions' notebooks),
and the reference solution, wrapped under every reordering of the stub's
names that changes its answer, fails with that hint alone."""

from __future__ import annotations

import ast
import importlib
import itertools
import json
from pathlib import Path

import pytest

import pagedkit
from pagedkit.exercises import SIGNATURES, order_mistake

from .test_exercises import SOLUTIONS, load

LABS = Path(__file__).resolve().parents[2] / "labs"
MODULES = {"blocks_for": "lab00", "cached_kv_reads": "lab01", "max_batch": "lab01",
           "kv_bytes_per_token": "lab01", "reservation_size": "lab02", "first_fit": "lab02",
           "waste_breakdown": "lab02", "token_at": "lab03", "blocks_needed": "lab03",
           "append_slots": "lab03", "gather_kv": "lab04", "paged_decode_attention": "lab04",
           "online_softmax_update": "lab04", "merge_states": "lab04", "finish_steps": "lab05",
           "admit": "lab05", "tokens_to_recompute": "lab06", "preemption_mode": "lab06",
           "choose_victims": "lab06", "copy_on_write": "lab07", "chain_hashes": "lab07",
           "sharing_blocks": "lab07", "pack_step": "lab08", "top_p_filter": "lab08",
           "tokens_that_fit": "lab09", "best_num_drafts": "lab09"}


def stubs(folder: Path) -> dict[str, str]:
    """Each graded stub of the labs in `folder` that is a Python function (not a
    Triton kernel): name -> its parameters as written."""
    found = {}
    for path in sorted(folder.glob("[0-9]*.ipynb")):
        for cell in json.loads(path.read_text())["cells"]:
            if not cell.get("metadata", {}).get("nbgrader", {}).get("solution"):
                continue
            for node in ast.parse("".join(cell["source"])).body:
                if isinstance(node, ast.FunctionDef) and not node.decorator_list:
                    found[node.name] = ast.unparse(node.args)
    return found


@pytest.mark.parametrize("edition", [LABS, LABS / "zh-CN"], ids=["en", "zh-CN"])
def test_the_table_is_every_stub_as_the_labs_write_it(edition):
    assert stubs(edition) == SIGNATURES
    assert set(MODULES) == set(SIGNATURES)


def _solution(name):
    return getattr(load(next(SOLUTIONS.glob(f"{MODULES[name]}_*.py"))), name)


def _under(solution, parts):
    """`solution` as a learner's function taking the stub's parameters `parts`
    (``"chunked=False"`` keeps its default) in their order: each one read by
    its name, as a body written for the stub reads it."""
    names = [part.split("=")[0] for part in parts]
    scope = {"solution": solution}
    exec(f"def learner({', '.join(parts)}):\n"
         f"    return solution({', '.join(f'{n}={n}' for n in names)})\n", scope)
    return scope["learner"]


@pytest.mark.parametrize("language", ["en", "zh-CN"])
@pytest.mark.parametrize("name", sorted(SIGNATURES))
def test_a_reordered_stub_is_told_its_order(name, language):
    check = getattr(importlib.import_module(f"pagedkit.exercises.{MODULES[name]}"),
                    f"check_{name}")
    parts = SIGNATURES[name].split(", ")
    required = [p for p in parts if "=" not in p]
    solution = _solution(name)
    told = 0
    pagedkit.set_language(language)
    try:
        assert check(_under(solution, parts)).passed  # the stub's order passes
        orders = [list(o) for o in itertools.permutations(required) if list(o) != required]
        for order in orders[:24]:
            learner = _under(solution, [*order, *parts[len(required):]])
            hint = order_mistake(name, learner)
            assert hint and ", ".join(order) in hint
            result = check(learner)
            if result.passed:  # (this order gives the same answers: nothing to tell)
                continue
            told += 1
            assert result.message.endswith(hint), result.message
            assert result.message.count(hint) == 1 and "Hint" * (language == "en") in result.message
    finally:
        pagedkit.set_language("en")
    assert told or len(required) < 2, name


def test_names_of_ones_own_are_not_an_order_mistake():
    assert order_mistake("blocks_needed", lambda n, k, bs: 0) == ""
    assert order_mistake("blocks_needed", lambda num_tokens, num_new_tokens, block_size: 0) == ""
    assert order_mistake("blocks_needed", lambda *args: 0) == ""
    assert order_mistake("paged_kernel", lambda b, a: 0) == ""  # not a called exercise
