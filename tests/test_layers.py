"""Data flows down the layers, never back up: every import in the package
reaches only its own layer or one below it.

The order is written once, in the diagram of docs/architecture.md; this test
reads it from there, so the picture a learner reads is the one enforced."""

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "pagedkit"


def layers() -> dict[str, int]:
    """Unit name (``"memory"``, ``"sequence"``, ``"kernels"``) -> its rank, 0 = bottom."""
    doc = (ROOT / "docs" / "architecture.md").read_text()
    diagram = doc.split("```\n", 2)[1]
    ranks: list[list[str]] = []
    for line in diagram.splitlines():
        match = re.match(r"(pagedkit/[\w, ]+?)(?:\s{2,}|$)", line)
        if match:
            names = [n.strip().removeprefix("pagedkit/").rstrip("/")
                     for n in match.group(1).split(",")]
            ranks.append(names)
    assert ranks, "no layer diagram found in docs/architecture.md"
    return {name: rank for rank, names in enumerate(reversed(ranks)) for name in names}


def _parts(path: Path) -> tuple[str, ...]:
    """`path` as a module path under ``pagedkit``."""
    return path.relative_to(PACKAGE).parts


def unit_of(path: Path) -> str:
    """The layer unit a file of the package belongs to (its top-level module or folder)."""
    return _parts(path)[0].removesuffix(".py")


def imported_units(path: Path, source: str | None = None) -> set[tuple[str, int]]:
    """The package units `path` imports (at any depth of its code), with line numbers."""
    rel_parts = _parts(path)
    tree = ast.parse(path.read_text() if source is None else source, filename=str(path))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names if a.name.split(".")[0] == "pagedkit"]
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:  # relative: resolve against the file's package
                base = ["pagedkit", *rel_parts[:-1]]
                module = ".".join([*base[:len(base) - (node.level - 1)], *filter(None, [module])])
            if module == "pagedkit":  # from pagedkit import scheduler
                targets = [f"pagedkit.{a.name}" for a in node.names]
            else:
                targets = [module] if module.split(".")[0] == "pagedkit" else []
        else:
            continue
        for target in targets:
            parts = target.split(".")
            if len(parts) > 1:
                found.add((parts[1], node.lineno))
    return found


def package_files() -> list[Path]:
    files = PACKAGE.rglob("*.py")
    return sorted(p for p in files if "models/tiny" not in p.as_posix())


def test_the_diagram_places_every_module():
    ranks = layers()
    units = {unit_of(p) for p in package_files()}
    assert units <= ranks.keys(), f"not placed in docs/architecture.md: {units - ranks.keys()}"


@pytest.mark.parametrize("path", package_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_module_imports_from_a_layer_above_it(path):
    ranks = layers()
    own = unit_of(path)
    upward = [f"line {line}: pagedkit.{unit} (layer {ranks[unit]}) above {own} "
              f"(layer {ranks[own]})"
              for unit, line in sorted(imported_units(path), key=lambda x: x[1])
              if unit in ranks and ranks[unit] > ranks[own]]
    assert not upward, f"{path.relative_to(ROOT)} imports upward: " + "; ".join(upward)


@pytest.mark.parametrize("source", ["from ..scheduler import Scheduler\n",
                                    "def f():\n    import pagedkit.scheduler.events\n",
                                    "from pagedkit import scheduler\n",
                                    "from .. import scheduler\n"])
def test_the_check_sees_an_upward_import(source):
    """The test can fail: a memory module importing the scheduler, however spelled."""
    units = {unit for unit, _ in imported_units(PACKAGE / "memory" / "probe.py", source)}
    assert "scheduler" in units
    ranks = layers()
    assert ranks["scheduler"] > ranks["memory"]
    assert ranks["model"] < ranks["scheduler"] < ranks["engine"] < ranks["sim"] < ranks["viz"]
