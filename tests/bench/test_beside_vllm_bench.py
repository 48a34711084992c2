"""`python -m pagedkit bench vllm`: the command of each cell and the table it
writes from the cells' JSON (the runs themselves need vLLM and time: they are
benchmarks, docs/benchmarks.md)."""

import json
import sys
from pathlib import Path

import pytest

from pagedkit.bench import beside_vllm as bv
from pagedkit.bench.engine import benchmark


def report(model, n, rates, differing=(0, 0), uptime=None):
    results = [{"system": s, "tokens_per_s": r, "tokens_per_cpu_s": r / 2, "ttft_mean_s": 0.25,
                "outputs_differing": d} for s, r, d in zip(("pagedkit", "vllm"), rates,
                                                          differing, strict=False)]
    out = {"model": model, "num_requests": n, "results": results,
           "environment": {"load_average": [1.0, 0.5, 0.25], "load_average_end": [2.0, 1.0, 0.5]}}
    if uptime:
        out["uptime"] = uptime
    return out


def test_each_cell_is_one_bench_engine_command():
    argv = bv.engine_argv("larger", 64, "1", "out/larger-b64-t1.json")
    assert argv[0] == sys.executable and argv[1:] == [
        "-m", "pagedkit", "bench", "engine", "--model", "larger", "--requests", "64",
        "--systems", "pagedkit,vllm", "--rounds", "1", "--json", "out/larger-b64-t1.json",
        "--threads", "1"]
    assert "--threads" not in bv.engine_argv("tiny", 1, "default", "x.json")


def test_no_progress_is_passed_on_to_each_cell():
    """``bench vllm --no-progress`` leaves out its bench engine runs' progress
    lines: it passes the option on (tenth newcomer's N6)."""
    from pagedkit.bench.engine import _parser

    for threads in ("1", "default"):
        argv = bv.engine_argv("tiny", 8, threads, "x.json", progress=False)
        assert argv[3:5] == ["bench", "engine"] and argv[-1] == "--no-progress"
        assert _parser().parse_args(argv[5:]).no_progress is True
        assert "--no-progress" not in bv.engine_argv("tiny", 8, threads, "x.json")


def test_the_table_has_both_systems_the_ratio_and_the_load_and_names_missing_cells(tmp_path):
    up = {"before": "03:33:14 up 3:09,  0 user,  load average: 1.32, 0.98, 1.01",
          "after": "03:33:33 up 3:09,  0 user,  load average: 1.87, 1.13, 1.06"}
    (tmp_path / "tiny-b8-t1.json").write_text(json.dumps([report("tiny", 8, (100.0, 150.0),
                                                                 uptime=up)]))
    (tmp_path / "tiny-b8-tdefault.json").write_text(json.dumps([report("tiny", 8, (80.0,))]))
    table = bv.markdown(tmp_path, ("tiny",), (8, 64), ("1", "default")).splitlines()
    assert table[2] == ("| tiny | 8 | 1 | pagedkit | 100.0 | 1.00 | 50.0 | 0.25 s | 0 "
                        "| 1.32, 0.98, 1.01 -> 1.87, 1.13, 1.06 |")
    assert table[3] == "| tiny | 8 | 1 | vllm | 150.0 | 1.50 | 75.0 | 0.25 s | 0 |  |"
    assert table[4].endswith("| [1.0, 0.5, 0.25] -> [2.0, 1.0, 0.5] |")  # no uptime: the JSON's
    assert table[5].startswith("| tiny | 8 | default | vllm | failed")  # vLLM did not run
    assert table[6].startswith("| tiny | 64 | 1 | | not run (tiny-b64-t1.json missing)")
    assert len(table) == 8


def test_the_table_goes_between_the_markers_or_nowhere(tmp_path):
    doc = tmp_path / "doc.md"
    doc.write_text(f"before\n{bv.START}\nold\n{bv.END}\nafter\n")
    bv.write_table(doc, "| new |")
    assert doc.read_text() == f"before\n{bv.START}\n| new |\n{bv.END}\nafter\n"
    doc.write_text("no markers")
    with pytest.raises(ValueError, match=r"no .* markers"):
        bv.write_table(doc, "| new |")
    assert doc.read_text() == "no markers"


@pytest.mark.parametrize("argv, message", [
    (["--models", "huge"], "--models: ['huge']; choose from tiny, larger"),
    (["--threads", "2"], "--threads: ['2']; choose from 1, default"),
    (["--requests", "eight"], "--requests: expected a whole number >= 1, got 'eight'"),
    (["--requests", "0"], "--requests: must be >= 1, got 0"),
    # newcomer finding 4: a page relative to the cwd was a FileNotFoundError traceback
    (["--doc", "nowhere/benchmarks.md"], "--doc nowhere/benchmarks.md: no such file"),
])
def test_bad_options_are_usage_errors(argv, message, capsys, tmp_path):
    with pytest.raises(SystemExit):
        bv.main([*argv, "--out", str(tmp_path), "--table-only"])
    assert message in capsys.readouterr().err


