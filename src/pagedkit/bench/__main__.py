"""``python -m pagedkit bench <name> [options]``: run one benchmark.

``engine`` is pagedkit against transformers' generate and its continuous
batching (also ``python -m pagedkit bench``); ``kernels`` the PagedAttention
kernels against SDPA on a contiguous cache; ``widgets`` what recording a
simulation for the widgets costs per step; ``labs`` each lab's nbval run
time (wall and CPU); ``calls`` how many named pagedkit functions one
decode step calls; ``linears`` where prepacked linear layers pay
(shapes and token counts); ``hash`` what naming a prefix-cache block costs; ``vllm``
pagedkit beside vLLM's CPU build over batch sizes, models and threads;
``study`` each lab's estimated student time (core and optional). Each
has its own options: ``python -m pagedkit bench <name> --help``
(``python -m pagedkit.bench`` runs the same).
"""

from __future__ import annotations

import argparse
import importlib
import sys

from .._validation import PROG
from ..i18n.terminal import HelpFormatter

#: name -> (module whose ``main(argv)`` runs it, one line of help). The times: on 2
#: shared cores at load 3-4 (2026-12-02), calls 3.1 s, hash 4.0 s, kernels (CPU) 3.0 s
#: (3.0-3.4 s at load 4 with its batched row, 2026-12-03),
#: linears 66 s at load 1-2.5 (2026-12-04; newcomer 36: 2 minutes at load 2-3),
#: study 0.1 s; engine, widgets and labs as their modules measured;
#: vllm as docs/benchmarks.md's "Beside vLLM again" ran (16:46-16:54 UTC), with
#: --repeats 3 as "A few rows in C" ran (2026-12-05 14:30-14:39 UTC).
BENCHMARKS = {
    "engine": ("pagedkit.bench.engine", "pagedkit against transformers' generate (17 minutes on "
               "2 busy cores; --quick: 10 s to 2 minutes)"),
    "kernels": ("pagedkit.bench.kernels", "the PagedAttention kernels against SDPA (on a CPU: "
                "the small grid, seconds, timing SDPA, the torch reference, the batched path "
                "and the C decode kernel the CPU engine runs, not the Triton kernels)"),
    "widgets": ("pagedkit.bench.widgets", "what recording and drawing the widgets cost "
                "(3.5-7.5 minutes on 2 busy cores; --steps 300 --rounds 1: a quick look)"),
    "labs": ("pagedkit.bench.labs", "each lab's nbval run time, wall and CPU (needs "
             "requirements-dev.txt; all labs: about 10 minutes; --labs 00: one)"),
    "calls": ("pagedkit.bench.calls", "the named pagedkit functions one decode step calls "
              "(seconds)"),
    "hash": ("pagedkit.bench.prefix_hash", "what naming and finding a prefix-cache block costs "
             "(seconds)"),
    "vllm": ("pagedkit.bench.beside_vllm", "pagedkit and vLLM, batch 1/8/64, two models, "
             "threads (12 runs, 8 minutes at load 1-2; --repeats 3: each three times, "
             "9 minutes at load 1; --models tiny: the faster half)"),
    "linears": ("pagedkit.bench.linears", "plain against prepacked linear layers, by shape "
                "(1-2 minutes)"),
    "study": ("pagedkit.bench.study", "each lab's estimated student time, by a stated rule "
              "(instant)"),
}


def _parser(prog: str, default: str | None) -> argparse.ArgumentParser:
    lines = "\n".join(f"  {name:<9} {text}" for name, (_, text) in BENCHMARKS.items())
    p = argparse.ArgumentParser(
        prog=prog, usage=f"%(prog)s {{{', '.join(BENCHMARKS)}}} [options]",
        description="Run one of pagedkit's benchmarks"
                    + (f" (without NAME: {default})." if default else "."),
        epilog=f"benchmarks:\n{lines}\n\nEach has its own options: {prog} NAME --help",
        formatter_class=HelpFormatter)
    p.add_argument("name", choices=list(BENCHMARKS), metavar="NAME",
                   help=f"one of: {', '.join(BENCHMARKS)}")
    p.add_argument("args", nargs=argparse.REMAINDER, metavar="...",
                   help="the benchmark's own options")
    return p


def main(argv: list[str] | None = None, prog: str = f"{PROG} bench",
         default: str | None = None) -> int:
    """Run benchmark ``argv[0]`` with the rest; `default` runs when no name is
    given (``python -m pagedkit bench`` alone is the engine benchmark)."""
    from . import no_progress_after_name

    argv = no_progress_after_name(sys.argv[1:] if argv is None else list(argv))
    if default and (not argv or (argv[0].startswith("-")
                                 and argv[0] not in ("-h", "--help"))):
        argv = [default, *argv]
    args = _parser(prog, default).parse_args(argv)
    return importlib.import_module(BENCHMARKS[args.name][0]).main(args.args)


if __name__ == "__main__":
    sys.exit(main())
