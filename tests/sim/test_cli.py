import json
import re
import subprocess
import sys

import pytest

from pagedkit.sim import paper
from pagedkit.sim.cli import main
from pagedkit.sim.report import compare, format_table


@pytest.fixture(scope="module")
def quick_report():
    return compare("quick")


def test_report_sets_every_paper_number_beside_ours(quick_report):
    rows = quick_report.rows
    figures = {r.figure for r in rows}
    assert {"Table 1", "Fig. 11", "Fig. 2", "Fig. 12", "Fig. 13", "Fig. 15",
            "Fig. 18b"} <= figures
    fig13 = [r for r in rows if r.figure == "Fig. 13" and r.quantity.startswith("batched")]
    assert len(fig13) == 8 and {r.paper for r in fig13} >= set(paper.FIG13_BATCH["alpaca"]
                                                                 .values())
    computed = [r for r in rows if r.figure == "Fig. 13" and r.note == "scheduled"]
    assert len(computed) == 2 and all(r.paper == "not reported" for r in computed)
    assert all(isinstance(r.ours, (int, float, str)) and r.note for r in rows)
    table = format_table(quick_report)
    assert "Orca (Oracle)" in table and "first-fit" in table
    assert format_table(quick_report, markdown=True).startswith("| figure | quantity |")


