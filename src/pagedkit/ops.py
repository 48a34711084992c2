"""The four PagedAttention operations, each run by one of four implementations.

* the **Triton kernels** (``pagedkit/kernels/paged_decode.py``, ...): follow the block
  table while streaming K/V through on-chip memory (paper §4.1), on a GPU;
* the **torch reference** (``pagedkit/kernels/reference.py``): one sequence at a time,
  gather its blocks, attend — the readable statement of the math, and the
  oracle the tests hold the others against;
* the **batched torch path** (``pagedkit/kernels/batched.py``): the same numbers for a
  whole step in one gather and one masked SDPA call per layer and group of
  similar lengths, however many sequences run — what a CPU runs by default,
  because the reference's per-sequence calls cost far more in overhead than
  in arithmetic there;
* the **C decode kernel** (``pagedkit/kernels/cpu_decode.c``, built on first
  use by `pagedkit.kernels.cpu_decode`): decode attention following the block
  tables on CPU threads, as the Triton kernel does on a GPU, no gather; the
  other operations on the batched path. What a CPU runs by default where a C
  compiler with OpenMP builds it: faster than the batched path per call and
  per engine run (docs/benchmarks.md).

Which one runs is decided from the tensors' device by `backend` (once per device
and setting: a layer's call looks the answer up):

=================  ===========================================================
``auto`` (default) CUDA GPU of compute capability >= 8.0 with Triton installed:
                   Triton. A CPU: the C decode kernel (``native``) where it
                   builds, else the batched torch path. Anything else (an
                   older GPU such as Colab's T4, no Triton as on macOS): the
                   batched torch path, with a one-line notice when a GPU is
                   passed over.
``native``         always the C decode kernel (CPU tensors only; a call it
                   does not take, not float32, runs the batched path).
``batched``        always the batched torch path.
``torch``          always the per-sequence torch reference.
``triton``         always the Triton kernels. On CPU they run in Triton's
                   interpreter, which must be switched on *before* the kernel
                   modules are imported (see below); otherwise this raises.
=================  ===========================================================

Copying blocks is one batched torch operation already; ``native``, ``batched`` and
``torch`` all run the reference for it. Writing K/V into slots has a batched
version (one ``index_copy_`` per cache), the reference's boolean-mask
indexing being the readable one.

Every layer of an engine step calls these ops by name
(`pagedkit.model.attention.paged_attention`), with the step's metadata and a
``step_cache`` its layers share, where the batched path keeps its buckets.
Which function runs comes from two explicit tables: `OVERRIDES`, functions
plugged in for an op (`override`, and `use_decode_attention` built on it),
consulted first; then `IMPLEMENTATIONS`, each torch backend's functions (the
Triton kernels' are imported on first use).

Choose with the environment variable ``PAGEDKIT_KERNELS=auto|native|batched|torch|triton``
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
or float16 there, or the torch paths.

Every operation checks its arguments first and raises an error naming the
shapes. ``check=False`` skips the checks: the caller vouches for its
arguments. An engine step does, in every layer: the metadata its layers
share is checked once, when the step starts
(`pagedkit.kernels.checks.check_step`), or vouched for by its builder (the
engine's `pagedkit.model.runner.pack_step`), and each layer's own tensors
were checked when the model was loaded.

Importing this module never imports Triton, so it works where Triton is not
installed. The references are re-exported here under ``*_reference``, the
batched attention and ``store_kv`` under ``*_batched``.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import os
import sys
import warnings
from collections.abc import Callable, Iterator

import torch

from pagedkit.kernels import batched, cpu_decode, reference
from pagedkit.kernels.batched import paged_decode_attention as paged_decode_attention_batched
from pagedkit.kernels.batched import (
    paged_prefill_attention as paged_prefill_attention_batched,
)
from pagedkit.kernels.batched import store_kv as store_kv_batched
from pagedkit.kernels.reference import copy_blocks as copy_blocks_reference
from pagedkit.kernels.reference import paged_decode_attention as paged_decode_attention_reference
from pagedkit.kernels.reference import (
    paged_prefill_attention as paged_prefill_attention_reference,
)
from pagedkit.kernels.reference import store_kv as store_kv_reference

__all__ = [
    "IMPLEMENTATIONS",
    "MIN_FORCED_TRITON_CAPABILITY",
    "MIN_TRITON_CAPABILITY",
    "OVERRIDES",
    "Backend",
    "KernelFallbackWarning",
    "backend",
    "copy_blocks",
    "copy_blocks_reference",
    "override",
    "paged_decode_attention",
    "paged_decode_attention_batched",
    "paged_decode_attention_reference",
    "paged_prefill_attention",
    "paged_prefill_attention_batched",
    "paged_prefill_attention_reference",
    "set_backend",
    "store_kv",
    "store_kv_batched",
    "store_kv_reference",
    "use_backend",
    "use_decode_attention",
]

ENV_VAR = "PAGEDKIT_KERNELS"
CHOICES = ("auto", "native", "batched", "torch", "triton")
# `auto` runs the Triton kernels on Ampere (8.0) and newer, the GPUs Triton
# supports officially. A T4 (7.5, Colab's free GPU) runs them on request
# (PAGEDKIT_KERNELS=triton, float16 only): every kernel compiles and fits there
# without spilling (tests/kernels/test_compile.py), but Triton has no
# tensor-core path for 7.5 and no T4 has run them yet; see docs/kernels.md.
# Older GPUs (a V100 is 7.0) get the batched torch path.
MIN_TRITON_CAPABILITY = (8, 0)
MIN_FORCED_TRITON_CAPABILITY = (7, 5)

# operation -> module under pagedkit.kernels holding its Triton kernel
_TRITON_MODULES = {
    "store_kv": "store_kv",
    "paged_decode_attention": "paged_decode",
    "paged_prefill_attention": "paged_prefill",
    "copy_blocks": "copy_blocks",
}

_override: str | None = None
_override_by = "set_backend"  # the call that made `_override`: what `backend().reason` names
_noticed: set[tuple[str, str]] = set()


class KernelFallbackWarning(UserWarning):
    """A GPU was found but a torch path runs instead of Triton."""


class Backend(str):
    """``"triton"``, ``"native"``, ``"batched"`` or ``"torch"``, with the `reason` it was chosen."""

    reason: str

    def __new__(cls, name: str, reason: str) -> Backend:
        obj = super().__new__(cls, name)
        obj.reason = reason
        return obj

    def __repr__(self) -> str:
        return f"Backend({str(self)!r}, reason={self.reason!r})"


def set_backend(name: str | None) -> None:
    """Force ``"native"``, ``"batched"``, ``"torch"`` or ``"triton"`` (or ``"auto"``) for every
    call from now on;
    ``None`` defers to the ``PAGEDKIT_KERNELS`` environment variable again."""
    _set_override(name, "set_backend")


def _set_override(name: str | None, by: str) -> None:
    """`set_backend` / `use_backend`: `by` is the call a forced backend's reason names."""
    global _override, _override_by
    if name is not None and name not in CHOICES:
        raise ValueError(f"backend must be one of {CHOICES} or None, got {name!r}")
    _override, _override_by = name, by


