"""Paged decode attention in C on a CPU: build `cpu_decode.c` once, call it.

`cpu_decode.c` computes `reference.paged_decode_attention` the way the paper's
GPU kernel does (§4.1): it follows each sequence's block table and reads K/V
where they lie, one task per (sequence, KV head) on OpenMP threads, no gather
into a copy. The batched torch path (`batched.py`) computes the same numbers
with a gather and SDPA per layer; read that one first. This one is what a
CPU runs by default (`pagedkit.ops`, backend ``"native"``) because it is
faster: 1.7-4.7x per call on the decode shapes the benchmarks serve, 2-16%
of a whole engine run (docs/benchmarks.md, "A decode kernel in C").

**Building.** The first call compiles the C file for this CPU and later
processes load it (`cbuild`: the compiler, the cache folder, and why it links
without ``-ffast-math``). Where it cannot be built (no compiler, no OpenMP,
as with Apple's clang), `unavailable` says why and the batched path runs.

**What it covers.** float32 caches and queries (what the engine serves on a
CPU), any block size, grouped-query attention, sliding windows, softcaps and
sinks. Anything else (another dtype) goes to the batched path, call by call.
"""

from __future__ import annotations

import ctypes
import functools
from pathlib import Path

import torch

from . import batched, cbuild, checks

SOURCE = Path(__file__).with_name("cpu_decode.c")
#: Elements of K/V (keys x KV heads x head_dim) below which a call runs one
#: thread: torch's own grain (``at::internal::GRAIN_SIZE``), below which waking
#: a second thread costs more than the work (docs/benchmarks.md). The tests
#: set it to 0 to run two threads on small cases.
GRAIN_ELEMENTS = 32768
#: A sliding window as C reads it (an int): a wider one is no window at all.
MAX_WINDOW = 2**31 - 1


@functools.cache
def _library() -> ctypes.CDLL | str:
    """The built library, or why there is none (built once per process)."""
    lib = cbuild.build(SOURCE, "the C decode kernel")
    if isinstance(lib, str):
        return lib
    try:
        fn = lib.paged_decode_f32
    except AttributeError as exc:  # a foreign or damaged file in the cache folder
        return f"the C decode kernel's library has no paged_decode_f32 ({exc})"
    i32, i64, ptr = ctypes.c_int, ctypes.c_int64, ctypes.c_void_p
    fn.argtypes = [ptr, i64, i64, ptr, ptr, ptr, i64, ptr, ptr, i32, i32, i32, i32, i32,
                   ctypes.c_float, i32, ctypes.c_float, ptr, i32, i64]
    fn.restype = ctypes.c_int
    return lib


def unavailable() -> str | None:
    """Why the C kernel cannot run here, or None if it can (builds it on first use)."""
    lib = _library()
    return lib if isinstance(lib, str) else None


def paged_decode_attention(query: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                           block_tables: torch.Tensor, context_lens: torch.Tensor,
                           scale: float | None = None, *, sliding_window: int | None = None,
                           softcap: float | None = None, sinks: torch.Tensor | None = None,
                           num_splits: int | None = None, check: bool = True,
                           step_cache: dict | None = None) -> torch.Tensor:
    """The contract of `reference.paged_decode_attention`, in C. Calls the C
    kernel cannot take (not float32, a CUDA tensor) run the batched path,
    which also gets `step_cache`; the C kernel needs nothing kept per step."""
    if check:
        checks.check_decode(query, k_cache, v_cache, block_tables, context_lens, num_splits,
                            sliding_window=sliding_window, softcap=softcap, sinks=sinks)
    lib = _library()
    if (isinstance(lib, str) or k_cache.dtype != torch.float32 or query.dtype != torch.float32
            or k_cache.device.type != "cpu" or query.stride(2) != 1):
        return batched.paged_decode_attention(
            query, k_cache, v_cache, block_tables, context_lens, scale,
            sliding_window=sliding_window, softcap=softcap, sinks=sinks, check=False,
            step_cache=step_cache)
    num_seqs, num_q_heads, head_dim = query.shape
    out = torch.empty(num_seqs, num_q_heads, head_dim, dtype=torch.float32)
    if not num_seqs:
        return out
    tables = block_tables.to(torch.int32).contiguous()
    lens = context_lens.to(torch.int32).contiguous()
    sink = None if sinks is None else sinks.detach().to(torch.float32).contiguous()
    failed = lib.paged_decode_f32(
        query.data_ptr(), query.stride(0), query.stride(1), k_cache.data_ptr(),
        v_cache.data_ptr(), tables.data_ptr(), tables.stride(0), lens.data_ptr(),
        out.data_ptr(), num_seqs, num_q_heads, k_cache.shape[2], head_dim, k_cache.shape[1],
        head_dim ** -0.5 if scale is None else scale, min(sliding_window or 0, MAX_WINDOW),
        softcap or 0.0, None if sink is None else sink.data_ptr(), torch.get_num_threads(),
        GRAIN_ELEMENTS)
    if failed:
        raise MemoryError(f"the C decode kernel could not allocate its scratch memory "
                          f"({num_q_heads // k_cache.shape[2]} x {int(lens.max())} floats "
                          "per thread)")
    return out