def test_one_request_runs_its_warm_up_too():
    """The warm-up serves the first two prompts: with one request, one."""
    report = benchmark("tiny", num_requests=1, systems=("pagedkit",), log=lambda s: 0)
    assert [r.system for r in report.results] == ["pagedkit"]



def test_the_page_is_this_checkouts_wherever_it_runs_from(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    written = []
    monkeypatch.setattr(bv, "write_table", lambda doc, table: written.append(doc))
    assert bv.main(["--out", str(tmp_path / "cells"), "--table-only"]) == 0
    assert written == [bv.DOC] and bv.DOC.is_file()


def _up(before: float, after: float) -> dict:
    line = "12:00:00 up 1:00,  0 user,  load average: {:.2f}, 1.00, 1.00"
    return {"before": line.format(before), "after": line.format(after)}


def test_several_runs_of_a_cell_give_medians_ranges_and_the_ratio_within_each_run(tmp_path):
    """``--repeats``: each figure is the runs' median with their range; the
    ratio is taken run by run (a slow minute slows both systems of its run)."""
    runs = [report("larger", 64, (100.0, 200.0), uptime=_up(1.0, 1.5)),
            report("larger", 64, (300.0, 200.0), differing=(0, 2), uptime=_up(0.5, 0.75)),
            report("larger", 64, (120.0, 100.0), uptime=_up(2.0, 1.25))]
    (tmp_path / "larger-b64-tdefault.json").write_text(json.dumps(runs))
    table = bv.markdown(tmp_path, ("larger",), (64,), ("default",)).splitlines()
    assert table[2] == ("| larger | 64 | default | pagedkit | 120.0 (100.0-300.0, 3 runs) "
                        "| 1.00 (1.00-1.00, 3 runs) | 60.0 (50.0-150.0, 3 runs) "
                        "| 0.25 s (0.25-0.25, 3 runs) | 0 "
                        "| 1 min: 0.50-2.00 -> 0.75-1.50 |")
    # ratios 2.0, 0.667, 0.833: the median ratio is not the ratio of the medians (1.67)
    assert table[3] == ("| larger | 64 | default | vllm | 200.0 (100.0-200.0, 3 runs) "
                        "| 0.83 (0.67-2.00, 3 runs) | 100.0 (50.0-100.0, 3 runs) "
                        "| 0.25 s (0.25-0.25, 3 runs) | 2 |  |")
    assert len(table) == 4


def test_a_run_that_failed_among_several_is_counted_not_hidden(tmp_path):
    runs = [report("tiny", 8, (100.0, 150.0)), report("tiny", 8, (90.0,))]
    (tmp_path / "tiny-b8-t1.json").write_text(json.dumps(runs))
    table = bv.markdown(tmp_path, ("tiny",), (8,), ("1",)).splitlines()
    assert table[2].startswith("| tiny | 8 | 1 | pagedkit | 95.0 (90.0-100.0, 2 runs) |")
    assert table[3].startswith("| tiny | 8 | 1 | vllm | failed in 1 of 2 runs")


def test_repeats_run_the_cells_in_turn_and_each_cell_keeps_its_runs(monkeypatch, tmp_path):
    """Round after round of cells (not one cell's runs back to back); the first
    round replaces a cell's old JSON, later rounds add to it."""
    (tmp_path / "tiny-b1-t1.json").write_text(json.dumps([report("tiny", 1, (1.0, 1.0))]))
    order = []

    def fake_run(argv, check):
        model, n = argv[argv.index("--model") + 1], int(argv[argv.index("--requests") + 1])
        order.append((model, n))
        rate = 10.0 * len(order)
        run = [report(model, n, (rate, rate))]
        Path(argv[argv.index("--json") + 1]).write_text(json.dumps(run))

    monkeypatch.setattr(bv.subprocess, "run", fake_run)
    monkeypatch.setattr(bv, "uptime", lambda: "up,  load average: 1.00, 1.00, 1.00")
    monkeypatch.setattr(bv, "write_table", lambda doc, table: None)
    assert bv.main(["--out", str(tmp_path), "--models", "tiny", "--requests", "1,8",
                    "--threads", "1", "--repeats", "3", "--no-progress"]) == 0
    assert order == [("tiny", 1), ("tiny", 8)] * 3
    rates = {n: [r["results"][0]["tokens_per_s"] for r in
                 json.loads((tmp_path / f"tiny-b{n}-t1.json").read_text())] for n in (1, 8)}
    assert rates == {1: [10.0, 30.0, 50.0], 8: [20.0, 40.0, 60.0]}  # the old run replaced
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tiny-b1-t1.json", "tiny-b8-t1.json"]


@pytest.mark.parametrize("value, message", [
    ("0", "--repeats: must be >= 1, got 0"),
    ("three", "--repeats: expected a whole number >= 1, got 'three'"),
])
def test_bad_repeats_are_usage_errors(value, message, capsys, tmp_path):
    with pytest.raises(SystemExit):
        bv.main(["--repeats", value, "--out", str(tmp_path), "--table-only"])
    assert message in capsys.readouterr().err
