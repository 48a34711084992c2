"""`python -m pagedkit bench vllm`: the command of each cell and the table it
writes from the cells' JSON (the runs themselves need vLLM and time: they are
benchmarks, docs/benchmarks.md)."""

import json
import sys

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
