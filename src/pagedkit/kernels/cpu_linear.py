"""A linear layer's product for a few rows, in C on a CPU: build `cpu_linear.c` once, call it.

A decode step multiplies each weight by one row per sequence: few rows, so
the product is bound by reading the weight, and oneDNN's prepacked product
(`pagedkit.model.accel`) pays a fixed cost per call on top. `cpu_linear.c`
reads a weight packed once into panels of 64 outputs, straight down, with
every partial sum in registers (its comment says how). Measured on 2 AVX-512
cores, weights read from memory (docs/benchmarks.md, "A few rows in C"), it
ran 1.4-2.1x faster than oneDNN's product at 1-2 rows, 1.1-1.9x at 4,
0.95-1.45x at 6 and 8, and level at 12: so `accel` runs products of up to
`MAX_ROWS` rows here and larger ones with oneDNN.

Built as `cpu_decode.c` is (`cbuild`); where it cannot be, `unavailable`
says why and `accel` runs oneDNN's product for every call. float32 only
(`accel` multiplies nothing else packed).
"""

from __future__ import annotations

import ctypes
import functools
from pathlib import Path

import torch

from . import cbuild

SOURCE = Path(__file__).with_name("cpu_linear.c")
#: Outputs per panel of the packed weight (``NB`` in the C file).
PANEL = 64
#: Most rows (tokens) a product runs here; more go to oneDNN (module docstring).
MAX_ROWS = 8
#: Multiply-adds below which a call runs one thread: torch's grain
#: (``at::internal::GRAIN_SIZE``, 32,768) for a few microseconds' work.
GRAIN_MACS = 32768


@functools.cache
def _library() -> ctypes.CDLL | str:
    """The built library, or why there is none (built once per process)."""
    lib = cbuild.build(SOURCE, "the C linear kernel")
    if isinstance(lib, str):
        return lib
    i64, ptr = ctypes.c_int64, ctypes.c_void_p
    lib.linear_rows_f32.argtypes = [ptr, i64, ptr, ptr, i64, i64, i64, i64, ctypes.c_int]
    lib.linear_rows_f32.restype = None
    return lib


def unavailable() -> str | None:
    """Why the C kernel cannot run here, or None if it can (builds it on first use)."""
    lib = _library()
    return lib if isinstance(lib, str) else None


def pack(weight: torch.Tensor) -> torch.Tensor:
    """`weight` (N outputs x K inputs, float32) as the C kernel reads it:
    ``[panels, K, 64]``, panel b holding outputs b*64 ... b*64+63 transposed,
    zero-padded past N."""
    out_features, in_features = weight.shape
    panels = -(-out_features // PANEL)
    with torch.no_grad():
        padded = weight.detach().new_zeros(panels * PANEL, in_features)
        padded[:out_features] = weight.detach()
        return padded.view(panels, PANEL, in_features).transpose(1, 2).contiguous()


def linear(x: torch.Tensor, packed: torch.Tensor, out_features: int,
           bias: torch.Tensor | None) -> torch.Tensor:
    """``F.linear(x, weight, bias)`` for float32 CPU tensors, with `packed` =
    ``pack(weight)`` (any number of rows; `accel` sends at most `MAX_ROWS`)."""
    lib = _library()
    if isinstance(lib, str):
        raise RuntimeError(f"the C linear kernel is not available here: {lib}")
    in_features = packed.shape[1]
    rows = x if x.dim() == 2 else x.reshape(-1, in_features)
    if rows.stride(-1) != 1:
        rows = rows.contiguous()
    out = torch.empty(*x.shape[:-1], out_features, dtype=torch.float32)
    count = rows.shape[0]
    if count:
        macs = count * in_features * out_features
        lib.linear_rows_f32(rows.data_ptr(), rows.stride(0), packed.data_ptr(), out.data_ptr(),
                            out_features, count, in_features, out_features,
                            torch.get_num_threads() if macs >= GRAIN_MACS else 1)
    if bias is not None:
        out += bias
    return out
