"""How long each lab takes to run under nbval, in wall time and in CPU time.

``python -m pagedkit bench labs [--labs 05,08] [--repo DIR] [--env KEY=VALUE]
[--json PATH]``

Each lab runs as CI runs it, ``python -m pytest --nbval labs/NAME.ipynb``
(every cell executed in a fresh kernel, outputs compared), one lab at a time,
in its own process. Two times are recorded per lab:

* ``wall_s``: from starting pytest to its exit;
* ``cpu_s``: the CPU time (user + system) of pytest and of everything it
  started and waited for — the notebook's kernel above all, a grandchild of
  this process — read from ``getrusage(RUSAGE_CHILDREN)`` before and after
  (pytest reaps the kernel, so its CPU is counted: a notebook burning 5 s of
  CPU reported 5.0 s more than an empty one).

On a shared machine the load stretches wall time but barely CPU time, so CPU
time is the fairer figure when comparing two versions of the labs.

``--repo DIR`` times another checkout's labs (say ``git worktree add
/tmp/old COMMIT``) with that checkout's own pagedkit: it goes first on the
children's ``PYTHONPATH`` and the runs start in ``DIR`` (so its own pytest
settings apply). Where the children import pagedkit from is recorded with
each run, and a run whose pagedkit is not the checkout's is refused.
``--env KEY=VALUE`` sets a variable for the children (e.g.
``PAGEDKIT_KERNELS=torch`` for the per-sequence reference attention).
The load averages before and after each run go into the JSON too.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import resource
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .._validation import PROG, writable_file
from ..i18n import english_error
from ..i18n.terminal import HelpFormatter
from ..lab import find_lab, unnamed_lab
from . import add_no_progress, check_choice, load_average

#: The checkout this pagedkit was imported from (its labs are the default).
HOME = Path(__file__).resolve().parents[3]
#: What all the labs took, one run each on 2 cores shared with other work
#: (load 5-8.5): docs/teachers_guide.md's table, 30 s to 98 s a lab.
DURATION = ("all the labs take about 10 minutes on 2 busy cores (load 5-8.5), 30 s to 1.5 "
            "minutes each; --labs 00 runs one")
#: What the runs need beyond requirements.txt
TOOLS = ("pytest", "nbval")


def missing_tools() -> list[str]:
    """The test tools `run_lab` needs that this Python cannot import."""
    return [name for name in TOOLS if importlib.util.find_spec(name) is None]


@dataclass
class LabRun:
    lab: str              # the notebook's file name
    passed: bool          # pytest's exit status was 0
    wall_s: float
    cpu_s: float          # user + system CPU of pytest and its reaped descendants
    cpu_user_s: float
    cpu_sys_s: float
    load_before: list[float] | None
    load_after: list[float] | None


@dataclass
class Report:
    repo: str
    commit: str | None
    pagedkit_file: str    # where the children import pagedkit from
    env: dict[str, str]
    runs: list[LabRun] = field(default_factory=list)


def find_labs(labs_dir: Path, names: list[str] | None) -> list[Path]:
    """The notebooks `names` name, in that order, or every lab in `labs_dir`.
    A lab is named as ``python -m pagedkit lab`` names it (`pagedkit.lab.find_lab`:
    ``05``, ``5``, ``04b``, ``05_continuous_batching``, ``paging``); a ValueError
    names an unknown or ambiguous one, or one named twice, and the choices."""
    if not labs_dir.is_dir():
        raise ValueError(f"no labs directory at {labs_dir}")
    notebooks = {p.name.split("_")[0]: p for p in sorted(labs_dir.glob("*.ipynb"))}
    if not notebooks:
        raise ValueError(f"no notebooks (*.ipynb) in {labs_dir}")
    if names is None:
        return list(notebooks.values())
    numbers = []
    for name in names:
        file, could_be = find_lab(labs_dir, name)
        if could_be:
            raise ValueError(unnamed_lab(labs_dir, name, could_be))
        numbers.append(file.split("_")[0] if file else name)  # an unknown one as given
    return [notebooks[n] for n in check_choice("lab", numbers, notebooks)]


def parse_env(pairs: list[str]) -> dict[str, str]:
    """``KEY=VALUE`` strings as a dict; a ValueError names one without ``=``."""
    env = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"--env takes KEY=VALUE, got {pair!r}")
        env[key] = value
    return env


def source_dir(repo: Path) -> Path:
    """Where `repo` keeps the package: ``src/`` (the layout since issue #26), or
    the checkout itself for an older checkout with ``pagedkit/`` at its top."""
    return repo / "src" if (repo / "src" / "pagedkit").is_dir() else repo


def child_env(repo: Path, extra: dict[str, str]) -> dict[str, str]:
    """This process's environment, `repo`'s package folder first on PYTHONPATH,
    plus `extra`."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(source_dir(repo)), *filter(None, [env.get("PYTHONPATH")])])
    env.update(extra)
    return env


def imported_pagedkit(repo: Path, env: dict[str, str]) -> str:
    """The pagedkit file the children import; a RuntimeError if it, or
    pagedkit.kernels, is not `repo`'s (an installed or editable copy elsewhere
    would win, and the times would be of the wrong code)."""
    probe = "import pagedkit, pagedkit.kernels; print(pagedkit.__file__); " \
            "print(pagedkit.kernels.__file__)"
    out = subprocess.run([sys.executable, "-c", probe], cwd=repo, env=env,
                         capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"pagedkit does not import from {repo}: {out.stderr.strip()}")
    package, kernels = out.stdout.split()
    for name, path in (("pagedkit", package), ("pagedkit.kernels", kernels)):
        if not Path(path).resolve().is_relative_to(repo.resolve()):
            hint = (f" (an editable install maps it to another checkout: link it, "
                    f"ln -s ../kernels {repo / 'pagedkit' / 'kernels'})"
                    if name == "pagedkit.kernels" and source_dir(repo) == repo else "")
            raise RuntimeError(f"the labs of {repo} would import {name} from {path}, not "
                               f"from {repo}{hint}")
    return package


def _commit(repo: Path) -> str | None:
    out = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True,
                         text=True, check=False)
    return out.stdout.strip() or None