@contextlib.contextmanager
def use_backend(name: str | None) -> Iterator[None]:
    """``with ops.use_backend("triton"): ...`` — `set_backend` for a block only;
    the previous choice comes back even if the block raises."""
    previous = _override, _override_by
    _set_override(name, "use_backend")
    try:
        yield
    finally:
        _set_override(*previous)


def _gpu_too_old(device: torch.device, forced: bool = False) -> str | None:
    """Why a CUDA device cannot run the Triton kernels, or None if it can
    (`forced`: on request, which reaches down to `MIN_FORCED_TRITON_CAPABILITY`)."""
    cap = torch.cuda.get_device_capability(device)
    need = MIN_FORCED_TRITON_CAPABILITY if forced else MIN_TRITON_CAPABILITY
    if cap >= need:
        return None
    how = "" if forced or cap < MIN_FORCED_TRITON_CAPABILITY else (
        f" by default (on request with {ENV_VAR}=triton, float16 only)")
    return (f"{torch.cuda.get_device_name(device)} has compute capability {cap[0]}.{cap[1]} "
            f"and pagedkit's Triton kernels need {need[0]}.{need[1]}+{how}")


def _mode() -> tuple[str, str]:
    if _override is not None:
        return _override, f"{_override_by}({_override!r})"
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
    """What a call on `device` runs, ``"triton"``, ``"native"``, ``"batched"``
    or ``"torch"``; ``.reason`` says why.

    Raises when ``triton`` or ``native`` is forced where it cannot run (no
    Triton, an unsupported GPU, CPU without the interpreter; a GPU, or no C
    compiler with OpenMP).
    """
    device = torch.device(device)
    mode, source = _mode()
    if mode in ("torch", "batched"):
        return Backend(mode, f"forced by {source}")
    if mode == "native":
        problem = (f"it runs on CPU tensors, not {device.type}"
                   if device.type != "cpu" else cpu_decode.unavailable())
        if problem:
            raise RuntimeError(f"{source} forces the C decode kernel, but {problem}; "
                               f"{_torch_instead(source)}")
        return Backend("native", f"forced by {source}; decode attention in C "
                                 "(kernels/cpu_decode.c), the rest on the batched torch path")

    if mode == "triton":
        problem = _forced_triton_problem(device)
        if problem:
            install = ("install it (Linux only: pip install triton; Colab has it), or "
                       if problem == _triton_import_error() else "or ")
            raise RuntimeError(f"{source} forces the Triton kernels, but {problem}; "
                               f"{install}{_torch_instead(source)}")
        where = "in the interpreter" if device.type == "cpu" else f"on {device}"
        return Backend("triton", f"forced by {source}; running {where}")

    if device.type != "cuda":  # auto
        return _auto_without_cuda(device)
    problem = _triton_import_error() or _gpu_too_old(device)
    if problem is None:
        return Backend("triton", f"CUDA device {device} with Triton")
    _notice(str(device), problem)
    return Backend("batched", f"{problem}: the batched torch path runs instead")


