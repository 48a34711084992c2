"""Fused projections (pagedkit.model.fused): which groups fuse, the switch, the
fallbacks, every member's product whatever the order of the calls, and every
served architecture's tokens fused against transformers' `generate`."""

from __future__ import annotations

import copy
import itertools
import json
import pickle
import warnings
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from tiny_configs import tiny_model
from torch import nn

from pagedkit import LLM
from pagedkit.kernels.cpu_linear import MAX_ROWS
from pagedkit.model import accel, fused
from pagedkit.model.accel import PackedLinear, prepack_linears
from pagedkit.model.fused import (
    FusedLinear,
    FusedProduct,
    below_rule,
    fuse_projections,
    why_not_fuse,
)

pytestmark = pytest.mark.skipif(accel.prepack_unavailable() is not None,
                                reason=f"no prepacked linears here: {accel.prepack_unavailable()}")

ROOT = Path(__file__).resolve().parents[2]
SERVED = sorted(k for k, v in json.loads((ROOT / "docs" / "architectures.json").read_text())
                ["results"].items() if v["status"] == "served")


@pytest.fixture
def switches(env_switch):
    """Set ``PAGEDKIT_PREPACK`` and ``PAGEDKIT_FUSE`` (None: the default, auto)."""
    prepack, fuse = env_switch(accel.ENV_VAR), env_switch(fused.ENV_VAR)

    def set_both(pack: str | None, fuse_mode: str | None) -> None:
        prepack(pack)
        fuse(fuse_mode)
    return set_both


def wide_llama(width: int = 512, layers: int = 1):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=256, hidden_size=width, intermediate_size=width,
                         num_hidden_layers=layers, num_attention_heads=8, num_key_value_heads=2,
                         max_position_embeddings=256, tie_word_embeddings=False)
    return LlamaForCausalLM(config).eval()


def fused_names(model: nn.Module) -> list[str]:
    return [n for n, m in model.named_modules() if isinstance(m, FusedLinear)]


def group(sizes=(24, 8, 8), width=32, bias=False, min_rows=1):
    """Sibling linear layers fused as `fuse_projections` fuses them: q/k/v, or
    gate/up for two sizes."""
    torch.manual_seed(0)
    parent = nn.Module()
    names = ("q_proj", "k_proj", "v_proj") if len(sizes) == 3 else ("gate_proj", "up_proj")
    for name, size in zip(names, sizes, strict=True):
        setattr(parent, name, nn.Linear(width, size, bias=bias))
    report = fuse_projections(parent, "on", min_rows)
    assert report.fused == ["{" + ",".join(names) + "}"], report
    return parent, [getattr(parent, n) for n in names]


# ---------------------------------------------------------------- which groups fuse
def test_auto_fuses_the_groups_its_rule_names(switches):
    """``auto`` fuses a group whose concatenated weight passes `fused.below_rule`
    (docs/benchmarks.md, "Fused and packed from one row"); the tiny model,
    256 wide, keeps its separate layers (each packed), and each group says why."""
    switches(None, None)
    model = wide_llama(layers=2)
    report = prepack_linears(model)
    assert report.fusion.mode == "auto" and report.fusion.skipped == {}
    assert report.fusion.fused == [f"model.layers.{i}.{group}" for i in range(2) for group in
                                   ("self_attn.{q_proj,k_proj,v_proj}", "mlp.{gate_proj,up_proj}")]
    assert "4 groups fused (auto)" in str(report)
    tiny = LLM("tiny", num_blocks=8).llm_engine.runner.model
    report = prepack_linears(tiny)
    assert report.fusion.fused == [] and fused_names(tiny) == [] and "fused" not in str(report)
    assert set(report.fusion.skipped.values()) == {below_rule(256, 512)}  # too narrow, packed
    assert len(report.replaced) == 29
    assert len(report.fusion.skipped) == 2 * tiny.config.num_hidden_layers


def test_on_fuses_q_k_v_and_gate_up_and_keeps_the_model_as_transformers_built_it(switches):
    switches(None, "on")
    model = wide_llama(layers=2)
    params = dict(model.named_parameters())
    state = model.state_dict().keys()
    report = prepack_linears(model)
    assert report.fusion.fused == [f"model.layers.{i}.{group}" for i in range(2) for group in
                                   ("self_attn.{q_proj,k_proj,v_proj}", "mlp.{gate_proj,up_proj}")]
    assert fused_names(model) == [f"model.layers.{i}.{name}" for i in range(2) for name in
                                  ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                                   "mlp.gate_proj", "mlp.up_proj")]
    assert set(fused_names(model)) <= set(report.replaced)  # k and v too: fused, not skipped
    assert "4 groups fused (on)" in str(report)
    assert all(type(m.mlp.down_proj) is PackedLinear for m in model.model.layers)  # no group
    # the module tree, the Parameters and the state dict are transformers' own
    assert dict(model.named_parameters()).keys() == params.keys()
    assert all(p is params[n] for n, p in model.named_parameters())
    assert model.state_dict().keys() == state
    assert {m.min_rows for m in model.modules() if isinstance(m, FusedLinear)} == {accel.MIN_ROWS}


