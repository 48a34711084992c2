"""Lab 09 §8 sends the reader from each pagedkit module to vLLM's code: every
path in that section, and every class or function it names beside a path,
exists in the vLLM the course pins (newcomer19 #9: `vllm/attention/layer.py`
and `vllm/beam_search.py` were gone from 0.32). Both editions; the paths are
read from the lab, so a new row is checked too."""

import importlib.util
import json
import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.vllm

LABS = Path(__file__).resolve().parents[2] / "labs"
EDITIONS = [LABS / "09_beyond.ipynb", LABS / "zh-CN" / "09_beyond.ipynb"]
#: C++/CUDA sources are in vLLM's repository, not in its wheel.
NOT_IN_THE_WHEEL = ("csrc/",)


def section(path: Path) -> str:
    cells = ["".join(c["source"]) for c in json.loads(path.read_text())["cells"]]
    found = [c for c in cells if "vllm/v1/core/block_pool.py" in c]
    assert len(found) == 1, f"{path.name}: the pagedkit->vLLM cell is not found once"
    return found[0]


def rows(text: str) -> list[tuple[list[str], list[str]]]:
    """(paths, names) of each table row's vLLM column, then of each later line."""
    out = []
    for line in text.splitlines():
        cells = line.split("|")
        column = cells[2] if line.startswith("|") and len(cells) > 3 else line
        spans = re.findall(r"`([^`]+)`", column)
        paths = [s for s in spans if s.startswith(("vllm/", "csrc/"))]
        names = [s for s in spans if re.fullmatch(r"[A-Za-z_][\w.]*", s) and "/" not in s
                 and not s.endswith(".py")]
        if paths:
            out.append((paths, names if line.startswith("|") else []))
    return out


def vllm_root() -> Path:
    spec = importlib.util.find_spec("vllm")
    return Path(spec.origin).parent.parent


@pytest.mark.parametrize("edition", EDITIONS, ids=lambda p: p.parent.name)
def test_every_vllm_path_and_name_in_lab09_exists(edition):
    root = vllm_root()
    checked, wrong = 0, []
    for paths, names in rows(section(edition)):
        sources = []
        for p in paths:
            if p.startswith(NOT_IN_THE_WHEEL):
                continue
            checked += 1
            if not (root / p).exists():
                wrong.append(f"{p}: no such path in the installed vLLM ({root})")
            elif p.endswith(".py"):
                sources.append((root / p).read_text())
        for name in names if sources else ():   # a csrc/ row's names cannot be read here
            parts = name.split(".")
            if not any(all(re.search(rf"^\s*(class|def)\s+{re.escape(part)}\b", src, re.M)
                           for part in parts) for src in sources):
                wrong.append(f"{name}: defined in none of {paths}")
    assert checked >= 20, f"only {checked} paths read: is the table still there?"
    assert not wrong, "\n".join(wrong)
