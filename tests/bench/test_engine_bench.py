"""The engine benchmark and the demo run end to end (numbers are printed by
the benchmark, never asserted: speed lives in benchmarks, not tests)."""

import json

import pytest
import torch

from pagedkit.__main__ import main as cli
from pagedkit.bench.engine import (
    PROFILE_PARTS,
    SYSTEMS,
    Report,
    Result,
    benchmark,
    build_model,
    floor_line,
    format_report,
    profile_pagedkit,
    run_floor,
    run_pagedkit,
    sharegpt_workload,
)


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
    assert "mean over the steps" in out and "greedy" not in out


@pytest.mark.parametrize("argv, said", [(["-n", "3"], True), (["-n", "3", "--temperature", "0.8"],
                                                               False), (["-n", "1"], False)])
def test_demo_says_when_its_completions_are_greedy_copies(capsys, argv, said):
    """Sixth newcomer's N16: -n 3 at the default temperature 0 printed three
    equal completions per prompt without a word."""
    assert cli(["demo", "--max-tokens", "2", "--num-blocks", "64", "--no-progress", *argv]) == 0
    out = capsys.readouterr().out
    assert ("temperature 0 is greedy: a prompt's 3 completions are the same" in out) is said


def test_cli_usage(capsys):
    assert cli([]) == 2
    assert "simulate" in capsys.readouterr().err


