"""Every kernel compiles, fits and does not spill on every Colab / cloud GPU, proven without one.

Triton's interpreter accepts programs the real compiler rejects and says
nothing about registers or shared memory. ``triton.compile`` with a
``GPUTarget`` runs the real pipeline down to a cubin with the ``ptxas``
inside the Triton wheel, no GPU or driver needed. compile_matrix.py does that
for the launches the wrappers actually make (their ``plan_*`` functions, the
launch configs of `pagedkit.kernels.launch`, Triton's own argument binder)
for sm_75 (T4), sm_80 (A100), sm_86 (A10, RTX 30xx), sm_89 (L4, RTX 40xx)
and sm_90 (H100/H200). A row fails on a compile error, on shared memory over
the target's per-block limit, or on spilled registers over
`launch.MAX_SPILL_BYTES` (0: a spill is a slowdown that a config change
removes). The table is printed (``pytest -s``) and saved to
test-artifacts/kernels/compile_table.txt.

It runs in a fresh process (the interpreter must be off there) with two
workers and an empty Triton cache: 77 compiles, 136 s of CPU in all (three
tests, measured with /usr/bin/time on the 2-core machine), so about 70 s on
two idle cores. The last test counts
the compiled variants a sequence growing to 8k tokens needs, the way
Triton's cache keys them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
ARTIFACTS = ROOT / "test-artifacts" / "kernels"

pytest.importorskip("triton", reason="Triton is not installed")
from pagedkit.kernels import launch  # noqa: E402  (after the importorskip)


def run_matrix(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.update(TRITON_CACHE_DIR=str(tmp_path / "triton-cache"), TRITON_DEFAULT_FP_FUSION="1",
               OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, str(HERE / "compile_matrix.py"), *args], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=1800)


def problems(row: dict) -> list[str]:
    where = f"{row['kernel']} [{row['case']}] on sm_{row['arch']} ({row['block']})"
    if row["error"]:
        return [f"{where}: {row['error']}"]
    found = []
    if row["shared_bytes"] > row["shared_limit"]:
        found.append(f"{where}: {row['shared_bytes']} B of shared memory, over the "
                     f"{row['shared_limit']} B a block may use there")
    if row["spill_bytes"] > launch.MAX_SPILL_BYTES:
        found.append(f"{where}: spills {row['spill_bytes']} B of registers "
                     f"({row['registers']} used), budget {launch.MAX_SPILL_BYTES} B")
    return found


def test_every_kernel_compiles_fits_and_does_not_spill_on_every_target(tmp_path):
    out_json = tmp_path / "rows.json"
    out = run_matrix(tmp_path, "--json", str(out_json), "--workers", "2")
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-4000:]
    print("\n" + out.stdout)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / "compile_table.txt").write_text(out.stdout)
    rows = json.loads(out_json.read_text())
    # the matrix is what it claims: every target, kernel, dtype and option switch
    assert {r["arch"] for r in rows} == set(launch.TARGETS)
    for arch in launch.TARGETS:
        kernels = {r["kernel"] for r in rows if r["arch"] == arch}
        assert kernels == {"decode", "decode_split", "split_reduce", "prefill"}, arch
    assert {c.split()[1] for c in (r["case"] for r in rows)} == {"fp16", "bf16", "fp32"}
    assert any("window softcap sinks" in r["case"] for r in rows if r["kernel"] == "prefill")
    assert any("window softcap sinks" in r["case"] for r in rows
               if r["kernel"] == "decode_split")
    found = [p for row in rows for p in problems(row)]
    assert not found, "\n".join(found)


def test_problems_are_named():
    """The failure messages of the test above, on made-up rows."""
    row = dict(kernel="prefill", case="prefill fp32 d256", arch=86, block="m64 n64 w4 s3",
               error=None, registers=255, spill_bytes=1008, shared_bytes=115200,
               shared_limit=101376)
    found = problems(row)
    assert "115200 B of shared memory, over the 101376 B" in found[0]
    assert "spills 1008 B of registers (255 used), budget 0 B" in found[1]
    assert problems(dict(row, error="PTXASError: ptxas died")) == [
        "prefill [prefill fp32 d256] on sm_86 (m64 n64 w4 s3): PTXASError: ptxas died"]
    assert problems(dict(row, spill_bytes=0, shared_bytes=1024)) == []


def test_a_growing_generation_compiles_each_decode_kernel_a_handful_of_times(tmp_path):
    """One sequence growing to 8,192 tokens on a 132-SM GPU: the split count goes
    from 1 to 32, which used to be a compile-time constant (65 decode and 31
    reduce variants, each 1-4 s of compiling mid-generation). Now: the
    single-pass and the split decode kernel and one reduce kernel."""
    out_json = tmp_path / "counts.json"
    out = run_matrix(tmp_path, "--count-variants", "--json", str(out_json))
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-4000:]
    counts = json.loads(out_json.read_text())
    print(counts)
    assert counts == {"_paged_decode_kernel": 2, "_split_k_reduce_kernel": 1}