@pytest.mark.parametrize("pack, fuse", itertools.product(("auto", "on", "off"), repeat=2))
def test_each_pair_of_switches(pack, fuse, switches):
    """At 64 wide only ``PAGEDKIT_FUSE=on`` fuses (``auto`` keeps the shape rule),
    and only where layers are packed (fusion is part of packing:
    ``PAGEDKIT_PREPACK=off`` leaves every layer plain); the fused product is
    used from the packing's row rule."""
    switches(pack, fuse)
    model = wide_llama(64)
    report = prepack_linears(model)
    fuses = pack != "off" and fuse == "on"
    assert len(fused_names(model)) == (5 if fuses else 0)
    assert len(report.fusion.fused if report.fusion else []) == (2 if fuses else 0)
    assert {m.min_rows for m in model.modules() if isinstance(m, FusedLinear)} <= {
        accel.MIN_ROWS if pack == "auto" else 1}


def test_off_after_on_leaves_every_linear_plain(switches):
    model = wide_llama(64)
    switches("on", "on")
    prepack_linears(model)
    assert fused_names(model)
    switches("on", "off")
    prepack_linears(model)
    assert fused_names(model) == []
    switches("off", "on")
    prepack_linears(model)
    assert all(type(m) is nn.Linear for m in model.modules() if isinstance(m, nn.Linear))


def test_a_bad_fuse_value_is_an_error_naming_it_before_the_model_changes(switches):
    switches(None, "fast")
    model = wide_llama(64)
    with pytest.raises(ValueError, match=r"PAGEDKIT_FUSE='fast'.*auto, on, off"):
        LLM(model, num_blocks=8)
    assert not any(isinstance(m, PackedLinear) for m in model.modules())
    switches(None, None)
    with pytest.raises(ValueError, match=r"fuse must be one of 'auto', 'on', 'off'; got 'x'"):
        prepack_linears(model, fuse="x")


class Lora(nn.Linear):
    pass


def hooked(layer: nn.Linear) -> nn.Linear:
    layer.register_forward_pre_hook(lambda *a: None)
    return layer


def inference_made(width: int, out: int) -> nn.Linear:
    with torch.inference_mode():
        return nn.Linear(width, out)


def biased(layer: nn.Linear, dtype) -> nn.Linear:
    layer.bias = nn.Parameter(layer.bias.detach().to(dtype))
    return layer


#: one member of q/k/v (k_proj) made unfit, each way a layer can be; the reason named
UNFIT = {
    "a subclass (LoRA, quantized)": (lambda: Lora(64, 16), "k_proj: a Lora"),
    "not a linear layer": (lambda: nn.Identity(), "not an nn.Linear (Identity)"),
    "hooks": (lambda: hooked(nn.Linear(64, 16)), "k_proj: it has hooks"),
    "bfloat16": (lambda: nn.Linear(64, 16, dtype=torch.bfloat16), "bfloat16"),
    "float16": (lambda: nn.Linear(64, 16, dtype=torch.float16), "float16"),
    "meta device": (lambda: nn.Linear(64, 16, device="meta"), "meta"),
    "an inference-tensor weight": (lambda: inference_made(64, 16), "inference tensor"),
    "another input width": (lambda: nn.Linear(48, 16), "inputs differ in width"),
    "a bias where the others have none": (lambda: nn.Linear(64, 16), "some have a bias"),
    "a bias of another dtype": (lambda: biased(nn.Linear(64, 16), torch.float64),
                                "its bias is torch.float64"),
}


@pytest.mark.parametrize("case", sorted(UNFIT))
def test_a_group_with_an_unfit_member_stays_separate_and_says_why(case):
    make, reason = UNFIT[case]
    layers = [nn.Linear(64, 32, bias=False), make(), nn.Linear(64, 16, bias=False)]
    if case == "a bias of another dtype":
        layers[0], layers[2] = nn.Linear(64, 32), nn.Linear(64, 16)
    if case == "a bias where the others have none":
        layers[1] = nn.Linear(64, 16, bias=True)
    names = ("q_proj", "k_proj", "v_proj")
    assert reason in why_not_fuse(layers, names, "on")
    parent = nn.Module()
    for name, layer in zip(names, layers, strict=True):
        setattr(parent, name, layer)
    report = fuse_projections(parent, "on", 1)
    assert report.fused == [] and reason in report.skipped["{q_proj,k_proj,v_proj}"]
    assert not any(isinstance(m, FusedLinear) for m in parent.modules())


