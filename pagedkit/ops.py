"""The four PagedAttention operations, each run by one of three implementations.

* the **Triton kernels** (``kernels/paged_decode.py``, ...): follow the block
  table while streaming K/V through on-chip memory (paper §4.1), on a GPU;
* the **torch reference** (``kernels/reference.py``): one sequence at a time,
  gather its blocks, attend — the readable statement of the math, and the
  oracle the tests hold the others against;
* the **batched torch path** (``kernels/batched.py``): the same numbers for a
  whole step in one gather and one masked SDPA call per layer and group of
  similar lengths, however many sequences run — what a CPU runs by default,
  because the reference's per-sequence calls cost far more in overhead than
  in arithmetic there.

Which one runs is decided per call from the tensors' device, by `backend`:

=================  ===========================================================
``auto`` (default) CUDA GPU of compute capability >= 8.0 with Triton installed:
                   Triton. Anything else (CPU, an older GPU such as Colab's T4,
                   no Triton as on macOS): the batched torch path, with a
                   one-line notice when a GPU is passed over.
``batched``        always the batched torch path.
``torch``          always the per-sequence torch reference.
``triton``         always the Triton kernels. On CPU they run in Triton's
                   interpreter, which must be switched on *before* the kernel
                   modules are imported (see below); otherwise this raises.
=================  ===========================================================

Copying blocks is one batched torch operation already; ``batched`` and
``torch`` both run the reference for it. Writing K/V into slots has a batched
version (one ``index_copy_`` per cache), the reference's boolean-mask
indexing being the readable one.

An engine step calls these ops for every layer with the same metadata;
`StepOps` does what depends only on that metadata (choosing the backend,
checking the values, the batched path's plan) once per step.

Choose with the environment variable ``PAGEDKIT_KERNELS=auto|batched|torch|triton``
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
shapes. ``check=False`` skips the checks that read tensor *values* (block
ids, slots and lengths in range), which on a GPU cost a host sync per call;
the engine, whose inputs come from its own bookkeeping, skips them on CUDA.

Importing this module never imports Triton, so it works where Triton is not
installed. The references are re-exported here under ``*_reference``, the
batched attention and ``store_kv`` under ``*_batched``.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import inspect
import os
import sys
import warnings
from collections.abc import Callable, Iterator

import torch

from pagedkit.kernels import batched, checks, reference
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
    "MIN_FORCED_TRITON_CAPABILITY",
    "MIN_TRITON_CAPABILITY",
    "Backend",
    "KernelFallbackWarning",
    "StepOps",
    "backend",
    "copy_blocks",
    "copy_blocks_reference",
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
]

ENV_VAR = "PAGEDKIT_KERNELS"
CHOICES = ("auto", "batched", "torch", "triton")
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
_noticed: set[tuple[str, str]] = set()


class KernelFallbackWarning(UserWarning):
    """A GPU was found but a torch path runs instead of Triton."""


class Backend(str):
    """``"triton"``, ``"batched"`` or ``"torch"``, with the `reason` it was chosen."""

    reason: str

    def __new__(cls, name: str, reason: str) -> Backend:
        obj = super().__new__(cls, name)
        obj.reason = reason
        return obj

    def __repr__(self) -> str:
        return f"Backend({str(self)!r}, reason={self.reason!r})"


def set_backend(name: str | None) -> None:
    """Force ``"batched"``, ``"torch"`` or ``"triton"`` (or ``"auto"``) for every call from now on;
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
    """What a call on `device` runs, ``"triton"``, ``"batched"`` or ``"torch"``;
    ``.reason`` says why.

    Raises when ``triton`` is forced where it cannot run (no Triton, an
    unsupported GPU, or CPU without the interpreter).
    """
    device = torch.device(device)
    mode, source = _mode()
    if mode == "torch":
        return Backend("torch", f"forced by {source}")
    if mode == "batched":
        return Backend("batched", f"forced by {source}")

    if mode == "triton":
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
        if problem:
            raise RuntimeError(f"{source} forces the Triton kernels, but {problem}")
        where = "in the interpreter" if device.type == "cpu" else f"on {device}"
        return Backend("triton", f"forced by {source}; running {where}")

    # auto
    if device.type != "cuda":
        return Backend("batched", f"{device.type} device: the batched torch path runs, one "
                                  f"call per layer for all sequences (the per-sequence "
                                  f"reference with {ENV_VAR}=torch; the Triton kernels with "
                                  f"{ENV_VAR}=triton and TRITON_INTERPRET=1)")
    problem = _triton_import_error() or _gpu_too_old(device)
    if problem is None:
        return Backend("triton", f"CUDA device {device} with Triton")
    _notice(str(device), problem)
    return Backend("batched", f"{problem}: the batched torch path runs instead")


