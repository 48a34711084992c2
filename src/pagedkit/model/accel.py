"""Prepacked linear layers on CPU: transformers' model code, a faster matmul.

Outside the textbook path: nothing here changes what a step computes, only
how fast its matrix products run on a CPU, and the engine reads exactly as
it would without it (docs/architecture.md). The engine makes one call, the
last of its construction, `prepack_linears(model, device)` (on a GPU the layers
stay plain); ``PAGEDKIT_PREPACK=off`` turns it off.

Why: on a CPU the linear layers take ~40-45% of a pagedkit step
(``python -m pagedkit bench --profile``). ``F.linear`` hands each call's
plain row-major weight to a GEMM that re-blocks it on the fly; oneDNN can
reorder a weight once into the blocked layout its kernels read
(``torch.ops.mkldnn._reorder_linear_weight``) and then multiply against that
layout on every call (``torch.ops.mkldnn._linear_pointwise``) — what vLLM's
CPU build does for its own layers. And a call of a few rows (a decode
step's) runs neither GEMM but a C kernel (below). The rule under ``auto``
was measured in the engine, where each weight comes from memory, and is the
model's: its layers are packed, every call of them (``MIN_ROWS``, 1), when
its narrowest packable linear layer has at least ``MIN_IN_FEATURES`` (256)
inputs (one narrow layer, an adapter's say, leaves the model plain).
The embedded tiny model (256 wide) ran 1.14-1.35x faster so; models 64 and
128 wide ran 0.80-0.96x packed, and a 128-wide one with only its wider down
projections packed 0.73-0.98x (docs/benchmarks.md, "The tiny model
packed"), so such models stay plain. Without the C kernel (no compiler),
every packed call is oneDNN's, and ``auto`` keeps the rule measured for
oneDNN's product alone, per layer: 512 inputs and 512 x 512 weights
(``ONEDNN_MIN_IN_FEATURES``, ``ONEDNN_MIN_WEIGHT_ELEMENTS``; "Prepacked
linear layers"), which leaves the tiny model plain.

A call of a few rows (a decode step's tokens, up to ``cpu_linear.MAX_ROWS``)
runs neither GEMM but `pagedkit.kernels.cpu_linear`, a C kernel that reads
a weight packed into panels once, straight down: 1.4-2.1x faster than
oneDNN's product at 1-2 rows on 2 AVX-512 cores, and the larger bench
model's engine 1.06-1.5x faster (docs/benchmarks.md, "A few rows in C").
Where no C compiler builds it, every packed call runs oneDNN's product.

How: each eligible ``nn.Linear`` is replaced, in place in its parent, by a
`PackedLinear` that holds the very same ``weight`` and ``bias`` Parameters
(state dict, tied weights and ``.to()`` behave as before) plus the packed
copies (oneDNN's and the C kernel's), built here, at load (not in the
first step, where 41 weights of the larger model took 0.06 s of the first
request's time to first token on one thread, 0.2-0.4 s on two of a busy
machine), and rebuilt whenever the weight changes (a new tensor, an
in-place write, ``.to()``). Anything the packed product does not cover —
another dtype or device, autograd, autocast, a call below the row rule —
runs ``F.linear`` on the same weight, and so does a call torch must see
whole: a fake, functional, nested or sparse tensor, a tensor subclass, a
JIT trace, torch.compile's tracing, a functorch transform (vmap, grad,
jvp), forward-mode AD, a dispatch mode (FakeTensorMode, FlopCounterMode). The packed copies
are a second and a third copy of each packed layer's weight in memory.

Exactness: a packed product is not bitwise the plain one (oneDNN and the
C kernel sum in other orders than MKL's): float32 logits differ by ~1e-6 relative, far below the gap
between the top two tokens of the workloads the tests and benches compare,
whose tokens are equal to transformers' own.
"""

from __future__ import annotations

import functools
import os
import warnings
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils._python_dispatch import _get_current_dispatch_mode

from .._validation import check_choice
from ..kernels import cpu_linear

if TYPE_CHECKING:
    from .fused import FuseReport

