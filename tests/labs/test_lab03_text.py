"""Lab 03's prose says what its cells print (fourth newcomer, F9): the
block-size sweep's "16 is N% slower than the best" is a line the sweep
cell prints, computed before rounding, and the text quotes it."""

import json
import re
from pathlib import Path

import pytest

LABS = Path(__file__).resolve().parents[2] / "labs"


def cells(path):
    return {c.get("id"): c for c in json.loads(path.read_text(encoding="utf-8"))["cells"]}


def printed(cell):
    return "".join("".join(o.get("text", "")) for o in cell.get("outputs", []))


@pytest.mark.parametrize("lab", [LABS / "03_paging.ipynb", LABS / "zh-CN" / "03_paging.ipynb"])
def test_the_block_size_16_figure_is_one_the_sweep_prints(lab):
    nb = cells(lab)
    shares = re.findall(r"^(\S+): block size 16 is ([\d.]+)% slower than the best$",
                        printed(nb["d1643a08"]), re.M)
    assert [t for t, _ in shares] == ["sharegpt@2", "alpaca@30"]
    text = "".join(nb["e4d5f545"]["source"])
    for _, share in shares:
        assert f"{share}%" in text
    assert "0.038 vs 0.036" not in text  # rounded figures that give other shares


@pytest.mark.parametrize("path", sorted(LABS.glob("*.ipynb")), ids=lambda p: p.name)
def test_no_tokens_slots(path):
    assert "tokens slots" not in path.read_text(encoding="utf-8")
