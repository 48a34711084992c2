"""Compile pagedkit's kernel launches for real GPU targets, without a GPU.

``triton.compile(ASTSource(...), target=GPUTarget("cuda", arch, 32))`` runs
Triton's whole pipeline down to PTX and a cubin (with the ``ptxas`` inside
the Triton wheel), no driver needed. The launches compiled here are the ones
the wrappers make: `paged_decode.decode_launches` / `paged_prefill.prefill_launches`
build them from (meta) tensors of the shapes the engine passes, and their
arguments go through the same binder ``kernel[grid](...)`` uses, so the
signature, constexprs and specialisations (which ints are 1 or divisible by
16) are exactly a real launch's. The binder's key is also how Triton's own
cache tells variants apart, which `variant_key` exposes for counting
recompiles.

Run as a script (the compile test does, in a fresh process, because Triton's
interpreter must be off here)::

    python tests/kernels/compile_matrix.py --json out.json [--workers 2] [--quick]

It prints one row per kernel and target (registers, spill bytes, shared
memory) and writes the rows as JSON.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass

import torch

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}


@dataclass(frozen=True)
class Case:
    """One kernel call the engine makes, to compile for one target."""

    op: str                 # "decode" or "prefill"
    arch: int
    dtype: str
    head_dim: int
    num_q_heads: int = 32
    num_kv_heads: int = 8
    block_size: int = 16
    num_splits: int = 1     # decode: 1 single-pass, > 1 split + reduce
    max_q_len: int = 512    # prefill: the longest chunk
    sliding_window: int | None = None
    softcap: float | None = None
    sinks: bool = False

    @property
    def label(self) -> str:
        heads = f"{self.num_q_heads}q/{self.num_kv_heads}kv"
        extra = [f"split{self.num_splits}"] if self.op == "decode" and self.num_splits > 1 else []
        extra += [f"q{self.max_q_len}"] if self.op == "prefill" else []
        extra += ["window"] if self.sliding_window else []
        extra += ["softcap"] if self.softcap else []
        extra += ["sinks"] if self.sinks else []
        return f"{self.op} {self.dtype} d{self.head_dim} {heads} " + " ".join(extra)


def launches(case: Case, device: str = "meta"):
    """The `Launch` objects the wrapper would make for `case`, on `device` tensors."""
    from pagedkit.kernels import paged_decode, paged_prefill

    dtype = DTYPES[case.dtype]
    hq, hkv, d, bs = case.num_q_heads, case.num_kv_heads, case.head_dim, case.block_size
    cache = torch.empty(1024, bs, hkv, d, dtype=dtype, device=device)
    sinks = torch.empty(hq, dtype=torch.float32, device=device) if case.sinks else None
    options = dict(sliding_window=case.sliding_window, softcap=case.softcap, sinks=sinks,
                   arch=case.arch)
    if case.op == "decode":
        seqs = 8
        query = torch.empty(seqs, hq, d, dtype=dtype, device=device)
        tables = torch.empty(seqs, 512, dtype=torch.int32, device=device)
        lens = torch.empty(seqs, dtype=torch.int32, device=device)
        out = torch.empty_like(query)
        return paged_decode.decode_launches(query, cache, cache, tables, lens, out, d ** -0.5,
                                        num_splits=case.num_splits, sms=None, **options)
    seqs = 2
    query = torch.empty(seqs * case.max_q_len, hq, d, dtype=dtype, device=device)
    tables = torch.empty(seqs, 512, dtype=torch.int32, device=device)
    lens = torch.empty(seqs, dtype=torch.int32, device=device)
    cu = torch.empty(seqs + 1, dtype=torch.int32, device=device)
    out = torch.empty_like(query)
    return paged_prefill.prefill_launches(query, cache, cache, tables, cu, lens, out, d ** -0.5,
                                      case.max_q_len, **options)


def _bind(launch, arch: int):
    """What ``kernel[grid](*args, ...)`` hands Triton's compiler for `arch`: (backend,
    source, options, cache key)."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, make_backend
    from triton.runtime.jit import compute_cache_key, create_function_from_signature

    fn = launch.kernel
    backend = make_backend(GPUTarget("cuda", arch, 32))
    binder = create_function_from_signature(fn.signature, fn.params, backend)
    kwargs = dict(launch.constexprs, num_warps=launch.config.num_warps,
                  num_stages=launch.config.num_stages, debug=False)
    bound, specialization, options = binder(*launch.args, **kwargs)
    key = compute_cache_key({}, specialization, options)
    options, signature, constexprs, attrs = fn._pack_args(backend, kwargs, bound,
                                                          specialization, options)
    return backend, ASTSource(fn, signature, constexprs, attrs), options, key