ENV_VAR = "PAGEDKIT_PREPACK"
#: ``auto``: the measured rule; ``on``: every eligible layer, every call
#: (what the tests use on models too small for the rule); ``off``: plain nn.Linear.
CHOICES = ("auto", "on", "off")
#: ``auto`` with the C kernel: a model's layers are packed when its narrowest
#: packable linear layer has at least this many inputs. In the engine the tiny model
#: (256 wide) ran 1.14-1.35x faster with every layer packed; models 64 and 128
#: wide ran 0.80-0.96x, and a 128-wide one with only its 344-input down
#: projections packed 0.73-0.98x (docs/benchmarks.md, "The tiny model packed"),
#: so the rule is the model's, all layers or none.
MIN_IN_FEATURES = 256
#: ``auto`` without the C kernel (every packed call oneDNN's): a layer is packed
#: when it has at least this many inputs and weights, the rule measured for
#: oneDNN's product (docs/benchmarks.md, "Prepacked linear layers").
ONEDNN_MIN_IN_FEATURES = 512
ONEDNN_MIN_WEIGHT_ELEMENTS = 512 * 512
#: Fewest tokens (rows of the input) a call multiplies packed under ``auto``.
#: Every call: alone, with the weight in cache, oneDNN's fixed cost per call
#: made 1-3 tokens slower packed (``bench linears``), but in a decode step a
#: weight comes from memory, and packing from 4 tokens instead (both fusion
#: groups fused either way) ran the larger bench model 7-25% slower
#: (docs/benchmarks.md, "Fused and packed from one row").
MIN_ROWS = 1


def prepack_unavailable() -> str | None:
    """Why this torch cannot run prepacked linear layers, or None if it can."""
    if not torch.backends.mkldnn.is_available():
        return "this torch was built without oneDNN (torch.backends.mkldnn.is_available() is False)"
    if not torch.backends.mkldnn.enabled:
        return "oneDNN is switched off (torch.backends.mkldnn.enabled is False)"
    return _probe()


@functools.cache
def _probe() -> str | None:
    """One small packed product against ``F.linear``, once per process: a torch
    whose oneDNN cannot run it here (an ISA or platform it lacks) says so now,
    not in the middle of a step."""
    try:
        make = {"dtype": torch.float32, "device": "cpu",
                "generator": torch.Generator().manual_seed(0)}  # whatever torch's defaults
        weight, x = torch.randn(8, 16, **make), torch.randn(4, 16, **make)
        with torch.inference_mode():  # oneDNN's product alone (the C kernel checks its own)
            packed = torch.ops.mkldnn._reorder_linear_weight(weight, None)
            ok = torch.allclose(onednn_linear(x, packed, None), F.linear(x, weight),
                                rtol=1e-4, atol=1e-5)
    except (RuntimeError, AttributeError, NotImplementedError) as err:
        return f"oneDNN's prepacked linear fails here ({type(err).__name__}: {err})"[:300]
    return None if ok else "oneDNN's prepacked linear gave another product than F.linear here"


def switch(name: str, section: str) -> str:
    """The environment's ``auto|on|off`` switch `name` (default ``auto``), or
    a ValueError naming the choices and docs/api.md's `section`."""
    mode = os.environ.get(name, "auto").strip().lower() or "auto"
    if mode not in CHOICES:
        raise ValueError(f"{name}={os.environ[name]!r} is not one of {', '.join(CHOICES)} "
                         f"(docs/api.md, '{section}')")
    return mode


def prepack_mode() -> str:
    """``PAGEDKIT_PREPACK`` (default ``auto``), or a ValueError naming the choices;
    ``PAGEDKIT_FUSE`` is checked along with it (the engine calls this before it
    loads the model; `prepack_linears` reads that one)."""
    from .fused import fuse_mode

    fuse_mode()
    return switch(ENV_VAR, "Prepacked linear layers")


@dataclass(frozen=True, eq=False)
class PackedWeight:
    """A weight packed once, at load, for both products `packed_linear` runs:
    oneDNN's blocked layout, and the C kernel's panels for calls of up to
    ``cpu_linear.MAX_ROWS`` rows (None where the C kernel cannot be built)."""

    onednn: torch.Tensor
    panels: torch.Tensor | None
    out_features: int