def test_auto_and_on_by_group():
    wide = [nn.Linear(512, 512), nn.Linear(512, 128), nn.Linear(512, 128)]
    qkv = ("q_proj", "k_proj", "v_proj")
    assert why_not_fuse(wide, qkv, "auto") is None
    assert why_not_fuse(wide, qkv, "on") is None
    narrow = [nn.Linear(256, 256), nn.Linear(256, 64), nn.Linear(256, 64)]
    assert why_not_fuse(narrow, qkv, "auto") == below_rule(256, 384)
    assert why_not_fuse([nn.Linear(8, 8)] * 3, qkv, "on") is None  # any width
    # the rule reads the group's weight: 512 x 256 alone is below it, three of them are not
    small = [nn.Linear(512, 256)] * 3
    assert below_rule(512, 256) and why_not_fuse(small, qkv, "auto") is None
    assert below_rule(511, 4096) == ("groups under 512 inputs wide stay separate (auto's rule: "
                                     "docs/benchmarks.md, 'Fused and packed from one row')")
    assert below_rule(512, 511) and below_rule(512, 512) is None
    pair = [nn.Linear(512, 128)] * 2
    assert why_not_fuse(pair, ("gate_proj", "up_proj"), "auto") == below_rule(512, 256)
    parent = nn.Module()
    parent.gate_proj, parent.up_proj = nn.Linear(64, 96), nn.Linear(64, 96)
    assert fuse_projections(parent, "on", 1).fused == ["{gate_proj,up_proj}"]


