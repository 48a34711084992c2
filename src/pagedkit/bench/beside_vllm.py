"""pagedkit and vLLM's CPU build on the same requests, one table (docs/benchmarks.md).

``python -m pagedkit bench vllm [--out DIR] [--requests 1,8,64] [--models tiny,larger]
[--threads 1,default] [--repeats R] [--doc docs/benchmarks.md]`` runs one
``bench engine`` per cell — ``python -m pagedkit bench engine --model M
--requests N [--threads 1] --systems pagedkit,vllm --rounds 1 --json
DIR/M-bN-tT.json`` — each in a fresh process (vLLM's CPU worker replaces
``torch.set_num_threads`` in the process that builds it, so a thread setting
would not survive from one cell to the next), records ``uptime`` before and
after each, and writes the table between the markers in `doc`.
``--table-only`` rewrites the table from the JSON already in DIR.

One round per cell, counted as it ran (``bench engine`` warms each system
up with a two-request run first, untimed). On a shared machine the load
beside each row says how far to trust it. One such run of a short cell
varies by 10-30% here, at times more, both systems alike (docs/benchmarks.md,
issue #25), so ``--repeats R`` runs every cell R times, the cells in turn (each round
of cells before the next, so a slow minute of the machine falls on many
cells, not on one cell's runs); a cell's JSON then holds one report per
run, and the table gives medians, with the range beside them.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

from .._validation import PROG, positive_int
from ..i18n import english_error
from ..i18n.terminal import HelpFormatter
from . import add_no_progress

START = "<!-- beside-vllm-table:start -->"
END = "<!-- beside-vllm-table:end -->"
MODELS = ("tiny", "larger")
REQUESTS = (1, 8, 64)
THREADS = ("1", "default")
#: The table's page in the checkout this pagedkit was imported from
DOC = Path(__file__).resolve().parents[3] / "docs" / "benchmarks.md"


def cell_name(model: str, requests: int, threads: str) -> str:
    return f"{model}-b{requests}-t{threads}"


def engine_argv(model: str, requests: int, threads: str, json_path: Path,
                progress: bool = True) -> list[str]:
    """The ``bench engine`` command line of one cell (`progress` False: with
    ``--no-progress``)."""
    argv = [sys.executable, "-m", "pagedkit", "bench", "engine", "--model", model,
            "--requests", str(requests), "--systems", "pagedkit,vllm", "--rounds", "1",
            "--json", str(json_path)]
    return (argv + (["--threads", threads] if threads != "default" else [])
            + ([] if progress else ["--no-progress"]))


def uptime() -> str:
    """What ``uptime`` prints (its load averages are the point)."""
    return subprocess.run(["uptime"], capture_output=True, text=True, check=True).stdout.strip()


def run_cell(model: str, requests: int, threads: str, out: Path, progress: bool = True,
             keep: bool = False) -> Path:
    """One ``bench engine`` run; its JSON gains ``uptime`` before and after.
    With `keep`, the cell's JSON keeps the reports of earlier runs and gains
    this one's (``--repeats``); else this run's replaces them."""
    path = out / f"{cell_name(model, requests, threads)}.json"
    run_path = path.with_suffix(".run.json")
    argv = engine_argv(model, requests, threads, run_path, progress)
    before = uptime()
    print(f"$ {' '.join(argv)}\n  {before}", flush=True)
    subprocess.run(argv, check=True)
    after = uptime()
    print(f"  {after}", flush=True)
    reports = json.loads(run_path.read_text())
    run_path.unlink()
    for report in reports:
        report["uptime"] = {"before": before, "after": after}
    earlier = json.loads(path.read_text()) if keep and path.exists() else []
    path.write_text(json.dumps(earlier + reports, indent=2))
    return path


def _load(text: str) -> str:
    """The three load averages of an ``uptime`` line."""
    return text.rsplit("load average:", 1)[-1].strip() if "load average:" in text else "?"


def _spread(values: list[float], digits: int = 1, unit: str = "") -> str:
    """One run's value; several runs' median, their range and count beside it."""
    if len(values) == 1:
        return f"{values[0]:.{digits}f}{unit}"
    lo, mid, hi = min(values), statistics.median(values), max(values)
    return f"{mid:.{digits}f}{unit} ({lo:.{digits}f}-{hi:.{digits}f}, {len(values)} runs)"


def _loads(reports: list[dict]) -> str:
    """The load beside a cell: one run's averages before and after; several
    runs' 1-minute averages, before each and after each, as ranges."""
    def pair(report: dict) -> tuple[str, str]:
        up = report.get("uptime")
        if up:
            return _load(up["before"]), _load(up["after"])
        env = report["environment"]
        return str(env.get("load_average")), str(env.get("load_average_end"))

    pairs = [pair(r) for r in reports]
    if len(pairs) == 1:
        return " -> ".join(pairs[0])
    try:
        before, after = ([float(p[i].strip("[]").split(",")[0]) for p in pairs] for i in (0, 1))
    except ValueError:
        return "; ".join(" -> ".join(p) for p in pairs)
    return f"1 min: {min(before):.2f}-{max(before):.2f} -> {min(after):.2f}-{max(after):.2f}"


