"""The four PagedAttention operations, each run by a Triton kernel or its torch reference.

Which one runs is decided per call from the tensors' device, by `backend`:

=================  ===========================================================
``auto`` (default) CUDA GPU of compute capability >= 8.0 with Triton installed:
                   Triton. Anything else (CPU, an older GPU such as Colab's T4,
                   no Triton as on macOS): the torch reference, with a one-line
                   notice when a GPU is passed over.
``torch``          always the torch reference.
``triton``         always the Triton kernels. On CPU they run in Triton's
                   interpreter, which must be switched on *before* the kernel
                   modules are imported (see below); otherwise this raises.
=================  ===========================================================

Choose with the environment variable ``PAGEDKIT_KERNELS=auto|torch|triton``
or, from Python, ``set_backend("triton")`` (``set_backend(None)`` goes back
to the variable). ``backend(device)`` tells you what a call would run and
why: ``backend("cpu").reason``.

Triton's interpreter (``TRITON_INTERPRET=1``) runs a kernel's Python body
with numpy on CPU, so you can step through it in a debugger. Triton reads the
variable when a kernel is *decorated*, not when it runs: when our kernel
modules are imported, and already when ``triton`` itself is first imported
(its ``tl.max``, ``tl.cdiv``... are kernels too), which importing
transformers already does (through ``torch._dynamo``). This module imports
Triton only on the first call that uses it, but set the variable before
importing anything, first thing in a notebook (restart the kernel to change
it)::

    import os; os.environ["TRITON_INTERPRET"] = "1"; os.environ["PAGEDKIT_KERNELS"] = "triton"

The interpreter computes ``tl.dot`` on bfloat16 wrongly (Triton issue
11584), so the Triton attention kernels refuse bfloat16 on CPU; use float32
or float16 there, or the torch reference.

Every operation checks its arguments first and raises an error naming the
shapes. ``check=False`` skips the checks that read tensor *values* (block
ids, slots and lengths in range), which on a GPU cost a host sync per call;
the engine, whose inputs come from its own bookkeeping, skips them on CUDA.

Importing this module never imports Triton, so it works where Triton is not
installed. The references are re-exported here under ``*_reference``.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import os
import sys
import warnings
from collections.abc import Callable, Iterator

import torch

from pagedkit.kernels import reference
from pagedkit.kernels.reference import copy_blocks as copy_blocks_reference
from pagedkit.kernels.reference import paged_decode_attention as paged_decode_attention_reference
from pagedkit.kernels.reference import (
    paged_prefill_attention as paged_prefill_attention_reference,
)
from pagedkit.kernels.reference import store_kv as store_kv_reference

__all__ = [
    "MIN_TRITON_CAPABILITY",
    "Backend",
    "KernelFallbackWarning",
    "backend",
    "copy_blocks",
    "copy_blocks_reference",
    "paged_decode_attention",
    "paged_decode_attention_reference",
    "paged_prefill_attention",
    "paged_prefill_attention_reference",
    "set_backend",
    "store_kv",
    "store_kv_reference",
    "use_backend",
]

ENV_VAR = "PAGEDKIT_KERNELS"
CHOICES = ("auto", "torch", "triton")
# Current Triton releases generate code for Ampere (8.0) and newer only; a
# T4 (7.5, Colab's free GPU) or a V100 (7.0) gets the torch reference.
MIN_TRITON_CAPABILITY = (8, 0)

# operation -> module under pagedkit.kernels holding its Triton kernel
_TRITON_MODULES = {
    "store_kv": "store_kv",
    "paged_decode_attention": "paged_decode",
    "paged_prefill_attention": "paged_prefill",
    "copy_blocks": "copy_blocks",
}

_override: str | None = None
_noticed: set[tuple[str, str]] = set()


class KernelFallbackWarning(UserWarning):
    """A GPU was found but the torch reference runs instead of Triton."""


class Backend(str):
    """``"triton"`` or ``"torch"``, with the `reason` it was chosen."""

    reason: str

    def __new__(cls, name: str, reason: str) -> Backend:
        obj = super().__new__(cls, name)
        obj.reason = reason
        return obj

    def __repr__(self) -> str:
        return f"Backend({str(self)!r}, reason={self.reason!r})"


def set_backend(name: str | None) -> None:
    """Force ``"torch"`` or ``"triton"`` (or ``"auto"``) for every call from now on;
    ``None`` defers to the ``PAGEDKIT_KERNELS`` environment variable again."""
    global _override
    if name is not None and name not in CHOICES:
        raise ValueError(f"backend must be one of {CHOICES} or None, got {name!r}")
    _override = name


@contextlib.contextmanager
def use_backend(name: str | None) -> Iterator[None]:
    """``with ops.use_backend("triton"): ...`` — `set_backend` for a block only;
    the previous choice comes back even if the block raises."""
    previous = _override
    set_backend(name)
    try:
        yield
    finally:
        set_backend(previous)


def _gpu_too_old(device: torch.device) -> str | None:
    """Why a CUDA device cannot run the Triton kernels, or None if it can."""
    cap = torch.cuda.get_device_capability(device)
    if cap >= MIN_TRITON_CAPABILITY:
        return None
    return (f"{torch.cuda.get_device_name(device)} has compute capability {cap[0]}.{cap[1]} "
            f"and pagedkit's Triton kernels need {MIN_TRITON_CAPABILITY[0]}."
            f"{MIN_TRITON_CAPABILITY[1]}+")


def _mode() -> tuple[str, str]:
    if _override is not None:
        return _override, f"set_backend({_override!r})"
    value = os.environ.get(ENV_VAR, "auto").strip().lower() or "auto"
    if value not in CHOICES:
        raise ValueError(f"{ENV_VAR} must be one of {', '.join(CHOICES)}; got {value!r}")
    return value, f"{ENV_VAR}={value}"


@functools.lru_cache(maxsize=1)
def _triton_import_error() -> str | None:
    """None if Triton imports, else why not (cached: a failed import is slow)."""
    try:
        import triton  # noqa: F401
    except ImportError as exc:
        return f"Triton is not installed ({exc})"
    return None


def _interpreted(name: str) -> bool:
    """Whether the Triton kernel of operation `name` runs in the interpreter: fixed
    when its module was imported, else decided by TRITON_INTERPRET now."""
    module = sys.modules.get(f"pagedkit.kernels.{_TRITON_MODULES[name]}")
    if module is not None:
        return module.INTERPRETED
    from pagedkit.kernels.triton_support import interpreter_on  # Triton is known to import

    return interpreter_on()


def backend(device: torch.device | str) -> Backend:
    """What a call on `device` runs, ``"triton"`` or ``"torch"``; ``.reason`` says why.

    Raises when ``triton`` is forced where it cannot run (no Triton, an
    unsupported GPU, or CPU without the interpreter).
    """
    device = torch.device(device)
    mode, source = _mode()
    if mode == "torch":
        return Backend("torch", f"forced by {source}")

    if mode == "triton":
        problem = _triton_import_error()
        if problem is None and device.type == "cpu" and not all(map(_interpreted,
                                                                    _TRITON_MODULES)):
            problem = ("Triton kernels run on CPU only in Triton's interpreter, and Triton "
                       "reads TRITON_INTERPRET=1 when a kernel module is imported: set it "
                       "before importing pagedkit (in a notebook, restart the kernel first)")
        if problem is None and device.type == "cuda":
            problem = _gpu_too_old(device)
        if problem is None and device.type not in ("cpu", "cuda"):
            problem = f"Triton does not run on {device.type} devices"
        if problem:
            raise RuntimeError(f"{source} forces the Triton kernels, but {problem}")
        where = "in the interpreter" if device.type == "cpu" else f"on {device}"
        return Backend("triton", f"forced by {source}; running {where}")

    # auto
    if device.type != "cuda":
        return Backend("torch", f"{device.type} device: the torch reference runs (force the "
                                f"Triton kernels with {ENV_VAR}=triton and TRITON_INTERPRET=1)")
    problem = _triton_import_error() or _gpu_too_old(device)
    if problem is None:
        return Backend("triton", f"CUDA device {device} with Triton")
    _notice(str(device), problem)
    return Backend("torch", f"{problem}: the torch reference runs instead")


def _notice(device: str, problem: str) -> None:
    """One line, once per device and problem, when a GPU does not get Triton."""
    if (device, problem) not in _noticed:
        _noticed.add((device, problem))
        warnings.warn(f"pagedkit: {problem}; using the torch reference kernels on {device}",
                      KernelFallbackWarning, stacklevel=4)


def _triton_op(name: str) -> Callable:
    module = importlib.import_module(f"pagedkit.kernels.{_TRITON_MODULES[name]}")
    return getattr(module, name)


def _op(name: str, device: torch.device) -> Callable:
    if backend(device) == "torch":
        return getattr(reference, name)
    return _triton_op(name)


def store_kv(key: torch.Tensor, value: torch.Tensor, k_cache: torch.Tensor,
             v_cache: torch.Tensor, slot_mapping: torch.Tensor, *, check: bool = True) -> None:
    """Write new tokens' K/V ``[num_tokens, num_kv_heads, head_dim]`` into their
    slots of the paged cache; a negative slot skips the token."""
    _op("store_kv", k_cache.device)(key, value, k_cache, v_cache, slot_mapping, check=check)


def paged_decode_attention(query: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                           block_tables: torch.Tensor, context_lens: torch.Tensor,
                           scale: float | None = None, *, num_splits: int | None = None,
                           check: bool = True) -> torch.Tensor:
    """One query token per sequence attending to its paged K/V; see
    `pagedkit.kernels.reference.paged_decode_attention` for the contract."""
    return _op("paged_decode_attention", k_cache.device)(
        query, k_cache, v_cache, block_tables, context_lens, scale, num_splits=num_splits,
        check=check)


def paged_prefill_attention(query: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                            block_tables: torch.Tensor, cu_seqlens_q: torch.Tensor,
                            context_lens: torch.Tensor, scale: float | None = None, *,
                            check: bool = True) -> torch.Tensor:
    """Packed query chunks attending causally to their paged K/V (cached prefix
    plus the chunk); see `pagedkit.kernels.reference.paged_prefill_attention`."""
    return _op("paged_prefill_attention", k_cache.device)(
        query, k_cache, v_cache, block_tables, cu_seqlens_q, context_lens, scale, check=check)


def copy_blocks(cache: torch.Tensor, block_pairs: torch.Tensor, *, check: bool = True) -> None:
    """Copy blocks ``cache[src] -> cache[dst]`` in place for each (src, dst) row
    of `block_pairs` (copy-on-write)."""
    _op("copy_blocks", cache.device)(cache, block_pairs, check=check)