def packed_linear(x: torch.Tensor, packed: PackedWeight, bias: torch.Tensor | None
                  ) -> torch.Tensor:
    """``F.linear(x, weight, bias)`` against the weight packed by `pack_weight`:
    a call of a few rows in C (`pagedkit.kernels.cpu_linear`: it reads the
    weight once, 1.4-2.1x faster than oneDNN at 1-2 rows), more rows with
    oneDNN; its own name, so `bench --profile` can time it."""
    if (packed.panels is not None and x.shape[-1:] == packed.panels.shape[1:2]
            and x.numel() <= cpu_linear.MAX_ROWS * x.shape[-1]):
        return cpu_linear.linear(x, packed.panels, packed.out_features, bias)
    return onednn_linear(x, packed.onednn, bias)


def onednn_linear(x: torch.Tensor, onednn: torch.Tensor, bias: torch.Tensor | None
                  ) -> torch.Tensor:
    """oneDNN's product against a weight in its blocked layout (`pack_weight`)."""
    return torch.ops.mkldnn._linear_pointwise(x, onednn, bias, "none", [], "")


def pack_weight(weight: torch.Tensor) -> PackedWeight:
    """The weight reordered, once, into oneDNN's blocked layout (no batch-size
    hint: the layout then serves every token count) and into the C kernel's
    panels (another copy, where the kernel can be built)."""
    with torch.no_grad():
        onednn = torch.ops.mkldnn._reorder_linear_weight(weight.detach(), None)
    panels = None if cpu_linear.unavailable() else cpu_linear.pack(weight)
    return PackedWeight(onednn, panels, weight.shape[0])


def cannot_pack(weight: torch.Tensor, bias: torch.Tensor | None) -> str | None:
    """Why this weight cannot be packed as it is now, or None."""
    if weight.device.type != "cpu":
        return f"its weight is on {weight.device}, not the CPU"
    if weight.dtype != torch.float32:
        return f"its weight is {weight.dtype}, not torch.float32"
    if bias is not None and bias.dtype != torch.float32:
        return f"its bias is {bias.dtype}, not torch.float32"
    if type(weight.data) is not torch.Tensor or weight.layout != torch.strided:
        return f"its weight is a {type(weight.data).__name__} ({weight.layout}), not a plain tensor"
    if weight.is_inference():
        return ("its weight is an inference tensor (made under torch.inference_mode), which "
                "keeps no version counter: an in-place write to it would go unseen")
    return None


def _weight_key(weight: torch.Tensor) -> tuple:
    """Changes whenever the weight's values may have: a new tensor or an in-place write
    (an inference tensor keeps no counter: `cannot_pack` refuses it). A new tensor
    can only take the packed one's address once that is freed: whoever keeps
    this key also keeps the packed-from tensor (``_packed_from``), so it is not."""
    return (weight.data_ptr(), tuple(weight.shape), weight.stride(),  # a new view of it too
            -1 if weight.is_inference() else weight._version)


