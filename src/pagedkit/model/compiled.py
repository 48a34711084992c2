"""A compiled forward on CPU: transformers' model code under ``torch.compile``.

Outside the textbook path, like `pagedkit.model.accel`: nothing here changes
what a step computes, only how its model code runs. The engine makes one
call, after `prepack_linears`, `compile_forward(runner)`; with
``PAGEDKIT_COMPILE=on`` the runner's step then calls
``torch.compile(model)`` instead of the model (``auto``, the default, and
``off`` leave the runner calling the model itself).

Why: on a CPU, transformers' norms, rotary embedding, activations and module
calls take a quarter of a small model's step (``bench --profile``, "model
other"), one small tensor op at a time. Inductor fuses them into a few C++
loops and drops the Python between them; measured on the 2-core development
machine that made the engine 1.06-1.36x faster once compiled (CPU time)
(docs/benchmarks.md, "A compiled forward"). But compiling takes 10-90
seconds (more than a benchmark's whole run serves), so ``auto`` does not
compile: ``on`` is for an engine that serves long enough to earn it back.

How: the paged attention is one custom op, ``pagedkit::attention_layer``,
opaque to the compiler (a fake implementation gives its output's shape), so
the graph does not break at the attention; when it runs, it calls the same
`attention.paged_attention` an eager step calls, on the step's metadata
(`attention.forward_context`), so the KV store, the kernels and lab 08's
overrides (`ops.override`) are the eager ones. Token counts change every
step, so the model is compiled with dynamic shapes (a handful of graphs: a
step of decodes only, one with prompts, and a single token of each). A
failure to compile (no C++ compiler, an unsupported model) is caught: the
step reruns eagerly — its K/V writes are the same values again — and every
later step runs eagerly, the reason kept in ``runner.compiled.reason``.

Exactness: inductor's fused loops may sum in another order, so float32
logits are not bitwise the eager ones (tests/model/test_compiled.py checks
the tokens against transformers' generate and the uncompiled engine).
"""

from __future__ import annotations

import functools
import time
import warnings
from dataclasses import dataclass, field

import torch

from .._validation import check_choice
from . import attention
from .accel import CHOICES, switch

#: The switch (`accel.switch`): ``auto``, not compiled (compiling costs more than
#: a run of a benchmark's size saves, docs/benchmarks.md); ``on``, compiled on a
#: CPU; ``off``, never.
ENV_VAR = "PAGEDKIT_COMPILE"
#: The attention-registry name a compiled model's layers look up.
ATTENTION_NAME = "pagedkit_compiled"


def compile_mode() -> str:
    """``PAGEDKIT_COMPILE`` (default ``auto``), or a ValueError naming the choices."""
    return switch(ENV_VAR, "A compiled forward")


@torch.library.custom_op("pagedkit::attention_layer", mutates_args=())
def paged_attention_op(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                       module_name: str, layer_idx: int, scaling: float | None,
                       sliding_window: int | None, softcap: float | None,
                       sinks: torch.Tensor | None) -> torch.Tensor:
    """`attention.paged_attention` of one layer as one op the compiler does not
    look into: stores the layer's K/V into the paged cache of the current step
    and attends. (It writes the cache, which is not among its arguments: the
    graph reads the cache nowhere else, so the compiler need not know.)"""
    if attention._current.get() is None:
        raise RuntimeError("pagedkit::attention_layer runs inside an engine step only "
                           "(attention.forward_context); call the model itself outside one")
    options = {name: value for name, value in (("sliding_window", sliding_window),
                                                ("softcap", softcap), ("s_aux", sinks))
               if value is not None}
    out, _ = attention.paged_attention(_layer(module_name, layer_idx), query, key, value,
                                       None, scaling=scaling, **options)
    return out.contiguous()


# The op writes the step's K/V into the cache, which the graph does not see:
# without an effect it would be dead code wherever its output goes unused (a
# prompt chunk that samples nothing needs no last layer's output, yet must
# store its K/V), so the compiler is told it has one, and keeps every call in order.
def _register_effect() -> str | None:
    """Mark the op effectful (ordered); None, or why this torch cannot (then
    nothing is compiled: `compile_unavailable`)."""
    try:
        from torch._library.effects import EffectType

        torch.library._register_effectful_op(paged_attention_op._opoverload,
                                             EffectType.ORDERED)
    except (AttributeError, ImportError, TypeError, RuntimeError) as err:
        return (f"this torch ({torch.__version__}) cannot mark the attention op as writing "
                f"the KV cache ({type(err).__name__}: {err}), so a compiler could drop "
                "its stores")[:300]
    return None


_EFFECT_PROBLEM = _register_effect()


@paged_attention_op.register_fake
def _(query, key, value, module_name, layer_idx, scaling, sliding_window, softcap, sinks):
    # [1, q_heads, tokens, head_dim] in, [1, tokens, q_heads, head_dim] out
    return query.new_empty((1, query.shape[2], query.shape[1], query.shape[3]))


@functools.cache
def _layer(module_name: str, layer_idx: int) -> object:
    """What `attention.paged_attention` reads of an attention module: its layer
    index (and its class's name, in messages). A graph compiled for one model
    serves every model of the same structure, so the op is given these, not
    the module."""
    return type(module_name, (), {"layer_idx": layer_idx})()


def compiled_attention(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor,
                       value: torch.Tensor, attention_mask: torch.Tensor | None,
                       scaling: float | None = None, dropout: float = 0.0, **kwargs):
    """The attention function of a compiled model: while the compiler traces,
    the custom op (its options checked now, once per graph); called eagerly
    (a step that fell back, ``generate`` outside a step), `paged_attention`."""
    if not torch.compiler.is_compiling():
        return attention.paged_attention(module, query, key, value, attention_mask,
                                         scaling=scaling, dropout=dropout, **kwargs)
    options = attention.attention_options(module, dict(kwargs, dropout=dropout))
    return paged_attention_op(query, key, value, type(module).__name__, module.layer_idx,
                              scaling, options["sliding_window"], options["softcap"],
                              options["sinks"]), None


