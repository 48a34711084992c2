"""What naming a block costs: the prefix cache's hashes, per full block.

``python -m pagedkit bench hash [--blocks 20000] [--rounds 5] [--json PATH]``

A block is named once, when it fills (`BlockTable._seal_last_block`), and a
new request's prompt is looked up block by block (`BlockTable.cached_prefix`).
This times, per block of 16 and of 32 tokens, in this process's CPU time
(the fastest of ``--rounds`` rounds counts):

* Python's built-in ``hash`` of ``(parent, tokens)`` — what pagedkit used
  before, for comparison only: it collides (``hash(-1) == hash(-2)``);
* ``sha256`` (vLLM's default) and ``sha256_cbor`` of ``(parent, tokens, None)``;
* a `BlockKey`, name included, as the engine makes one;
* a cache hit: `BlockAllocator.find_cached` of a key equal to a cached one's
  (the name, then the exact comparison of the keys).

Without prefix caching no block is named, so none of this is paid.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import time
from collections.abc import Callable

from .._validation import PROG, positive_int, writable_file
from ..i18n.terminal import HelpFormatter
from ..memory import ROOT_HASH, BlockAllocator, BlockKey, sha256, sha256_cbor
from . import add_no_progress

clock = time.process_time


def best_per_call(fn: Callable[[int], object], count: int, rounds: int) -> float:
    """Fastest round's CPU time per call, in microseconds."""
    best = float("inf")
    for _ in range(rounds):
        start = clock()
        for i in range(count):
            fn(i)
        best = min(best, clock() - start)
    return best / count * 1e6


def measure(block_size: int, count: int, rounds: int, seed: int = 0) -> dict[str, float]:
    rng = random.Random(seed)
    blocks = [tuple(rng.randrange(150_000) for _ in range(block_size)) for _ in range(count)]
    pool = BlockAllocator(count, block_size, enable_prefix_caching=True)
    keys = []
    for tokens in blocks:  # one cached block per content, each after the root
        block = pool.allocate()
        pool.append_tokens(block, block_size)
        keys.append(pool.new_key(None, tokens))
        pool.register(block, keys[-1])
    lookups = [pool.new_key(None, tokens) for tokens in blocks]  # equal keys, other objects
    if any(pool.find_cached(key) is None for key in lookups):
        raise RuntimeError("a lookup the bench times as a hit misses")
    return {
        "builtin_hash_us": best_per_call(lambda i: hash((ROOT_HASH, blocks[i])), count, rounds),
        "sha256_us": best_per_call(lambda i: sha256((ROOT_HASH, blocks[i], None)), count,
                                   rounds),
        "sha256_cbor_us": best_per_call(lambda i: sha256_cbor((ROOT_HASH, blocks[i], None)),
                                        count, rounds),
        "block_key_us": best_per_call(lambda i: BlockKey(None, blocks[i]), count, rounds),
        "cache_hit_us": best_per_call(lambda i: pool.find_cached(lookups[i]), count, rounds),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog=f"{PROG} bench hash",
                                description="What naming and finding a cached block costs.",
                                formatter_class=HelpFormatter)
    p.add_argument("--blocks", type=positive_int, default=20_000, help="blocks per round (20000)")
    p.add_argument("--rounds", type=positive_int, default=5, help="rounds; the fastest counts (5)")
    p.add_argument("--json", metavar="PATH", type=writable_file,
                   help="write the numbers here as JSON")
    add_no_progress(p)
    args = p.parse_args(argv)
    rows = {bs: measure(bs, args.blocks, args.rounds) for bs in (16, 32)}
    print(f"CPU microseconds per block ({args.blocks} blocks, fastest of {args.rounds} rounds)")
    print(f"{'block size':>10} | {'builtin hash':>12} | {'sha256':>7} | {'sha256_cbor':>11} | "
          f"{'BlockKey':>8} | {'cache hit':>9}")
    for bs, r in rows.items():
        print(f"{bs:>10} | {r['builtin_hash_us']:>12.2f} | {r['sha256_us']:>7.2f} | "
              f"{r['sha256_cbor_us']:>11.2f} | {r['block_key_us']:>8.2f} | "
              f"{r['cache_hit_us']:>9.2f}")
    if args.json:
        report = {"machine": platform.processor() or platform.machine(),
                  "python": platform.python_version(), "blocks": args.blocks,
                  "rounds": args.rounds, "per_block_size": rows}
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
        print(f"wrote {args.json}")
    return 0