def test_main_prints_json(capsys, monkeypatch, quick_report):
    monkeypatch.setattr("pagedkit.sim.cli.compare", lambda *a, **k: quick_report)
    assert main(["--scale", "quick", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["scale"] == "quick" and out["speed"]["iterations"] > 0
    slots = next(r for r in out["rows"] if r["figure"] == "Table 1")
    assert (slots["ours"], slots["paper"]) == (15_728, 15_700)
    assert set(out["notes"]) >= {"max", "speed", "lengths"}


def test_one_trace_mode(capsys, tmp_path):
    assert main(["--dataset", "alpaca", "--rate", "5", "--requests", "25", "--manager",
                 "paged:8", "--manager", "oracle", "--json", "--no-progress"]) == 0
    runs = json.loads(capsys.readouterr().out)
    assert [r["manager"] for r in runs] == ["vLLM (block 8)", "Orca (Oracle)"]
    assert all(r["requests"] == 25 and r["aborted"] == 0 for r in runs)
    path = tmp_path / "t.csv"
    path.write_text("prompt_len,output_len,arrival\n10,5,0\n20,3,0.5\n")
    assert main(["--trace", str(path), "--manager", "pow2", "--no-progress"]) == 0
    assert "Orca (Pow2)" in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["--dataset", "alpaca"], "--dataset needs --rate"),
    (["--dataset", "alpaca", "--rate", "2", "--manager", "lru"], "manager kind must be"),
    *[(["--dataset", "alpaca", "--rate", "2", "--manager", kind],
       f"manager kind must be 'max', 'pow2', 'oracle', 'paged' or 'paged:BLOCK_SIZE' "
       f"(e.g. 'paged:32'); got {kind!r}") for kind in ("foo", "lru", "page")],
    *[(["--dataset", "alpaca", "--rate", "2", "--requests", "3", *more, "--manager",
        f"paged:{size}"], f"argument --manager: paged:{size}: a block of {size} slots is more "
       f"than {model}'s {slots:,} KV slots; use a block size of {slots} or less")
      for size in (15729, 100000) for more, model, slots in (([], "opt-13b", 15728),)],
    # fifth newcomer's N18: 2e9 requests were drawn until the OOM killer took a 23 GB machine
    *[(["--dataset", "sharegpt", "--rate", rate, *size], f"--dataset sharegpt: {asked} is more "
       "than a synthetic trace holds (1,000,000")
      for rate, size, asked in (
          ("2", ["--duration", "1e9"], "rate 2 req/s x duration 1e+09 s = 2,000,000,000 requests"),
          ("2", ["--duration", "500000.5"],
           "rate 2 req/s x duration 500000 s = 1,000,001 requests"),
          ("55", ["--requests", "1000001"], "--requests 1,000,001"),
          ("1", ["--requests", "2000000000"], "--requests 2,000,000,000"))],
    *[(["--trace", missing, "--rate", "1"], f"--trace: {missing}: no such trace file")
      for missing in ("/nonexist", "/nonexist.json", "/nonexist.csv", "/tmp")],
    (["--dataset", "alpaca", "--rate", "2", "--manager", "paged:big"],
     "must be a whole number of tokens"),
    (["--dataset", "alpaca", "--rate", "2", "--manager", "pow2:16"],
     "only the paged manager takes a block size"),
    (["--trace", "{csv}", "--duration", "60"], "--duration draws a synthetic trace"),
    (["--trace", "{csv}", "--dataset", "alpaca"], "not both"),
    (["--trace", "{bare}"], "no arrival times (a column arrival, arrival_time, timestamp, or a "
                            "third value after each [prompt, output] pair); pass --rate "
                            "(requests/s)"),
    (["--benchmark", "--batching", "static"], "--batching: for one trace's run only"),
    (["--scale", "quick", "--manager", "max", "--preemption", "swap"],
     "--manager, --preemption: for one trace's run only"),
    (["--rate", "3"], "--rate: for one trace's run only; give --dataset or --trace too"),
    *[([*one, *extra], f"{given}: for the paper comparison (--scale, --markdown) or the "
                       "benchmarks (--benchmark, --benchmark-scheduler) only, not with "
                       "--dataset or --trace")
      for one in (["--dataset", "alpaca", "--rate", "2"], ["--trace", "{csv}"])
      for extra, given in ((["--scale", "quick"], "--scale"), (["--scale", "full"], "--scale"),
                           (["--markdown"], "--markdown"), (["--benchmark"], "--benchmark"),
                           (["--benchmark-scheduler"], "--benchmark-scheduler"),
                           (["--scale", "quick", "--markdown"], "--scale, --markdown"))],
])
def test_bad_arguments_are_argparse_errors(argv, message, capsys, tmp_path):
    """A mistake ends in a usage message naming it (exit status 2), not a traceback
    and not a silently ignored option."""
    (tmp_path / "t.csv").write_text("prompt_len,output_len,arrival\n10,5,0\n")
    (tmp_path / "bare.csv").write_text("prompt_len,output_len\n10,5\n")
    argv = [a.format(csv=tmp_path / "t.csv", bare=tmp_path / "bare.csv") for a in argv]
    with pytest.raises(SystemExit) as exit_:
        main([*argv, "--no-progress"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "usage: python -m pagedkit simulate" in err and message in err


def test_the_command_line_and_the_simulator_default_to_the_same_prefill():
    import inspect

    from pagedkit.sim import Simulator
    from pagedkit.sim.cli import _parser
    from pagedkit.sim.experiments import PAPER_OPTIONS

    default = inspect.signature(Simulator).parameters["prefill"].default
    assert _parser().parse_args([]).prefill == default == PAPER_OPTIONS["prefill"] == "separate"
    assert "separate (default" in _parser().format_help()


def test_python_dash_m_pagedkit_sim_without_torch():
    code = ("import sys, runpy; sys.argv = ['x', '--dataset', 'alpaca', '--rate', '5', "
            "'--requests', '5', '--manager', 'paged', '--json']\n"
            "try:\n    runpy.run_module('pagedkit.sim', run_name='__main__')\n"
            "except SystemExit as e:\n    assert e.code == 0\n"
            "print('torch' in sys.modules, file=sys.stderr)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout)[0]["requests"] == 5
    assert out.stderr.strip().splitlines()[-1] == "False"


def test_scheduler_benchmark_runs_the_engine_scheduler_to_the_end(capsys, monkeypatch):
    """The measurement behind docs/simulator.md's "One scheduler ...?": every
    request of the trace finishes through the real Scheduler (a short trace here)."""
    from pagedkit.sim import report

    row = report.scheduler_benchmark(duration=60.0)
    assert row["finished"] == row["requests"] > 100 and row["iterations"] > row["requests"]
    assert row["cpu_seconds"] > 0 and row["simulated_seconds"] >= 60
    monkeypatch.setattr("pagedkit.sim.cli.scheduler_benchmark", lambda seed: dict(row))
    assert main(["--benchmark-scheduler", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == [row]


@pytest.mark.parametrize("lengths, aborted", [
    ([(100000, 10), (10, 5)], [0]), ([(2040, 9), (2039, 9)], [0]),
    ([(10, 5)], []), ([(3000, 1)] * 5, [0, 1, 2, 3, 4])])
def test_aborted_requests_are_said_under_the_table(capsys, tmp_path, lengths, aborted):
    """Fifth newcomer's N20: a request past the model's context was 'aborted' in
    every row, with nan latency, and nothing said why."""
    path = tmp_path / "t.json"
    path.write_text(json.dumps([{"prompt_len": p, "output_len": o} for p, o in lengths]))
    assert main(["--trace", str(path), "--rate", "1", "--manager", "paged", "--no-progress"]) == 0
    out = capsys.readouterr().out
    if not aborted:
        assert "aborted:" not in out
        return
    count = len(aborted)
    assert f"vLLM: {count} request{'s' * (count != 1)} aborted:" in out
    for i in aborted[:3]:
        p, o = lengths[i]
        assert (f"  request {i} (prompt_len {p}, output_len {o}): needs {p + o} tokens > "
                "max_seq_len 2048") in out
    assert ("... and 2 more" in out) == (count == 5)
    # every request aborted: no mean latency exists, and the row says "-", not nan
    # (newcomer 36); --json says null and lists each aborted request's reason
    assert "nan" not in out
    assert (count == len(lengths)) == (out.splitlines()[1].split()[-3] == "-")
    main(["--trace", str(path), "--rate", "1", "--manager", "paged", "--no-progress", "--json"])
    (row,) = json.loads(capsys.readouterr().out, parse_constant=pytest.fail)  # no NaN
    assert (row["normalized_latency_s_per_token"] is None) == (count == len(lengths))
    assert [r["request_id"] for r in row["aborted_requests"]] == aborted
    for r in row["aborted_requests"]:
        p, o = lengths[r["request_id"]]
        assert (r["prompt_len"], r["output_len"]) == (p, o)
        assert r["reason"] == f"needs {p + o} tokens > max_seq_len 2048"


def _simulated(argv, capsys):
    """The command's JSON rows, or its usage error's message."""
    try:
        main([*argv, "--manager", "paged", "--json", "--no-progress"])
    except SystemExit as e:
        assert e.code == 2
        return capsys.readouterr().err.splitlines()[-1].split("error: ", 1)[1]
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("rate", [[], ["--rate", "0.5"]], ids=["no rate", "rate"])
@pytest.mark.parametrize("header", ["arrival,prompt_len,output_len",
                                    "prompt_len,output_len,arrival",
                                    "output_len,arrival,prompt_len", "prompt_len,output_len",
                                    "output_len,prompt_len", "arrival, prompt_len, output_len"])
def test_a_trace_with_a_byte_order_mark_runs_as_without(tmp_path, capsys, header, rate):
    """Newcomer 15, finding 3, on the command line: Excel's "CSV UTF-8" file
    ran with Poisson arrivals in place of its own under --rate, and was refused
    as having no arrival times without it."""
    values = {"arrival": ("0", "0"), "prompt_len": ("10", "20"), "output_len": ("5", "3")}
    names = [n.strip() for n in header.split(",")]
    text = "\n".join([header, *(",".join(values[n][i] for n in names) for i in range(2))])
    outcomes = []
    for bom in ("", "\ufeff"):
        path = tmp_path / f"t{len(bom)}.csv"
        path.write_text(bom + text + "\n", encoding="utf-8")
        got = _simulated(["--trace", str(path), *rate], capsys)
        outcomes.append(got.replace(str(path), "FILE") if isinstance(got, str)
                        else [{k: v for k, v in row.items() if k not in ("trace", "wall_seconds")}
                              for row in got])
    assert outcomes[0] == outcomes[1]
    has_arrivals = "arrival" in names
    if has_arrivals and not rate:  # the newcomer's hand-checked run: 5 steps, mean batch 1.6
        assert (outcomes[1][0]["steps"], outcomes[1][0]["mean_batch_size"]) == (5, 1.6)
    elif has_arrivals:
        assert outcomes[1].startswith("argument --trace: FILE: the file gives every request an "
                                      "arrival")
    elif not rate:
        assert outcomes[1].startswith("argument --trace: FILE: the file has no arrival times")
    else:
        assert outcomes[1][0]["requests"] == 2


# ------------------------------------------------------------ in Chinese
@pytest.fixture
def chinese(monkeypatch):
    """The command line under PAGEDKIT_LANGUAGE=zh-CN; English again afterwards."""
    import pagedkit
    monkeypatch.setenv("PAGEDKIT_LANGUAGE", "zh-CN")
    yield
    pagedkit.set_language("en")


def _run(argv, capsys) -> tuple[int, str, str]:
    from pagedkit.__main__ import main as pagedkit_main
    try:
        code = pagedkit_main(["simulate", *argv, "--no-progress"])
    except SystemExit as e:
        code = e.code
    out = capsys.readouterr()
    return code, out.out, out.err


#: trace files, each refused for another reason: every refusal `load_trace` makes
BAD_FILES = {
    "t.parquet": "x", "empty.csv": "", "words.json": "hello", "list.json": '{"a": 1}',
    "pair.json": "[[1, 2, 3, 4]]", "number.json": "[1]", "none.json": "[]",
    "length.json": "[[1.5, 2]]", "zero.json": "[[0, 2]]", "arrival.json": "[[1, 2, -1]]",
    "order.json": "[[1, 2, 1], [1, 2, 0]]", "half.json": "[[1, 2, 0], [1, 2]]",
    "columns.csv": "x,y\n1,2\n", "semicolon.csv": "prompt_len;output_len\n1;2\n",
    "twice.csv": "prompt_len,Prompt_Len,output_len\n1,1,2\n",
    "bare.csv": "prompt_len,output_len\n1,2\n",
}
#: (arguments, needs the rate): each usage error of simulate that pagedkit words
USAGE_ERRORS = [
    ["--dataset", "alpaca"], ["--dataset", "alpaca", "--rate", "0"],
    ["--dataset", "alpaca", "--rate", "nan"], ["--dataset", "alpaca", "--rate", "2",
                                               "--requests", "0"],
    ["--dataset", "alpaca", "--rate", "2", "--requests", "x"], ["--seed", "-1"], ["--seed", "x"],
    ["--dataset", "alpaca", "--rate", "2", "--duration", "-1"],
    ["--dataset", "alpaca", "--rate", "2", "--duration", "1e9"],
    ["--dataset", "alpaca", "--rate", "2", "--requests", "2000000"],
    *[["--dataset", "alpaca", "--rate", "2", "--manager", kind]
      for kind in ("lru", "paged:0", "paged:big", "pow2:16", "paged:99999")],
    ["--dataset", "alpaca", "--trace", "{dir}/bare.csv"],
    ["--trace", "{dir}/bare.csv", "--duration", "5"], ["--rate", "3"],
    ["--benchmark", "--batching", "static"], ["--trace", "{dir}/bare.csv", "--markdown"],
    ["--trace", "{dir}/bare.csv", "--rate", "1", "--requests", "5"],
    ["--trace", "{dir}/nonexist.csv", "--rate", "1"], ["--trace", "{dir}/arrivals.csv", "--rate",
                                                       "1"],
    *[["--trace", f"{{dir}}/{name}", *([] if name == "bare.csv" else ["--rate", "1"])]
      for name in BAD_FILES],
]
#: what argparse itself says, English and Chinese: pagedkit's catalog speaks for
#: it (i18n.argparse_speaking, docs/i18n.md)
ARGPARSE_OWN = [(["--dataset", "lmsys"], "argument --dataset: invalid choice: 'lmsys'",
                 "参数 --dataset：无效的选择：'lmsys'"),
                (["--model", "gpt"], "argument --model: invalid choice: 'gpt'",
                 "参数 --model：无效的选择：'gpt'"),
                (["--bogus"], "unrecognized arguments: --bogus", "无法识别的参数：--bogus"),
                (["--dataset", "alpaca", "--rate", "2", "--requests", "5", "--duration", "5"],
                 "argument --duration: not allowed with argument --requests",
                 "参数 --duration：不能与参数 --requests 同时使用"),
                (["--rate"], "argument --rate: expected one argument",
                 "参数 --rate：需要一个参数值")]
#: words a Chinese message keeps as they are: names of things, formats, units
KEPT = {"trace", "token", "KV", "vLLM", "JSON", "CSV", "UTF", "dict", "dataset",
        *("prompt", "input", "output", "arrival", "timestamp")}  # a trace file's column names
#: what Python's json module says of a file it cannot read (its own words, as argparse's)
JSON_SAYS = r"(?<=：)Expecting value(?=）)"


def _english_left(message: str) -> list[str]:
    """The English words of a message once its quoted values, option names, file
    names, code (``paged:BLOCK_SIZE``, ``prompt_len``) and `KEPT` words are set aside."""
    rest = re.sub(r"'[^']*'|\"[^\"]*\"|--[\w-]+|/[\w./-]*|\.\w+|\w+[_:.=][\w:.=,]*|\w+-[\w-]+|"
                  + JSON_SAYS, " ", message)
    return [w for w in re.findall(r"[A-Za-z]{2,}", rest) if w not in KEPT]


@pytest.mark.parametrize("argv", USAGE_ERRORS, ids=" ".join)
def test_every_usage_error_speaks_chinese(tmp_path, capsys, chinese, argv):
    """Newcomer 15, finding 10: under zh-CN half of simulate's usage errors were
    English ('argument --rate: expected a finite number > 0', 'no such trace file',
    'manager kind must be ...'). Each is checked here for English words left."""
    for name, text in {**BAD_FILES, "arrivals.csv": "prompt_len,output_len,arrival\n1,2,0\n"
                       }.items():
        (tmp_path / name).write_text(text)
    code, out, err = _run([a.format(dir=tmp_path) for a in argv], capsys)
    assert code == 2 and not out
    message = err.strip().splitlines()[-1].split("：错误：", 1)[1]
    message = re.sub(r"^参数 --[\w-]+(?: \w+)?：", "", message)  # which option (its value)
    assert re.search("[\u4e00-\u9fff]", message) and not _english_left(message), message


@pytest.mark.parametrize("argv, english, chinese_words", ARGPARSE_OWN,
                         ids=[" ".join(a) for a, *_ in ARGPARSE_OWN])
def test_argparses_own_errors_speak_the_language(capsys, monkeypatch, argv, english,
                                                 chinese_words):
    for language, said in (("en", f"simulate: error: {english}"),
                           ("zh-CN", f"simulate：错误：{chinese_words}")):
        monkeypatch.setenv("PAGEDKIT_LANGUAGE", language)
        code, _out, err = _run(argv, capsys)
        assert code == 2 and said in err, err


def test_the_one_trace_table_speaks_chinese_and_its_json_does_not(tmp_path, capsys, chinese,
                                                                  monkeypatch):
    """Finding 10: the table's headers stayed English under zh-CN. The JSON's keys
    are data: the same in every language."""
    path = tmp_path / "t.csv"
    path.write_text("arrival,prompt_len,output_len\n0,10,5\n0,20,3\n")
    argv = ["--trace", str(path), "--manager", "paged", "--manager", "max"]
    tables, jsons = [], []
    for language in ("zh-CN", "en"):
        monkeypatch.setenv("PAGEDKIT_LANGUAGE", language)
        tables.append(_run(argv, capsys)[1].splitlines())
        jsons.append([{k: v for k, v in row.items() if k != "wall_seconds"}
                      for row in json.loads(_run([*argv, "--json"], capsys)[1])])
    # the JSON's rows are the table's columns, and each row's aborted requests
    assert jsons[0] == jsons[1]
    assert [*jsons[0][0]] == [*tables[1][0].split()[:-1], "aborted_requests"]
    header = tables[0][0].split("  ")
    assert [h for h in header if h and re.search("[\u4e00-\u9fff]", h)] and \
        not _english_left(" ".join(header)), tables[0][0]
    assert tables[0][1:] != [] and [r.split()[-2] for r in tables[0][1:]] == \
        [r.split()[-2] for r in tables[1][1:]]  # the numbers are the same


def test_the_comparisons_json_is_english_and_its_table_chinese(capsys, chinese):
    """Finding 10: under zh-CN the JSON's "quantity" (and "not reported") came out
    translated, so a script read language-dependent data."""
    import pagedkit
    from pagedkit.sim.report import Scale

    tiny = Scale("tiny", 20, 5, 10, 10, 10, rate_points=3)
    reports = {}
    for language in ("zh-CN", "en"):
        pagedkit.set_language(language)
        reports[language] = compare(tiny)
    rows = {language: report.as_dict()["rows"] for language, report in reports.items()}
    assert rows["zh-CN"] == rows["en"]
    assert "token states, vLLM" in [r["quantity"] for r in rows["en"]]
    assert "not reported" in [r["paper"] for r in rows["en"]]
    pagedkit.set_language("zh-CN")
    table = format_table(reports["en"])
    assert "外部碎片，Orca (Max)" in table and "token states" not in table
    assert "not reported" not in table


def test_fig12_paper_ranges_only_beside_sharegpt(quick_report):
    """newcomer26 finding 1: §6.2's 1.7-2.7x / 2.7-8x are ShareGPT's (Fig. 12's first
    row); the paper gives Alpaca no number. Every Fig. 12 row: the range beside
    ShareGPT, "not reported" beside Alpaca; the note says so."""
    fig12 = [r for r in quick_report.rows if r.figure == "Fig. 12"]
    assert len(fig12) == 2 * len(paper.FIG12_RATE_GAIN)
    for row in fig12:
        base, dataset = dict(row.values)["base"], dict(row.values)["dataset"]
        low, high = paper.FIG12_RATE_GAIN[base]
        expected = f"{low}-{high}" if dataset == "sharegpt" else "not reported"
        assert row.paper == expected, (row.quantity, row.paper)
    from pagedkit.sim.report import NOTES
    assert "two traces" not in NOTES["knee"] and "ShareGPT" in NOTES["knee"]


def test_simulator_doc_fig12_rows_match_the_rule():
    """docs/simulator.md's table: the same rule for every Fig. 12 row, and note 9."""
    from pathlib import Path
    doc = (Path(__file__).resolve().parents[2] / "docs" / "simulator.md").read_text()
    rows = [line.split(" | ") for line in doc.splitlines() if line.startswith("| Fig. 12 |")]
    assert len(rows) == 4
    for cells in rows:
        base, dataset = re.match(r"rate vLLM sustains / (.+), (\w+)$", cells[1]).groups()
        low, high = paper.FIG12_RATE_GAIN[base]
        assert cells[3] == (f"{low}-{high}" if dataset == "sharegpt" else "not reported")
    from pagedkit.sim.report import NOTES
    assert f"9. {NOTES['knee']}" in doc


@pytest.mark.parametrize("managers, twice", [
    (["paged", "paged"], "paged:16"), (["paged", "paged:16"], "paged:16"),
    (["max", "pow2", "max"], "max"), (["paged:32", "oracle", "paged:32"], "paged:32"),
    (["paged:32", "paged"], None), (["max", "pow2", "oracle", "paged"], None)])
def test_a_manager_given_twice_is_refused(capsys, managers, twice):
    """Newcomer 38: the same manager twice printed the same row twice."""
    argv = ["--dataset", "sharegpt", "--rate", "2", "--requests", "3", "--no-progress", "--json"]
    argv += [word for m in managers for word in ("--manager", m)]
    if twice is None:
        assert main(argv) == 0
        assert len(json.loads(capsys.readouterr().out)) == len(managers)
        return
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    assert (f"argument --manager: {twice} is given twice; each manager runs once, so give it "
            "once") in capsys.readouterr().err


@pytest.mark.parametrize("managers", [["max"], ["pow2", "oracle"], ["max", "paged"], ["paged:8"]])
@pytest.mark.parametrize("preemption", ["swap", "recompute"])
def test_swap_preemption_needs_a_paged_manager(capsys, managers, preemption):
    """Newcomer 38: --preemption swap with only contiguous managers (which
    never preempt) ran as if it meant something."""
    argv = ["--dataset", "sharegpt", "--rate", "2", "--requests", "3", "--no-progress", "--json",
            "--preemption", preemption] + [w for m in managers for w in ("--manager", m)]
    refused = preemption == "swap" and not any(m.startswith("paged") for m in managers)
    if not refused:
        assert main(argv) == 0
        return
    with pytest.raises(SystemExit):
        main(argv)
    assert ("--preemption swap: only the paged manager preempts (max, pow2 and oracle reserve "
            "a request's memory up front and never preempt); add --manager paged, or leave "
            "--preemption out") in capsys.readouterr().err
