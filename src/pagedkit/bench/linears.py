"""Where prepacked linear layers pay: F.linear against the packed product.

``python -m pagedkit bench linears [--threads 1,2] [--widths 256,384,512,768,1024]
[--rows 1,2,4,8,16,64,256] [--cold] [--json PATH]``

For each width h, the projection shapes of a Llama-style layer (q/o: h x h,
k/v: h x h/4, gate/up: h x 2.7h, down: 2.7h x h, and an output layer of 4096
tokens) are multiplied by inputs of each row count (the tokens of a step),
plain (``F.linear``) and prepacked (`pagedkit.model.accel`: up to
``cpu_linear.MAX_ROWS`` rows in C, more with oneDNN); each time is
the fastest of several repeats, what a shared machine's load disturbs least.
The table gives plain time / packed time (above 1: packed is faster) and
whether ``PAGEDKIT_PREPACK=auto`` packs that shape (it then uses the packed
copy in every call). By default one weight is multiplied again and again,
in the CPU's caches; ``--cold`` cycles through copies of it (twice the
CPU's largest cache in all, `cold_bytes`), so each product reads its
weight from memory, as in a decode step of a model larger than the
caches. `pagedkit.model.accel`'s rule (a layer at least 256 inputs wide,
every call) was measured in the engine, which the second resembles
(docs/benchmarks.md, "The tiny model packed"); a shape rule read from the
first, for oneDNN's product alone, came before it ("Prepacked linear layers").
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from .._validation import PROG, writable_file
from ..i18n.terminal import HelpFormatter
from ..model import accel
from . import add_no_progress, load_average

SHAPES = {"q/o h x h": (1, 1), "k/v h x h/4": (1, 0.25), "gate/up h x 2.7h": (1, 2.7),
          "down 2.7h x h": (2.7, 1), "output h x 4096": (1, None)}


def fastest(fn, repeats: int, number: int) -> float:
    """Seconds of one call: the fastest of `repeats` timings of `number` calls."""
    fn()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        best = min(best, (time.perf_counter() - start) / number)
    return best


#: ``--cold``: the copies of a weight cycled through, in all; None: `cold_bytes`.
COLD_BYTES: int | None = None


def cold_bytes() -> int:
    """Twice the CPU's largest cache (Linux's sysfs), or 64 MiB where it cannot be read."""
    sizes = []
    for path in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        text = path.read_text().strip().upper()
        scale = {"K": 2**10, "M": 2**20, "G": 2**30}.get(text[-1:], 1)
        if text.rstrip("KMG").isdigit():
            sizes.append(int(text.rstrip("KMG")) * scale)
    return 2 * max(sizes) if sizes else 64 * 2**20


@torch.inference_mode()
def measure(width: int, shape: str, rows: list[int], repeats: int = 7,
            cold_total: int = 0) -> dict:
    """One shape at one width: plain and packed seconds per row count, the
    weight in cache or (`cold_total` bytes) one of copies read in turn from memory."""
    scale_in, scale_out = SHAPES[shape]
    k = round(width * scale_in)
    n = 4096 if scale_out is None else round(width * scale_out)
    copies = -(-cold_total // (4 * n * k)) if cold_total else 1
    weights = [torch.randn(n, k) * k ** -0.5 for _ in range(copies)]
    packed = [accel.pack_weight(w) for w in weights]
    out = {"width": width, "shape": shape, "in_features": k, "out_features": n,
           "auto_packs": accel.below_rule(k, n, width) is None,  # in a model this wide
           "cold": bool(cold_total), "rows": {}}
    for m in rows:
        x = torch.randn(1, m, k)
        number = max(3, min(200, int(2e7 / (m * k * n * copies))))

        def plain():
            for w in weights:
                F.linear(x, w)  # noqa: B023

        def fast():
            for w in packed:
                accel.packed_linear(x, w, None)  # noqa: B023
        out["rows"][m] = {"plain_s": fastest(plain, repeats, number) / copies,
                          "packed_s": fastest(fast, repeats, number) / copies}
    return out


def format_table(results: list[dict], threads: int, rows: list[int], cold_total: int = 0) -> str:
    where = (f"from memory (--cold: copies of each, {cold_total >> 20} MiB in all)"
             if cold_total else "in cache")
    lines = [f"threads={threads}, weights {where}: plain time / packed time (above 1: packed "
             "faster), by rows",
             f"{'width':>5} {'shape':<17}{'weight':>12}" + "".join(f"{m:>7}" for m in rows)
             + "  auto packs"]
    for r in results:
        ratios = "".join(f"{v['plain_s'] / v['packed_s']:>7.2f}" for v in r["rows"].values())
        packs = "yes" if r["auto_packs"] else "no"
        weight = f"{r['in_features']:>5} x {r['out_features']:<5}"
        lines.append(f"{r['width']:>5} {r['shape']:<17}{weight}{ratios}  {packs}")
    return "\n".join(lines)


def _ints(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        values = []
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers separated by commas, "
                                         f"got {text!r}")
    return values


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog=f"{PROG} bench linears", description=__doc__.splitlines()[0],
                                formatter_class=HelpFormatter)
    p.add_argument("--threads", type=_ints, default=[1, 2], help="torch threads (default 1,2)")
    p.add_argument("--widths", type=_ints, default=[256, 384, 512, 768, 1024],
                   help="hidden sizes (default 256,384,512,768,1024)")
    p.add_argument("--rows", type=_ints, default=[1, 2, 4, 8, 16, 64, 256],
                   help="tokens per call (default 1,2,4,8,16,64,256)")
    p.add_argument("--cold", action="store_true",
                   help="read each weight from memory, as a decode step of a large model does "
                   "(cycles through copies of it, twice the CPU's largest cache in all)")
    p.add_argument("--json", metavar="PATH", type=writable_file, help="write every time here")
    add_no_progress(p)
    args = p.parse_args(argv)
    why = accel.prepack_unavailable()
    if why:
        print(f"bench linears: nothing to compare: {why}")
        return 1
    report = {"torch": torch.__version__, "load_average": load_average(), "runs": []}
    cold_total = (COLD_BYTES or cold_bytes()) if args.cold else 0  # read once
    for threads in args.threads:
        torch.set_num_threads(threads)
        results = [measure(w, s, args.rows, cold_total=cold_total)
                   for w in args.widths for s in SHAPES]
        report["runs"].append({"threads": threads, "cold": args.cold, "results": results})
        print(format_table(results, threads, args.rows, cold_total), flush=True)
    report["load_average_end"] = load_average()
    print(f"load {report['load_average']} -> {report['load_average_end']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    return 0
