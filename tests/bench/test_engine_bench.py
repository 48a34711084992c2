"""The engine benchmark and the demo run end to end (numbers are printed by
the benchmark, never asserted: speed lives in benchmarks, not tests)."""

import json

from pagedkit.__main__ import main as cli
from pagedkit.bench.engine import benchmark, format_report, sharegpt_workload


def test_workload_is_sharegpt_shaped_and_fits_the_model():
    work = sharegpt_workload(64, 1000, scale=0.125, max_len=128, seed=0)
    assert len(work.prompts) == 64
    assert all(len(p) + o <= 128 for p, o in zip(work.prompts, work.output_lens, strict=True))
    assert all(3 <= t < 1000 for p in work.prompts for t in p)
    mean_out = sum(work.output_lens) / 64
    assert 20 < mean_out < 60  # 338 x 1/8, long-tailed, capped


def test_benchmark_systems_agree_and_report():
    report = benchmark("tiny", num_requests=4, systems=("pagedkit", "hf_static"), log=lambda s: 0)
    assert [r.system for r in report.results] == ["pagedkit", "hf_static"]
    assert all(r.outputs_differing == 0 for r in report.results)
    paged, static = report.results
    assert paged.output_tokens == static.output_tokens > 0
    assert 0 < static.kv_usage <= paged.kv_usage <= 1
    text = format_report(report)
    assert "pagedkit" in text and "hf_static" in text
    json.dumps(report.as_dict())


def test_demo_prints_outputs_and_kv_usage(capsys):
    assert cli(["demo", "--max-tokens", "4", "--num-blocks", "16"]) == 0
    out = capsys.readouterr().out
    assert "'Once upon a time' ->" in out and "KV usage" in out and "tokens/s" in out


def test_cli_usage(capsys):
    assert cli([]) == 2
    assert "simulate" in capsys.readouterr().err
