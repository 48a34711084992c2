"""Fused projections on CPU: q, k and v as one prepacked product, gate and up as another.

Outside the textbook path, like `pagedkit.model.accel` (whose
`prepack_linears` calls `fuse_projections` first): transformers' attention
still calls ``self.q_proj(x)``, ``self.k_proj(x)``, ``self.v_proj(x)`` one
by one (and its MLP ``self.gate_proj(x)``, ``self.up_proj(x)``), and the
module tree, the state dict and each projection's Parameters stay as
transformers built them. ``PAGEDKIT_FUSE=auto|on|off``.

Why: vLLM multiplies q, k and v by one concatenated weight, and gate and up
by another. In a decode step each weight of a model larger than the CPU's
caches comes from memory, and one product over a concatenated weight
streams it faster than two or three small ones do: on the larger bench
model (512 wide, 8 layers, 97 MB of linear weights) the engine ran 5-13% faster on
one thread and 17-33% on two, with both groups fused and every call packed
(docs/benchmarks.md, "Fused and packed from one row"). ``auto`` fuses a
group whose concatenated weight is at least ``MIN_IN_FEATURES`` (512) inputs
wide and ``MIN_WEIGHT_ELEMENTS`` (512 x 512) large (`below_rule`): the
embedded tiny model (256 wide, every layer packed) ran level fused
(0.97-1.02x, docs/benchmarks.md, "The tiny model packed"), so it keeps its
separate layers.

How: the members of a group are `FusedLinear` layers (`accel.PackedLinear`'s
subclass: the same Parameters, no packed copy of their own) sharing one
`FusedProduct`, which holds the concatenated weight packed once, at load
(`accel.pack_weight`: for oneDNN and for the C kernel of a few rows).
The first member called with an input computes the whole product and keeps
it, with the input tensor itself; each other member called with *that same
tensor object* gets its slice (a view) without multiplying, and once every
member has had its slice the product is dropped. A member called with
another tensor, or a second time, computes the product afresh: every member
always returns ``x @ its weight.T`` (+ its bias), whatever the order of the
calls. Exact as a packed layer is (oneDNN's or the C kernel's order of
summation, ~1e-6 on float32 logits); tokens equal transformers' in every test.

An in-place write to the input between the member calls makes the next
member multiply afresh too (the tensor's version counter moved), except
for an inference tensor, which keeps none (the engine's steps run in
inference mode): no architecture transformers builds writes to the hidden
states between its projections, and ``tests/model/test_fused.py`` runs
every served architecture fused against `generate`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from . import accel
from .accel import PackedLinear, why_not

ENV_VAR = "PAGEDKIT_FUSE"
#: Fewest inputs, and fewest elements of the concatenated weight, of a group
#: fused under ``auto``: oneDNN's shape rule (512, 512 x 512), on the group's
#: weight; the larger bench model's groups (512 wide) ran 5-33% faster fused,
#: the tiny model's (256 wide) level.
MIN_IN_FEATURES = accel.ONEDNN_MIN_IN_FEATURES
MIN_WEIGHT_ELEMENTS = accel.ONEDNN_MIN_WEIGHT_ELEMENTS
#: Where `below_rule` comes from, as its reasons say.
RULE = "(auto's rule: docs/benchmarks.md, 'Fused and packed from one row')"
#: The groups looked for: sibling layers of one module, by transformers' names.
GROUPS = (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj"))


def fuse_mode() -> str:
    """``PAGEDKIT_FUSE`` (default ``auto``), or a ValueError naming the choices."""
    return accel.switch(ENV_VAR, "Fused projections")


class FusedProduct:
    """One prepacked product over the concatenated weights of a group's members,
    computed once per input and handed out in slices."""

    def __init__(self) -> None:
        self.members: list[FusedLinear] = []  # in the order of the concatenation
        self.packed: accel.PackedWeight | None = None
        self.bias: torch.Tensor | None = None
        self.forget()

    def repack(self) -> str | None:
        """Pack the members' weights as they are now; returns why they cannot be, or None.
        Each member keeps the key of its own weight and bias packed here
        (`FusedLinear.key`): a member's slice depends on those alone."""
        self.forget()
        why = next(filter(None, (accel.cannot_pack(m.weight, m.bias) for m in self.members)), None)
        self.packed = self.bias = None
        if why is None:
            with torch.no_grad():
                weight = torch.cat([m.weight.detach() for m in self.members])
                self.packed = accel.pack_weight(weight)
                if self.members[0].bias is not None:
                    self.bias = torch.cat([m.bias.detach() for m in self.members])
        for m in self.members:  # the group's packed weight is each member's
            m._packed, m._packed_key = self.packed, m.key()
            m._packed_from = tuple(t.detach() for t in (m.weight, m.bias) if t is not None)
        return why

    def slice(self, index: int, x: torch.Tensor) -> torch.Tensor:
        """Member `index`'s product with `x`: its slice of the product computed for
        this very tensor if it has not had it yet, else of a new one."""
        key = accel._weight_key(x)  # an in-place write to x since changes it (not in inference)
        if self._x is not x or self._x_key != key or index not in self._waiting:
            out = accel.packed_linear(x, self.packed, self.bias)
            self._x, self._x_key = x, key
            self._slices = out.split([m.out_features for m in self.members], dim=-1)
            self._waiting = set(range(len(self.members)))
        self._waiting.discard(index)
        out = self._slices[index]
        if not self._waiting:
            self.forget()
        return out

    def forget(self) -> None:
        """Drop the kept input and product."""
        self._x: torch.Tensor | None = None
        self._x_key: tuple | None = None
        self._slices: tuple[torch.Tensor, ...] = ()
        self._waiting: set[int] = set()

    def __getstate__(self):  # an opaque oneDNN tensor cannot be copied or pickled
        state = self.__dict__.copy()
        state.update(packed=None, bias=None, _x=None, _x_key=None, _slices=(), _waiting=set())
        return state