class PackedLinear(nn.Linear):
    """An ``nn.Linear`` whose products run against prepacked copies of its
    weight (`PackedWeight`: C up to 8 rows, oneDNN above) when they pay
    (`min_rows` tokens or more) and can (float32 on the CPU, no autograd, no
    autocast); ``F.linear`` otherwise."""

    def __init__(self, linear: nn.Linear, min_rows: int) -> None:
        nn.Module.__init__(self)  # not nn.Linear's: it would allocate a new weight
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.weight = linear.weight  # the same Parameters: state dict and tied weights hold
        self.register_parameter("bias", linear.bias)
        self.min_rows = min_rows
        self.training = linear.training  # an eval() model stays in eval mode
        self._packed: PackedWeight | None = None
        self._packed_key: tuple | None = None  # the weight `_packed` was built from
        self._packed_from: object = None  # ... held, so no new weight can take its address
        #: why the weight is not packed now (None once it is, or before `repack`)
        self.unpacked_reason: str | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.plain_call(x):
            return F.linear(x, self.weight, self.bias)
        if self._packed_key != _weight_key(self.weight):
            self.repack()
        if self._packed is None:
            return F.linear(x, self.weight, self.bias)
        return packed_linear(x, self._packed, self.bias)

    def plain_call(self, x: torch.Tensor) -> bool:
        """Whether this call must run ``F.linear``: anything but a plain strided
        tensor (a fake, functional, nested or traced tensor, a tensor subclass,
        a sparse one), a JIT trace, torch.compile's tracing, a torch dispatch
        mode (FakeTensorMode, FlopCounterMode: they must see the product), a
        functorch transform (vmap, grad, jvp) or forward-mode AD, another dtype or device,
        another width than the weight's (F.linear's error names the shapes),
        fewer than `min_rows` tokens, autograd (the input, weight or bias) or
        autocast."""
        return (type(x) is not torch.Tensor or x.layout != torch.strided or x.is_nested
                or torch.jit.is_tracing() or torch.compiler.is_compiling()
                or _get_current_dispatch_mode() is not None
                or torch._C._functorch.maybe_current_level() is not None  # vmap, grad, jvp
                or torch.autograd.forward_ad._current_level >= 0  # dual tensors
                or x.dtype != torch.float32 or not x.is_cpu
                or x.shape[-1:] != self.weight.shape[1:]
                or x.numel() < self.min_rows * self.in_features
                or (torch.is_grad_enabled() and (x.requires_grad or self.weight.requires_grad
                                                 or (self.bias is not None
                                                     and self.bias.requires_grad)))
                or torch.is_autocast_enabled("cpu"))

    def repack(self) -> None:
        """Pack the weight as it is now, or note why it cannot be."""
        self.unpacked_reason = cannot_pack(self.weight, self.bias)
        self._packed = pack_weight(self.weight) if self.unpacked_reason is None else None
        self._packed_key, self._packed_from = _weight_key(self.weight), self.weight.detach()

    def _apply(self, fn, recurse=True):  # .to(), .float(), .cuda(), ...: pack again when used
        out = super()._apply(fn, recurse)
        self._packed, self._packed_key, self._packed_from = None, None, None
        return out

    def __getstate__(self):  # an opaque oneDNN tensor cannot be copied or pickled
        state = super().__getstate__()
        state.update(_packed=None, _packed_key=None, _packed_from=None)
        return state

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, prepacked {rows_phrase(self.min_rows)}"


def rows_phrase(min_rows: int) -> str:
    """When a packed product is used: ``in every call``, or from how many rows."""
    return "in every call" if min_rows <= 1 else f"from {min_rows} rows"


@dataclass
class PrepackReport:
    """What `prepack_linears` did to a model, and why."""

    mode: str
    replaced: list[str] = field(default_factory=list)  # names of the PackedLinear modules
    skipped: dict[str, str] = field(default_factory=dict)  # linear layer -> why not
    reason: str = ""  # why nothing was replaced, when nothing was
    #: what `fused.fuse_projections` did (None when nothing was packed)
    fusion: FuseReport | None = None

    def __str__(self) -> str:
        if self.reason:
            return f"prepacked linear layers: none ({self.reason})"
        why = sorted(set(self.skipped.values()))
        fused = self.fusion.fused if self.fusion else []
        return (f"prepacked linear layers ({ENV_VAR}={self.mode}): {len(self.replaced)} of "
                f"{len(self.replaced) + len(self.skipped)}"
                + (f", {len(fused)} groups fused ({self.fusion.mode})" if fused else "")
                + (f"; the others: {'; '.join(why)}" if why else ""))


def why_not(module: nn.Module, mode: str, narrowest: int | None = None) -> str | None:
    """Why this linear layer stays a plain ``nn.Linear`` under `mode`, or None
    (`narrowest`: the inputs of its model's narrowest packable layer, `below_rule`)."""
    if type(module) is not nn.Linear:  # a subclass (quantized, LoRA, ...) has its own forward
        return f"a {type(module).__name__}, not a plain nn.Linear"
    if module._forward_hooks or module._forward_pre_hooks or module._backward_hooks:
        return "it has hooks"
    why = cannot_pack(module.weight, module.bias)
    if why:
        return why
    if mode != "auto":
        return None
    return below_rule(module.in_features, module.out_features, narrowest)


#: Where `below_rule`'s two rules come from, as its reasons say.
RULE = "(auto's rule: docs/benchmarks.md, 'The tiny model packed')"
ONEDNN_RULE = "(auto's rule for oneDNN alone: docs/benchmarks.md, 'Prepacked linear layers')"