def _notice(device: str, problem: str) -> None:
    """One line, once per device and problem, when a GPU does not get Triton."""
    if (device, problem) not in _noticed:
        _noticed.add((device, problem))
        warnings.warn(f"pagedkit: {problem}; using the batched torch path on {device}",
                      KernelFallbackWarning, stacklevel=4)


def _triton_op(name: str) -> Callable:
    module = importlib.import_module(f"pagedkit.kernels.{_TRITON_MODULES[name]}")
    return getattr(module, name)


def _implementation(name: str, choice: Backend) -> Callable:
    if choice == "triton":
        return _triton_op(name)
    if choice == "batched" and hasattr(batched, name):  # copy_blocks is one op already
        return getattr(batched, name)
    return getattr(reference, name)


def _op(name: str, device: torch.device) -> Callable:
    return _implementation(name, backend(device))


def store_kv(key: torch.Tensor, value: torch.Tensor, k_cache: torch.Tensor,
             v_cache: torch.Tensor, slot_mapping: torch.Tensor, *, check: bool = True) -> None:
    """Write new tokens' K/V ``[num_tokens, num_kv_heads, head_dim]`` into their
    slots of the paged cache; a negative slot skips the token."""
    _op("store_kv", k_cache.device)(key, value, k_cache, v_cache, slot_mapping, check=check)


@functools.lru_cache(maxsize=64)
def _parameters(op: Callable) -> frozenset[str] | None:
    """The parameter names of `op`, None if it takes any keyword (``**kwargs``:
    a wrapper that records or times the calls). Cached: every layer asks."""
    parameters = inspect.signature(op).parameters.values()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return None
    return frozenset(p.name for p in parameters)


def _given(op: Callable, name: str, choice: Backend, options: dict) -> dict:
    """The options to pass `op`: those that are set (so an implementation
    without an option still serves calls that do not use it), refusing one it lacks."""
    given = {k: v for k, v in options.items() if v is not None}
    accepted = _parameters(op)
    missing = [] if accepted is None else sorted(set(given) - accepted)
    if missing:
        raise NotImplementedError(
            f"the {choice} {name} does not implement {', '.join(missing)} yet; "
            "use the torch reference: ops.use_backend('torch') or PAGEDKIT_KERNELS=torch")
    return given


def _attention_op(name: str, device: torch.device, **options) -> tuple[Callable, dict]:
    """The op for `device` and the options to pass it (`_given`)."""
    choice = backend(device)
    op = _implementation(name, choice)
    return op, _given(op, name, choice, options)


def paged_decode_attention(query: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                           block_tables: torch.Tensor, context_lens: torch.Tensor,
                           scale: float | None = None, *, sliding_window: int | None = None,
                           softcap: float | None = None, sinks: torch.Tensor | None = None,
                           num_splits: int | None = None, check: bool = True) -> torch.Tensor:
    """One query token per sequence attending to its paged K/V; see
    `pagedkit.kernels.reference.paged_decode_attention` for the contract
    (`sliding_window`, `softcap`, `sinks`: `pagedkit.kernels.reference.attention`)."""
    op, options = _attention_op("paged_decode_attention", k_cache.device,
                                sliding_window=sliding_window, softcap=softcap, sinks=sinks)
    return op(query, k_cache, v_cache, block_tables, context_lens, scale, num_splits=num_splits,
              check=check, **options)


def paged_prefill_attention(query: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                            block_tables: torch.Tensor, cu_seqlens_q: torch.Tensor,
                            context_lens: torch.Tensor, scale: float | None = None, *,
                            sliding_window: int | None = None, softcap: float | None = None,
                            sinks: torch.Tensor | None = None,
                            check: bool = True) -> torch.Tensor:
    """Packed query chunks attending causally to their paged K/V (cached prefix
    plus the chunk); see `pagedkit.kernels.reference.paged_prefill_attention`."""
    op, options = _attention_op("paged_prefill_attention", k_cache.device,
                                sliding_window=sliding_window, softcap=softcap, sinks=sinks)
    return op(query, k_cache, v_cache, block_tables, cu_seqlens_q, context_lens, scale,
              check=check, **options)


def copy_blocks(cache: torch.Tensor, block_pairs: torch.Tensor, *, check: bool = True) -> None:
    """Copy blocks ``cache[src] -> cache[dst]`` in place for each (src, dst) row
    of `block_pairs` (copy-on-write)."""
    _op("copy_blocks", cache.device)(cache, block_pairs, check=check)