def _auto_without_cuda(device: torch.device) -> Backend:
    """`backend`'s auto choice off CUDA: the C decode kernel on a CPU where it
    builds, else the batched torch path; the reason names the others."""
    triton = (f"the Triton kernels with {ENV_VAR}=triton and TRITON_INTERPRET=1"
              if importlib.util.find_spec("triton") else  # asked, not imported
              "the Triton kernels need Triton, which is not installed here")
    problem = cpu_decode.unavailable() if device.type == "cpu" else None
    if device.type == "cpu" and problem is None:
        return Backend("native", f"cpu device: decode attention in C (kernels/cpu_decode.c, "
                                 f"built here), prefill and the KV store on the batched torch "
                                 f"path, one call per layer for all sequences (the batched "
                                 f"torch path with {ENV_VAR}=batched, the per-sequence "
                                 f"reference with {ENV_VAR}=torch; {triton})")
    why = f"; {problem}" if problem else ""
    return Backend("batched", f"{device.type} device: the batched torch path runs, one call "
                              f"per layer for all sequences{why} (the per-sequence reference "
                              f"with {ENV_VAR}=torch; {triton})")


def _torch_instead(source: str) -> str:
    """How to run a torch path instead of a forced backend that cannot run here."""
    call = source.split("(")[0]
    if call in ("set_backend", "use_backend"):
        return f"call {call}('batched') or {call}('torch') for a torch path"
    return f"unset {ENV_VAR} (auto runs what works here), or set it to batched or torch"


def _forced_triton_problem(device: torch.device) -> str | None:
    """Why the Triton kernels cannot run on `device` even on request, or None."""
    problem = _triton_import_error()
    if problem is None and device.type == "cpu" and not all(map(_interpreted,
                                                                _TRITON_MODULES)):
        problem = ("Triton kernels run on CPU only in Triton's interpreter, and Triton "
                   "reads TRITON_INTERPRET=1 when a kernel module is imported: set it "
                   "before importing pagedkit (in a notebook, restart the kernel first)")
    if problem is None and device.type == "cuda":
        problem = _gpu_too_old(device, forced=True)
    if problem is None and device.type not in ("cpu", "cuda"):
        problem = f"Triton does not run on {device.type} devices"
    return problem


def _notice(device: str, problem: str) -> None:
    """One line, once per device and problem, when a GPU does not get Triton."""
    if (device, problem) not in _noticed:
        _noticed.add((device, problem))
        warnings.warn(f"pagedkit: {problem}; using the batched torch path on {device}",
                      KernelFallbackWarning, stacklevel=4)


def _triton_op(name: str) -> Callable:
    module = importlib.import_module(f"pagedkit.kernels.{_TRITON_MODULES[name]}")
    return getattr(module, name)