def test_unknown_systems_are_a_usage_error_listing_the_valid_ones(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli(["bench", "--systems", "foo"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "foo" in err and all(name in err for name in SYSTEMS)
    with pytest.raises(ValueError, match="unknown system"):
        benchmark("tiny", num_requests=2, systems=("pagedkit", "hf_generate"), log=lambda s: 0)
    with pytest.raises(ValueError, match="rounds"):
        benchmark("tiny", num_requests=2, systems=("pagedkit",), rounds=0, log=lambda s: 0)


def test_floor_computes_the_same_tokens_as_pagedkit():
    """The floor is a throughput bound only if it does the same work: its greedy
    tokens equal pagedkit's (mixed prompt and output lengths, one-token outputs)."""
    work = sharegpt_workload(6, 1000, scale=0.125, max_len=256, seed=3)
    work.output_lens[0] = 1
    paged, paged_tokens = run_pagedkit(build_model("tiny", "cpu"), work, 16)
    floor, floor_tokens = run_floor(build_model("tiny", "cpu"), work)
    assert floor_tokens == paged_tokens
    assert floor.output_tokens == paged.output_tokens == work.num_output_tokens


def test_rounds_progress_floor_share_and_profile(capsys):
    lines = []
    report = benchmark("tiny", num_requests=3, systems=("pagedkit", "floor"), rounds=2,
                       profile=True, log=lines.append)
    assert sum("running pagedkit (round" in line for line in lines) == 2
    assert [r.system for r in report.results] == ["pagedkit", "floor"]
    assert all(len(r.round_seconds) == 2 and r.outputs_differing == 0 for r in report.results)
    assert report.share_of_floor() is None or 0 < report.share_of_floor() <= 1
    parts = report.profile["seconds"]
    assert set(parts) == set(PROFILE_PARTS)
    assert parts["attention"] > 0 and parts["linear layers"] > 0 and parts["scheduling"] > 0
    assert abs(sum(parts.values()) - report.profile["total_s"]) < 1e-6
    text = format_report(report)
    assert "a share of the floor's" in text and "attention" in text
    json.dumps(report.as_dict())


def test_profile_leaves_the_engine_code_as_it_was():
    from pagedkit import ops

    def code():
        return ops.paged_decode_attention, ops.paged_prefill_attention, ops.store_kv

    before = code()
    import torch.nn.functional as F

    from pagedkit.model import accel

    linear, packed = F.linear, accel.packed_linear
    work = sharegpt_workload(2, 1000, scale=0.05, max_len=64, seed=1)
    profile_pagedkit(build_model("tiny", "cpu"), work, 16)
    assert code() == before and F.linear is linear and accel.packed_linear is packed


def test_pagedkit_with_and_without_prepacked_linears(monkeypatch):
    """``pagedkit_unpacked`` serves with ``PAGEDKIT_PREPACK=off`` (and leaves the
    variable as it was); with ``on`` the two differ only in the packing."""
    monkeypatch.setenv("PAGEDKIT_PREPACK", "on")
    report = benchmark("tiny", num_requests=3, systems=("pagedkit", "pagedkit_unpacked", "floor"),
                       log=lambda s: 0)
    paged, plain, floor = report.results
    assert [r.system for r in report.results] == ["pagedkit", "pagedkit_unpacked", "floor"]
    assert all(r.outputs_differing == 0 for r in report.results)
    assert "29 of 29" in paged.note and "none (switched off)" in plain.note
    assert "29 of 29" in floor.note  # the floor runs the linear layers pagedkit runs
    assert "pagedkit_unpacked" in format_report(report)
    assert report.as_dict()["results"][1]["system"] == "pagedkit_unpacked"
    import os

    assert os.environ["PAGEDKIT_PREPACK"] == "on"


def test_alpaca_workload_runs_identical_tokens_and_reports_cpu_time_and_load():
    """The second workload (Alpaca-shaped: short prompts, longer answers) runs
    through the systems with identical tokens; the report names it and carries
    CPU time and the load averages; an unknown workload is refused by name."""
    work = sharegpt_workload(64, 1000, scale=1.0, max_len=256, seed=0, dataset="alpaca")
    assert sum(map(len, work.prompts)) / 64 < sum(work.output_lens) / 64  # answers longer
    report = benchmark("tiny", num_requests=4, systems=("pagedkit", "hf_static", "floor"),
                       workload="alpaca", log=lambda s: 0)
    assert report.workload == "alpaca"
    assert all(r.outputs_differing == 0 and r.cpu_seconds > 0 for r in report.results)
    data = report.as_dict()
    assert data["workload"] == "alpaca" and data["results"][0]["tokens_per_cpu_s"] > 0
    assert "workload=alpaca" in format_report(report)
    with pytest.raises(ValueError, match="'lmsys'"):
        benchmark("tiny", num_requests=2, workload="lmsys", log=lambda s: 0)


def test_wall_and_cpu_windows_cover_the_same_serving(monkeypatch):
    """Each runner reads wall and CPU time at the same two points (`_clocks`),
    so the two windows cover the same work. A fake clock whose CPU reading is
    always 10x its wall reading shows it: a CPU window opened or closed at any
    other point (around the system's setup, say, as it once was) would not be
    exactly 10x the wall window."""
    from pagedkit.bench import engine

    readings = []

    def fake_clocks():
        readings.append(len(readings) + 1)
        return float(readings[-1]), 10.0 * readings[-1]

    monkeypatch.setattr(engine, "_clocks", fake_clocks)
    # (hf_continuous reads `_clocks` alike; its manager's start and stop would
    # add a minute of CI time here)
    systems = ("pagedkit", "hf_static", "floor")
    report = benchmark("tiny", num_requests=2, systems=systems, log=lambda s: 0)
    assert [r.system for r in report.results] == list(systems)
    # one untimed warm-up and one timed run per system, two readings each
    assert len(readings) == 2 * 2 * len(systems)
    for r in report.results:
        assert r.seconds == 1.0 and r.cpu_seconds == 10.0, r


def test_floor_equals_transformers_generate_through_every_bucket_layout(monkeypatch):
    """The floor's greedy tokens equal transformers' own `generate`, one request
    at a time (no padding, its own cache), on a mix that runs every layout of
    the floor's per-step plan: a prefill of unequal prompts (padded queries),
    steps of several buckets, single-bucket decode steps in packed order, and
    buckets of one request."""
    import torch

    from pagedkit.bench import floor

    work = sharegpt_workload(12, 1000, scale=0.25, max_len=512, seed=5)
    work.output_lens[:3] = [1, 2, 40]
    model = build_model("tiny", "cpu")
    with torch.inference_mode():
        expected = [model.generate(torch.tensor([p]), max_new_tokens=o, min_new_tokens=o,
                                   do_sample=False, eos_token_id=None, pad_token_id=0
                                   )[0, len(p):].tolist()
                    for p, o in zip(work.prompts, work.output_lens, strict=True)]
    plans = []
    plan = floor._step_buckets
    monkeypatch.setattr(floor, "_step_buckets", lambda *a: plans.append(plan(*a)) or plans[-1])
    _, tokens = run_floor(build_model("tiny", "cpu"), work)
    assert tokens == expected
    assert not plans[0].in_order and not plans[0].buckets[0].is_query.all()
    assert any(len(p.buckets) > 1 for p in plans) and any(p.in_order for p in plans)
    # a bucket of one request, read in place, its decode without a mask
    assert any(b.row is not None and b.bias is None for p in plans for b in p.buckets)
    assert any(len(b.seqs) > 1 and b.gathered for p in plans for b in p.buckets)


def _floor_report(paged: tuple[float, float], floor: tuple[float, float]) -> Report:
    """A report of 100 tokens each, from (wall s, CPU s) per system."""
    report = Report("tiny", "cpu", 4, 10.0, 25.0,
                    environment={"load_average": [1.0], "load_average_end": [7.5]})
    for name, (wall, cpu) in (("pagedkit", paged), ("floor", floor)):
        report.results.append(Result(name, wall, 100, 0.1, 0.1, None, cpu_seconds=cpu))
    return report


@pytest.mark.parametrize("paged, floor, wall, cpu", [
    ((2.0, 1.5), (1.0, 1.0), 0.5, 1 / 1.5),
    ((1.0, 2.0), (2.0, 1.0), None, 0.5),     # the floor's run was slowed
    ((1.0, 1.0), (2.0, 2.0), None, None),    # both: no share at all
    ((1.0, 1.0), (1.0, 1.0), 1.0, 1.0),
])
def test_a_share_of_the_floor_over_100_percent_is_refused(paged, floor, wall, cpu):
    """Issue #26: a busy machine printed "pagedkit runs at 264.7% of the floor".
    The floor bounds every engine, so a share over 100% says the load moved
    between the runs: the line says so (with the loads) instead of a number."""
    report = _floor_report(paged, floor)
    line = floor_line(report)
    assert report.share_of_floor() == pytest.approx(wall)
    assert report.share_of_floor("tokens_per_cpu_s") == pytest.approx(cpu)
    for share, what in ((wall, "wall"), (cpu, "CPU")):
        assert (f"{share:.1%} in {what} time" in line) if share else (f"{what} time" in line)
    refused = wall is None or cpu is None
    assert ("measured faster than the floor" in line) == refused
    assert ("load [1.0] -> [7.5]" in line) == refused
    d = report.as_dict()
    assert d["pagedkit_share_of_floor"] == pytest.approx(wall)
    assert d["pagedkit_share_of_floor_cpu"] == pytest.approx(cpu)


def test_hf_continuous_agrees_and_says_nothing_of_its_own(capfd):
    """Newcomer finding 15: transformers' manager warned twice per run that
    eos_token_id was not set (and set it to -1, disabled). It is given -1
    outright, what the run means (every request runs to its length)."""
    report = benchmark("tiny", num_requests=2, systems=("pagedkit", "hf_continuous"),
                       log=lambda s: 0)
    assert [r.outputs_differing for r in report.results] == [0, 0]
    assert report.results[0].output_tokens == report.results[1].output_tokens > 0
    captured = capfd.readouterr()
    assert "eos_token_id" not in captured.err + captured.out


@pytest.mark.parametrize("mode, width", [("auto", 64), ("auto", 256), ("on", 64), ("off", 256)])
def test_the_prepack_note_says_why_when_none_are_prepacked(monkeypatch, mode, width):
    """Fourth newcomer, F12: 'prepacked linear layers: 0 of 29' alone reads
    as a fault; with none prepacked the note keeps why (a 64-wide model's
    layers are below auto's rule; off switches packing off), with some it
    stays short."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from pagedkit import LLM
    from pagedkit.bench.engine import prepack_note

    monkeypatch.setenv("PAGEDKIT_PREPACK", mode)
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=128, hidden_size=width, intermediate_size=2 * width,
                         num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=64)
    model = LLM(LlamaForCausalLM(config).eval(), num_blocks=4).llm_engine.runner.model
    report, note = model.pagedkit_prepack, prepack_note(model)
    if report.replaced:
        assert note == str(report).split(";")[0] and f"{len(report.replaced)} of" in note
        assert mode == "on" or width == 256
    else:
        assert note == str(report)
        why = ("the model's narrowest packable linear layer has 64 inputs" if mode == "auto"
               else "none (switched off)")
        assert why in note, note


def test_no_progress_leaves_the_reports_and_the_failures(capsys, monkeypatch):
    """``bench --no-progress`` (for logs and CI): stdout holds the report and
    any system that failed, not which system runs nor its progress lines."""
    from pagedkit.bench import engine as engine_bench

    def broken(*args, **kwargs):
        raise RuntimeError("out of order")

    monkeypatch.setattr(engine_bench, "run_hf_static", broken)
    argv = ["--model", "tiny", "--requests", "2", "--systems", "pagedkit,hf_static"]
    assert engine_bench.main(argv) == 0
    out = capsys.readouterr().out
    assert "running pagedkit" in out and "hf_static failed: RuntimeError: out of order" in out
    assert engine_bench.main([*argv, "--no-progress"]) == 0
    quiet = capsys.readouterr().out
    assert "running" not in quiet and "output tok/s (" not in quiet
    assert "hf_static failed: RuntimeError: out of order" in quiet
    assert "model=tiny" in quiet and "\npagedkit " in quiet


def test_pagedkit_with_and_without_fused_projections(monkeypatch):
    """``pagedkit_unfused`` serves with ``PAGEDKIT_FUSE=off`` (and puts the
    variable back); with ``PAGEDKIT_FUSE=on`` the two differ only in the fusion."""
    monkeypatch.setenv("PAGEDKIT_PREPACK", "on")
    monkeypatch.setenv("PAGEDKIT_FUSE", "on")
    report = benchmark("tiny", num_requests=3, systems=("pagedkit", "pagedkit_unfused"),
                       log=lambda s: 0)
    fused, unfused = report.results
    assert [r.system for r in report.results] == ["pagedkit", "pagedkit_unfused"]
    assert all(r.outputs_differing == 0 for r in report.results)
    assert "29 of 29, 8 groups fused (on)" in fused.note
    assert "29 of 29" in unfused.note and "fused" not in unfused.note
    import os

    assert os.environ["PAGEDKIT_FUSE"] == "on"


@pytest.mark.parametrize("batch_size, note", [
    (16, "all 3 requests in one batch (batches of up to 16)"), (2, "batches of 2")])
def test_the_static_batches_note_says_what_ran(batch_size, note):
    """Newcomer 34 read "one batch of 8 (batch size 16)" as a contradiction."""
    from pagedkit.bench.engine import run_hf_static

    work = sharegpt_workload(3, 1000, scale=0.05, max_len=64, seed=1)
    result, _tokens = run_hf_static(build_model("tiny", "cpu"), work, batch_size, pad_id=0)
    assert result.note == note


@pytest.mark.parametrize("given, named", [
    (["--requests", "5"], "--requests"), (["--model", "larger"], "--model"),
    (["--requests", "64"], "--requests"),  # even the default's value, given
    (["--model", "tiny", "--requests", "8"], "--model and --requests")])
def test_quick_refuses_the_options_it_would_override(given, named, capsys):
    """Newcomer 36: `bench --quick --requests 5` ran 8 requests, `--quick --model
    larger` the tiny model, saying so only in its header."""
    from pagedkit.bench.engine import main

    with pytest.raises(SystemExit) as stopped:
        main(["--quick", *given])
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert f"--quick runs 8 requests on the tiny model, so it takes no {named}" in err, err
