"""``python -m pagedkit <command>`` (also the ``pagedkit`` console script).

Each command has its own options: ``python -m pagedkit <command> --help``.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from . import __version__
from ._validation import NO_PROGRESS, PROG, no_progress_refusal
from .bench.__main__ import BENCHMARKS
from .i18n import N_, _, argparse_speaking, command_language, join_names
from .i18n.terminal import HelpFormatter

#: command -> (module whose ``main(argv)`` runs it, one line of help)
COMMANDS = {
    "demo": ("pagedkit.demo",
             N_("the embedded model serving a batch: outputs, throughput, KV cache use")),
    "bench": ("pagedkit.bench.__main__",
              N_("benchmarks: {names}; with none named, engine (pagedkit against "
                 "transformers); see bench --help")),
    "simulate": ("pagedkit.sim.cli",
                 N_("the paper's memory and batching results from the simulator (no GPU)")),
    "lab": ("pagedkit.lab",
            N_("the labs in JupyterLab, from a clone: served from its root, your copies in "
               "my-labs/")),
    "gpucheck": ("pagedkit.gpucheck",
                 N_("on a CUDA GPU: compiled kernels vs references, kernel benchmark, engine vs "
                    "transformers, one table")),
    "vllm": ("pagedkit.vllm.__main__",
             N_("beside the real vLLM (its CPU build): 'vllm compare' runs one workload on "
                "both, 'vllm events' follows a vLLM's cache events")),
}
"""(The help line is English, marked for translation; `_parser` shows it in the
language of the moment, the benchmarks' names put in.)"""

def _parser() -> argparse.ArgumentParser:
    names = join_names(BENCHMARKS)
    lines = "\n".join(f"  {name:<10} " + _(text).format(names=names)
                      for name, (_module, text) in COMMANDS.items())
    p = argparse.ArgumentParser(
        prog=PROG, description=_("pagedkit {version}: a teaching lab for PagedAttention.")
        .format(version=__version__),
        epilog=_("commands:\n{lines}\n\nEach command has its own options: {prog} COMMAND "
                 "--help").format(lines=lines, prog=PROG),
        formatter_class=HelpFormatter)
    p.add_argument("--version", action="version", version=f"pagedkit {__version__}",
                   help=_("show program's version number and exit"))
    p.add_argument("--no-progress", action="store_true",
                   help=_("leave out the command's progress output: its own --no-progress, given "
                          "before its name ({commands} take it)")
                   .format(commands=join_names(NO_PROGRESS)))
    p.add_argument("command", choices=list(COMMANDS), metavar="COMMAND",
                   help=_("one of: {commands}").format(commands=join_names(COMMANDS)))
    p.add_argument("args", nargs=argparse.REMAINDER, metavar="...",
                   help=_("the command's own options"))
    return p


def commands_markdown() -> str:
    """docs/api.md's table of every command and benchmark, from their help lines
    here (English; tests/test_cli.py holds the page to it)."""
    names = ", ".join(BENCHMARKS)
    rows = [(name, text.format(names=names)) for name, (_module, text) in COMMANDS.items()]
    rows += [(f"bench {name}", text) for name, (_module, text) in BENCHMARKS.items()]
    return "\n".join(["| command | what it does |", "|---|---|",
                      *(f"| `{PROG} {name}` | {text} |" for name, text in rows)])


def main(argv: list[str] | None = None) -> int:
    """Run a command and return its exit status; usage errors, ``--help`` and
    ``--version`` exit through argparse (status 2, 0, 0). argparse's own words
    (``usage:``, ``error:``) are said in pagedkit's language too (`argparse_speaking`)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if not command_language(PROG):  # a bad PAGEDKIT_LANGUAGE: said, not a traceback
        return 2
    with argparse_speaking():
        return _run(argv)


def _run(argv: list[str]) -> int:
    """`main` once the language is set: parse the command line, run the command."""
    parser = _parser()
    if not argv:  # a first try: show what there is to run
        parser.print_help(sys.stderr)
        return 2
    args = parser.parse_args(argv)  # --help, --version, a usage error: SystemExit, as argparse
    if args.no_progress:  # the command's own option, given before its name
        if args.command not in NO_PROGRESS:
            parser.error(no_progress_refusal(args.command))
        args.args = ["--no-progress", *args.args]
    run = importlib.import_module(COMMANDS[args.command][0]).main
    options = {"default": "engine"} if args.command == "bench" else {}
    try:
        return run(args.args, **options)
    except KeyboardInterrupt:  # Ctrl-C: a word, not a traceback, and the shell's status
        print(_("{prog} {command}: interrupted").format(prog=PROG, command=args.command),
              file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
