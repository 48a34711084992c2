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

Built as `cpu_decode.c` is (`cbuild`), then checked once against
``F.linear``; where it cannot be built or gives another product,
`unavailable` says why and `accel` runs oneDNN's product for every call.
float32 on the CPU only: `linear` refuses anything else by name.
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
    """The built and checked library, or why there is none (once per process)."""
    lib = cbuild.build(SOURCE, "the C linear kernel")
    if isinstance(lib, str):
        return lib
    i64, ptr = ctypes.c_int64, ctypes.c_void_p
    try:
        lib.linear_rows_f32.argtypes = [ptr, i64, ptr, ptr, i64, i64, i64, i64, ctypes.c_int]
    except AttributeError as exc:  # a foreign or damaged file in the cache folder
        return f"the C linear kernel's library has no linear_rows_f32 ({exc})"
    lib.linear_rows_f32.restype = None
    # float32 on the CPU whatever torch's defaults, and a generator of its own
    # (the user's seeded stream is left alone)
    make = {"dtype": torch.float32, "device": "cpu", "generator": torch.Generator().manual_seed(0)}
    weight, x = torch.randn(70, 24, **make), torch.randn(5, 24, **make)  # panels, a tile, a rest
    packed, out = pack(weight), torch.empty(5, 70, dtype=torch.float32, device="cpu")  # held
    _check(x, packed, 70, None)
    lib.linear_rows_f32(x.data_ptr(), 24, packed.data_ptr(), out.data_ptr(), 70, 5, 24, 70, 1)
    if not torch.allclose(out, x @ weight.t(), rtol=1e-4, atol=1e-5):
        return "the C linear kernel built here gives another product than F.linear"
    return lib


def unavailable() -> str | None:
    """Why the C kernel cannot run here, or None if it can (builds and checks
    it on first use)."""
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


def _check(x: torch.Tensor, packed: torch.Tensor, out_features: int,
           bias: torch.Tensor | None) -> None:
    """A ValueError unless the C kernel can read these: float32 CPU tensors,
    `x` as wide as the weight `packed` holds and `out_features` as many as it
    holds (the kernel takes both from its arguments, and would read and write
    past the tensors otherwise), no autograd (the kernel records no graph)."""
    if not packed.is_contiguous() or packed.dim() != 3 or packed.shape[2] != PANEL:
        raise ValueError(f"packed has shape {tuple(packed.shape)}: not what pack() returns")
    if (isinstance(out_features, bool) or not isinstance(out_features, int)
            or not (packed.shape[0] - 1) * PANEL < out_features <= packed.shape[0] * PANEL):
        raise ValueError(f"out_features={out_features!r}, but packed holds "
                         f"{packed.shape[0]} panels of {PANEL}: "
                         f"{(packed.shape[0] - 1) * PANEL + 1}-{packed.shape[0] * PANEL} outputs")
    if bias is not None and bias.shape != (out_features,):
        raise ValueError(f"bias has shape {tuple(bias.shape)}, not ({out_features},)")
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad
                                       for t in (x, packed, bias)):
        raise ValueError("the C linear kernel records no autograd graph: use F.linear for "
                         "inputs that require grad, or call it under torch.no_grad()")
    if x.shape[-1:] != packed.shape[1:2]:
        raise ValueError(f"x has {tuple(x.shape)[-1:] or 'no'} inputs per row, the packed "
                         f"weight {packed.shape[1]} (shape {tuple(x.shape)})")
    for name, t in (("x", x), ("packed", packed)) + (() if bias is None else (("bias", bias),)):
        if t.dtype != torch.float32 or not t.is_cpu:
            raise ValueError(f"{name} is {t.dtype} on {t.device}: the C linear kernel "
                             "multiplies float32 CPU tensors only (use F.linear)")


def linear(x: torch.Tensor, packed: torch.Tensor, out_features: int,
           bias: torch.Tensor | None) -> torch.Tensor:
    """``F.linear(x, weight, bias)`` for float32 CPU tensors, with `packed` =
    ``pack(weight)`` (any number of rows; `accel` sends at most `MAX_ROWS`)."""
    lib = _library()
    if isinstance(lib, str):
        raise RuntimeError(f"the C linear kernel is not available here: {lib}")
    _check(x, packed, out_features, bias)
    x = x.resolve_neg()  # a lazily negated view: C reads the stored values
    in_features = packed.shape[1]
    rows = x if x.dim() == 2 else x.reshape(-1, in_features)
    if rows.stride(-1) != 1:
        rows = rows.contiguous()
    out = torch.empty(*x.shape[:-1], out_features, dtype=torch.float32,
                      device="cpu")  # not the default device: C writes here
    count = rows.shape[0]
    if count:
        macs = count * in_features * out_features
        lib.linear_rows_f32(rows.data_ptr(), rows.stride(0), packed.data_ptr(), out.data_ptr(),
                            out_features, count, in_features, out_features,
                            torch.get_num_threads() if macs >= GRAIN_MACS else 1)
    if bias is not None:
        out += bias
    return out