def variant_key(launch, arch: int = 90) -> str:
    """Triton's cache key for this launch: a launch with a new key compiles anew."""
    return f"{launch.kernel.__name__}:{_bind(launch, arch)[3]}"


@dataclass
class Row:
    case: str
    kernel: str
    arch: int
    block: str              # the launch config: tiles, warps, stages
    registers: int | None = None
    spill_bytes: int | None = None
    shared_bytes: int | None = None
    shared_limit: int | None = None
    seconds: float = 0.0
    error: str | None = None


def compile_case(case: Case) -> list[dict]:
    """Compile every launch of `case` for its target; one row per kernel."""
    import triton
    from triton import knobs

    from pagedkit.kernels import launch as launch_rules

    rows = []
    for launch in launches(case):
        c = launch.config
        row = Row(case.label, launch.name, case.arch,
                  f"m{c.block_m} n{c.block_n} w{c.num_warps} s{c.num_stages}",
                  shared_limit=launch_rules.SHARED_MEMORY_PER_BLOCK[case.arch])
        start = time.perf_counter()
        try:
            _, src, options, _ = _bind(launch, case.arch)
            from triton.backends.compiler import GPUTarget

            knobs.nvidia.dump_ptxas_log = True
            log = io.StringIO()
            with contextlib.redirect_stdout(log):
                compiled = triton.compile(src, target=GPUTarget("cuda", case.arch, 32),
                                          options=options.__dict__)
            text = log.getvalue()
            used = re.findall(r"Used (\d+) registers", text)
            spills = re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", text)
            if used:
                row.registers = int(used[-1])
                row.spill_bytes = sum(int(a) + int(b) for a, b in spills)
            else:  # a cache hit prints no log: read the cubin's resource usage instead
                row.registers, row.spill_bytes = _resource_usage(compiled.asm["cubin"])
            row.shared_bytes = int(compiled.metadata.shared)
        except Exception as exc:  # reported as a failing row
            row.error = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:200]}"
        row.seconds = round(time.perf_counter() - start, 1)
        rows.append(asdict(row))
    return rows


def _resource_usage(cubin: bytes) -> tuple[int, int]:
    import subprocess
    import tempfile

    import triton

    tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin",
                        "cuobjdump")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        text = subprocess.run([tool, "--dump-resource-usage", f.name], capture_output=True,
                              text=True, check=True).stdout
    regs = int(re.search(r"REG:(\d+)", text).group(1))
    local = int(re.search(r"LOCAL:(\d+)", text).group(1))
    return regs, local


def matrix(quick: bool = False) -> list[Case]:
    """The shapes the engine launches, per target, trimmed to what can differ.

    A kernel's registers and shared memory depend on the target, the tile
    (head dim x element size, which `launch` maps to a config) and the
    compile-time switches, not on batch size or context length (runtime
    values). So per target each config bucket of `launch`'s rules appears at
    its largest shape (fp16 and bf16 tiles are the same size; bf16 appears
    once per kernel to prove it compiles), both decode variants (single-pass,
    split + reduce), GQA and MQA, a decode-heavy prefill tile, and every
    option on. sm_75 gets fp16 only: a T4 has no bfloat16, and fp32 there is
    left to the torch path (docs/kernels.md).
    """
    from pagedkit.kernels.launch import TARGETS

    window = dict(sliding_window=4096, softcap=50.0, sinks=True)
    mqa = dict(num_q_heads=32, num_kv_heads=1)
    cases = []
    for arch in TARGETS:
        if arch == 75:
            cases += [Case("decode", arch, "fp16", d) for d in (64, 128, 256)]
            cases += [Case("prefill", arch, "fp16", d) for d in (64, 128, 256)]
            cases += [Case("decode", arch, "fp16", 128, num_splits=8, **window),
                      Case("prefill", arch, "fp16", 128, **window)]
            continue
        cases += [Case("decode", arch, dt, d)
                  for dt, d in (("fp16", 128), ("fp32", 128), ("fp32", 256), ("bf16", 64))]
        cases += [Case("decode", arch, "fp16", 256, num_splits=8, **window),
                  Case("decode", arch, "fp32", 128, num_splits=8),
                  Case("decode", arch, "fp16", 128, **mqa),
                  Case("prefill", arch, "fp16", 128, **mqa)]
        cases += [Case("prefill", arch, dt, d)
                  for dt, d in (("fp16", 64), ("fp16", 128), ("fp32", 128), ("fp16", 256),
                                ("fp32", 256))]
        cases += [Case("prefill", arch, "bf16", 128, **window),
                  Case("prefill", arch, "fp16", 128, max_q_len=1)]
    if quick:
        cases = [c for c in cases if c.head_dim == 128]
    return cases


