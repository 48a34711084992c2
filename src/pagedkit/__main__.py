"""``python -m pagedkit <command>`` (also the ``pagedkit`` console script).

Each command has its own options: ``python -m pagedkit <command> --help``.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from . import __version__
from ._validation import PROG
from .bench.__main__ import BENCHMARKS

#: command -> (module whose ``main(argv)`` runs it, one line of help)
COMMANDS = {
    "demo": ("pagedkit.demo",
             "the embedded model serving a batch: outputs, throughput, KV cache use"),
    "bench": ("pagedkit.bench.__main__",
              f"benchmarks: {', '.join(BENCHMARKS)} (the default: pagedkit against "
              "transformers); see bench --help"),
    "simulate": ("pagedkit.sim.cli",
                 "the paper's memory and batching results from the simulator (no GPU)"),
    "lab": ("pagedkit.lab",
            "the labs in JupyterLab, from a clone: served from its root, your copies in "
            "my-labs/"),
    "gpucheck": ("pagedkit.gpucheck",
                 "on a CUDA GPU: compiled kernels vs references, kernel benchmark, engine vs "
                 "transformers, one table"),
    "vllm": ("pagedkit.vllm.__main__",
             "beside the real vLLM (its CPU build): 'vllm compare' runs one workload on both, "
             "'vllm events' follows a vLLM's cache events"),
}


def _parser() -> argparse.ArgumentParser:
    lines = "\n".join(f"  {name:<10} {text}" for name, (_, text) in COMMANDS.items())
    p = argparse.ArgumentParser(
        prog=PROG, description=f"pagedkit {__version__}: a teaching lab for "
        "PagedAttention.", epilog=f"commands:\n{lines}\n\nEach command has its own options: "
        f"{PROG} COMMAND --help", formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version", version=f"pagedkit {__version__}")
    p.add_argument("command", choices=list(COMMANDS), metavar="COMMAND",
                   help=f"one of: {', '.join(COMMANDS)}")
    p.add_argument("args", nargs=argparse.REMAINDER, metavar="...",
                   help="the command's own options")
    return p


def main(argv: list[str] | None = None) -> int:
    """Run a command and return its exit status; usage errors, ``--help`` and
    ``--version`` exit through argparse (status 2, 0, 0)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = _parser()
    if not argv:  # a first try: show what there is to run
        parser.print_help(sys.stderr)
        return 2
    args = parser.parse_args(argv)  # --help, --version, a usage error: SystemExit, as argparse
    run = importlib.import_module(COMMANDS[args.command][0]).main
    options = {"default": "engine"} if args.command == "bench" else {}
    return run(args.args, **options)


if __name__ == "__main__":
    sys.exit(main())
