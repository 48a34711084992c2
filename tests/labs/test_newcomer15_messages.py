"""Newcomer 15's message nits (finding 13), each over every case it concerns."""

import json
import re
from pathlib import Path

import pytest

from pagedkit.exercises import lab04, lab07, lab09
from pagedkit.exercises import nbgrader as ng

from .test_check_rules import check_of, function_checks
from .test_exercises import load

ROOT = Path(__file__).resolve().parents[2]


def test_lab09_fit_hints_write_no_plural_after_1():
    """ "a block of 1 tokens takes 2 (K and V) x 1 layers x 1 KV heads"."""
    hints = [case.hint() if callable(case.hint) else case.hint for case in lab09.fit_grid()]
    assert any("(block_size)" in hint for hint in hints)
    bad = sorted({h for h in hints if re.search(r"\b1 (tokens|layers|KV heads)\b", h)})
    assert not bad, bad[:3]


def _as_set(value):
    try:
        return set(value) if isinstance(value, list) else None
    except TypeError:  # unhashable items
        return None


def test_a_set_for_a_list_is_told_to_return_a_list():
    """Lab 06's choose_victims answered `set()` with "expected [].  Hint: 3 free
    blocks cover the 3 needed": the items were right, only the type not. Every
    check whose reference answers a list (of hashable items) is given it as a set."""
    told = {}
    for param in function_checks():
        path, lab, name = param.values
        reference = getattr(load(path), name)
        made = []

        def as_set(*args, reference=reference, made=made, **kwargs):
            got = _as_set(reference(*args, **kwargs))
            made.append(got is not None)
            return got if got is not None else reference(*args, **kwargs)

        result = check_of(lab, name)(as_set)
        if any(made):
            told[f"{lab}.{name}"] = "a set has no order" in result.message and not result.passed
    assert len(told) >= 5 and all(told.values()), told


def _kernel_cell(nb):
    return next(ng.text(c) for c in nb["cells"] if ng.KERNEL_REGION[0] in ng.text(c))


@pytest.mark.parametrize("copy", ["committed", "released"])
def test_lab04_unwritten_kernel_message_names_what_the_copy_holds(copy):
    """The committed lab's kernel stub holds `...`; nbgrader's released copy
    `# YOUR CODE HERE` / `raise NotImplementedError` (the course's code stub):
    the "not written yet" message must name what the student sees."""
    path = ROOT / "labs" / "04_paged_attention.ipynb"
    if copy == "committed":
        source, stub = _kernel_cell(json.loads(path.read_text())), "`...`"
    else:  # what generate_assignment makes of the instructor's version
        source = re.sub(rf"( *){ng.SOLUTION[0]}.*?{ng.SOLUTION[1]}",
                        lambda m: "\n".join(m[1] + line for line in ng.CODE_STUB.splitlines()),
                        _kernel_cell(ng.source_notebook(path)), flags=re.S)
        stub = "NotImplementedError"
    assert stub.strip("`") in source
    message = lab04._kernel_unwritten(source)
    assert message is not None and stub in message, message


def test_an_endless_chain_hashes_shows_the_short_hashes():
    def endless(token_ids, block_size):
        while True:
            yield b"\x00" * 32

    message = lab07.check_chain_hashes(endless).message
    assert "more than 1 item" in message and "…" in message, message
    assert "b'" not in message and "\\x" not in message, message
