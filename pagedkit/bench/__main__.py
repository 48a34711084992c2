"""``python -m pagedkit.bench <name> [options]``: run one benchmark.

Available: ``engine`` (pagedkit against transformers' generate and its
continuous batching; also ``python -m pagedkit bench``) and ``kernels`` (the
PagedAttention kernels against SDPA on a contiguous cache).
"""

from __future__ import annotations

import importlib
import sys

BENCHMARKS = {
    "engine": "pagedkit.bench.engine",
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
