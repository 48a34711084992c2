"""Second newcomer: lab 00's environment check used `sys` that only the
Colab setup cell imported, and showed no output (nbval-ignored, so its
committed output was stripped). It now runs on its own, and its report is
committed and compared, the machine's versions and device blanked out by
labs/nbval_sanitize.cfg."""

import configparser
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

LABS = Path(__file__).resolve().parents[2] / "labs"
CELL = "3de980fc"


def cell(edition: Path) -> dict:
    nb = json.loads((edition / "00_start_here.ipynb").read_text())
    return next(c for c in nb["cells"] if c.get("id") == CELL)


def sanitize(text: str) -> str:
    config = configparser.ConfigParser()
    config.read(LABS / "nbval_sanitize.cfg")
    for section in config.sections():
        text = re.sub(config[section]["regex"], config[section].get("replace", ""), text)
    return text


@pytest.mark.parametrize("compiler", ["found", "missing"])
@pytest.mark.parametrize("triton", ["installed", "missing"])
@pytest.mark.parametrize("edition", [LABS, LABS / "zh-CN"], ids=["en", "zh-CN"])
def test_the_environment_check_runs_alone_and_its_report_is_committed(edition, triton,
                                                                      compiler, tmp_path):
    source = "".join(cell(edition)["source"])
    assert not source.lstrip().startswith("# NBVAL")
    committed = "".join(t for out in cell(edition)["outputs"] for t in out.get("text", []))
    assert committed.startswith("Python ") and "\ndevice " in committed
    # the cell alone, in a fresh interpreter (a kernel restarted below the setup cell);
    # where Triton is missing (macOS) or no C compiler builds the C decode kernel
    # (Apple's clang has no OpenMP), the committed report still holds
    block = "import sys; sys.modules['triton'] = None\n" if triton == "missing" else ""
    env = dict(os.environ)
    env.pop("PAGEDKIT_KERNELS", None)
    if compiler == "missing":
        env.update(CC=str(tmp_path / "no-cc"), PAGEDKIT_CACHE_DIR=str(tmp_path))
    ran = subprocess.run([sys.executable, "-c", block + source], capture_output=True,
                         text=True, timeout=300, cwd=edition, env=env)
    assert ran.returncode == 0, ran.stderr
    cpu = next(line for line in ran.stdout.splitlines() if line.startswith("kernels on cpu:"))
    assert cpu.startswith("kernels on cpu: batched" if compiler == "missing"
                          else "kernels on cpu: native")
    assert sanitize(ran.stdout) == sanitize(committed)


@pytest.mark.parametrize("machine, line", [
    ("Python       3.12.1\n", "Python       VERSION\n"),
    ("torch        2.9.0+cu128\n", "torch        VERSION\n"),
    ("transformers 5.30.0\n", "transformers VERSION\n"),
    ("triton       not available (No module named 'triton'): the torch paths run "
     "everywhere\n", "triton       VERSION\n"),
    ("device       CUDA: NVIDIA H200, compute capability 9.0, 140 GiB\n",
     "device       DEVICE\n"),
    ("kernels on cuda: triton — CUDA device cuda with Triton\n", ""),
    ("kernels on cpu: batched — cpu device: the batched torch path runs\n",
     "kernels on cpu: CPU KERNELS\n"),
    ("pagedkit     0.1.0\n", "pagedkit     0.1.0\n"),  # the rest is compared
])
def test_only_the_machines_own_lines_are_blanked(machine, line):
    assert sanitize(machine) == line
