"""Run and tidy the lab notebooks before committing them.

    python .ci/notebooks.py run labs/03_paging.ipynb [...]   # execute in place, then tidy
    python .ci/notebooks.py tidy labs/*.ipynb                # tidy only
    python .ci/notebooks.py check labs/*.ipynb               # what the test suite checks

The committed notebooks carry their text outputs, which nbval compares when
the test suite re-runs them. Tidying keeps them small and comparable:

* no widget state (one plotly FigureWidget stores ~5 MB of JavaScript);
* no outputs in cells marked to be ignored by nbval (figures, timings):
  their outputs vary from run to run and are bulky;
* no execution timestamps, and the python3 kernelspec nbval needs.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import nbformat

IGNORE_MARKERS = ("# NBVAL_IGNORE_OUTPUT", "# NBVAL_SKIP")
IGNORE_TAGS = {"nbval-ignore-output", "nbval-skip"}
MAX_BYTES = 1_000_000
KERNELSPEC = {"display_name": "Python 3", "language": "python", "name": "python3"}


def output_ignored(cell) -> bool:
    tags = set(cell.get("metadata", {}).get("tags", []))
    return bool(tags & IGNORE_TAGS) or any(cell.source.lstrip().startswith(m)
                                           for m in IGNORE_MARKERS)


def tidy(nb) -> None:
    nb.metadata.pop("widgets", None)
    nb.metadata["kernelspec"] = KERNELSPEC
    nb.metadata.setdefault("language_info", {"name": "python"})
    for cell in nb.cells:
        cell.metadata.pop("execution", None)
        cell.metadata.pop("widgets", None)
        if cell.cell_type != "code":
            continue
        if output_ignored(cell):
            cell.outputs = []
        for out in cell.outputs:
            out.get("metadata", {}).pop("application/vnd.jupyter.widget-view+json", None)
            data = out.get("data", {})
            data.pop("application/vnd.jupyter.widget-view+json", None)


def problems(path: Path) -> list[str]:
    """What would make a committed notebook unfit (the test suite asserts none)."""
    found = []
    size = path.stat().st_size
    if size > MAX_BYTES:
        found.append(f"{path.name} is {size} bytes (limit {MAX_BYTES})")
    nb = nbformat.read(path, as_version=4)
    if "widgets" in nb.metadata:
        found.append(f"{path.name} stores widget state in its metadata")
    if nb.metadata.get("kernelspec", {}).get("name") != "python3":
        found.append(f"{path.name} has no python3 kernelspec")
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code" and output_ignored(cell) and cell.outputs:
            found.append(f"{path.name} cell {i} is ignored by nbval but keeps its outputs")
    return found


def execute(nb, folder: Path, timeout: int) -> None:
    """Run `nb` in a fresh kernel whose working folder is `folder`. The kernel
    keeps the build track in a file of its own, empty at the start (as the
    test suite's kernels do, conftest.py): the committed outputs never show
    the pieces saved in ~/.pagedkit by whoever ran the labs on this machine,
    and running them never overwrites those."""
    from nbclient import NotebookClient

    with tempfile.TemporaryDirectory(prefix="pagedkit-track-") as track:
        env = dict(os.environ, PAGEDKIT_TRACK=str(Path(track) / "my_engine.py"))
        NotebookClient(nb, timeout=timeout, kernel_name="python3",
                       resources={"metadata": {"path": str(folder)}}).execute(env=env)


def run(path: Path, timeout: int) -> None:
    nb = nbformat.read(path, as_version=4)
    execute(nb, path.parent, timeout)
    tidy(nb)
    nbformat.write(nb, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["run", "tidy", "check"])
    parser.add_argument("notebooks", nargs="+", type=Path)
    parser.add_argument("--timeout", type=int, default=600, help="seconds per cell")
    args = parser.parse_args(argv)
    failed = []
    for path in args.notebooks:
        if args.command == "run":
            run(path, args.timeout)
        elif args.command == "tidy":
            nb = nbformat.read(path, as_version=4)
            tidy(nb)
            nbformat.write(nb, path)
        failed += problems(path)
    for line in failed:
        print(line, file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
