"""Lab 08's section 5 and 6 text says what the code does (audit 37): it said
`bench --model larger` *adds* a model and hf_continuous (the default run has
both models and hf_continuous already; `--model` picks models), and that a T4
"falls back to the torch references" (`pagedkit.ops.backend` gives it the
batched torch path). Each claim is read from the text and compared with the
code it describes."""

import json
import re
import warnings
from pathlib import Path

import pytest
import torch

from pagedkit import ops
from pagedkit.bench import engine

LAB = Path(__file__).resolve().parents[2] / "labs" / "08_full_engine.ipynb"
CELL = "18f8c59d"  # "Read the numbers honestly" and section 6's opening


def cell_text() -> str:
    cells = json.loads(LAB.read_text(encoding="utf-8"))["cells"]
    return "".join("".join(c["source"]) for c in cells if c.get("id") == CELL)


def bench_bullet() -> str:
    bullets = [b for b in cell_text().split("\n* ") if b.startswith("`python -m pagedkit bench`")]
    assert len(bullets) == 1, "no one bullet on `python -m pagedkit bench` in lab 08"
    return " ".join(bullets[0].split("\n\n")[0].split())


def test_the_bench_bullet_says_what_the_default_run_runs():
    text = bench_bullet()
    defaults = engine._parser().parse_args([])
    assert defaults.model is None and defaults.requests is None  # neither: every model,
    assert engine.DEFAULT_REQUESTS == 64                            # 64 requests
    assert f"{engine.DEFAULT_REQUESTS} requests" in text
    assert re.findall(r"`--model (\w+)`", text) == list(engine.MODELS)
    named = set(re.findall(r"`(\w+)`", text) + re.findall(r"through (pagedkit),", text))
    systems = set(engine.SYSTEMS[:4])  # DEFAULT_SYSTEMS, less vllm (there only if installed)
    assert set(engine.DEFAULT_SYSTEMS) - {"vllm"} == systems
    assert named & set(engine.SYSTEMS) == systems, named
    assert "where it is installed, vLLM's CPU build" in text


@pytest.fixture
def fake_t4(monkeypatch):
    """A CUDA device of the capability the text gives the T4, with Triton importable."""
    def fake(capability):
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
        monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Tesla T4")
        monkeypatch.setattr(ops, "_triton_import_error", lambda: None)
    monkeypatch.delenv("PAGEDKIT_KERNELS", raising=False)
    ops.set_backend(None)
    ops._noticed.clear()
    yield fake
    ops._noticed.clear()


def test_the_gpu_cell_says_which_kernels_a_t4_runs(fake_t4):
    text = " ".join(cell_text().split())
    said = re.search(r"with the Triton kernels \(on compute capability (\d+)\.(\d+) or newer; "
                     r"on a T4, (\d+)\.(\d+), pagedkit by default runs its (\w+) torch path", text)
    assert said, "lab 08 section 6 no longer says which kernels run where"
    assert (int(said[1]), int(said[2])) == ops.MIN_TRITON_CAPABILITY
    fake_t4((int(said[3]), int(said[4])))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ops.KernelFallbackWarning)
        assert ops.backend("cuda") == said[5] == "batched"