#: Each torch backend's function for each operation (the Triton kernels' are
#: imported on first use: `_triton_op`). The batched path has no copy_blocks
#: of its own: the reference's is one batched op already.
IMPLEMENTATIONS: dict[str, dict[str, Callable]] = {
    "native": {"store_kv": batched.store_kv,
               "paged_decode_attention": cpu_decode.paged_decode_attention,
               "paged_prefill_attention": batched.paged_prefill_attention,
               "copy_blocks": reference.copy_blocks},
    "batched": {"store_kv": batched.store_kv,
                "paged_decode_attention": batched.paged_decode_attention,
                "paged_prefill_attention": batched.paged_prefill_attention,
                "copy_blocks": reference.copy_blocks},
    "torch": {"store_kv": reference.store_kv,
              "paged_decode_attention": reference.paged_decode_attention,
              "paged_prefill_attention": reference.paged_prefill_attention,
              "copy_blocks": reference.copy_blocks},
}

#: Functions plugged in for an operation, by its name here, in place of the
#: backend's; `override` puts one in for a block (`use_decode_attention` does,
#: for a learner's function). The public ops look here first, so a direct call
#: and every layer of an engine step alike run the plugged-in function, called
#: with the op's own arguments (no ``step_cache``).
OVERRIDES: dict[str, Callable] = {}


@contextlib.contextmanager
def override(name: str, fn: Callable) -> Iterator[None]:
    """``with ops.override("paged_decode_attention", fn): ...`` — operation
    `name` runs `fn` inside the block (same arguments as the op); the
    previous function, or none, comes back after it, errors included."""
    if name not in _TRITON_MODULES:
        raise ValueError(f"no operation named {name!r}; one of {sorted(_TRITON_MODULES)}")
    previous = OVERRIDES.get(name)
    OVERRIDES[name] = fn
    try:
        yield
    finally:
        if previous is None:
            del OVERRIDES[name]
        else:
            OVERRIDES[name] = previous


#: `backend`'s answers so far, by what they depend on that can change while a
#: process runs: the device, `set_backend`'s choice and the two environment
#: variables (Triton's installation and a GPU's capability are fixed). An
#: engine step calls the ops twice per layer; each call looks its backend up
#: here instead of deciding it again. A choice that raises is never kept.
_CHOSEN: dict[tuple, Backend] = {}


def _run(name: str, device: torch.device, args: tuple, options: dict,
         step_cache: dict | None = None):
    """Run operation `name` on `args` and `options`: the function plugged in
    for it (`OVERRIDES`) if there is one, else the backend's for `device`
    (`backend`, decided once per setting: `_CHOSEN`). The batched attention
    (and the native backend's, which runs it for what C does not take) also
    gets `step_cache`, where it keeps its buckets."""
    if name in OVERRIDES:
        return OVERRIDES[name](*args, **options)
    setting = (device, _override, os.environ.get(ENV_VAR), os.environ.get("TRITON_INTERPRET"))
    choice = _CHOSEN.get(setting)
    if choice is None:
        choice = _CHOSEN[setting] = backend(device)
    if choice == "triton":
        return _triton_op(name)(*args, **options)
    if step_cache is not None and choice in ("batched", "native"):
        return IMPLEMENTATIONS[choice][name](*args, **options, step_cache=step_cache)
    return IMPLEMENTATIONS[choice][name](*args, **options)


def store_kv(key: torch.Tensor, value: torch.Tensor, k_cache: torch.Tensor,
             v_cache: torch.Tensor, slot_mapping: torch.Tensor, *, check: bool = True) -> None:
    """Write new tokens' K/V ``[num_tokens, num_kv_heads, head_dim]`` into their
    slots of the paged cache; a negative slot skips the token."""
    _run("store_kv", k_cache.device, (key, value, k_cache, v_cache, slot_mapping),
         {"check": check})


def paged_decode_attention(query: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                           block_tables: torch.Tensor, context_lens: torch.Tensor,
                           scale: float | None = None, *, sliding_window: int | None = None,
                           softcap: float | None = None, sinks: torch.Tensor | None = None,
                           num_splits: int | None = None, check: bool = True,
                           step_cache: dict | None = None) -> torch.Tensor:
    """One query token per sequence attending to its paged K/V; see
    `pagedkit.kernels.reference.paged_decode_attention` for the contract
    (`sliding_window`, `softcap`, `sinks`: `pagedkit.kernels.reference.attention`).
    `step_cache`: a dict the layers of one engine step share (the step's
    `AttentionMetadata` holds it), in which the batched path keeps what
    depends only on the tables and lengths."""
    return _run("paged_decode_attention", k_cache.device,
                (query, k_cache, v_cache, block_tables, context_lens, scale),
                dict(sliding_window=sliding_window, softcap=softcap, sinks=sinks,
                     num_splits=num_splits, check=check), step_cache)