#: The ops as defined here. A caller may swap one of the module's names for
#: another function (`use_decode_attention`, a lab's call recorder, a profiler's
#: timer); `StepOps` then calls that function for every layer, as the engine did
#: before it had StepOps, so whoever swapped it sees every call.
_DEFINED = {"store_kv": store_kv, "paged_decode_attention": paged_decode_attention,
            "paged_prefill_attention": paged_prefill_attention}


class StepOps:
    """`store_kv` and paged attention for every layer of one engine step.

    Every layer of a step writes through the same slots and reads through the
    same block tables and lengths, so what depends only on those is done
    once per step, on the first layer that needs it, instead of per layer:

    * choosing the implementation (`backend`) and its functions;
    * the value checks of the metadata (slots and block ids inside the
      cache, lengths that fit the tables, query boundaries): once per cache
      shape and sliding window, the only things a layer adds that they read;
    * on the batched path, the plan of the gathers and masks
      (`batched.plan_decode`, `batched.plan_prefill`, `batched.plan_store`),
      once per block size and sliding window (a model may mix windowed and
      full layers, as Gemma 2 and Qwen2 do).

    Each layer still gets the structure checks of what is its own, its
    cache's shape, dtype and device, its keys' and queries' shapes, its
    options, so a wrong layer is refused as the public ops would refuse it:
    on the batched path once per *layout* of those (`_layout`), since a layer
    laid out like one already checked passes the same checks.
    Direct callers use the public ops, which do all of this per call. An op
    whose name in this module was swapped for another function (see
    `_DEFINED`) is called through that function for every layer.

    The metadata is the step's packed batch (`pagedkit.model.attention.
    AttentionMetadata`): each new token's slot, then the sequences' block
    tables and context lengths, the first `num_decodes` of them decodes (one
    query row each), the rest prefill chunks bounded by `cu_seqlens_q`.
    ``check=False`` skips the value checks (a host sync each on a GPU).
    """

    def __init__(self, slot_mapping: torch.Tensor, block_tables: torch.Tensor,
                 context_lens: torch.Tensor, cu_seqlens_q: torch.Tensor, num_decodes: int, *,
                 check: bool = True) -> None:
        d, num_seqs = num_decodes, context_lens.shape[0]
        self.slot_mapping = slot_mapping
        self.num_decodes = d
        self.check = check
        # The decodes' and the chunks' metadata (sliced only in a step that has both)
        self._metadata = {}
        if d:
            self._metadata["paged_decode_attention"] = (
                (block_tables, context_lens) if d == num_seqs
                else (block_tables[:d], context_lens[:d]))
        if d < num_seqs or not d:
            self._metadata["paged_prefill_attention"] = (
                (block_tables, cu_seqlens_q, context_lens) if not d
                else (block_tables[d:], cu_seqlens_q[d:] - d, context_lens[d:]))
        self.backend: Backend | None = None      # resolved by the first layer
        self._ops: dict[str, Callable | None] = {}  # None: the batched path, planned here
        self._checked: set[tuple] = set()        # value checks passed this step
        self._structures: set[tuple] = set()     # layers' structures that passed (`_layout`)
        self._plans: dict[tuple, batched.Plan | batched.StorePlan] = {}

    def _resolve(self, device: torch.device) -> None:
        """Pick the functions once. A layer whose cache is on another device is
        refused by its structure checks (metadata and cache on different devices)."""
        if self.backend is not None:
            return
        self.backend = choice = backend(device)
        current = globals()
        self._ops = {name: (current[name] if current[name] is not defined  # swapped (_DEFINED)
                            else None if choice == "batched"
                            else _implementation(name, choice))
                     for name, defined in _DEFINED.items()}

    def _plan(self, key: tuple, make: Callable):
        if key not in self._plans:
            self._plans[key] = make()
        return self._plans[key]

    def store_kv(self, key: torch.Tensor, value: torch.Tensor, k_cache: torch.Tensor,
                 v_cache: torch.Tensor) -> None:
        """`store_kv` of this layer's new K/V ``[num_tokens, num_kv_heads, head_dim]``."""
        self._resolve(k_cache.device)
        seen = ("store_kv", *k_cache.shape[:2])
        values = self.check and seen not in self._checked
        op = self._ops["store_kv"]
        if op is None:
            layout = ("store_kv", _layout(key), _layout(value), _layout(k_cache),
                      _layout(v_cache))
            if values or layout not in self._structures:
                checks.check_store_kv(key, value, k_cache, v_cache, self.slot_mapping,
                                      values=values)
                self._structures.add(layout)
            plan = self._plan(("store_kv",), lambda: batched.plan_store(self.slot_mapping))
            batched.store(key, value, k_cache, v_cache, plan)
        else:
            op(key, value, k_cache, v_cache, self.slot_mapping, check=values)
        self._checked.add(seen)

    def attention(self, query: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                  scale: float | None = None, *, sliding_window: int | None = None,
                  softcap: float | None = None, sinks: torch.Tensor | None = None
                  ) -> torch.Tensor:
        """This layer's attention for every query row of the step ``[num_tokens,
        num_q_heads, head_dim]``: the decodes' rows from `paged_decode_attention`,
        the rest from `paged_prefill_attention`."""
        self._resolve(k_cache.device)
        options = {"sliding_window": sliding_window, "softcap": softcap, "sinks": sinks}
        if len(self._metadata) == 1:  # only decodes, or only chunks: every row
            name, = self._metadata
            return self._attend(name, query, k_cache, v_cache, scale, options)
        d = self.num_decodes
        return torch.cat([
            self._attend("paged_decode_attention", query[:d], k_cache, v_cache, scale, options),
            self._attend("paged_prefill_attention", query[d:], k_cache, v_cache, scale,
                         options)])

    def _attend(self, name: str, query: torch.Tensor, k_cache: torch.Tensor,
                v_cache: torch.Tensor, scale: float | None, options: dict) -> torch.Tensor:
        metadata = self._metadata[name]
        window = options["sliding_window"]
        seen = (name, *k_cache.shape[:2], query.shape[0], window)
        values = self.check and seen not in self._checked
        op = self._ops[name]
        if op is not None:
            out = op(query, k_cache, v_cache, *metadata, scale, check=values,
                     **_given(op, name, self.backend, options))
        else:
            sinks = options["sinks"]
            softcap = options["softcap"]
            layout = (name, _layout(query), _layout(k_cache), _layout(v_cache),
                      type(window), window, type(softcap), softcap,  # True == 1, but refused
                      None if sinks is None else _layout(sinks))
            decode = name == "paged_decode_attention"
            if values or layout not in self._structures:
                if decode:
                    checks.check_decode(query, k_cache, v_cache, *metadata, None,
                                        values=values, **options)
                else:
                    checks.check_prefill(query, k_cache, v_cache, *metadata, values=values,
                                         **options)
                self._structures.add(layout)
            make = batched.plan_decode if decode else batched.plan_prefill
            block_size = k_cache.shape[1]
            plan = self._plan((name, block_size, window),
                              lambda: make(*metadata, block_size, window))
            out = batched.attend(query, k_cache, v_cache, plan, scale,
                                 softcap=options["softcap"], sinks=options["sinks"])
        self._checked.add(seen)
        return out


