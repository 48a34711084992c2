"""The command lines behave like command lines: usage errors exit 2 with the
usage and the valid choices (never a traceback), --help exits 0, every option
says what it does, --version answers, and a long run shows progress."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

import pagedkit
from pagedkit import demo
from pagedkit.__main__ import COMMANDS
from pagedkit.__main__ import _parser as top_parser
from pagedkit.__main__ import main as cli
from pagedkit.bench.__main__ import BENCHMARKS
from pagedkit.bench.__main__ import _parser as bench_parser
from pagedkit.bench.__main__ import main as bench_cli
from pagedkit.sim import cli as sim_cli


def run(main, argv):
    """Exit status of ``main(argv)``, whether it returns it or exits with it."""
    try:
        return main(argv)
    except SystemExit as e:
        return e.code


def test_top_level(capsys):
    assert cli([]) == 2
    err = capsys.readouterr().err
    assert all(name in err for name in ("demo", "bench", "simulate"))
    assert run(cli, ["--help"]) == 0
    out = capsys.readouterr().out
    assert "usage: pagedkit" in out and "simulate" in out
    assert run(cli, ["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"pagedkit {pagedkit.__version__}"
    assert run(cli, ["serve"]) == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'serve'" in err and "'demo', 'bench', 'simulate'" in err


def test_bench_dispatcher(capsys):
    assert run(bench_cli, ["--help"]) == 0
    assert "engine" in capsys.readouterr().out
    assert run(bench_cli, []) == 2
    assert ("usage: python -m pagedkit.bench {engine, kernels, widgets, labs, calls, hash}"
            in capsys.readouterr().err)
    assert run(bench_cli, ["fast"]) == 2
    assert ("invalid choice: 'fast' (choose from 'engine', 'kernels', 'widgets', 'labs', "
            "'calls', 'hash')" in capsys.readouterr().err)
    assert run(cli, ["bench", "--help"]) == 0
    assert "usage: pagedkit bench" in capsys.readouterr().out


@pytest.mark.parametrize("argv", [["-m", "pagedkit.bench", "--help"],
                                  ["-m", "pagedkit", "--version"],
                                  ["-m", "pagedkit", "simulate", "--help"]])
def test_as_a_process(argv):
    out = subprocess.run([sys.executable, *argv], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "Traceback" not in out.stderr


DEMO_ERRORS = [
    (["-n", "0"], "argument -n: must be >= 1, got 0"),
    (["--num-blocks", "0"], "argument --num-blocks: must be >= 1, got 0"),
    (["--num-blocks", "2"], "--num-blocks 2 is too small"),
    (["-n", "4", "--num-blocks", "8"], "x -n 4 = 16; give --num-blocks 16 or more"),
    (["--max-tokens", "x"], "argument --max-tokens: expected a whole number >= 1, got 'x'"),
    (["--temperature", "nan"], "argument --temperature: expected a finite number >= 0"),
    (["--temperature", "-1"], "argument --temperature: expected a finite number >= 0"),
    (["--block-size", "-4"], "argument --block-size: must be >= 1, got -4"),
    (["--model", "./no/such/dir"], "model path './no/such/dir' does not exist"),
    (["--frobnicate"], "unrecognized arguments: --frobnicate"),
]


@pytest.mark.parametrize("argv, message", DEMO_ERRORS, ids=[" ".join(a) for a, _ in DEMO_ERRORS])
def test_demo_usage_errors(capsys, argv, message):
    assert run(cli, ["demo", *argv]) == 2
    err = capsys.readouterr().err
    assert "usage: pagedkit demo" in err and message in err and "Traceback" not in err


def test_demo_shows_progress(capsys):
    assert cli(["demo", "--max-tokens", "3", "--num-blocks", "16"]) == 0
    captured = capsys.readouterr()
    assert "demo:" in captured.err and "tok" in captured.err  # the progress bar
    assert "KV cache: 16 blocks" in captured.out
    assert cli(["demo", "--max-tokens", "2", "--num-blocks", "16", "--no-progress"]) == 0
    assert "demo:" not in capsys.readouterr().err


SIM_ERRORS = [
    (["--dataset", "alpaca", "--rate", "-1"], "argument --rate: expected a finite number > 0"),
    (["--dataset", "alpaca", "--rate", "0"], "argument --rate: expected a finite number > 0"),
    (["--dataset", "alpaca", "--rate", "nan"], "argument --rate: expected a finite number > 0"),
    (["--dataset", "alpaca", "--rate", "inf"], "argument --rate: expected a finite number > 0"),
    (["--dataset", "alpaca", "--rate", "1", "--requests", "-3"],
     "argument --requests: must be >= 1, got -3"),
    (["--dataset", "alpaca", "--rate", "1", "--requests", "0"],
     "argument --requests: must be >= 1, got 0"),
    (["--dataset", "alpaca", "--rate", "1", "--duration", "-1"],
     "argument --duration: expected a finite number > 0, got '-1'"),
    (["--dataset", "alpaca"], "--dataset needs --rate"),
    (["--dataset", "lmsys", "--rate", "1"], "invalid choice: 'lmsys'"),
    (["--dataset", "alpaca", "--rate", "1", "--manager", "buddy"], "argument --manager"),
    (["--trace", "TRACE", "--rate", "1", "--requests", "-1"],
     "argument --requests: must be >= 1, got -1"),
    (["--trace", "TRACE", "--rate", "1", "--requests", "0"],
     "argument --requests: must be >= 1, got 0"),
    (["--trace", "TRACE", "--rate", "1", "--requests", "3"], "holds only 2 requests"),
    (["--trace", "TRACE", "--rate", "1", "--duration", "5"], "--duration draws a synthetic"),
    (["--trace", "TRACE"], "has no arrival times"),
]


@pytest.mark.parametrize("argv, message", SIM_ERRORS, ids=[" ".join(a) for a, _ in SIM_ERRORS])
def test_simulate_usage_errors(capsys, tmp_path, argv, message):
    trace = tmp_path / "two.json"
    trace.write_text("[[3, 4], [5, 6]]")
    argv = [str(trace) if a == "TRACE" else a for a in argv]
    assert run(cli, ["simulate", "--no-progress", *argv]) == 2
    err = capsys.readouterr().err
    assert "usage: pagedkit simulate" in err and message in err and "Traceback" not in err


def test_simulate_requests_with_a_trace_takes_the_first_n(capsys, tmp_path):
    trace = tmp_path / "two.json"
    trace.write_text("[[3, 4], [5, 6]]")
    argv = ["simulate", "--trace", str(trace), "--rate", "1", "--manager", "paged", "--json"]
    assert run(cli, [*argv, "--requests", "1"]) == 0
    assert '"requests": 1,' in capsys.readouterr().out


PARSERS = {
    "pagedkit": top_parser(),
    "pagedkit bench": bench_parser("pagedkit bench", "engine"),
    "pagedkit demo": demo._parser(),
    "pagedkit simulate": sim_cli._parser(),
}


@pytest.mark.parametrize("name", list(PARSERS))
def test_every_option_says_what_it_does(name):
    parser = PARSERS[name]
    assert parser.description and "`" not in parser.description
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        assert action.help, f"{name}: {action.option_strings or action.dest} has no help"
        assert "`" not in action.help, f"{name}: raw reST in the help of {action.dest}"


def every_command():
    """Every command the top level knows (so a new one is covered), bench's too."""
    for name in COMMANDS:
        yield pytest.param([name], id=name)
    for name in BENCHMARKS:
        yield pytest.param(["bench", name], id=f"bench {name}")
    yield pytest.param([], id="pagedkit")


@pytest.mark.parametrize("argv", list(every_command()))
def test_help_exits_0_without_raw_markup(capsys, argv):
    assert run(cli, [*argv, "--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: ") and "`" not in out