def paged_prefill_attention(query: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                            block_tables: torch.Tensor, cu_seqlens_q: torch.Tensor,
                            context_lens: torch.Tensor, scale: float | None = None, *,
                            sliding_window: int | None = None, softcap: float | None = None,
                            sinks: torch.Tensor | None = None, check: bool = True,
                            step_cache: dict | None = None) -> torch.Tensor:
    """Packed query chunks attending causally to their paged K/V (cached prefix
    plus the chunk); see `pagedkit.kernels.reference.paged_prefill_attention`.
    `step_cache`: as in `paged_decode_attention`."""
    return _run("paged_prefill_attention", k_cache.device,
                (query, k_cache, v_cache, block_tables, cu_seqlens_q, context_lens, scale),
                dict(sliding_window=sliding_window, softcap=softcap, sinks=sinks,
                     check=check), step_cache)


def copy_blocks(cache: torch.Tensor, block_pairs: torch.Tensor, *, check: bool = True) -> None:
    """Copy blocks ``cache[src] -> cache[dst]`` in place for each (src, dst) row
    of `block_pairs` (copy-on-write)."""
    _run("copy_blocks", cache.device, (cache, block_pairs), {"check": check})


@contextlib.contextmanager
def use_decode_attention(fn: Callable[..., torch.Tensor]) -> Iterator[None]:
    """Inside this block, `paged_decode_attention` runs `fn`, one sequence at a time.

    ``fn(query, k_cache, v_cache, block_table, context_len) -> out`` takes one
    sequence's query ``[num_q_heads, head_dim]``, the layer's paged caches, its
    block table ``[max_blocks]`` (padded) and its context length (an int), and
    returns ``[num_q_heads, head_dim]`` with the scale ``1 / sqrt(head_dim)`` —
    lab 04's exercise. This lets a learner's own function serve the real engine
    (lab 08 checks it still matches transformers). Calls this signature cannot
    express — another scale, a sliding window, a softcap, sinks — are refused,
    and a result of the wrong shape raises, naming it. Prefill
    attention, `store_kv` and the rest keep their implementations. It is an
    `override`: the previous function comes back on exit, errors included;
    blocks nest.
    """
    if not callable(fn):
        raise TypeError(f"use_decode_attention needs a function, got {type(fn).__name__}")

    def per_sequence(query, k_cache, v_cache, block_tables, context_lens, scale=None, *,
                     sliding_window=None, softcap=None, sinks=None, num_splits=None,
                     check=True):
        _refuse_what_fn_cannot_express(query.shape[-1], scale, sliding_window=sliding_window,
                                       softcap=softcap, sinks=sinks)
        outs = []
        for s, ctx in enumerate(context_lens.tolist()):
            out = fn(query[s], k_cache, v_cache, block_tables[s], int(ctx))
            if not isinstance(out, torch.Tensor) or out.shape != query[s].shape:
                shape = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
                raise ValueError(f"use_decode_attention: the function returned {shape} for "
                                 f"sequence {s}; expected a tensor of shape "
                                 f"{tuple(query[s].shape)} (num_q_heads, head_dim)")
            outs.append(out.to(query.dtype))
        return torch.stack(outs) if outs else torch.empty_like(query)

    with override("paged_decode_attention", per_sequence):
        yield


def _refuse_what_fn_cannot_express(head_dim: int, scale: float | None, **options) -> None:
    """`use_decode_attention`'s function takes no scale and no options: refuse
    a call that needs them."""
    if scale is not None and abs(scale - head_dim ** -0.5) > 1e-6 * head_dim ** -0.5:
        raise NotImplementedError(f"use_decode_attention: this model scales scores by "
                                  f"{scale}, not 1/sqrt({head_dim}); your function assumes "
                                  "1/sqrt(head_dim)")
    given = sorted(k for k, v in options.items() if v is not None)
    if given:
        raise NotImplementedError(f"use_decode_attention: this model's attention uses "
                                  f"{', '.join(given)}, which the plugged-in function "
                                  "does not take; use a model without it")