def _layout(t: torch.Tensor) -> tuple:
    """What a structure check reads of a tensor: its shape, strides, dtype
    and device (contiguity and being floating point follow from them). A
    layer whose tensors and options have the layouts of one checked this step
    passes the same checks, which read nothing else, so `StepOps` checks each
    layout once per step."""
    if not isinstance(t, torch.Tensor):
        return (type(t),)  # never equal to a tensor's: the check refuses it
    return t.shape, t.stride(), t.dtype, t.device


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
    attention, `store_kv` and the rest keep their implementations. The previous
    function is restored on exit, errors included; blocks nest.
    """
    if not callable(fn):
        raise TypeError(f"use_decode_attention needs a function, got {type(fn).__name__}")
    module = sys.modules[__name__]
    previous = module.paged_decode_attention

    def per_sequence(query, k_cache, v_cache, block_tables, context_lens, scale=None, *,
                     sliding_window=None, softcap=None, sinks=None, num_splits=None,
                     check=True):
        head_dim = query.shape[-1]
        if scale is not None and abs(scale - head_dim ** -0.5) > 1e-6 * head_dim ** -0.5:
            raise NotImplementedError(f"use_decode_attention: this model scales scores by "
                                      f"{scale}, not 1/sqrt({head_dim}); your function assumes "
                                      "1/sqrt(head_dim)")
        options = {"sliding_window": sliding_window, "softcap": softcap, "sinks": sinks}
        given = sorted(k for k, v in options.items() if v is not None)
        if given:
            raise NotImplementedError(f"use_decode_attention: this model's attention uses "
                                      f"{', '.join(given)}, which the plugged-in function "
                                      "does not take; use a model without it")
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

    module.paged_decode_attention = per_sequence
    try:
        yield
    finally:
        module.paged_decode_attention = previous
