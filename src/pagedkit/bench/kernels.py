"""How fast is paged attention, next to attention over a contiguous cache?

``python -m pagedkit bench kernels [--quick] [--json PATH] [--device DEV]``
(on a machine without a GPU it runs the small CPU grid, as ``--quick``, and
says so)

Decode attention is bound by memory traffic: each step reads every cached
key and value once. So it is measured as achieved bandwidth, the bytes it
must move (K/V of every context, the queries and the outputs) divided by the
time, next to the device's peak. These implementations see the same tokens:

* ``paged_triton``: our kernel (`pagedkit.kernels.paged_decode`), reading
  through shuffled block tables, block size 16;
* ``sdpa_contiguous``: `torch.nn.functional.scaled_dot_product_attention`
  over a contiguous ``[batch, kv_heads, context, head_dim]`` cache, the
  un-paged upper bound (a decode query's group of heads is passed as that
  many query rows, so K/V is read once per KV head, as in our kernel);
* ``gather_sdpa_reference``: the torch reference, which gathers each
  sequence's blocks and calls SDPA; what paging costs without a kernel;
* ``batched_torch`` (on a CPU only): the batched torch path
  (`pagedkit.kernels.batched`), all sequences at once;
* ``c_kernel`` (decode, on a CPU where it builds): the C decode kernel
  (`pagedkit.kernels.cpu_decode`), which reads through the block tables as
  the Triton kernel does: what the engine runs on a CPU.

The paper's claim (§4.1, §6) is that the paged kernel costs little over the
contiguous one; the target here is >= 80% of peak bandwidth at large batch x
context and at most 10% slower than ``sdpa_contiguous``. Prefill is
compute-bound and reported in TFLOP/s at a few shapes.

On a GPU the grid is batch {1, 16, 64, 256} x context {512, 2k, 8k, 32k},
float16 and bfloat16, Llama-3-8B / Mistral-7B-like heads (32 query heads, 8
KV heads, head dim 128; Llama-2-7B has 32 KV heads); shapes that do not fit
in free memory are skipped and say so. Without a GPU, ``--quick`` runs small
float32 shapes and times SDPA, the torch reference, the batched path and
the C decode kernel the CPU engine runs, not the Triton kernels (Triton's interpreter is for reading
kernels, not for timing them).

Each GPU timing is the median over repetitions, with the L2 cache flushed
before each, so that small caches are not served from L2. The Triton
kernels run with ``check=False``, without their argument checks: those
that read values need a host sync, which would be timed too.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import re
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F

import pagedkit
from pagedkit import ops
from pagedkit.kernels import batched, cpu_decode, reference

from .._validation import PROG, positive_int, writable_file
from ..i18n import english_error
from ..i18n.terminal import HelpFormatter
from . import add_no_progress, device_unavailable

# Spec-sheet peak HBM bandwidth (bytes/s), matched against the device name.
# Where the name is unknown, the peak is computed from the memory clock and
# bus width the driver reports (Triton's device properties).
PEAK_BANDWIDTH = {
    "H200": 4.8e12,
    "H100 SXM": 3.35e12, "H100 80GB HBM3": 3.35e12, "H100 PCIe": 2.0e12, "H100 NVL": 3.9e12,
    "A100-SXM4-80GB": 2.039e12, "A100 80GB PCIe": 1.935e12, "A100-SXM4-40GB": 1.555e12,
    "A100-PCIE-40GB": 1.555e12, "L40S": 864e9, "L40": 864e9, "L4": 300e9, "A10G": 600e9,
    "A10": 600e9, "RTX 4090": 1008e9, "RTX 3090": 936e9,
}
L2_FLUSH_BYTES = 256 * 2**20


@dataclass
class DecodeShape:
    """One decode benchmark shape; the default heads are Llama-3-8B / Mistral-7B-like
    (32 query heads sharing 8 KV heads of dim 128)."""

    batch: int
    context: int
    dtype: str
    block_size: int = 16
    num_q_heads: int = 32
    num_kv_heads: int = 8
    head_dim: int = 128


@dataclass
class PrefillShape:
    batch: int
    query_len: int     # new tokens per sequence (the chunk)
    context: int       # cached tokens per sequence after the chunk (prefix + chunk)
    dtype: str
    block_size: int = 16
    num_q_heads: int = 32
    num_kv_heads: int = 8
    head_dim: int = 128


def decode_shapes(device: torch.device, quick: bool) -> list[DecodeShape]:
    if device.type != "cuda":
        return [DecodeShape(b, c, "float32", num_q_heads=8, num_kv_heads=2, head_dim=64)
                for b in (1, 8) for c in (128, 512)]
    if quick:
        return [DecodeShape(b, c, "float16") for b in (1, 64) for c in (512, 8192)]
    return [DecodeShape(b, c, dtype) for dtype in ("float16", "bfloat16")
            for b in (1, 16, 64, 256) for c in (512, 2048, 8192, 32768)]


def prefill_shapes(device: torch.device, quick: bool) -> list[PrefillShape]:
    if device.type != "cuda":
        return [PrefillShape(2, 128, 128, "float32", num_q_heads=8, num_kv_heads=2, head_dim=64),
                PrefillShape(2, 32, 128, "float32", num_q_heads=8, num_kv_heads=2, head_dim=64)]
    if quick:
        return [PrefillShape(1, 2048, 2048, "float16")]
    return [PrefillShape(b, q, c, dtype) for dtype in ("float16", "bfloat16")
            for b, q, c in ((1, 2048, 2048), (8, 2048, 2048), (1, 8192, 8192), (4, 512, 4096))]


# ------------------------------------------------------------------ device facts
def device_info(device: torch.device) -> dict:
    if device.type != "cuda":
        return {"type": device.type, "name": platform.processor() or platform.machine(),
                "threads": torch.get_num_threads(), "peak_bytes_per_s": None, "peak_source": None}
    props = torch.cuda.get_device_properties(device)
    peak, source = None, None
    for key, value in PEAK_BANDWIDTH.items():
        if re.search(rf"\b{re.escape(key)}\b", props.name):  # "A10" must not match "A100"
            peak, source = value, f"spec sheet ({key})"
            break
    driver_peak = _driver_peak_bandwidth(device)
    if peak is None and driver_peak is not None:
        peak, source = driver_peak, "driver: 2 x memory clock x bus width"
    return {"type": "cuda", "name": props.name, "capability": f"{props.major}.{props.minor}",
            "memory_gib": round(props.total_memory / 2**30, 1),
            "multiprocessors": props.multi_processor_count,
            "peak_bytes_per_s": peak, "peak_source": source,
            "driver_peak_bytes_per_s": driver_peak}


def _driver_peak_bandwidth(device: torch.device) -> float | None:
    try:
        import triton

        index = device.index if device.index is not None else torch.cuda.current_device()
        props = triton.runtime.driver.active.utils.get_device_properties(index)
        return 2 * props["mem_clock_rate"] * 1e3 * props["mem_bus_width"] / 8
    except Exception:  # any failure just means "unknown"
        return None


# ------------------------------------------------------------------ timing
def make_timer(device: torch.device) -> Callable[[Callable[[], object]], float]:
    """Median milliseconds of `fn` over repetitions (about 0.2 s of them, 3 to 100)."""
    if device.type != "cuda":
        def time_cpu(fn):
            fn()
            start = time.perf_counter()
            fn()
            reps = int(min(50, max(3, 0.2 / max(time.perf_counter() - start, 1e-6))))
            times = []
            for _ in range(reps):
                start = time.perf_counter()
                fn()
                times.append((time.perf_counter() - start) * 1e3)
            return statistics.median(times)
        return time_cpu

    flush = torch.empty(L2_FLUSH_BYTES, dtype=torch.int8, device=device)

    def time_cuda(fn):
        fn()  # compile / warm up
        torch.cuda.synchronize(device)
        first, last = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        first.record()
        fn()
        last.record()
        torch.cuda.synchronize(device)
        reps = int(min(100, max(3, 200 / max(first.elapsed_time(last), 1e-3))))
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                  for _ in range(reps)]
        for start, end in events:
            flush.zero_()  # evict the previous repetition's K/V from L2
            start.record()
            fn()
            end.record()
        torch.cuda.synchronize(device)
        return statistics.median(s.elapsed_time(e) for s, e in events)
    return time_cuda


def free_bytes(device: torch.device) -> int | None:
    if device.type != "cuda":
        return None
    torch.cuda.empty_cache()
    return torch.cuda.mem_get_info(device)[0]


def triton_kernels(device: torch.device):
    """(paged_decode module, paged_prefill module, None) or (None, None, why not)."""
    if device.type != "cuda":
        return None, None, ("no GPU: Triton's interpreter runs the kernels on CPU for reading "
                            "and testing, not for timing")
    try:
        choice = ops.backend(device)
    except RuntimeError as exc:
        return None, None, str(exc)
    if choice != "triton":
        return None, None, choice.reason
    from pagedkit.kernels import paged_decode, paged_prefill

    return paged_decode, paged_prefill, None


# ------------------------------------------------------------------ building caches
def paged_copy(contiguous: torch.Tensor, block_size: int, block_ids: torch.Tensor) -> torch.Tensor:
    """A paged cache holding the same tokens as `contiguous` ``[batch, kv_heads,
    context, head_dim]``: sequence b's logical block i in physical block
    ``block_ids[b, i]``. Filled one sequence at a time to keep the temporary small."""
    batch, heads, _, dim = contiguous.shape
    cache = torch.empty(block_ids.numel(), block_size, heads, dim, dtype=contiguous.dtype,
                        device=contiguous.device)
    for b in range(batch):
        tokens = contiguous[b].transpose(0, 1)                 # [context, heads, dim]
        cache[block_ids[b].long()] = tokens.reshape(-1, block_size, heads, dim)
    return cache


def random_inputs(batch: int, kv_heads: int, context: int, head_dim: int,
                  query_shape: tuple[int, ...], dtype: torch.dtype, device: torch.device,
                  block_size: int, seed: int):
    """Contiguous K and V ``[batch, kv_heads, context, head_dim]``, a query, and
    block tables that scatter every sequence's blocks over the whole cache in
    random order. Drawn on the device: a 32k x 256 cache is 16 GiB per tensor."""
    gen = torch.Generator(device=device).manual_seed(seed)
    k = torch.randn(batch, kv_heads, context, head_dim, generator=gen, device=device,
                    dtype=dtype)
    v = torch.randn(batch, kv_heads, context, head_dim, generator=gen, device=device,
                    dtype=dtype)
    query = torch.randn(query_shape, generator=gen, device=device, dtype=dtype)
    blocks_per_seq = context // block_size
    perm = torch.randperm(batch * blocks_per_seq, generator=torch.Generator().manual_seed(seed))
    return k, v, query, perm.view(batch, blocks_per_seq).to(torch.int32).to(device)


def _result(ms: float, bytes_moved: float | None = None, flops: float | None = None,
            peak: float | None = None) -> dict:
    out = {"ms": _sig(ms)}
    if bytes_moved is not None:
        out["gb_per_s"] = _sig(bytes_moved / (ms * 1e-3) / 1e9)
        out["pct_of_peak"] = _sig(100 * bytes_moved / (ms * 1e-3) / peak) if peak else None
    if flops is not None:
        out["tflop_per_s"] = _sig(flops / (ms * 1e-3) / 1e12)
    return out


def _sig(x: float) -> float:
    return float(f"{x:.4g}")


# ------------------------------------------------------------------ decode
def bench_decode(shape: DecodeShape, device: torch.device, timer, decode_kernel,
                 kernel_skip: str | None, peak: float | None, seed: int = 0) -> dict:
    dtype = getattr(torch, shape.dtype)
    elt = torch.finfo(dtype).bits // 8
    b, c, hq, hkv, d = (shape.batch, shape.context, shape.num_q_heads, shape.num_kv_heads,
                        shape.head_dim)
    kv_bytes = 2 * b * c * hkv * d * elt
    qo_bytes = 2 * b * hq * d * elt
    row = {"shape": asdict(shape), "bytes_moved": kv_bytes + qo_bytes}
    free = free_bytes(device)
    # paged + contiguous copies, one sequence of gathered + repeated K/V, the L2 flush
    needed = 2 * kv_bytes + 6 * c * hq * d * elt + 2 * L2_FLUSH_BYTES
    if free is not None and needed > 0.9 * free:
        row["skipped"] = f"needs ~{needed / 2**30:.1f} GiB, {free / 2**30:.1f} GiB free"
        return row

    k_contig, v_contig, query, tables = random_inputs(b, hkv, c, d, (b, hq, d), dtype, device,
                                                      shape.block_size, seed)
    k_cache = paged_copy(k_contig, shape.block_size, tables)
    v_cache = paged_copy(v_contig, shape.block_size, tables)
    context_lens = torch.full((b,), c, dtype=torch.int32, device=device)
    group = hq // hkv

    def sdpa():  # a KV head's `group` query heads as `group` query rows: K/V read once
        q = query.view(b, hkv, group, d)
        return F.scaled_dot_product_attention(q, k_contig, v_contig).view(b, hq, d)

    def gather_reference():
        return reference.paged_decode_attention(query, k_cache, v_cache, tables, context_lens)

    results = {}
    expected = sdpa()
    if decode_kernel is not None:
        def paged():
            return decode_kernel.paged_decode_attention(query, k_cache, v_cache, tables,
                                                        context_lens, check=False)
        row["paged_max_abs_diff"] = float((paged().float() - expected.float()).abs().max())
        results["paged_triton"] = _result(timer(paged), row["bytes_moved"], peak=peak)
    else:
        results["paged_triton"] = {"skipped": kernel_skip}
    results["sdpa_contiguous"] = _result(timer(sdpa), row["bytes_moved"], peak=peak)
    row["reference_max_abs_diff"] = float(
        (gather_reference().float() - expected.float()).abs().max())
    results["gather_sdpa_reference"] = _result(timer(gather_reference), row["bytes_moved"],
                                               peak=peak)
    if device.type == "cpu":  # the engine's paths on a CPU (on a GPU: the Triton kernels)
        def batched_torch():
            return batched.paged_decode_attention(query, k_cache, v_cache, tables, context_lens,
                                                  check=False)
        row["batched_max_abs_diff"] = float((batched_torch() - expected).abs().max())
        results["batched_torch"] = _result(timer(batched_torch), row["bytes_moved"], peak=peak)
        if cpu_decode.unavailable() is None and dtype == torch.float32:
            def c_kernel():
                return cpu_decode.paged_decode_attention(query, k_cache, v_cache, tables,
                                                         context_lens, check=False)
            row["c_kernel_max_abs_diff"] = float((c_kernel() - expected).abs().max())
            results["c_kernel"] = _result(timer(c_kernel), row["bytes_moved"], peak=peak)
    row["results"] = results
    if "ms" in results["paged_triton"]:
        row["paged_over_sdpa"] = round(results["paged_triton"]["ms"]
                                       / results["sdpa_contiguous"]["ms"], 3)
    return row


# ------------------------------------------------------------------ prefill
def causal_flops(shape: PrefillShape) -> float:
    """2 matmuls x 2 flops per multiply-add over the (query, visible key) pairs."""
    q, c = shape.query_len, shape.context
    visible = q * (c - q) + q * (q + 1) / 2   # row j sees c - q + j + 1 keys
    return 4 * shape.batch * visible * shape.num_q_heads * shape.head_dim


def bench_prefill(shape: PrefillShape, device: torch.device, timer, prefill_kernel,
                  kernel_skip: str | None, seed: int = 0) -> dict:
    dtype = getattr(torch, shape.dtype)
    elt = torch.finfo(dtype).bits // 8
    b, q_len, c = shape.batch, shape.query_len, shape.context
    hq, hkv, d = shape.num_q_heads, shape.num_kv_heads, shape.head_dim
    group = hq // hkv
    flops = causal_flops(shape)
    row = {"shape": asdict(shape), "flops": flops}
    free = free_bytes(device)
    needed = (2 * 2 + 2 * group) * b * c * hkv * d * elt + 2 * L2_FLUSH_BYTES
    if free is not None and needed > 0.9 * free:
        row["skipped"] = f"needs ~{needed / 2**30:.1f} GiB, {free / 2**30:.1f} GiB free"
        return row

    k_contig, v_contig, query, tables = random_inputs(b, hkv, c, d, (b * q_len, hq, d), dtype,
                                                      device, shape.block_size, seed)
    k_cache = paged_copy(k_contig, shape.block_size, tables)
    v_cache = paged_copy(v_contig, shape.block_size, tables)
    context_lens = torch.full((b,), c, dtype=torch.int32, device=device)
    cu_seqlens = torch.arange(0, b * q_len + 1, q_len, dtype=torch.int32, device=device)
    # SDPA over K/V already repeated to every query head (done here, untimed), with
    # the query rows' causal mask aligned to the end of the context.
    k_rep = k_contig.repeat_interleave(group, dim=1)
    v_rep = v_contig.repeat_interleave(group, dim=1)
    q_sdpa = query.view(b, q_len, hq, d).transpose(1, 2)
    if q_len == c:
        mask, causal = None, True
    else:
        from torch.nn.attention.bias import causal_lower_right

        mask, causal = causal_lower_right(q_len, c), False

    def sdpa():
        out = F.scaled_dot_product_attention(q_sdpa, k_rep, v_rep, attn_mask=mask,
                                             is_causal=causal)
        return out.transpose(1, 2).reshape(b * q_len, hq, d)

    def gather_reference():
        return reference.paged_prefill_attention(query, k_cache, v_cache, tables, cu_seqlens,
                                                 context_lens)

    results = {}
    expected = sdpa()
    if prefill_kernel is not None:
        def paged():
            return prefill_kernel.paged_prefill_attention(query, k_cache, v_cache, tables,
                                                          cu_seqlens, context_lens, check=False)
        row["paged_max_abs_diff"] = float((paged().float() - expected.float()).abs().max())
        results["paged_triton"] = _result(timer(paged), flops=flops)
    else:
        results["paged_triton"] = {"skipped": kernel_skip}
    results["sdpa_contiguous"] = _result(timer(sdpa), flops=flops)
    row["reference_max_abs_diff"] = float(
        (gather_reference().float() - expected.float()).abs().max())
    results["gather_sdpa_reference"] = _result(timer(gather_reference), flops=flops)
    if device.type == "cpu":  # the engine's path on a CPU (on a GPU: the Triton kernels)
        def batched_torch():
            return batched.paged_prefill_attention(query, k_cache, v_cache, tables, cu_seqlens,
                                                   context_lens, check=False)
        row["batched_max_abs_diff"] = float((batched_torch() - expected).abs().max())
        results["batched_torch"] = _result(timer(batched_torch), flops=flops)
    row["results"] = results
    if "ms" in results["paged_triton"]:
        row["paged_over_sdpa"] = round(results["paged_triton"]["ms"]
                                       / results["sdpa_contiguous"]["ms"], 3)
    return row


# ------------------------------------------------------------------ driver
def run(device: torch.device, quick: bool, log: Callable[[str], None] = print) -> dict:
    info = device_info(device)
    decode_kernel, prefill_kernel, skip = triton_kernels(device)
    timer = make_timer(device)
    report = {
        "benchmark": "kernels",
        "quick": quick,
        "device": info,
        "versions": {"pagedkit": pagedkit.__version__, "torch": torch.__version__,
                     "triton": _triton_version(), "python": platform.python_version()},
        "triton_kernels": "timed" if skip is None else f"not timed: {skip}",
        "decode": [],
        "prefill": [],
    }
    peak = info["peak_bytes_per_s"]
    log(f"device: {info['name']} ({device}); peak bandwidth: "
        + (f"{peak / 1e12:.2f} TB/s [{info['peak_source']}]" if peak else "unknown"))
    if skip:
        log(f"Triton kernels not timed: {skip}")
    log("decode: batch x context dtype | ms and GB/s" + (" (% of peak)" if peak else "")
        + " per implementation")
    for shape in decode_shapes(device, quick):
        row = bench_decode(shape, device, timer, decode_kernel, skip, peak)
        report["decode"].append(row)
        log("  " + _describe(row, shape_label(shape)))
    log("prefill: batch x chunk/context dtype | ms and TFLOP/s per implementation")
    for shape in prefill_shapes(device, quick):
        row = bench_prefill(shape, device, timer, prefill_kernel, skip)
        report["prefill"].append(row)
        log("  " + _describe(row, shape_label(shape)))
    return report


def shape_label(shape: DecodeShape | PrefillShape) -> str:
    """``batch x context dtype`` (a prefill: ``batch x chunk/context dtype``), in
    columns that line up down the decode and the prefill rows alike."""
    size = (f"{shape.query_len}/{shape.context}" if isinstance(shape, PrefillShape)
            else str(shape.context))
    return f"{shape.batch:>4} x {size:<11} {shape.dtype:<9}"


def _describe(row: dict, label: str) -> str:
    if "skipped" in row:
        return f"{label} skipped: {row['skipped']}"
    parts = []
    for name, r in row["results"].items():
        if "ms" not in r:
            continue
        rate = (f"{r['gb_per_s']:.3g} GB/s" + (f" ({r['pct_of_peak']:.0f}%)"
                                               if r.get("pct_of_peak") is not None else "")
                if "gb_per_s" in r else f"{r['tflop_per_s']:.3g} TFLOP/s")
        parts.append(f"{name} {r['ms']:.3f} ms {rate}")
    ratio = f" | paged/sdpa {row['paged_over_sdpa']:.2f}" if "paged_over_sdpa" in row else ""
    return f"{label} " + "; ".join(parts) + ratio


def _triton_version() -> str | None:
    try:
        import triton
    except ImportError:
        return None
    return triton.__version__


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=f"{PROG} bench kernels",
                                     description=__doc__.split("\n\n")[0],
                                     formatter_class=HelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help="a few small shapes (the only mode that makes sense on CPU, "
                             "where it times SDPA, the torch reference and the batched path "
                             "the CPU engine runs, not the Triton kernels)")
    parser.add_argument("--json", metavar="PATH", type=writable_file,
                        help="write the full report here as JSON")
    parser.add_argument("--device", default=None,
                        help="cuda, cuda:1, cpu, ... (default: cuda if available)")
    parser.add_argument("--threads", type=positive_int, default=1, metavar="N",
                        help="CPU threads for torch on a CPU run (default 1: steadier timings "
                             "on a shared machine)")
    add_no_progress(parser)
    args = parser.parse_args(argv)
    why = device_unavailable(args.device) if args.device else None
    if why:
        english_error(parser, f"--device {args.device}: {why}; use --device cpu, or leave "
                              "--device out (CUDA where available, else CPU)")
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if device.type != "cuda" and not args.quick:
        # the GPU grid (up to 256 x 32k) would not fit a CPU's time or memory
        print(f"note: no GPU ({device}): running the small CPU grid (as --quick): SDPA, the "
              "torch reference, the batched path and the C decode kernel the CPU engine runs; "
              "the Triton kernels are timed on a GPU only")
        args.quick = True
    if device.type == "cpu":
        torch.set_num_threads(args.threads)
    report = run(device, args.quick)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(finite_json(report), f, indent=2, allow_nan=False)
        print(f"wrote {args.json}")
    return 0


def finite_json(value):
    """The report with NaN/inf (a broken kernel's max_abs_diff) as null: strict JSON."""
    if isinstance(value, dict):
        return {k: finite_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [finite_json(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
