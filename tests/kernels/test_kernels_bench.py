"""`python -m pagedkit bench kernels --quick` runs end to end and writes a well-formed report.

Timings are not checked (a benchmark measures; it does not pass or fail);
the report's structure, and that every timed implementation agreed with
SDPA on the numbers it timed, are.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from pagedkit.bench import kernels as bench
from pagedkit.kernels import cpu_decode


def run_bench(*args):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    return subprocess.run([sys.executable, "-m", "pagedkit.bench", *args], capture_output=True,
                          text=True, env=env, timeout=600)


def check_rows(rows, rate_key, cpu):
    assert rows
    for row in rows:
        assert set(row["shape"]) >= {"batch", "dtype", "block_size", "num_q_heads",
                                     "num_kv_heads", "head_dim"}
        if "skipped" in row:
            continue
        assert row["reference_max_abs_diff"] < 1e-3
        if "paged_max_abs_diff" in row:
            assert row["paged_max_abs_diff"] < 1e-2
            assert row["paged_over_sdpa"] > 0
        timed = 0
        names = ["paged_triton", "sdpa_contiguous", "gather_sdpa_reference"]
        if cpu:  # the paths the engine runs on a CPU, timed there
            assert row["batched_max_abs_diff"] < 1e-3
            names.append("batched_torch")
            if "c_kernel_max_abs_diff" in row:  # decode, where the C kernel builds
                assert row["c_kernel_max_abs_diff"] < 1e-3
                names.append("c_kernel")
        assert sorted(row["results"]) == sorted(names)
        for name in names:
            result = row["results"][name]
            if "skipped" in result:
                assert name == "paged_triton" and result["skipped"]
                continue
            assert result["ms"] > 0 and result[rate_key] > 0
            timed += 1
        assert timed >= 2


def test_quick_run_writes_the_report(tmp_path):
    path = tmp_path / "kernels.json"
    out = run_bench("kernels", "--quick", "--json", str(path))
    assert out.returncode == 0, out.stderr
    assert "decode:" in out.stdout and "prefill:" in out.stdout
    report = json.loads(path.read_text())
    assert report["benchmark"] == "kernels" and report["quick"] is True
    assert {"type", "name", "peak_bytes_per_s"} <= set(report["device"])
    assert {"pagedkit", "torch", "triton", "python"} <= set(report["versions"])
    cpu = report["device"]["type"] == "cpu"
    check_rows(report["decode"], "gb_per_s", cpu)
    check_rows(report["prefill"], "tflop_per_s", cpu)
    if report["device"]["type"] == "cpu":
        assert report["triton_kernels"].startswith("not timed: no GPU")
    # a header promises a percentage of peak only where a peak is known (newcomer 31, N8)
    assert ("% of peak" in out.stdout) == (report["device"]["peak_bytes_per_s"] is not None)


def test_usage_errors():
    out = run_bench()
    assert out.returncode == 2
    assert "usage: python -m pagedkit bench {engine, kernels, widgets," in out.stderr
    out = run_bench("kernels", "--bogus")
    assert out.returncode == 2 and "unrecognized arguments: --bogus" in out.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="the GPU grid is a GPU's job")
def test_without_a_gpu_bench_kernels_runs_the_cpu_grid_and_says_so(tmp_path):
    """`python -m pagedkit bench kernels` on a CPU used to stop with 'pass --quick'."""
    path = tmp_path / "kernels.json"
    out = subprocess.run([sys.executable, "-m", "pagedkit", "bench", "kernels", "--json",
                          str(path)], capture_output=True, text=True, timeout=600,
                         env={k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("note: no GPU (cpu): running the small CPU grid (as --quick)")
    report = json.loads(path.read_text())
    assert report["quick"] is True and report["device"]["type"] == "cpu"
    # docs/benchmarks.md ("The kernels") names every implementation a CPU run times
    timed = {name for row in report["decode"] + report["prefill"]
             for name, result in row["results"].items() if "ms" in result}
    c_kernel = {"c_kernel"} if cpu_decode.unavailable() is None else set()
    assert timed == {"sdpa_contiguous", "gather_sdpa_reference", "batched_torch"} | c_kernel
    docs = Path(__file__).resolve().parents[2] / "docs" / "benchmarks.md"
    section = docs.read_text().split("## The kernels", 1)[1].split("\n## ", 1)[0]
    assert all(f"`{name}`" in section for name in timed), timed
    check_rows(report["decode"], "gb_per_s", cpu=True)


@pytest.mark.parametrize("q_len,context", [(4, 4), (2, 5)])
def test_causal_flops_counts_visible_pairs(q_len, context):
    shape = bench.PrefillShape(3, q_len, context, "float32", num_q_heads=2, head_dim=8)
    pairs = sum(context - q_len + j + 1 for j in range(q_len))
    assert bench.causal_flops(shape) == 4 * 3 * pairs * 2 * 8


def test_paged_copy_holds_the_contiguous_tokens():
    contiguous = torch.randn(2, 3, 8, 4)          # [batch, kv_heads, context, head_dim]
    tables = torch.tensor([[3, 1], [2, 0]], dtype=torch.int32)
    cache = bench.paged_copy(contiguous, 4, tables)
    for b in range(2):
        for t in range(8):
            block, offset = tables[b, t // 4], t % 4
            assert torch.equal(cache[block, offset], contiguous[b, :, t])


@pytest.mark.parametrize("quick", [True, False])
@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_decode_and_prefill_rows_line_up(device, quick):
    """Every row's label is as wide, its dtype in one column (the CPU grid's
    prefill rows, "2 x 128/128", once pushed theirs right)."""
    shapes = (bench.decode_shapes(torch.device(device), quick)
              + bench.prefill_shapes(torch.device(device), quick))
    labels = [bench.shape_label(s) for s in shapes]
    assert len({len(label) for label in labels}) == 1, labels
    assert len({label.index(s.dtype) for label, s in zip(labels, shapes, strict=True)}) == 1