def compiled_mask(*args, **kwargs):
    """No mask while the compiler traces a step (the kernels mask); else pagedkit's."""
    if torch.compiler.is_compiling():
        return None
    return attention._mask(*args, **kwargs)


def register() -> str:
    """Register the compiled model's attention with transformers (idempotent)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(ATTENTION_NAME, compiled_attention)
    AttentionMaskInterface.register(ATTENTION_NAME, compiled_mask)
    return ATTENTION_NAME


#: What a failure to compile raises: torch's compiler errors (dynamo's, and
#: inductor's, a missing or failing C++ compiler among them). Anything else a
#: compiled step raises is the step's own error and is not caught.
def _compiler_errors() -> tuple[type[BaseException], ...]:
    from torch._dynamo.exc import TorchDynamoException
    from torch._inductor.exc import CppCompileError, InvalidCxxCompiler

    return TorchDynamoException, InvalidCxxCompiler, CppCompileError


#: Graphs compiled and the seconds it took, over every `CompiledForward` of this
#: process (a graph compiled for one model serves the next of its structure).
TOTALS = {"graphs": 0, "seconds": 0.0}


@dataclass
class CompiledForward:
    """The runner's forward under ``PAGEDKIT_COMPILE=on``: the model compiled,
    falling back to the model itself, for good, the first time compiling fails."""

    model: torch.nn.Module
    compiled: object = None
    reason: str | None = None  # why steps run eagerly (None while compiled ones run)
    compile_seconds: float = 0.0  # wall time of the calls that compiled a new graph
    graphs: int = 0  # graphs compiled so far
    _errors: tuple = field(default=(), repr=False)

    def __post_init__(self) -> None:
        self._errors = _compiler_errors()
        options = {"cpp.dynamic_threads": torch.get_num_threads() > 1}  # steps switch threads
        self.compiled = torch.compile(self.model, dynamic=True, fullgraph=True,
                                      options=options)

    def __call__(self, **inputs):
        if self.reason is not None:
            return self.model(**inputs)
        from torch._dynamo.utils import counters

        before = counters["stats"]["unique_graphs"]
        start = time.perf_counter()
        try:
            out = self.compiled(**inputs)
        except self._errors as err:
            self.reason = f"compiling failed ({type(err).__name__}: {err})"[:500]
            warnings.warn(f"{ENV_VAR}=on: {self.reason}; the model runs uncompiled",
                          stacklevel=3)
            return self.model(**inputs)
        new = counters["stats"]["unique_graphs"] - before
        if new:
            seconds = time.perf_counter() - start
            self.graphs += new
            self.compile_seconds += seconds
            TOTALS["graphs"] += new
            TOTALS["seconds"] += seconds
        return out


@dataclass
class CompileReport:
    """What `compile_forward` did, and why."""

    mode: str
    reason: str = ""  # why the forward is not compiled, when it is not

    def __str__(self) -> str:
        if self.reason:
            return f"compiled forward: no ({self.reason})"
        return f"compiled forward ({ENV_VAR}={self.mode}): torch.compile, inductor"


def compile_unavailable() -> str | None:
    """Why this machine cannot compile a CPU forward, as far as can be told
    without compiling (a C++ compiler inductor finds), or None."""
    if _EFFECT_PROBLEM:
        return _EFFECT_PROBLEM
    try:
        from torch._inductor.cpp_builder import get_cpp_compiler

        get_cpp_compiler()
    except Exception as err:  # any failure to find one is the answer
        return f"no C++ compiler for inductor ({type(err).__name__}: {err})"[:300]
    return None


def _unpack(model: torch.nn.Module) -> None:
    """Plain linear layers for the compiler (a `PackedLinear`'s per-call checks of
    its weight would break the graph); the prepack report says so."""
    from .accel import PrepackReport, unpack_linears

    report = getattr(model, "pagedkit_prepack", None)
    if report is not None and report.replaced:
        unpack_linears(model)
        model.pagedkit_prepack = PrepackReport(
            report.mode, reason=f"the compiled forward ({ENV_VAR}=on) multiplies the plain "
            "weights in its graph")


def compile_forward(runner, device: torch.device, mode: str | None = None) -> CompileReport:
    """Set ``runner.forward`` as `mode` says (``auto|on|off``; None reads
    ``PAGEDKIT_COMPILE``): the model itself, or a `CompiledForward` of it
    (kept as ``runner.compiled`` too). Never raises for a model or machine it
    cannot compile: the report (also ``runner.model.pagedkit_compile``) says
    why, and ``on`` warns."""
    report = CompileReport(compile_mode() if mode is None else
                           check_choice("mode", mode, CHOICES))
    model = runner.model
    runner.forward, runner.compiled = model, None
    model.set_attn_implementation(attention.register())
    report.reason = ("switched off" if report.mode == "off" else
                     "auto does not compile: compiling takes longer than a run of a "
                     f"benchmark's size saves; {ENV_VAR}=on compiles"
                     if report.mode == "auto" else
                     f"served on {device.type}, not the CPU" if device.type != "cpu" else
                     compile_unavailable() or "")
    if report.reason and report.mode == "on":
        warnings.warn(f"{ENV_VAR}=on: {report.reason}; the model runs uncompiled", stacklevel=2)
    if not report.reason:
        _unpack(model)
        model.set_attn_implementation(register())
        runner.forward = runner.compiled = CompiledForward(model)
    model.pagedkit_compile = report
    return report