def count_variants(max_context: int = 8192, block_size: int = 16, sms: int = 132,
                   batch: int = 1) -> dict[str, int]:
    """How many compiled variants of each kernel one sequence growing to `max_context`
    tokens needs: its decode steps are planned as the engine calls them (the block table
    as wide as the context needs; splits chosen for a GPU of `sms` multiprocessors, 132
    as an H100's) and their launches keyed as Triton's cache keys them. The context
    length itself reaches the kernels only as tensor values, so one step per table width
    (per block) covers every step."""
    from pagedkit.kernels import paged_decode

    hq, hkv, d = 32, 8, 128
    cache = torch.empty(4096, block_size, hkv, d, dtype=torch.float16, device="meta")
    query = torch.empty(batch, hq, d, dtype=torch.float16, device="meta")
    lens = torch.empty(batch, dtype=torch.int32, device="meta")
    keys: dict[str, set] = {}
    for width in range(1, -(-max_context // block_size) + 1):
        tables = torch.empty(batch, width, dtype=torch.int32, device="meta")
        for launch in paged_decode.decode_launches(
                query, cache, cache, tables, lens, torch.empty_like(query), d ** -0.5,
                sliding_window=None, softcap=None, sinks=None, num_splits=None, arch=90,
                sms=sms):
            keys.setdefault(launch.kernel.__name__, set()).add(variant_key(launch))
    return {name: len(found) for name, found in keys.items()}


def _worker_init() -> None:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def run(cases: list[Case], workers: int) -> list[dict]:
    # biggest first, so the slowest compiles do not end up alone at the end
    order = sorted(cases, key=lambda c: (c.arch == 75, c.head_dim, c.dtype == "fp32"),
                   reverse=True)
    if workers <= 1:
        return [row for case in order for row in compile_case(case)]
    with ProcessPoolExecutor(workers, initializer=_worker_init) as pool:
        return [row for rows in pool.map(compile_case, order) for row in rows]


def table(rows: list[dict]) -> str:
    head = (f"{'kernel':<13} {'case':<40} {'arch':<6} {'config':<16} {'regs':>4} "
            f"{'spill':>6} {'shared':>7} {'limit':>7} {'s':>5}")
    lines = [head, "-" * len(head)]
    for r in sorted(rows, key=lambda r: (r["case"], r["kernel"], r["arch"])):
        if r["error"]:
            lines.append(f"{r['kernel']:<13} {r['case']:<40} sm_{r['arch']:<3} "
                         f"{r['block']:<16} ERROR {r['error']}")
            continue
        lines.append(f"{r['kernel']:<13} {r['case']:<40} sm_{r['arch']:<3} {r['block']:<16} "
                     f"{r['registers']:>4} {r['spill_bytes']:>6} {r['shared_bytes']:>7} "
                     f"{r['shared_limit']:>7} {r['seconds']:>5}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", required=True)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="head dim 128 only")
    parser.add_argument("--count-variants", action="store_true",
                        help="only count the decode kernels' compiled variants over a "
                             "sequence growing to 8k tokens")
    args = parser.parse_args(argv)
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        parser.error("TRITON_INTERPRET must be off: this compiles for real GPUs")
    if args.count_variants:
        counts = count_variants()
        print(f"compiled variants over a sequence growing to 8192 tokens: {counts}")
        with open(args.json, "w") as f:
            json.dump(counts, f)
        return 0
    start = time.perf_counter()
    rows = run(matrix(args.quick), args.workers)
    print(table(rows))
    print(f"{len(rows)} kernels compiled in {time.perf_counter() - start:.0f} s")
    with open(args.json, "w") as f:
        json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
