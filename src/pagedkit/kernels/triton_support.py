"""What every Triton kernel module here shares: the guarded import and a few host helpers.

Triton has no macOS wheels, so this is the one place that imports it with a
message that says what to use instead. `pagedkit.ops` and
`pagedkit.kernels.reference` never import this module on the torch path.
"""

from __future__ import annotations

import os

import torch

try:
    import triton
    import triton.language as tl
except ImportError as exc:  # pragma: no cover - exercised where Triton is absent
    raise ImportError(
        "the pagedkit.kernels Triton modules need Triton, which installs on Linux only; "
        "pagedkit.ops runs its torch paths without it (by default the batched one, "
        "pagedkit.kernels.batched; the per-sequence reference is pagedkit.kernels.reference)"
        ) from exc

__all__ = [
    "ATTENTION_DTYPES",
    "TRITON_INTERPRETED",
    "check_attention_dtype",
    "dot_precision",
    "head_dim_at_stride_1",
    "interpreter_on",
    "next_power_of_2",
    "tl",
    "triton",
]


# Triton's own helpers (tl.max, tl.cdiv, ...) are @triton.jit functions too,
# decorated when Triton was first imported: interpreter mode is fixed then.
TRITON_INTERPRETED = type(tl.cdiv).__name__ == "InterpretedFunction"


def _interpret_requested() -> bool:
    knobs = getattr(triton, "knobs", None)
    if knobs is not None:
        return bool(knobs.runtime.interpret)
    return os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "on", "yes")


def interpreter_on() -> bool:
    """Whether a kernel decorated *now* runs in Triton's interpreter.

    Triton decides when a kernel is decorated, i.e. when its module is
    imported, so each kernel module records this once, as ``INTERPRETED``.
    Triton's own library was decorated when ``triton`` was first imported;
    if TRITON_INTERPRET has changed since, our kernels and the library would
    disagree (an interpreted kernel calling compiled helpers fails), so this
    raises instead.
    """
    requested = _interpret_requested()
    if requested != TRITON_INTERPRETED:
        raise RuntimeError(
            f"TRITON_INTERPRET is {'on' if requested else 'off'} now but was "
            f"{'on' if TRITON_INTERPRETED else 'off'} when Triton was first imported, and "
            "Triton fixes interpreter mode then. Set it before anything imports triton "
            "(in a notebook: restart the kernel and set it in the first cell)")
    return requested


def next_power_of_2(n: int) -> int:
    """Triton tiles have power-of-two sizes; a head_dim of 96 is loaded as 128 with a mask."""
    return 1 << max(0, int(n) - 1).bit_length()


ATTENTION_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def check_attention_dtype(x: torch.Tensor, what: str) -> None:
    """The attention kernels accumulate in float32 and multiply in the input
    dtype: float16, bfloat16 or float32. And the interpreter's ``tl.dot``
    returns garbage for bfloat16 (triton-lang/triton#11584)."""
    if x.dtype not in ATTENTION_DTYPES:
        raise TypeError(
            f"{what}: the Triton kernels take float16, bfloat16 or float32, got {x.dtype}; "
            "the torch reference (pagedkit.kernels.reference) takes any float dtype")
    if x.device.type == "cuda" and x.dtype != torch.float16 \
            and torch.cuda.get_device_capability(x.device) < (8, 0):
        raise TypeError(
            f"{what}: on a GPU of compute capability below 8.0 (a T4 is 7.5) the Triton kernels "
            f"run float16 only, got {x.dtype}: such a GPU has no bfloat16, and float32 tiles "
            "were never compiled for it (tests/kernels/test_compile.py); use float16 or the "
            "torch path (PAGEDKIT_KERNELS=auto)")
    if x.dtype == torch.bfloat16 and x.device.type == "cpu":
        raise TypeError(
            f"{what}: bfloat16 on CPU is refused because Triton's interpreter computes tl.dot on "
            "bfloat16 wrongly (triton-lang/triton issue 11584). Use float32 or float16 here, or "
            "the torch reference (pagedkit.kernels.reference), which handles bfloat16")


def head_dim_at_stride_1(x: torch.Tensor) -> torch.Tensor:
    """`x` ([tokens, heads, head_dim]) itself when its head_dim lies at stride 1,
    as the kernels read it (every query, key and value an engine makes does:
    no copy); else a contiguous copy. The torch paths take any strides."""
    return x if x.stride(2) == 1 else x.contiguous()


def dot_precision(dtype: torch.dtype) -> str:
    """float32 inputs multiply in full IEEE precision: on a GPU tl.dot would
    otherwise round them to TF32 (10-bit mantissa), far from the reference."""
    return "ieee" if dtype == torch.float32 else "tf32"