def below_rule(in_features: int, out_features: int, narrowest: int | None = None) -> str | None:
    """Why ``auto`` leaves a layer of this shape unpacked, or None. With the C
    kernel the rule is the model's (`narrow_model`: `narrowest`, the inputs of
    its narrowest packable layer; a layer alone, without it, by its own).
    Without the C kernel, oneDNN's rule, per layer."""
    missing = cpu_linear.unavailable()
    if missing is None:
        if narrowest is not None:
            return narrow_model(narrowest)
        if in_features < MIN_IN_FEATURES:
            return f"layers under {MIN_IN_FEATURES} inputs wide stay unpacked {RULE}"
        return None
    if in_features < ONEDNN_MIN_IN_FEATURES:
        return (f"without the C kernel ({missing}), layers under {ONEDNN_MIN_IN_FEATURES} "
                f"inputs wide stay unpacked {ONEDNN_RULE}")
    if in_features * out_features < ONEDNN_MIN_WEIGHT_ELEMENTS:
        return (f"without the C kernel ({missing}), weights under "
                f"{ONEDNN_MIN_WEIGHT_ELEMENTS:,} elements stay unpacked {ONEDNN_RULE}")
    return None


def narrow_model(narrowest: int | None) -> str | None:
    """Why ``auto`` packs none of a model's layers, with the C kernel: its
    narrowest packable linear layer has `narrowest` inputs, under
    ``MIN_IN_FEATURES``; None when it packs them (or has none, or no C kernel)."""
    if narrowest is None or narrowest >= MIN_IN_FEATURES or cpu_linear.unavailable():
        return None
    return (f"the model's narrowest packable linear layer has {narrowest} inputs: a model's "
            f"layers are packed when all have at least {MIN_IN_FEATURES} {RULE}")


def prepack_linears(model: nn.Module, device: torch.device | None = None,
                    mode: str | None = None, fuse: str | None = None) -> PrepackReport:
    """Replace each eligible ``nn.Linear`` of `model` by a `PackedLinear`, in
    place, as `mode` says (``auto|on|off``; None reads ``PAGEDKIT_PREPACK``;
    layers an earlier call replaced are decided afresh, so ``off`` leaves
    none), first fusing sibling projections as `fuse` says (`pagedkit.model.fused`;
    None reads ``PAGEDKIT_FUSE``); returns what was done, also kept as
    ``model.pagedkit_prepack``. A
    model served on another `device` than the CPU keeps plain layers (the
    packed product runs on the CPU only). Never raises for a model it cannot
    speed up: the report says why (and warns, when ``on`` was asked for)."""
    from .fused import fuse_mode, fuse_projections

    report = PrepackReport(prepack_mode() if mode is None else
                           check_choice("mode", mode, CHOICES))
    fuse = fuse_mode() if fuse is None else check_choice("fuse", fuse, CHOICES)
    unpack_linears(model)
    report.reason = ("switched off" if report.mode == "off" else
                     f"served on {device.type}, not the CPU" if device and device.type != "cpu"
                     else prepack_unavailable() or "")
    if report.reason and report.mode == "on":
        warnings.warn(f"{ENV_VAR}=on: {report.reason}; the linear layers run unpacked",
                      stacklevel=2)
    if not report.reason:
        min_rows = MIN_ROWS  # every call (1): the rule's per-call half, kept to be tried
        narrowest = min((m.in_features for m in model.modules() if isinstance(m, nn.Linear)
                         and why_not(m, "on") is None), default=None)
        report.fusion = fuse_projections(  # under auto a model left plain fuses nothing
            model, fuse, min_rows, narrow_model(narrowest) if report.mode == "auto" else None)
        for name, module in list(model.named_modules()):
            if isinstance(module, PackedLinear):  # a member of a fused group
                report.replaced.append(name)
            elif isinstance(module, nn.Linear):
                why = why_not(module, report.mode, narrowest)
                if why:
                    report.skipped[name] = why
                else:
                    packed = PackedLinear(module, min_rows)
                    packed.repack()  # now, at load: not in the first step's time
                    model.set_submodule(name, packed)
                    report.replaced.append(name)
    model.pagedkit_prepack = report
    return report


def unpack_linears(model: nn.Module) -> None:
    """Put a plain ``nn.Linear`` (the same Parameters) back for each `PackedLinear`."""
    for name, module in list(model.named_modules()):
        if isinstance(module, PackedLinear):
            plain = nn.Linear(module.in_features, module.out_features,
                              bias=module.bias is not None, device="meta")
            plain.weight, plain.bias = module.weight, module.bias
            plain.training = module.training
            model.set_submodule(name, plain)