# ---------------------------------------------------------------- the products
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("sizes", [(24, 8, 8), (40, 40)], ids=["q/k/v", "gate/up"])
def test_every_member_gets_its_own_product_in_any_order_of_calls(bias, sizes):
    """Every order of the calls, each with the same tensor, a copy of it, or a
    call repeated: each member's output is x @ its weight.T (+ its bias)."""
    _parent, members = group(sizes, bias=bias)
    x = torch.randn(2, 5, 32)
    want = [F.linear(x, m.weight, m.bias) for m in members]
    every = range(len(members))
    with torch.inference_mode():
        for order in itertools.permutations(every):
            for calls in (order, order + order, (order[0], *order), order[:2]):
                for i, index in enumerate(calls):
                    other = x.clone() if i == 1 else x  # another tensor, equal values
                    torch.testing.assert_close(members[index](other), want[index],
                                               rtol=1e-5, atol=1e-5)
        y = torch.randn(2, 5, 32)  # new values in between: never a stale slice
        for index in every:
            torch.testing.assert_close(members[index](y), F.linear(y, members[index].weight,
                                       members[index].bias), rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(members[index](x), want[index], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("sizes", [(24, 8, 8), (40, 40)], ids=["q/k/v", "gate/up"])
def test_an_input_written_in_place_between_the_calls_is_multiplied_afresh(sizes):
    """`gate(x); x.mul_(2); up(x)` gave up a slice of the product of the old x
    (the same tensor object): outside inference mode x's version counter shows
    the write, and the next member multiplies again."""
    _parent, members = group(sizes)
    x = torch.randn(3, 32)
    with torch.no_grad():
        members[0](x)
        x.mul_(2)
        for member in members[1:]:
            torch.testing.assert_close(member(x), F.linear(x, member.weight), rtol=1e-5,
                                       atol=1e-5)


def test_the_product_is_computed_once_for_the_three_and_then_dropped(monkeypatch):
    _parent, (q, k, v) = group()
    calls = []
    real = accel.packed_linear
    monkeypatch.setattr(accel, "packed_linear", lambda *a: calls.append(1) or real(*a))
    x = torch.randn(7, 32)
    with torch.inference_mode():
        q(x), k(x), v(x)
        assert len(calls) == 1 and q.product._x is None  # nothing kept after the last
        q(x), k(x.clone()), v(x)
    assert len(calls) == 1 + 3  # k's other tensor: a product of its own, then v's own too


def test_below_min_rows_each_member_runs_its_own_plain_product():
    _parent, members = group(min_rows=4)
    x = torch.randn(1, 3, 32)
    with torch.inference_mode():
        for m in members:
            assert torch.equal(m(x), F.linear(x, m.weight, m.bias))  # bit for bit


def test_autograd_and_autocast_take_the_plain_product():
    _parent, members = group()
    x = torch.randn(4, 32, requires_grad=True)
    sum(m(x).sum() for m in members).backward()
    assert x.grad is not None and all(m.weight.grad is not None for m in members)
    with torch.autocast("cpu", dtype=torch.bfloat16), torch.no_grad():
        assert all(m(x).dtype == torch.bfloat16 for m in members)


@pytest.mark.parametrize("rows", [1, MAX_ROWS + 1])  # the C kernel's copy, and oneDNN's
def test_a_changed_weight_of_any_member_is_packed_again(rows):
    _parent, (q, k, v) = group(bias=True)
    x = torch.randn(rows, 32)
    with torch.no_grad():
        q(x), k(x), v(x)
        k.weight.mul_(2)  # in place
        v.bias.add_(1)
        for m in (q, k, v):
            torch.testing.assert_close(m(x), F.linear(x, m.weight, m.bias), rtol=1e-5, atol=1e-5)
        v.weight = nn.Parameter(torch.randn(8, 32))  # a new tensor
        for m in (q, k, v):
            torch.testing.assert_close(m(x), F.linear(x, m.weight, m.bias), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("rows", [1, MAX_ROWS + 1])
@pytest.mark.parametrize("which", ["weight", "bias"])
def test_a_member_replaced_twice_between_calls_is_never_taken_for_the_packed_one(rows, which):
    """Review of newcomer 51's fix: a member's weight or bias replaced twice could
    take the freed address (and key) of the packed one (54 of 120 tries on a
    q/k/v group); each member keeps its packed-from tensors."""
    _parent, (q, k, v) = group(bias=True)
    x = torch.randn(rows, 32)
    shape = tuple(getattr(v, which).shape)
    with torch.no_grad():
        for _ in range(30):
            setattr(v, which, nn.Parameter(torch.randn(shape)))
            q(x), k(x), v(x)
            setattr(v, which, nn.Parameter(torch.zeros(shape)))
            setattr(v, which, nn.Parameter(torch.full(shape, 0.01)))
            for m in (q, k, v):
                torch.testing.assert_close(m(x), F.linear(x, m.weight, m.bias))


@pytest.mark.parametrize("rows", [1, MAX_ROWS + 1])
def test_a_round_trip_through_another_dtype_is_never_stale(rows):
    parent, members = group()
    x = torch.randn(rows, 32)
    with torch.no_grad():
        [m(x) for m in members]
        parent.to(torch.bfloat16)
        assert members[0](x.bfloat16()).dtype == torch.bfloat16  # plain: packs nothing
        members[0].repack()
        assert all("bfloat16" in m.unpacked_reason for m in members)
        parent.float()
        for m in members:
            torch.testing.assert_close(m(x), F.linear(x, m.weight, m.bias), rtol=1e-5, atol=1e-5)
        assert all(m.unpacked_reason is None for m in members)


def test_a_fused_model_copies_and_pickles(switches):
    switches("on", "on")
    model = wide_llama(64)
    prepack_linears(model)
    ids = torch.tensor([[5, 6, 7, 8, 9]])
    with torch.inference_mode():
        want = model(ids).logits
        for other in (copy.deepcopy(model), pickle.loads(pickle.dumps(model))):
            attn = other.model.layers[0].self_attn
            assert attn.q_proj.product is attn.v_proj.product  # still one group
            assert attn.q_proj.product.members[1] is attn.k_proj  # of the copy's layers
            assert torch.equal(other(ids).logits, want)


def test_the_product_class_shares_members_by_group():
    _parent, members = group()
    assert isinstance(members[0].product, FusedProduct)
    assert {id(m.product) for m in members} == {id(members[0].product)}
    assert "fused with q_proj, k_proj, v_proj" in repr(members[2])


# ---------------------------------------------------------------- every architecture
@pytest.mark.parametrize("model_type", SERVED)
def test_every_served_architecture_gives_generates_tokens_fused(model_type, switches):
    """tests/model/test_architectures.py's three settings with every linear packed
    and every q/k/v and gate/up group fused: transformers'
    greedy tokens; without fusion the same settings run in test_accel.py and
    test_architectures.py."""
    from test_architectures import check_architecture

    switches("on", "on")
    groups = prepack_linears(tiny_model(model_type)).fusion
    if not groups.fused:
        pytest.skip(f"no group to fuse ({groups.skipped or 'no q/k/v or gate/up siblings'})")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = check_architecture(model_type)
    assert result["status"] == "served", (groups.fused, result)
