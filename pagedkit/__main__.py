"""``python -m pagedkit <command>`` (also the ``pagedkit`` console script).

  demo       the embedded model serving a batch: outputs, throughput, KV usage
  bench      benchmarks: ``bench`` (engine vs transformers) or ``bench kernels``
  simulate   the paper's memory and batching results from the simulator
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    command, rest = (argv[0], argv[1:]) if argv else ("", [])
    if command == "demo":
        from .demo import main as run
    elif command == "bench":
        from .bench.__main__ import main as bench

        def run(args):
            # `bench` alone is the engine benchmark; `bench kernels` the kernels'
            return bench(args if args and not args[0].startswith("-") else ["engine", *args])
    elif command == "simulate":
        from .sim.cli import main as run
    else:
        print(__doc__, file=sys.stderr)
        return 0 if command in ("-h", "--help") else 2
    return run(rest)


if __name__ == "__main__":
    sys.exit(main())
