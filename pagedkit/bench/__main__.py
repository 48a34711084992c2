"""``python -m pagedkit.bench <name> [options]``: run one benchmark.

Available: ``kernels`` (the PagedAttention kernels against SDPA on a
contiguous cache; ``python -m pagedkit.bench kernels --help``).
"""

from __future__ import annotations

import importlib
import sys

BENCHMARKS = {
    "kernels": "pagedkit.bench.kernels",
}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in BENCHMARKS:
        names = ", ".join(BENCHMARKS)
        print(f"usage: python -m pagedkit.bench {{{names}}} [options]", file=sys.stderr)
        return 2
    return importlib.import_module(BENCHMARKS[argv[0]]).main(argv[1:])


if __name__ == "__main__":
    sys.exit(main())
