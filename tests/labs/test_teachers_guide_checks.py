"""The teachers' guide says where every check it assigns lives: checks are
`pagedkit.exercises.labNN.CHECKS[name]`, and lab 04b's `merge_states` is in
`lab04` (newcomer 11 finding 7: `pagedkit.exercises.lab04b` does not exist)."""

import importlib
import re
from pathlib import Path

import pytest

GUIDES = ["docs/teachers_guide.md", "docs/zh-CN/teachers_guide.md"]


@pytest.mark.parametrize("guide", GUIDES)
def test_the_guide_says_where_every_assigned_check_lives(guide):
    """Each check in the guide's "assign" table is in its own lab's module,
    or the guide names the module it is in."""
    text = (Path(__file__).resolve().parents[2] / guide).read_text(encoding="utf-8")
    rows = re.findall(r"^\| (\d\d[a-z]?) [^|]*\| [^|]*\| ([^|]*)\| ([^|]*)\|$", text, re.M)
    assert len(rows) >= 10, rows
    owners = {}
    for lab in [*(f"lab0{i}" for i in range(10)), "lab04c"]:
        for name in importlib.import_module(f"pagedkit.exercises.{lab}").CHECKS:
            owners[name] = lab
    unsaid = []
    for number, assign, stretch in rows:
        for name in re.findall(r"`(\w+)`", assign + stretch):
            if name in owners and owners[name] != f"lab{number}":
                said = re.search(rf"`{name}`[^`\n]*(?:\n[^`\n]*)?`{owners[name]}\.CHECKS`", text)
                if not said:
                    unsaid.append((number, name, owners[name]))
    assert not unsaid, unsaid