def table_rows(reports: list[dict], threads: str) -> list[str]:
    """Markdown rows of one cell's runs (one report each): one row per system,
    each figure one run's or the runs' median (range beside it), the ratio
    to pagedkit taken within each run, the load beside them."""
    first = reports[0]
    runs = [{r["system"]: r for r in report["results"]} for report in reports]
    rows = []
    for name in ("pagedkit", "vllm"):
        head = f"| {first['model']} | {first['num_requests']} | {threads} | {name} "
        mine = [(run[name], run.get("pagedkit")) for run in runs if name in run]
        if len(mine) < len(runs):
            failed = (f"failed in {len(runs) - len(mine)} of {len(runs)} runs (see the runs' "
                      "log)" if len(runs) > 1 else "failed (see the run's log)")
            rows.append(f"{head}| {failed} | | | | | |")
            continue
        ratios = [r["tokens_per_s"] / base["tokens_per_s"] for r, base in mine if base]
        cpu = [r["tokens_per_cpu_s"] for r, _ in mine if r.get("tokens_per_cpu_s") is not None]
        differ = [r["outputs_differing"] for r, _ in mine if r.get("outputs_differing") is not None]
        rows.append(
            f"{head}| {_spread([r['tokens_per_s'] for r, _ in mine])} "
            f"| {_spread(ratios, 2) if len(ratios) == len(mine) else '-'} "
            f"| {_spread(cpu) if len(cpu) == len(mine) else '-'} "
            f"| {_spread([r['ttft_mean_s'] for r, _ in mine], 2, ' s')} "
            f"| {max(differ) if len(differ) == len(mine) else '-'} "
            f"| {_loads(reports) if name == 'pagedkit' else ''} |")
    return rows


def markdown(out: Path, models=MODELS, requests=REQUESTS, threads=THREADS) -> str:
    """The table over every cell whose JSON is in `out` (a missing cell is named)."""
    lines = ["| model | requests | threads | system | tok/s | x pagedkit | tok per CPU-s "
             "| mean TTFT | requests differing | load (1/5/15 min) before -> after |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for model in models:
        for n in requests:
            for t in threads:
                path = out / f"{cell_name(model, n, t)}.json"
                if not path.exists():
                    lines.append(f"| {model} | {n} | {t} | | not run ({path.name} missing) "
                                 "| | | | | |")
                    continue
                lines += table_rows(json.loads(path.read_text()), t)
    return "\n".join(lines)


def check_doc(doc: Path) -> str:
    """`doc`'s text, if it has the markers to put the table between; else a
    ValueError saying what is wrong (checked before any cell runs)."""
    if not doc.is_file():
        raise ValueError(f"--doc {doc}: no such file (the table goes into a page with the "
                         f"markers {START} ... {END}, by default this checkout's "
                         "docs/benchmarks.md)")
    text = doc.read_text()
    if START not in text or END not in text:
        raise ValueError(f"--doc {doc} has no {START} ... {END} markers to put the table "
                         "between")
    return text


def write_table(doc: Path, table: str) -> None:
    """Put `table` between the markers in `doc` (they must be there)."""
    head, rest = check_doc(doc).split(START, 1)
    _, tail = rest.split(END, 1)
    doc.write_text(f"{head}{START}\n{table}\n{END}{tail}")


def _choices(text: str, valid, what: str) -> tuple:
    items = tuple(s.strip() for s in text.split(",") if s.strip())
    bad = [s for s in items if valid is not None and s not in valid]
    if bad or not items:
        raise argparse.ArgumentTypeError(f"{what}: {bad or text!r}; choose from "
                                         f"{', '.join(valid or ('positive integers',))}")
    return items


def _positive(text: str, option: str) -> int:
    try:
        return positive_int(text)
    except argparse.ArgumentTypeError as err:
        raise argparse.ArgumentTypeError(f"{option}: {err}") from None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog=f"{PROG} bench vllm", description=__doc__.splitlines()[0],
                                formatter_class=HelpFormatter)
    p.add_argument("--out", default="bench-vllm", help="folder for each cell's JSON")
    p.add_argument("--models", default=",".join(MODELS),
                   help=f"comma-separated, from {', '.join(MODELS)} (default: both)")
    p.add_argument("--requests", default=",".join(map(str, REQUESTS)),
                   help="comma-separated batch sizes (default: 1,8,64)")
    p.add_argument("--threads", default=",".join(THREADS), help="1 and/or default")
    p.add_argument("--doc", type=Path, default=DOC,
                   help="the page whose marked table is rewritten (default: this checkout's "
                   "docs/benchmarks.md, a tracked file)")
    p.add_argument("--repeats", default="1",
                   help="runs of every cell, the cells in turn (default 1); the table "
                   "gives medians and ranges")
    p.add_argument("--table-only", action="store_true",
                   help="only rewrite the table, from the JSON already in --out")
    add_no_progress(p, "each bench engine run's progress lines (it is passed on to them)")
    args = p.parse_args(argv)
    try:
        models = _choices(args.models, MODELS, "--models")
        threads = _choices(args.threads, THREADS, "--threads")
        requests = tuple(_positive(n, "--requests")
                         for n in _choices(args.requests, None, "--requests"))
        repeats = _positive(args.repeats, "--repeats")
        check_doc(args.doc)
    except (argparse.ArgumentTypeError, ValueError) as err:
        english_error(p, str(err))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if not args.table_only:
        for repeat in range(repeats):
            for model in models:
                for n in requests:
                    for t in threads:
                        run_cell(model, n, t, out, progress=not args.no_progress,
                                 keep=repeat > 0)
    table = markdown(out, models, requests, threads)
    print(table)
    write_table(args.doc, table)
    return 0
