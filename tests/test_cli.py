"""The command lines behave like command lines: usage errors exit 2 with the
usage and the valid choices (never a traceback), --help exits 0, every option
says what it does, --version answers, and a long run shows progress."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

import pytest

import pagedkit
from pagedkit import demo
from pagedkit.__main__ import COMMANDS
from pagedkit.__main__ import _parser as top_parser
from pagedkit.__main__ import main as cli
from pagedkit.bench import engine as engine_bench
from pagedkit.bench import kernels as kernels_bench
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
    assert "usage: python -m pagedkit" in out and "simulate" in out
    assert all(name in out for name in BENCHMARKS)  # the bench line names every benchmark
    assert run(cli, ["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"pagedkit {pagedkit.__version__}"
    assert run(cli, ["serve"]) == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'serve'" in err and "'demo', 'bench', 'simulate'" in err


def test_bench_dispatcher(capsys):
    assert run(bench_cli, ["--help"]) == 0
    assert "engine" in capsys.readouterr().out
    assert run(bench_cli, []) == 2
    assert (f"usage: python -m pagedkit bench {{{', '.join(BENCHMARKS)}}}"  # wrapped to fit
            in " ".join(capsys.readouterr().err.split()))
    assert run(bench_cli, ["fast"]) == 2
    assert (f"invalid choice: 'fast' (choose from {', '.join(map(repr, BENCHMARKS))})"
            in capsys.readouterr().err)
    assert run(cli, ["bench", "--help"]) == 0
    assert "usage: python -m pagedkit bench" in capsys.readouterr().out


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
    (["-n", "4", "--num-blocks", "8"], "takes 4 blocks of 16 for each of the -n 4 completions: "
     "16 blocks; give --num-blocks 16 or more"),
    (["--max-tokens", "x"], "argument --max-tokens: expected a whole number >= 1, got 'x'"),
    (["--temperature", "nan"], "argument --temperature: expected a finite number >= 0"),
    (["--temperature", "-1"], "argument --temperature: expected a finite number >= 0"),
    (["--block-size", "-4"], "argument --block-size: must be >= 1, got -4"),
    # in the command line's terms (newcomer finding 8), not model='tiny' or a model object
    (["--model", "./no/such/dir"], "model path './no/such/dir' does not exist (a Hugging Face "
     "model name is 'name' or 'org/name'); use --model tiny (the embedded default) or a local "
     "directory"),
    # no sequence grows past the model's 2048 positions: 128 blocks hold the longest (finding 11)
    (["--frobnicate"], "unrecognized arguments: --frobnicate"),
]


@pytest.mark.parametrize("argv, message", DEMO_ERRORS, ids=[" ".join(a) for a, _ in DEMO_ERRORS])
def test_demo_usage_errors(capsys, argv, message):
    assert run(cli, ["demo", *argv]) == 2
    err = capsys.readouterr().err
    assert "usage: python -m pagedkit demo" in err and message in err and "Traceback" not in err


#: (options, what the demo says its longest prompt, 12 tokens, needs) in each case where
#: the cache is too small: past max_model_len (2048: 2036 new tokens), up to it, shared
DEMO_TOO_SMALL = [
    (["--max-tokens", "100000", "--num-blocks", "4"],
     "+ --max-tokens 100000 would pass the model's max_model_len of 2048 tokens, where generation "
     "stops anyway (at most 2036 new tokens); grown to 2048 tokens, it takes 128 blocks of 16; "
     "give --num-blocks 128 or more, or --max-tokens 52 or fewer"),
    (["--max-tokens", "2037", "--num-blocks", "64"],
     "+ --max-tokens 2037 would pass the model's max_model_len of 2048 tokens, where generation "
     "stops anyway (at most 2036 new tokens); grown to 2048 tokens, it takes 128 blocks of 16; "
     "give --num-blocks 128 or more, or --max-tokens 1012 or fewer"),
    (["--max-tokens", "3000", "--num-blocks", "4", "--block-size", "32"],
     "+ --max-tokens 3000 would pass the model's max_model_len of 2048 tokens, where generation "
     "stops anyway (at most 2036 new tokens); grown to 2048 tokens, it takes 64 blocks of 32; "
     "give --num-blocks 64 or more, or --max-tokens 116 or fewer"),
    (["--max-tokens", "100000", "-n", "3", "--num-blocks", "100"],
     "+ --max-tokens 100000 would pass the model's max_model_len of 2048 tokens, where generation "
     "stops anyway (at most 2036 new tokens); grown to 2048 tokens, it takes 128 blocks of 16 "
     "for each of the -n 3 completions: 384 blocks; give --num-blocks 384 or more, or "
     "--max-tokens 517 or fewer"),
    (["--max-tokens", "5000", "-n", "2", "--num-blocks", "4", "--block-size", "4"],
     "+ --max-tokens 5000 would pass the model's max_model_len of 2048 tokens, where generation "
     "stops anyway (at most 2036 new tokens); grown to 2048 tokens, it takes its 3 full blocks "
     "of 4 shared by the -n 2 completions, each with 509 of its own: 1021 blocks; give "
     "--num-blocks 1021 or more, or --max-tokens 1 or fewer"),
    (["--max-tokens", "2036", "--num-blocks", "4"],
     "+ --max-tokens 2036 takes 128 blocks of 16; give --num-blocks 128 or more, or "
     "--max-tokens 52 or fewer"),
    (["--max-tokens", "40", "-n", "2", "--num-blocks", "4", "--block-size", "4"],
     "+ --max-tokens 40 takes its 3 full blocks of 4 shared by the -n 2 completions, each with "
     "10 of its own: 23 blocks; give --num-blocks 23 or more, or --max-tokens 1 or fewer"),
]


@pytest.mark.parametrize("argv, said", DEMO_TOO_SMALL, ids=[" ".join(a) for a, _ in DEMO_TOO_SMALL])
def test_demo_says_what_a_cache_too_small_needs_in_a_sentence_that_reads(capsys, argv, said):
    """Issue #26 (newcomer 7, finding 4): past max_model_len the sentence did
    not parse ('the longest prompt (12 tokens) grows to the model's
    max_model_len of 2048 tokens (--max-tokens 100000 goes past it) takes 128
    blocks') and did not say that generation stops there anyway. The
    advice is served: one block fewer is refused, it is not."""
    assert run(cli, ["demo", "--no-progress", *argv]) == 2
    err = capsys.readouterr().err
    num_blocks = argv[argv.index("--num-blocks") + 1]
    assert (f"error: --num-blocks {num_blocks} is too small: the longest prompt (12 tokens) "
            f"{said}\n") in err, err
    from pagedkit.models import load_tiny_tokenizer

    advice = int(re.search(r"give --num-blocks (\d+) or more", said).group(1))
    # newcomer 32: the other way out, fewer new tokens, is the most that fits
    fewer = int(re.search(r"or --max-tokens (\d+) or fewer", said).group(1))
    for option, refused, served in [("num_blocks", advice - 1, advice),
                                    ("max_tokens", fewer + 1, fewer)]:
        args = demo._parser().parse_args(argv)
        setattr(args, option, refused)
        with pytest.raises(SystemExit):
            demo._check_blocks(demo._parser(), args, load_tiny_tokenizer(), 2048)
        setattr(args, option, served)
        demo._check_blocks(demo._parser(), args, load_tiny_tokenizer(), 2048)


def test_demo_shows_progress(capsys):
    assert cli(["demo", "--max-tokens", "3", "--num-blocks", "16"]) == 0
    captured = capsys.readouterr()
    assert "demo: 100%|" in captured.err and "tok" in captured.err  # the progress bar
    assert "KV cache: 16 blocks" in captured.out
    assert cli(["demo", "--max-tokens", "2", "--num-blocks", "16", "--no-progress"]) == 0
    assert "%|" not in capsys.readouterr().err


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
    (["--trace", "TRACE", "--rate", "1", "--requests", "3"], "holds only 2 requests; give "
     "--requests 2 or fewer, or leave it out (the whole file)"),
    (["--trace", "TRACE", "--rate", "1", "--duration", "5"], "--duration draws a synthetic"),
    (["--trace", "TRACE"], "has no arrival times (a column arrival, arrival_time, timestamp, or a "
                           "third value after each [prompt, output] pair); pass --rate "
                           "(requests/s)"),
    # newcomer finding 4: a negative seed was numpy's traceback
    (["--dataset", "alpaca", "--rate", "1", "--seed", "-1"],
     "argument --seed: must be >= 0, got -1"),
    (["--scale", "quick", "--seed", "-1"], "argument --seed: must be >= 0, got -1"),
]


@pytest.mark.parametrize("argv, message", SIM_ERRORS, ids=[" ".join(a) for a, _ in SIM_ERRORS])
def test_simulate_usage_errors(capsys, tmp_path, argv, message):
    trace = tmp_path / "two.json"
    trace.write_text("[[3, 4], [5, 6]]")
    argv = [str(trace) if a == "TRACE" else a for a in argv]
    assert run(cli, ["simulate", "--no-progress", *argv]) == 2
    err = capsys.readouterr().err
    assert "usage: python -m pagedkit simulate" in err and message in err and "Traceback" not in err


def test_simulate_requests_with_a_trace_takes_the_first_n(capsys, tmp_path):
    trace = tmp_path / "two.json"
    trace.write_text("[[3, 4], [5, 6]]")
    argv = ["simulate", "--trace", str(trace), "--rate", "1", "--manager", "paged", "--json"]
    assert run(cli, [*argv, "--requests", "1"]) == 0
    assert '"requests": 1,' in capsys.readouterr().out


PARSERS = {
    "pagedkit": top_parser(),
    "pagedkit bench": bench_parser("pagedkit bench", "engine"),
    "pagedkit bench engine": engine_bench._parser(),
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
    # one name for the program everywhere: the README's (issue #26 found three)
    assert out.startswith("usage: python -m pagedkit ") and "`" not in out
    assert "pagedkit.bench" not in out and "usage: pagedkit" not in out


def no_cuda(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


BENCH_ERRORS = [
    (["--requests", "-3"], "argument --requests: must be >= 1, got -3"),
    (["--requests", "0"], "argument --requests: must be >= 1, got 0"),
    (["--scale", "-1"], "argument --scale: expected a finite number > 0, got '-1'"),
    (["--scale", "0"], "argument --scale: expected a finite number > 0, got '0'"),
    (["--scale", "nan"], "argument --scale: expected a finite number > 0, got 'nan'"),
    (["--rounds", "0"], "argument --rounds: must be >= 1, got 0"),
    (["--batch-size", "0"], "argument --batch-size: must be >= 1, got 0"),
    (["--block-size", "-16"], "argument --block-size: must be >= 1, got -16"),
    (["--threads", "0"], "argument --threads: must be >= 1, got 0"),
    (["--device", "tpu"], "argument --device: invalid choice: 'tpu'"),
    (["--device", "cuda"], "--device cuda: torch sees no CUDA device here"),
    (["kernels", "--device", "cuda"], "--device cuda: torch sees no CUDA device here"),
    (["kernels", "--device", "cuda:1"], "--device cuda:1: torch sees no CUDA device here"),
    (["kernels", "--device", "mps"], "--device mps: the benchmarks run on cpu or cuda[:N]"),
    (["kernels", "--device", "gpu0"], "--device gpu0: not a device name"),
    (["kernels", "--threads", "0"], "argument --threads: must be >= 1, got 0"),
    # newcomer finding 4: tracebacks, the last only after the whole run
    (["calls", "--threads", "0"], "argument --threads: must be >= 1, got 0"),
    (["--quick", "--json", "/nonexistent/dir/x.json"],
     "argument --json: cannot write '/nonexistent/dir/x.json': the folder /nonexistent/dir does "
     "not exist"),
    (["kernels", "--json", "."], "argument --json: '.' is a folder"),
    (["widgets", "--json", "/nonexistent/x.json"], "cannot write '/nonexistent/x.json'"),
    (["labs", "--json", "/nonexistent/x.json"], "cannot write '/nonexistent/x.json'"),
    (["hash", "--json", "/nonexistent/x.json"], "cannot write '/nonexistent/x.json'"),
    (["linears", "--json", "/nonexistent/x.json"], "cannot write '/nonexistent/x.json'"),
]


@pytest.mark.parametrize("argv, message", BENCH_ERRORS, ids=[" ".join(a) for a, _ in BENCH_ERRORS])
def test_bench_usage_errors(capsys, monkeypatch, argv, message):
    """Issue #26: --requests -3 was a traceback, --scale -1 ran silently, and
    kernels --device cuda without CUDA an AssertionError. Each is refused before
    any work, naming the option, the value and the limit."""
    no_cuda(monkeypatch)
    monkeypatch.setattr(engine_bench, "benchmark", lambda *a, **k: pytest.fail("it ran"))
    monkeypatch.setattr(kernels_bench, "run", lambda *a, **k: pytest.fail("it ran"))
    assert run(cli, ["bench", *argv]) == 2
    err = capsys.readouterr().err
    assert "usage: python -m pagedkit bench" in err and message in err, err
    assert "Traceback" not in err


def test_bench_says_how_long_and_how_to_run_it_quick(capsys, monkeypatch):
    """A run longer than a smoke run first says what the default run cost and
    names --quick; a machine with less memory free than that run took is warned."""
    runs = []
    monkeypatch.setattr(engine_bench, "benchmark", lambda name, **k: runs.append(name)
                        or engine_bench.Report(name, "cpu", 1, 1.0, 1.0))
    monkeypatch.setattr(engine_bench, "available_gib", lambda: 1.2)
    assert run(cli, ["bench", "--systems", "pagedkit"]) == 0
    err = capsys.readouterr().err
    assert engine_bench.DEFAULT_RUN_NOTE in err and "--quick" in err
    assert "1.2 GiB of memory is available here" in err
    assert runs == ["tiny", "larger"]
    assert run(cli, ["bench", "--quick", "--systems", "pagedkit"]) == 0
    err = capsys.readouterr().err  # a smoke run says its own duration first (finding 6)
    assert err.startswith(engine_bench.QUICK_LINE) and runs[2:] == ["tiny"]
    assert engine_bench.DEFAULT_RUN_NOTE not in err
    # under its table, what a smoke run's figures are worth (newcomer 37 ranked by them)
    assert run(cli, ["bench", "--quick", "--systems", "pagedkit"]) == 0
    out = capsys.readouterr().out
    assert out.rstrip().endswith(engine_bench.QUICK_CAUTION) and "rank nothing" in out
    assert run(cli, ["bench", "--systems", "pagedkit"]) == 0
    assert engine_bench.QUICK_CAUTION not in capsys.readouterr().out


def test_simulate_says_how_long_and_how_to_run_it_quick(capsys, monkeypatch):
    from pagedkit.sim import report

    seen = []
    monkeypatch.setattr(sim_cli, "compare", lambda scale, **k: seen.append(scale)
                        or report.Report(scale))
    monkeypatch.setattr(sim_cli, "format_table", lambda *a, **k: "")
    assert run(cli, ["simulate"]) == 0
    err = capsys.readouterr().err
    assert "1.5-5 minutes" in err and "--scale quick" in err and seen == ["default"]
    assert run(cli, ["simulate", "--scale", "quick"]) == 0
    assert "minutes" not in capsys.readouterr().err


def test_simulate_progress_names_the_step_it_is_in(capsys):
    """Issue #26: a 6-step bar sat at 2/6 for two minutes. The bar now counts the
    slow steps apart and names the one running."""
    from pagedkit.sim.report import COMPARE_STEPS, SCALES, compare

    compare(SCALES["quick"], progress=True)
    err = capsys.readouterr().err
    for step in COMPARE_STEPS:
        assert step in err
    assert f"{len(COMPARE_STEPS)}/{len(COMPARE_STEPS)}" in err


def test_demo_checks_its_options_before_loading_the_model(capsys, monkeypatch):
    """Issue #26: demo was silent ~20 s, then refused --num-blocks only once the
    model had loaded. It says what it loads first, and the embedded model's
    tokenizer alone decides whether the cache is big enough."""
    import pagedkit.models

    monkeypatch.setattr(pagedkit.models, "load_tiny", lambda *a, **k: pytest.fail("loaded"))
    assert run(cli, ["demo", "--num-blocks", "2"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("demo: loading torch and transformers (10-20 s on a busy machine), "
                          "which the cache-size options' check needs, then 'tiny' ...")
    assert "--num-blocks 2 is too small" in err


@pytest.mark.parametrize("command", sorted(set(COMMANDS) - {"lab"}))
def test_ctrl_c_is_a_word_and_status_130_not_a_traceback(command, capsys, monkeypatch):
    """`lab` waits for JupyterLab instead (tests/test_lab.py)."""
    import importlib

    def interrupted(argv, **options):
        raise KeyboardInterrupt

    monkeypatch.setattr(importlib.import_module(COMMANDS[command][0]), "main", interrupted)
    assert cli([command]) == 130
    assert capsys.readouterr().err.strip() == f"python -m pagedkit {command}: interrupted"


def test_every_scale_of_the_comparison_says_what_it_costs_and_means():
    assert set(sim_cli.SCALE_TIMES) == {"quick", "default", "full"}
    assert "under its table" in sim_cli.SCALE_TIMES["quick"] and "rough" in sim_cli.QUICK_ROUGH


def test_the_quick_comparison_says_its_numbers_are_rough_under_its_table_once(capsys):
    """Newcomer 32: the caution went to stderr before the table only, where a
    reader of the table (or of stdout alone) missed it. Newcomer 36: then a
    terminal showed it twice. It is said once, under the table; the line
    before the run points there."""
    assert cli(["simulate", "--scale", "quick", "--no-progress"]) == 0
    captured = capsys.readouterr()
    rough = sim_cli.QUICK_ROUGH
    assert captured.out.rstrip().endswith(f"--scale quick: {rough}")
    assert (captured.out + captured.err).count(rough) == 1
    assert "takes 3-50 s; its numbers are rough (the note under its table says why)" \
        in captured.err


def test_a_bad_language_in_the_environment_is_said_not_a_traceback(capsys, monkeypatch):
    monkeypatch.setenv("PAGEDKIT_LANGUAGE", "fr")
    assert cli(["--version"]) == 2
    assert "PAGEDKIT_LANGUAGE='fr' is not a language pagedkit speaks" in capsys.readouterr().err
    assert pagedkit.get_language() == "en"


def test_the_api_page_lists_every_command():
    """Newcomer finding 7: docs/api.md named demo, simulate and bench [kernels]
    only. Its table is `commands_markdown()`, the commands' own help lines."""
    from pagedkit.__main__ import commands_markdown

    page = (Path(__file__).resolve().parents[1] / "docs" / "api.md").read_text()
    table = page.split("<!-- commands:start -->\n", 1)[1].split("<!-- commands:end -->", 1)[0]
    assert table == commands_markdown() + "\n"
    assert all(f"`python -m pagedkit {name}`" in table for name in COMMANDS)
    assert all(f"`python -m pagedkit bench {name}`" in table for name in BENCHMARKS)


def _unwritable_paths(tmp_path):
    """Paths root cannot write either (this machine runs the tests as root,
    where os.access says yes to all of them but the missing folder)."""
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    paths = {"parent is a file": str(a_file / "out.json"),
             "new file in /proc": "/proc/pagedkit-out.json",
             "read-only file in /proc": "/proc/version",
             "new file in /sys": "/sys/pagedkit-out.json"}
    frozen = tmp_path / "frozen"
    frozen.mkdir()
    if subprocess.run(["chattr", "+i", str(frozen)], capture_output=True).returncode == 0:
        paths["immutable folder (chattr +i)"] = str(frozen / "out.json")
    return paths, frozen


@pytest.mark.parametrize("command", [["bench", "--quick"], ["bench", "kernels"],
                                     ["bench", "linears"], ["gpucheck"], ["vllm", "compare"]],
                         ids=" ".join)
def test_json_to_an_unwritable_path_is_refused_before_the_run_even_as_root(
        tmp_path, capsys, monkeypatch, command):
    """Second newcomer: `--json PATH` was checked with os.access, which says yes to
    root; every path here is refused by actually opening it, before the run, and
    nothing is left behind."""
    from pagedkit._validation import writable_file

    paths, frozen = _unwritable_paths(tmp_path)
    try:
        for why, path in paths.items():
            with pytest.raises(argparse.ArgumentTypeError, match=f"cannot write '{path}'"):
                writable_file(path)
            assert run(cli, [*command, "--json", path]) == 2, why
            err = capsys.readouterr().err
            assert f"argument --json: cannot write '{path}'" in err and "Traceback" not in err, why
        assert not any(frozen.iterdir())
    finally:
        subprocess.run(["chattr", "-i", str(frozen)], capture_output=True)
    # a writable one passes, and the check leaves no file behind (nor changes one that is there)
    new, there = tmp_path / "new.json", tmp_path / "there.json"
    there.write_text("kept")
    assert writable_file(str(new)) == str(new) and not new.exists()
    assert writable_file(str(there)) == str(there) and there.read_text() == "kept"


@pytest.mark.parametrize("device", ["cpu", "mps", "meta", "gpu", "cuda0", ""])
def test_gpucheck_refuses_a_device_that_is_not_cuda_by_name(capsys, device):
    """Fourth newcomer, F11: ``gpucheck --device cpu`` answered with the
    generic no-GPU text; a device that is no CUDA device is now refused as
    an argument, naming it, whether or not this machine has a GPU."""
    assert run(cli, ["gpucheck", "--device", device]) == 2
    err = capsys.readouterr().err
    assert f"argument --device: {device!r} is not a CUDA device" in err
    assert "cuda or cuda:N" in err and "Traceback" not in err and "Nothing was checked" not in err


@pytest.mark.parametrize("device", ["cuda", "cuda:0", "cuda:3"])
def test_gpucheck_takes_cuda_devices(device):
    from pagedkit.gpucheck import cuda_device

    assert cuda_device(device).type == "cuda"


@pytest.mark.parametrize("block_size, n, max_tokens", [
    (1, 4, 5), (1, 1, 5), (2, 2, 3), (4, 3, 7), (16, 2, 40), (3, 4, 1), (5, 2, 9)])
def test_demos_block_check_is_the_engines(block_size, n, max_tokens):
    """Fifth newcomer's N1: demo asked for 68 blocks (17 per completion x -n 4)
    where the engine serves the request on 28: its -n completions share the
    prompt's full blocks. The demo's bound is the engine's: it takes `needed`
    blocks and refuses needed - 1, and the engine serves the longest prompt's
    n completions whole on `needed` and not on one block fewer."""
    import re
    import warnings

    from pagedkit import LLM, SamplingParams
    from pagedkit.models import load_tiny_tokenizer

    tokenizer = load_tiny_tokenizer()
    parser = demo._parser()

    def check(num_blocks):
        args = parser.parse_args(["--block-size", str(block_size), "-n", str(n), "--max-tokens",
                                  str(max_tokens), "--num-blocks", str(num_blocks)])
        try:
            demo._check_blocks(parser, args, tokenizer, 2048)
        except SystemExit:
            return False
        return True

    needed = next(b for b in range(1, 10_000) if check(b))
    assert not check(needed - 1)
    longest = max((tokenizer(p)["input_ids"] for p in demo.PROMPTS), key=len)
    params = SamplingParams(n=n, temperature=0.8, seed=0, max_tokens=max_tokens, ignore_eos=True)
    for num_blocks in (needed, needed - 1):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                [out] = LLM("tiny", num_blocks=num_blocks, block_size=block_size).generate(
                    {"prompt_token_ids": longest}, params, use_tqdm=False)
                whole = all(len(c.token_ids) == max_tokens for c in out.outputs)
            except ValueError as e:  # refused at the door: too few for the prompt's blocks
                assert re.search(r"num_blocks=\d+ or more", str(e))
                whole = False
        assert whole == (num_blocks == needed), (num_blocks, needed)


def test_labs_and_docs_spell_every_command_as_the_cli_takes_it():
    """Each ``python -m pagedkit ...`` in the labs, their Chinese catalogs, the
    docs and the READMEs names a command (and a benchmark) the CLI has, spelled
    as the README spells it: ``python -m pagedkit bench kernels``, not
    ``python -m pagedkit.bench kernels`` (lab 04 and two docs said the latter;
    it runs, but a reader meets two spellings of one command)."""
    import importlib.util
    import json
    import re

    root = Path(__file__).resolve().parents[1]
    texts = {}
    for path in [*root.glob("labs/*.ipynb"), *root.glob("labs/zh-CN/*.ipynb")]:
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        texts[path] = "\n".join("".join(c["source"]) for c in cells)
    for path in [*root.glob("docs/**/*.md"), *root.glob("i18n/zh-CN/**/*.json"),
                 *root.glob("i18n/zh-CN/*.md"), root / "README.md", root / "labs" / "README.md"]:
        texts[path] = path.read_text(encoding="utf-8").replace("\\n", "\n")
    wrong = []
    for path, text in texts.items():
        for m in re.finditer(r"python3? -m pagedkit(\.[\w.]+)?((?: [\w-]+)*)", text):
            module, words = m[1], m[2].split()
            if module:  # a module of its own: it must exist, and not spell a CLI command
                ok = (importlib.util.find_spec(f"pagedkit{module}") is not None
                      and not (module == ".bench" and words and words[0] in BENCHMARKS))
            elif not words or words[0].startswith("-"):
                ok = True
            else:
                ok = words[0] in COMMANDS and not (
                    words[0] == "bench" and len(words) > 1 and not words[1].startswith("-")
                    and words[1] not in BENCHMARKS)
            if not ok:
                wrong.append(f"{path.relative_to(root)}: {m[0]}")
    assert not wrong, wrong


@pytest.mark.parametrize("argv, quick", [(["bench"], "--quick"), (["bench", "engine"], "--quick"),
                                         (["simulate"], "--scale quick"),
                                         (["demo"], "--max-tokens N")])
def test_long_commands_say_how_long_they_take_and_how_to_run_them_quick(capsys, argv, quick):
    """A newcomer met `simulate` at 4-5 minutes and `bench` at 11-17 with no
    word of it: each long command's --help states a duration and its quick way."""
    import re

    assert run(cli, [*argv, "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert re.search(r"\d+(-\d+(\.\d+)?)? (s|minutes)\b", text), text
    assert quick in text


@pytest.mark.parametrize("argv, said", [
    (["--systems", "foo"], "--systems 'foo': unknown system(s) ['foo']; choose from vllm, "
                           "pagedkit"),
    (["--systems", "foo,pagedkit"], "--systems 'foo,pagedkit': unknown system(s) ['foo']"),
    (["--systems", ","], "--systems ',': no system named; choose from vllm, pagedkit"),
    (["--systems", ""], "--systems '': no system named; choose from vllm, pagedkit"),
    (["--systems", " , "], "--systems ' , ': no system named"),
    # compare_all's one check: a system listed twice (the CLI's own check let it through)
    (["--systems", "pagedkit,pagedkit"], "--systems 'pagedkit,pagedkit': a system is listed "
                                         "twice: ('pagedkit', 'pagedkit')"),
    (["--model", "/", "--systems", "pagedkit"], "--model '/' is neither 'tiny' nor a"),
    (["--num-blocks", "1", "--systems", "pagedkit"], "--num-blocks 1 is too small: the longest "
     "request (82 prompt tokens + 40 to generate) takes 4 blocks of 32 tokens; give "
     "--num-blocks 4 or more"),
    (["--num-blocks", "3", "--systems", "pagedkit"], "give --num-blocks 4 or more"),
])
def test_vllm_compare_refuses_bad_options_as_usage_errors(argv, said, capsys):
    """Sixth newcomer's N9: these were tracebacks, checked before any model loads."""
    from pagedkit.vllm.__main__ import main as vllm_main

    with pytest.raises(SystemExit) as exit_:
        vllm_main(["compare", *argv])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert said in err
    # newcomer 13: these were printed under `vllm [-h] COMMAND ...`, the parent's usage
    assert err.startswith("usage: python -m pagedkit vllm compare [-h]"), err
    assert "\npython -m pagedkit vllm compare: error: --" in err


@pytest.mark.parametrize("argv, command", [
    (["skeleton", "nope.ipynb"], "skeleton"), (["skeleton", "labs/99_no.ipynb"], "skeleton"),
    (["build", "--no-execute", "nope.ipynb"], "build"),
    (["build", "labs/00_start_here.ipynb", "x.ipynb"], "build")])
def test_the_i18n_commands_usage_errors_print_their_own_usage(argv, command, capsys):
    """The other command line with subcommands: its errors after parsing (a lab
    that is not one) printed `python -m pagedkit.i18n`'s usage, not the command's."""
    from pagedkit.i18n.__main__ import main as i18n_main

    assert run(i18n_main, argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"usage: python -m pagedkit.i18n {command} [-h]"), err
    assert f"python -m pagedkit.i18n {command}: error: " in err and "is not an English lab" in err


@pytest.mark.parametrize("spelling", ["PagedKit", "PAGEDKIT", " Pagedkit ", "pagedkit"])
@pytest.mark.parametrize("vllm", ["VLLM", "vLLM", "vllm", "Vllm"])
def test_vllm_compare_reads_system_names_without_regard_to_case(spelling, vllm, monkeypatch):
    """Newcomer 13: `--systems PagedKit` was refused while lab names, --lang and
    the simulator's managers and presets ignore case: one rule for them all now
    (`_validation.choice_name`). The systems reach the comparison as named."""
    from pagedkit.vllm import compare as cmp
    from pagedkit.vllm.__main__ import main as vllm_main

    class Reached(Exception):
        pass

    def compare(work, model, **options):
        raise Reached(options["systems"])

    monkeypatch.setattr(cmp, "vllm_available", lambda: True)
    monkeypatch.setattr(cmp, "compare", compare)
    for systems, reached in ((spelling, ("pagedkit",)), (f"{vllm},{spelling}",
                                                         ("vllm", "pagedkit"))):
        with pytest.raises(Reached) as got:
            vllm_main(["compare", "--systems", systems, "--requests", "1"])
        assert got.value.args[0] == reached, systems


@pytest.mark.parametrize("option, spelling, read", [
    ("--batching", "Static", "static"), ("--batching", "ITERATION", "iteration"),
    ("--preemption", "Swap", "swap"), ("--prefill", "Mixed", "mixed"),
    ("--model", "OPT-13B", "opt-13b"), ("--dataset", "ShareGPT", "sharegpt"),
    ("--scale", "Quick", "quick"), ("--manager", "Max", None)])
def test_simulates_names_are_read_without_regard_to_case(option, spelling, read, monkeypatch):
    """`simulate --batching Static` was refused as `Simulator(batching="Static")`
    was, while `--manager Max` was taken: every name of the simulator's command
    line is read as its managers' are now."""
    p = sim_cli._parser()
    args = p.parse_args([option, spelling])
    assert getattr(args, option[2:]) == (read if read else [sim_cli._manager("max")])
    with pytest.raises(SystemExit):
        p.parse_args([option, spelling + "x"])  # still checked


def test_vllm_compare_of_one_system_prints_the_table_of_two(capsys, tmp_path):
    """The smallest cache the check allows serves the workload. Tenth
    newcomer's N7: one system's figures were a raw ``key: value`` dump
    (``seconds: 0.13137798700336134``, an empty ``note:``) where two systems
    print a table; now the same table, its line saying there is nothing to
    compare. Its --json (a KeyError 'vllm' before) leaves the comparison out."""
    import json

    from pagedkit.vllm.__main__ import main as vllm_main

    path = tmp_path / "one.json"
    assert vllm_main(["compare", "--num-blocks", "4", "--systems", "pagedkit",
                      "--requests", "2", "--json", str(path)]) == 0
    head, columns, row = capsys.readouterr().out.splitlines()
    assert head == "model=tiny workload=shared_prefix requests=2 pagedkit alone: nothing to compare"
    assert columns.split() == ["system", "tok/s", "TTFT", "mean", "latency", "steps",
                               "step-end", "peak", "preempt", "hit", "tokens", "events",
                               "cached", "load"]
    assert row.split()[0] == "pagedkit" and re.search(r" \d+/4 ", row)
    # the column reads the blocks in use after each step, and says so; its
    # header ends where its "used/total" field does
    assert columns.index("peak") + len("peak") == row.index("/") + len("/4   ")
    saved = json.loads(path.read_text())
    assert saved["tokens_equal"] is None and saved["caches_equal"] is None
    assert [r["equal"] for r in saved["per_request"]] == [None, None]
    assert list(saved["systems"]) == ["pagedkit"]


def test_one_systems_rows_are_the_rows_the_two_system_table_prints():
    from pagedkit.vllm import compare as cmp

    work = cmp.shared_prefix_workload(2)

    def system(name, seconds):
        return cmp.SystemRun(name, [[1, 2], [3]], seconds, [0.1, 0.2], [0.5, 0.7], [1, 2], 8,
                             0, [0, 32], load_average=[1.5, 1.0, 0.5])

    both = cmp.Comparison(work, {"vllm": system("vllm", 1.0),
                                 "pagedkit": system("pagedkit", 2.0)}, "tiny").table()
    for name, seconds in (("vllm", 1.0), ("pagedkit", 2.0)):
        alone = cmp.Comparison(work, {name: system(name, seconds)}, "tiny").table()
        lines = alone.splitlines()
        assert lines[0] == f"model=tiny workload=shared_prefix requests=2 {name} alone: " \
                           "nothing to compare"
        assert lines[1:] == [line for line in both.splitlines()[1:]
                             if not line.startswith(("vllm", "pagedkit"))
                             or line.startswith(name)]


def bench_and_vllm_commands():
    """Every benchmark and every ``vllm`` command, enumerated from the parsers."""
    from pagedkit.vllm.__main__ import _parser as vllm_parser

    for name, (module, _help) in BENCHMARKS.items():
        yield pytest.param(module, [], id=f"bench {name}")
    sub = next(a for a in vllm_parser()._actions if isinstance(a, argparse._SubParsersAction))
    for name, parser in sub.choices.items():
        positionals = ["x" for a in parser._actions if not a.option_strings]
        yield pytest.param("pagedkit.vllm.__main__", [name, *positionals], id=f"vllm {name}")


class _Parsed(Exception):
    """What parse_args raises in the tests below: the options were taken."""


def _stop_at_the_commands_parser(monkeypatch):
    """Make the command's own parser (not a dispatcher's) raise `_Parsed` with what it
    parsed (the options only) and its prog, instead of running the command."""
    original = argparse.ArgumentParser.parse_args

    def parsed(self, args=None, namespace=None):
        if self.prog in ("python -m pagedkit", "python -m pagedkit bench"):  # dispatchers
            return original(self, args, namespace)
        raise _Parsed(self.parse_known_args(args, namespace), self.prog)

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", parsed)


@pytest.mark.parametrize("module, argv", list(bench_and_vllm_commands()))
def test_every_bench_and_vllm_command_takes_no_progress(module, argv, monkeypatch, capsys):
    """Tenth newcomer's N6: api.md said ``--no-progress`` leaves out bench's
    progress lines, and only ``bench engine`` took it (every other benchmark and
    ``vllm compare``: 'unrecognized arguments', exit 2). One rule
    (`pagedkit.bench.add_no_progress`) gives it to each: where the command
    prints progress its help names what it leaves out, elsewhere that it
    changes nothing. Only the options are parsed here (nothing runs)."""
    import importlib

    from pagedkit.bench import NO_PROGRESS_HERE

    main = importlib.import_module(module).main
    assert run(main, [*argv, "--help"]) == 0
    help_text = " ".join(capsys.readouterr().out.split())
    assert "--no-progress" in help_text
    assert "--no-progress leave out " in help_text or " ".join(NO_PROGRESS_HERE.split()) \
        in help_text

    def parsed(self, args=None, namespace=None):
        raise _Parsed(self.parse_known_args(args, namespace))

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", parsed)
    with pytest.raises(_Parsed) as got:
        main([*argv, "--no-progress"])
    namespace, unknown = got.value.args[0]
    assert namespace.no_progress is True and unknown == []


def dispatched_commands():
    """Every benchmark and every ``vllm`` command, as the dispatchers run them:
    (the words before --no-progress can go, the words after it)."""
    from pagedkit.vllm.__main__ import _parser as vllm_parser

    for name in BENCHMARKS:
        yield pytest.param(["bench"], [name], id=f"bench {name}")
    sub = next(a for a in vllm_parser()._actions if isinstance(a, argparse._SubParsersAction))
    for name, parser in sub.choices.items():
        positionals = ["x" for a in parser._actions if not a.option_strings]
        yield pytest.param(["vllm"], [name, *positionals], id=f"vllm {name}")


@pytest.mark.parametrize("where", ["after", "before", "twice before"])
@pytest.mark.parametrize("parent, argv", list(dispatched_commands()))
def test_no_progress_is_taken_before_the_command_name_too(parent, argv, where, monkeypatch):
    """Newcomer 13: `bench --no-progress study` ran the engine's parser ("bench
    engine: error: unrecognized arguments: study") and `vllm --no-progress
    compare` said "unrecognized arguments: --no-progress", while the help says
    every bench and vllm command takes it. It goes after the name now
    (`bench.no_progress_after_name`), on every one; only the options are parsed."""
    _stop_at_the_commands_parser(monkeypatch)
    name, rest = argv[0], argv[1:]
    words = {"after": [name, "--no-progress", *rest],
             "before": ["--no-progress", name, *rest],
             "twice before": ["--no-progress", "--no-progress", name, *rest]}[where]
    with pytest.raises(_Parsed) as got:
        cli([*parent, *words])
    (namespace, unknown), prog = got.value.args
    assert namespace.no_progress is True and unknown == [], words
    if parent == ["vllm"]:
        assert namespace.command == name and prog == "python -m pagedkit vllm"
    else:  # the benchmark named, not the default one
        assert prog == f"python -m pagedkit bench {name}"


def every_command():
    """Every command as its own parser takes it: (the command, the words naming one
    of its leaves: a benchmark, a vllm command and its positionals, or none)."""
    from pagedkit.vllm.__main__ import _parser as vllm_parser

    sub = next(a for a in vllm_parser()._actions if isinstance(a, argparse._SubParsersAction))
    leaves = {"bench": [[name] for name in BENCHMARKS],
              "vllm": [[name, *("x" for a in parser._actions if not a.option_strings)]
                       for name, parser in sub.choices.items()]}
    for command in COMMANDS:
        for leaf in leaves.get(command, [[]]):
            yield pytest.param(command, leaf, id=" ".join([command, *leaf[:1]]))


@pytest.mark.parametrize("command, leaf", list(every_command()))
def test_no_progress_before_the_command_is_its_own(command, leaf, monkeypatch, capsys):
    """Newcomer (issue #26): `python -m pagedkit --no-progress bench` said "unrecognized
    arguments: --no-progress", while every bench and vllm command (and demo and
    simulate) take it after their name. Given before the command it is the command's
    own option (`NO_PROGRESS`, held here to each command's --help); a command that
    takes none refuses it, saying what to run instead. Only the options are parsed."""
    from pagedkit.__main__ import NO_PROGRESS

    assert run(cli, [command, *leaf[:1], "--help"]) == 0
    takes_it = "--no-progress" in capsys.readouterr().out
    assert takes_it == (command in NO_PROGRESS)
    _stop_at_the_commands_parser(monkeypatch)
    if not takes_it:
        assert run(cli, ["--no-progress", command, *leaf]) == 2
        err = capsys.readouterr().err
        said = (f"--no-progress: {command} shows no progress to leave out; run python -m "
                f"pagedkit {command} without it")
        assert said in err
        monkeypatch.undo()  # given after the name (newcomer 34: gpucheck's said less there)
        for option in ("--no-progress", "--no-progress=1"):
            assert run(cli, [command, *leaf, option]) == 2
            assert said in capsys.readouterr().err
        return
    with pytest.raises(_Parsed) as got:
        cli(["--no-progress", command, *leaf])
    (namespace, unknown), prog = got.value.args
    assert namespace.no_progress is True and unknown == []
    named = leaf[:1] if command == "bench" else []  # the benchmark's parser, or vllm's
    assert prog == " ".join(["python -m pagedkit", command, *named])


def test_vllm_compare_no_progress_leaves_out_the_loading_bars(capsys):
    from pagedkit.vllm.__main__ import main as vllm_main

    argv = ["compare", "--num-blocks", "4", "--systems", "pagedkit", "--requests", "1"]
    assert vllm_main(argv) == 0
    assert "Loading weights" in capsys.readouterr().err
    assert vllm_main([*argv, "--no-progress"]) == 0
    assert "Loading weights" not in capsys.readouterr().err


def test_vllm_events_says_when_nothing_arrived(capsys, tmp_path):
    """Tenth newcomer's N8: with no publisher it printed nothing and exited 0."""
    pytest.importorskip("zmq")
    from pagedkit.vllm.__main__ import main as vllm_main

    endpoint = f"ipc://{tmp_path}/kv"
    assert vllm_main(["events", endpoint, "--seconds", "0.2"]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith(f"no KV event batches arrived from {endpoint} in 0.2 s: is a vLLM "
                          "publishing there (--kv-events-config with enable_kv_cache_events")
    assert "--seconds" in err and "--replay" in err


def test_vllm_events_prints_what_arrives_and_exits_0(capsys, monkeypatch):
    from pagedkit.vllm import reader
    from pagedkit.vllm.__main__ import main as vllm_main
    from pagedkit.vllm.wire import BlockStored, EventBatch

    class OneBatch:
        """A publisher that sent one batch (the CLI's loop, without a socket)."""
        missed = 0

        def __init__(self, endpoint, replay_endpoint=None):
            self.batches = [EventBatch(0.0, [BlockStored([b"a" * 32], None, [1, 2], 2)])]

        def receive(self, timeout_ms):
            got, self.batches = self.batches, []
            return list(enumerate(got))

        def close(self):
            pass

    monkeypatch.setattr(reader, "ZmqEventStream", OneBatch)
    assert vllm_main(["events", "ipc:///nowhere", "--seconds", "0.2"]) == 0
    out, err = capsys.readouterr()
    assert out == "batch 0: BlockStored -> 1 cached blocks (1 copies)\n" and err == ""


@pytest.mark.parametrize("seconds", ["0", "-1", "x"])
def test_vllm_events_refuses_a_time_that_is_not_positive(seconds, capsys):
    from pagedkit.vllm.__main__ import main as vllm_main

    assert run(vllm_main, ["events", "ipc:///nowhere", "--seconds", seconds]) == 2
    assert "--seconds" in capsys.readouterr().err


@pytest.mark.parametrize("name, content", [("t.json", b"hello world\n"), ("t.json", b""),
                                           ("t.json", b"\xff\xfe\x00"), ("t.csv", b"\xff")])
def test_simulate_names_a_trace_file_it_cannot_read(capsys, tmp_path, name, content):
    """Issue #26 N3: a malformed --trace file was json's 'Expecting value: line 1
    column 1 (char 0)', naming neither the file nor the form a trace takes."""
    path = tmp_path / name
    path.write_bytes(content)
    assert run(cli, ["simulate", "--no-progress", "--trace", str(path), "--rate", "1"]) == 2
    err = capsys.readouterr().err
    assert f"error: argument --trace: {path}: " in err and "expected a " in err
    assert "Traceback" not in err


@pytest.mark.parametrize("row", ['{"prompt_len": -5, "output_len": 3}', "[0, 3]", "[12, -1]"])
def test_simulate_names_a_trace_file_with_a_bad_length(capsys, tmp_path, row):
    """Issue #26 (newcomer 7, finding 5): valid JSON with a length below 1 was
    '--trace: prompt_len of request 0 must be >= 1, got -5', without the file."""
    path = tmp_path / "neg.json"
    path.write_text(f"[{row}]")
    assert run(cli, ["simulate", "--no-progress", "--trace", str(path), "--rate", "1"]) == 2
    err = capsys.readouterr().err
    assert f"error: argument --trace: {path}: " in err and " of request 0 must be >= 1, got " in err


@pytest.mark.parametrize("block_size", [2049, 4096, 100000])
def test_demo_names_a_block_longer_than_any_sequence(capsys, block_size):
    """Issue #26 N1: `demo --block-size 100000` blamed --model with a KV cache
    memory error in the API's terms ('give num_blocks=58 ...'). It names
    --block-size, its value, the model's max_model_len and what to give,
    before anything loads, on any machine."""
    assert run(demo.main, ["--block-size", str(block_size), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert (f"error: --block-size {block_size} is longer than any sequence: the longest "
            "sequence --model 'tiny' takes (its max_model_len) is 2048" in err)
    assert ("give --block-size 16 (pagedkit's default; vLLM's CPU build picks 128) or another "
            "up to 2048" in err)
    assert "num_blocks" not in err and "--model 'tiny':" not in err


@pytest.mark.parametrize("argv", [["--num-blocks", "10000000"], ["--num-blocks", str(10**10)],
                                  ["--num-blocks", str(10**12), "--block-size", "1"],
                                  ["--num-blocks", str(10**9), "--block-size", "64", "-n", "2"]],
                         ids=" ".join)
def test_demo_refuses_a_cache_larger_than_memory_in_num_blocks_terms(capsys, argv):
    """Issue #26 (newcomer 7, finding 3): `demo --num-blocks 10000000` blamed
    --model and advised the API's num_blocks= and kv_cache_memory=, which
    the demo does not take. It says --num-blocks is too large, the bytes,
    the memory, and the most --num-blocks that fit, as '--num-blocks 1 is
    too small' says the least."""
    assert run(demo.main, [*argv, "--no-progress"]) == 2
    err = capsys.readouterr().err.split(" error: ", 1)[1]  # the message, not the usage
    num_blocks = argv[1]
    block_size = argv[argv.index("--block-size") + 1] if "--block-size" in argv else "16"
    tokens = "token" if block_size == "1" else "tokens"  # a count of 1 in the singular
    assert err.startswith(f"--num-blocks {num_blocks} is too large: a KV cache of {num_blocks} "
                          f"blocks x {block_size} {tokens} (")
    per_block, have = (int(x) for x in re.search(r"\((\d+) bytes a block\).*, but (\d+) bytes",
                                                 err).groups())
    assert f"; give --num-blocks {have // per_block} or fewer. Nothing was allocated." in err
    assert "num_blocks" not in err and "kv_cache_memory" not in err and "--model" not in err


@pytest.mark.parametrize("num_blocks", [10**10, 10**12])
def test_vllm_compare_refuses_a_cache_larger_than_memory_in_num_blocks_terms(capsys, num_blocks):
    """The same refusal through `pagedkit.vllm compare` was a traceback."""
    from pagedkit.vllm.__main__ import main as vllm_main

    with pytest.raises(SystemExit) as exit_:
        vllm_main(["compare", "--num-blocks", str(num_blocks), "--systems", "pagedkit",
                   "--requests", "1"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.split(" error: ", 1)[1]
    assert err.startswith(f"--num-blocks {num_blocks} is too large: a KV cache of {num_blocks} "
                          "blocks x 32 tokens (")
    assert re.search(r"; give --num-blocks \d+ or fewer\. Nothing was allocated\.", err)
    assert "num_blocks" not in err and "kv_cache_memory" not in err


def test_demo_says_the_engines_block_refusal_in_its_own_terms():
    from pagedkit.engine.llm_engine import block_past_sequences

    args = argparse.Namespace(model="some/folder", block_size=4096)
    text = demo._block_option(block_past_sequences(4096, 1024, "it does not fit"), args)
    assert text.startswith("--block-size 4096 is longer than any sequence: the longest "
                           "sequence --model 'some/folder' takes (its max_model_len) is 1024")
    assert text.endswith("give --block-size 16 (pagedkit's default; vLLM's CPU build picks 128) "
                         "or another up to 1024")


def test_demo_names_a_model_folder_without_a_tokenizer(capsys, tmp_path):
    """Issue #26 N12: in the command line's terms (the demo takes no
    tokenizer= or token ids)."""
    import shutil

    from pagedkit.models import TINY_DIR

    for name in ("config.json", "model.safetensors"):
        shutil.copy(TINY_DIR / name, tmp_path / name)
    assert run(demo.main, ["--model", str(tmp_path), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "has no tokenizer: none of tokenizer.json" in err
    assert err.rstrip().endswith("the demo's prompts are text: copy the model's tokenizer files "
                                 "into it, or use --model tiny")


@pytest.mark.parametrize("argv", [["--no-progress"], ["03", "--no-progress"],
                                  ["--no-progress", "--no-browser"], ["--no-progress=1"],
                                  ["--no-progress", "foo"]])
def test_lab_refuses_no_progress_after_its_name_before_it_copies_anything(argv, monkeypatch,
                                                                          capsys):
    """Newcomer 31, N6: `python -m pagedkit lab --no-progress` copied the labs and
    wrote JupyterLab's settings, then passed the option on to JupyterLab, whose
    30-line usage refused it. pagedkit refuses it first, as before the name."""
    from pagedkit import lab

    def must_not_run(*args, **kwargs):
        raise AssertionError("lab copied or wrote something before refusing --no-progress")

    monkeypatch.setattr(lab, "copy_labs", must_not_run)
    monkeypatch.setattr(lab, "set_jupyterlab", must_not_run)
    assert run(cli, ["lab", *argv]) == 2
    assert ("--no-progress: lab shows no progress to leave out; run python -m pagedkit lab "
            "without it") in capsys.readouterr().err