def _children_cpu() -> tuple[float, float]:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime, usage.ru_stime


def run_lab(notebook: Path, repo: Path, env: dict[str, str],
            log=print) -> LabRun:
    """One nbval run of `notebook` (started in `repo`, with `env`), timed."""
    command = [sys.executable, "-m", "pytest", "--nbval", "--nbval-current-env", str(notebook),
               "-q", "-p", "no:cacheprovider"]
    load = load_average()
    user, system = _children_cpu()
    start = time.perf_counter()
    out = subprocess.run(command, cwd=repo, env=env, capture_output=True, text=True,
                         check=False)
    wall = time.perf_counter() - start
    user_end, system_end = _children_cpu()
    run = LabRun(notebook.name, out.returncode == 0, round(wall, 2),
                 round(user_end - user + system_end - system, 2), round(user_end - user, 2),
                 round(system_end - system, 2), load, load_average())
    tail = out.stdout.strip().splitlines()[-1:] or [""]
    log(f"{notebook.name:<36}{run.wall_s:>8.1f} s wall{run.cpu_s:>8.1f} s CPU"
        f"  load {load} -> {run.load_after}  {tail[0]}")
    if not run.passed:
        log(out.stdout[-3000:] + out.stderr[-2000:])
    return run


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog=f"{PROG} bench labs",
                                description=__doc__.splitlines()[0],
                                epilog=f"It runs pytest --nbval (pip install -r "
                                       f"requirements-dev.txt); {DURATION}.",
                                formatter_class=HelpFormatter)
    p.add_argument("--labs", help="comma-separated labs, each named as the lab command names "
                   "one (number, name or title), e.g. 05,08 (default: all)")
    p.add_argument("--repo", default=str(HOME),
                   help="the checkout whose labs and pagedkit run (default: this one)")
    p.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                   help="an environment variable for the runs (repeatable)")
    p.add_argument("--json", metavar="PATH", type=writable_file, help="write the report here")
    add_no_progress(p)
    args = p.parse_args(argv)
    missing = missing_tools()
    if missing:
        english_error(p, f"bench labs runs each lab under pytest --nbval, and this Python has no "
                         f"{' and no '.join(missing)}: pip install -r requirements-dev.txt")
    repo = Path(args.repo).resolve()
    try:
        names = None if args.labs is None else [n.strip() for n in args.labs.split(",")
                                                if n.strip()]
        notebooks = find_labs(repo / "labs", names)
        extra = parse_env(args.env)
        env = child_env(repo, extra)
        pagedkit_file = imported_pagedkit(repo, env)  # refuses another checkout's pagedkit
    except (ValueError, RuntimeError) as err:
        english_error(p, str(err))
    report = Report(str(repo), _commit(repo), pagedkit_file, extra)
    print(f"labs of {repo} (commit {report.commit}), pagedkit from {report.pagedkit_file}"
          + (f", env {extra}" if extra else "")
          + (f"; {DURATION}" if len(notebooks) > 1 else ""), flush=True)
    for notebook in notebooks:
        report.runs.append(run_lab(notebook, repo, env, log=lambda s: print(s, flush=True)))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(asdict(report), f, indent=2)
    return 0 if all(r.passed for r in report.runs) else 1


if __name__ == "__main__":
    sys.exit(main())