class FusedLinear(PackedLinear):
    """An ``nn.Linear`` of a fused group: its products are slices of the group's
    one packed product (`FusedProduct`) when they pay and can, ``F.linear`` on
    its own weight otherwise (the same rules as `PackedLinear`)."""

    def __init__(self, linear: nn.Linear, min_rows: int, product: FusedProduct,
                 index: int, names: tuple[str, ...]) -> None:
        super().__init__(linear, min_rows)
        self.product, self.index, self.names = product, index, names

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.plain_call(x):
            return F.linear(x, self.weight, self.bias)
        if self._packed_key != self.key():  # its own weight or bias changed: pack the group
            self.repack()
        if self._packed is None:
            return F.linear(x, self.weight, self.bias)
        return self.product.slice(self.index, x)

    def key(self) -> tuple:
        """Changes whenever this member's weight or bias may have."""
        return (accel._weight_key(self.weight),
                None if self.bias is None else accel._weight_key(self.bias))

    def repack(self) -> None:
        """Pack the group's weights as they are now, or note why they cannot be."""
        self.unpacked_reason = self.product.repack()
        for member in self.product.members:
            member.unpacked_reason = self.unpacked_reason

    def _apply(self, fn, recurse=True):  # .to(), ...: the group packs again when used
        out = super()._apply(fn, recurse)  # forgets this member's key: it packs again
        self.product.forget()
        return out

    def extra_repr(self) -> str:
        return (f"{nn.Linear.extra_repr(self)}, fused with {', '.join(self.names)} "
                f"(one packed product) {accel.rows_phrase(self.min_rows)}")


@dataclass
class FuseReport:
    """Which groups `fuse_projections` fused, and why the others were not."""

    mode: str
    fused: list[str] = field(default_factory=list)  # module.{q_proj,k_proj,v_proj}, ...
    skipped: dict[str, str] = field(default_factory=dict)  # group -> why not


def why_not_fuse(layers: list[nn.Module], names: tuple[str, ...], mode: str) -> str | None:
    """Why these sibling layers stay separate under `mode`, or None."""
    for name, layer in zip(names, layers, strict=True):
        if isinstance(layer, nn.Linear):
            why = why_not(layer, "on")
        else:
            why = f"not an nn.Linear ({type(layer).__name__})"
        if why:
            return f"{name}: {why}"
    if len({layer.in_features for layer in layers}) != 1:
        return "their inputs differ in width"
    if len({layer.bias is None for layer in layers}) != 1:
        return "some have a bias and some not"
    if mode == "auto":  # on the weight the group multiplies by
        return below_rule(layers[0].in_features, sum(x.out_features for x in layers))
    return None


def below_rule(in_features: int, out_features: int) -> str | None:
    """Why ``auto`` leaves a group whose concatenated weight has this shape
    separate, or None."""
    if in_features < MIN_IN_FEATURES:
        return f"groups under {MIN_IN_FEATURES} inputs wide stay separate {RULE}"
    if in_features * out_features < MIN_WEIGHT_ELEMENTS:
        return f"groups of under {MIN_WEIGHT_ELEMENTS:,} weights stay separate {RULE}"
    return None


def group_name(parent: str, names: tuple[str, ...]) -> str:
    return f"{parent + '.' if parent else ''}{{{','.join(names)}}}"


def fuse_projections(model: nn.Module, mode: str, min_rows: int,
                     unpacked: str | None = None) -> FuseReport:
    """Replace each group of sibling projections that `mode` fuses by
    `FusedLinear` members of one `FusedProduct`, packed now; returns what was
    done. `unpacked`: why ``PAGEDKIT_PREPACK=auto`` packs none of this model's
    layers, then ``auto`` fuses no group either (``on`` still fuses)."""
    report = FuseReport(mode)
    if mode == "off":
        return report
    for parent_name, parent in list(model.named_modules()):
        for names in GROUPS:
            if not all(isinstance(getattr(parent, n, None), nn.Module) for n in names):
                continue
            layers = [getattr(parent, n) for n in names]
            group = group_name(parent_name, names)
            why = (unpacked if mode == "auto" else None) or why_not_fuse(layers, names, mode)
            if why:
                report.skipped[group] = why
                continue
            product = FusedProduct()
            product.members = [FusedLinear(layer, min_rows, product, i, names)
                               for i, layer in enumerate(layers)]
            product.members[0].repack()  # now, at load: not in the first step's time
            for name, member in zip(names, product.members, strict=True):
                parent.set_submodule(name, member)
            report.fused.append(group)
    return report
