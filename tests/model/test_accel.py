"""Prepacked linear layers (pagedkit.model.accel): who gets them, the switch,
the fallbacks, and the engine's tokens unchanged with them.

The packed product is not bitwise the plain one (oneDNN and the C kernel of
a few rows sum in other orders; ~1e-6 on these logits), so engine runs are compared by tokens, on
workloads where the logit differences are far below the gap between each
step's top two tokens (asserted: the comparison is decisive, not luck).
"""

from __future__ import annotations

import copy
import pickle
import warnings

import pytest
import torch
import torch.nn.functional as F
from tiny_configs import tiny_model
from torch import nn

from pagedkit import LLM, SamplingParams
from pagedkit.kernels.cpu_linear import MAX_ROWS
from pagedkit.model import accel
from pagedkit.model.accel import (
    ENV_VAR,
    MIN_IN_FEATURES,
    MIN_ROWS,
    PackedLinear,
    prepack_linears,
    why_not,
)

pytestmark = pytest.mark.skipif(accel.prepack_unavailable() is not None,
                                reason=f"no prepacked linears here: {accel.prepack_unavailable()}")


def packed_names(model: nn.Module) -> list[str]:
    return [n for n, m in model.named_modules() if isinstance(m, PackedLinear)]


def wide_llama(width: int = 512, layers: int = 1, intermediate: int | None = None):
    """Wide enough that `auto` packs its larger weights (its MLP `intermediate`
    wide, `width` unless given)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=256, hidden_size=width,
                         intermediate_size=intermediate or width,
                         num_hidden_layers=layers, num_attention_heads=8, num_key_value_heads=2,
                         max_position_embeddings=256, tie_word_embeddings=False)
    return LlamaForCausalLM(config).eval()


@pytest.fixture
def mode(env_switch):
    return env_switch(ENV_VAR)


# ---------------------------------------------------------------- who is packed
def test_auto_packs_every_layer_of_the_tiny_model(mode):
    """256 wide: at the rule (docs/benchmarks.md, "The tiny model packed": 1.14-1.35x
    faster so), every one of its 29 linear layers, the output layer tied to the
    embedding too; its groups stay separate (tests/model/test_fused.py)."""
    mode(None)
    model = LLM("tiny", num_blocks=8).llm_engine.runner.model
    report = model.pagedkit_prepack
    assert len(report.replaced) == 29 and report.skipped == {} and not report.reason
    assert model.lm_head.weight is model.model.embed_tokens.weight  # still tied
    assert str(report) == "prepacked linear layers (PAGEDKIT_PREPACK=auto): 29 of 29"


@pytest.mark.parametrize("width", [64, 128, 240, 256, 272, 512])
def test_auto_packs_the_layers_at_least_256_inputs_wide_only(mode, width):
    mode(None)  # auto is the default
    model = wide_llama(width)
    report = prepack_linears(model, fuse="off")  # fused groups: tests/model/test_fused.py
    assert report.mode == "auto" and not report.reason and MIN_IN_FEATURES == 256
    linears = {n for n, m in model.named_modules() if isinstance(m, nn.Linear)}
    wide = {n for n in linears if model.get_submodule(n).in_features >= MIN_IN_FEATURES}
    assert set(packed_names(model)) == set(report.replaced) == wide
    assert set(report.skipped) == linears - wide
    assert (wide == linears) == (width >= 256)  # one width throughout
    assert set(report.skipped.values()) <= {accel.below_rule(width, width, width)}
    assert model.pagedkit_prepack is report
    if width < 256:
        assert (f"the model's narrowest packable linear layer has {width} inputs: a model's "
                "layers are packed when all have at least 256 (auto's rule:") in str(report)


def test_on_packs_every_plain_linear(mode):
    mode("on")
    model = wide_llama(64)
    linears = [n for n, m in model.named_modules() if isinstance(m, nn.Linear)]
    report = prepack_linears(model)
    assert packed_names(model) == linears == report.replaced and not report.skipped


def test_weights_are_packed_at_load_not_in_the_first_step(mode):
    """The packing is setup: done by `prepack_linears`, so the first request's
    time to first token does not pay for it (41 weights of the larger model)."""
    mode(None)
    model = wide_llama()
    prepack_linears(model)
    layers = [m for m in model.modules() if isinstance(m, PackedLinear)]
    assert layers and all(m._packed is not None and m.unpacked_reason is None for m in layers)
    before = [m._packed for m in layers]
    with torch.inference_mode():
        model(input_ids=torch.arange(8)[None], use_cache=False)
    assert all(m._packed is b for m, b in zip(layers, before, strict=True))  # not packed again


def test_why_not_names_each_reason():
    assert why_not(nn.Linear(256, 8), "auto") is None
    assert "256 inputs" in why_not(nn.Linear(255, 4096), "auto")
    assert why_not(nn.Linear(8, 8), "on") is None
    assert "bfloat16" in why_not(nn.Linear(8, 8, dtype=torch.bfloat16), "on")
    assert "meta" in why_not(nn.Linear(8, 8, device="meta"), "on")

    class Lora(nn.Linear):
        pass

    assert "Lora" in why_not(Lora(8, 8), "on")
    hooked = nn.Linear(8, 8)
    hooked.register_forward_hook(lambda *a: None)
    assert "hooks" in why_not(hooked, "on")


def test_the_packed_module_keeps_the_same_parameters_and_state_dict(mode):
    mode("on")
    model = tiny_model("llama")
    model.config.tie_word_embeddings = True
    model.tie_weights()
    params = dict(model.named_parameters())
    state = {k: v.clone() for k, v in model.state_dict().items()}
    prepack_linears(model)
    assert packed_names(model)
    assert dict(model.named_parameters()).keys() == params.keys()
    assert all(p is params[n] for n, p in model.named_parameters())
    assert model.lm_head.weight is model.get_input_embeddings().weight  # still tied
    assert state.keys() == model.state_dict().keys()
    assert all(torch.equal(state[k], v) for k, v in model.state_dict().items())


# ---------------------------------------------------------------- the switch
def test_off_leaves_every_linear_plain_even_after_on(mode):
    model = wide_llama(64)
    mode("on")
    prepack_linears(model)
    mode("off")
    report = prepack_linears(model)
    assert report.reason == "switched off" and not report.replaced
    assert packed_names(model) == []
    assert all(type(m) is nn.Linear for m in model.modules() if isinstance(m, nn.Linear))


def test_a_bad_switch_value_is_an_error_naming_it(mode):
    mode("fast")
    with pytest.raises(ValueError, match=r"PAGEDKIT_PREPACK='fast'.*auto, on, off"):
        LLM(wide_llama(64), num_blocks=8)


def test_the_engine_reads_each_switch_once_and_passes_it_on(monkeypatch):
    """LLMEngine checks both switches before it loads the model and hands the
    modes it read to prepack_linears and compile_forward (not a second read);
    PAGEDKIT_FUSE is checked with PAGEDKIT_PREPACK and read by prepack_linears."""
    from pagedkit.model import compiled

    reads, read = [], accel.switch

    def counting_switch(name, section):
        reads.append(name)
        return read(name, section)

    monkeypatch.setattr(accel, "switch", counting_switch)
    monkeypatch.setattr(compiled, "switch", counting_switch)
    LLM("tiny", num_blocks=8)
    assert sorted(reads) == ["PAGEDKIT_COMPILE", "PAGEDKIT_FUSE", "PAGEDKIT_FUSE",
                             "PAGEDKIT_PREPACK"]


def test_a_mode_given_overrides_the_switch_and_is_checked(mode):
    mode("on")
    model = wide_llama(64)
    assert prepack_linears(model, mode="off").reason == "switched off"
    assert packed_names(model) == []
    with pytest.raises(ValueError, match=r"mode must be one of 'auto', 'on', 'off'; got 'fast'"):
        prepack_linears(model, mode="fast")


def test_without_onednn_nothing_is_packed_and_the_reason_is_kept(mode, monkeypatch):
    monkeypatch.setattr(torch.backends.mkldnn, "is_available", lambda: False)
    mode(None)
    llm = LLM("tiny", num_blocks=16)
    report = llm.llm_engine.runner.model.pagedkit_prepack
    assert "without oneDNN" in report.reason and "without oneDNN" in str(report)
    assert packed_names(llm.llm_engine.runner.model) == []
    out = llm.generate([[5, 6, 7]], SamplingParams(temperature=0, max_tokens=3), use_tqdm=False)
    assert len(out[0].outputs[0].token_ids) == 3
    mode("on")  # asked for by name: said aloud too
    with pytest.warns(UserWarning, match="PAGEDKIT_PREPACK=on: this torch was built without"):
        prepack_linears(wide_llama(64))


def test_with_onednn_switched_off_nothing_is_packed(mode, monkeypatch):
    monkeypatch.setattr(torch.backends.mkldnn, "enabled", False)
    mode("on")
    with pytest.warns(UserWarning, match="switched off"):
        report = prepack_linears(wide_llama(64))
    assert "torch.backends.mkldnn.enabled is False" in report.reason


def test_a_onednn_that_fails_here_is_found_before_any_step(monkeypatch):
    def broken(*args):
        raise RuntimeError("no kernel for this ISA")

    monkeypatch.setattr(accel, "onednn_linear", broken)
    assert "no kernel for this ISA" in accel._probe.__wrapped__()  # uncached: run it again
    monkeypatch.setattr(accel, "onednn_linear", lambda x, packed, bias: x[:, :8] * 0)
    assert "another product" in accel._probe.__wrapped__()


def test_a_c_kernel_that_fails_here_leaves_onednn_packing(monkeypatch):
    """Review of this stop: the probe tied oneDNN to the C kernel. A C kernel
    that computes wrong does not switch oneDNN's packing off; one that cannot
    run (or fails its own check) only takes the few-rows path away."""
    from pagedkit.kernels import cpu_linear

    monkeypatch.setattr(cpu_linear, "linear", lambda x, *args: x[..., :1] * 0)  # wrong
    assert accel._probe.__wrapped__() is None
    monkeypatch.setattr(cpu_linear, "unavailable", lambda: "it gives another product")
    layer = PackedLinear(nn.Linear(32, 16), min_rows=1)
    layer.repack()
    assert layer._packed.panels is None and layer.unpacked_reason is None
    x = torch.randn(2, 32)
    with torch.no_grad():
        torch.testing.assert_close(layer(x), F.linear(x, layer.weight, layer.bias),
                                   rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------- one layer
def test_a_packed_layer_computes_the_plain_product():
    torch.manual_seed(0)
    plain = nn.Linear(96, 80)
    layer = PackedLinear(plain, min_rows=4)
    with torch.inference_mode():
        for rows in (1, 3, 4, 17):
            x = torch.randn(2, rows, 96)
            want = F.linear(x, plain.weight, plain.bias)
            got = layer(x)
            if rows * 2 < 4:  # below min_rows: F.linear itself, bit for bit
                assert torch.equal(got, want)
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert layer.unpacked_reason is None and layer._packed is not None


def test_autograd_and_autocast_take_the_plain_product():
    torch.manual_seed(0)
    layer = PackedLinear(nn.Linear(32, 16), min_rows=1)
    x = torch.randn(8, 32, requires_grad=True)
    layer(x).sum().backward()  # the packed op would give no gradient
    assert x.grad is not None and layer.weight.grad is not None
    with torch.autocast("cpu", dtype=torch.bfloat16), torch.no_grad():
        assert layer(x).dtype == torch.bfloat16


@pytest.mark.parametrize("rows", [1, MAX_ROWS + 1])  # the C kernel's copy, and oneDNN's
def test_a_changed_weight_is_packed_again(rows):
    torch.manual_seed(0)
    layer = PackedLinear(nn.Linear(32, 16, bias=False), min_rows=1)
    x = torch.randn(rows, 32)
    with torch.no_grad():
        layer(x)
        layer.weight.mul_(2)  # in place
        torch.testing.assert_close(layer(x), F.linear(x, layer.weight), rtol=1e-5, atol=1e-5)
        layer.weight = nn.Parameter(torch.randn(16, 32))  # a new tensor
        torch.testing.assert_close(layer(x), F.linear(x, layer.weight), rtol=1e-5, atol=1e-5)
        layer.load_state_dict({"weight": torch.ones(16, 32)})
        torch.testing.assert_close(layer(x), F.linear(x, torch.ones(16, 32)))


@pytest.mark.parametrize("rows", [1, MAX_ROWS + 1])
def test_a_weight_replaced_twice_between_calls_is_never_taken_for_the_packed_one(rows):
    """Newcomer 51: the key (address, version counter) came back when the
    allocator gave a new weight the freed address of the packed one (23 of
    120 tries): the layer kept the packed-from tensor, so it cannot be freed."""
    layer = PackedLinear(nn.Linear(64, 64), min_rows=1)
    x = torch.randn(rows, 64)
    with torch.no_grad():
        for _ in range(30):
            layer.weight = nn.Parameter(torch.randn(64, 64))
            layer(x)
            packed_key = layer._packed_key
            layer.weight = nn.Parameter(torch.zeros(64, 64))
            layer.weight = nn.Parameter(torch.full((64, 64), 0.01))
            assert accel._weight_key(layer.weight) != packed_key
            torch.testing.assert_close(layer(x), F.linear(x, layer.weight, layer.bias))


@pytest.mark.parametrize("rows", [1, MAX_ROWS + 1])
def test_a_new_view_of_the_packed_weight_is_packed_again(rows):
    """Review: a transposed view of a square weight keeps its address and
    version counter; its shape and strides are in the key too."""
    layer = PackedLinear(nn.Linear(16, 16), min_rows=1)
    x = torch.randn(rows, 16)
    with torch.no_grad():
        layer(x)
        layer.weight = nn.Parameter(layer.weight.detach().t())
        torch.testing.assert_close(layer(x), F.linear(x, layer.weight, layer.bias))


@pytest.mark.parametrize("rows", [1, MAX_ROWS + 1])
def test_a_bias_that_requires_grad_gets_its_gradient(rows):
    """Review: with the weight frozen and only the bias trained (BitFit), the
    packed product refused (C) or dropped the bias's gradient (oneDNN)."""
    layer = PackedLinear(nn.Linear(16, 8), min_rows=1)
    plain = nn.Linear(16, 8)
    plain.load_state_dict(layer.state_dict())
    for m in (layer, plain):
        m.weight.requires_grad_(False)
    x = torch.randn(rows, 16)
    layer(x).sum().backward()
    plain(x).sum().backward()
    torch.testing.assert_close(layer.bias.grad, plain.bias.grad)


def test_a_layer_given_a_weight_of_another_width_multiplies_by_it():
    """Review: the width check read `in_features`, which nn.Linear's forward
    never reads and a new weight leaves stale."""
    layer = PackedLinear(nn.Linear(32, 16), min_rows=1)
    with torch.no_grad():
        layer.weight = nn.Parameter(torch.randn(16, 48))
        x = torch.randn(2, 48)
        torch.testing.assert_close(layer(x), F.linear(x, layer.weight, layer.bias),
                                   rtol=1e-5, atol=1e-5)
        with pytest.raises(RuntimeError) as plain:
            F.linear(torch.randn(2, 32), layer.weight, layer.bias)
        with pytest.raises(RuntimeError) as packed:
            layer(torch.randn(2, 32))
        assert str(packed.value) == str(plain.value)


@pytest.mark.parametrize("rows", [1, MAX_ROWS + 1])
def test_another_dtype_or_a_round_trip_through_one_is_never_stale(rows):
    torch.manual_seed(0)
    layer = PackedLinear(nn.Linear(32, 16), min_rows=1)
    x = torch.randn(rows, 32)
    with torch.no_grad():
        layer(x)
        layer.to(torch.bfloat16)
        assert layer(x.bfloat16()).dtype == torch.bfloat16  # a plain call: packs nothing
        layer.repack()
        assert "bfloat16" in layer.unpacked_reason
        layer.float()  # rounded through bfloat16: the old pack would be wrong now
        torch.testing.assert_close(layer(x), F.linear(x, layer.weight, layer.bias),
                                   rtol=1e-5, atol=1e-5)
        assert layer.unpacked_reason is None


def test_a_packed_model_copies_and_pickles(mode):
    mode("on")
    model = wide_llama(64)
    prepack_linears(model)
    ids = torch.tensor([[5, 6, 7, 8, 9]])
    with torch.inference_mode():
        want = model(ids).logits
        for other in (copy.deepcopy(model), pickle.loads(pickle.dumps(model))):
            assert torch.equal(other(ids).logits, want)


# ---------------------------------------------------------------- the engine
def decisive(model, prompts, max_tokens) -> float:
    """The smallest gap between the top two logits along transformers' greedy
    paths: a logit difference below it cannot change a greedy token."""
    gaps = []
    with torch.inference_mode():
        for p in prompts:
            out = model.generate(torch.tensor([p]), max_new_tokens=max_tokens,
                                 min_new_tokens=max_tokens, do_sample=False, eos_token_id=None,
                                 pad_token_id=0, output_logits=True, return_dict_in_generate=True)
            top = torch.cat(out.logits).topk(2, dim=-1).values
            gaps.append((top[:, 0] - top[:, 1]).min().item())
    return min(gaps)


def fresh(name: str) -> nn.Module:
    """The same weights every call (seeded), never yet packed."""
    from pagedkit.bench.engine import build_model

    return build_model("tiny", torch.device("cpu")) if name == "tiny" else wide_llama(layers=2)


@pytest.mark.parametrize("name, setting", [("tiny", "on"), ("wide", "auto"), ("wide", "on")])
def test_the_engine_gives_transformers_tokens_with_packed_linears(name, setting, mode):
    g = torch.Generator().manual_seed(3)
    prompts = [torch.randint(3, 250, (n,), generator=g).tolist() for n in (1, 5, 9, 17, 33)]
    greedy = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)
    sampled = [SamplingParams(temperature=0.8, top_p=0.9, seed=i, max_tokens=8, ignore_eos=True)
               for i in range(len(prompts))]
    reference = fresh(name)
    with torch.inference_mode():
        expected = [reference.generate(torch.tensor([p]), max_new_tokens=8, min_new_tokens=8,
                                       do_sample=False, eos_token_id=None, pad_token_id=0
                                       )[0, len(p):].tolist() for p in prompts]
    mode("off")
    plain = LLM(fresh(name), num_blocks=64)
    assert [o.outputs[0].token_ids
            for o in plain.generate(prompts, greedy, use_tqdm=False)] == expected
    want_sampled = [o.outputs[0].token_ids
                    for o in plain.generate(prompts, sampled, use_tqdm=False)]
    mode(setting)
    llm = LLM(fresh(name), num_blocks=64)
    model = llm.llm_engine.runner.model
    assert packed_names(model)
    assert [o.outputs[0].token_ids
            for o in llm.generate(prompts, greedy, use_tqdm=False)] == expected
    assert [o.outputs[0].token_ids
            for o in llm.generate(prompts, sampled, use_tqdm=False)] == want_sampled
    # decisive: the packed logits differ far less than the top-2 gaps
    ids = torch.tensor([prompts[-1]])
    with torch.inference_mode():
        diff = (model(ids).logits - reference(ids).logits).abs().max().item()
    assert diff < decisive(reference, prompts, 8) / 100


@pytest.mark.parametrize("model_type", ["llama", "qwen2", "mistral", "gemma2", "phi3",
                                        "gpt_neox", "olmo2"])
def test_architectures_stay_exact_with_every_linear_packed(model_type, mode):
    """tests/model/test_architectures.py's three settings with ``PAGEDKIT_PREPACK=on``
    (its tiny models are narrower than the `auto` rule); ``PAGEDKIT_PREPACK=on pytest
    tests/model/test_architectures.py`` runs every architecture so (test_fused.py:
    fused too)."""
    from test_architectures import check_architecture

    mode("on")
    assert prepack_linears(tiny_model(model_type)).replaced  # its linear layers get packed
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = check_architecture(model_type)
    assert result["status"] == "served", result


def test_min_rows_is_what_auto_uses(mode):
    mode(None)
    model = wide_llama()
    prepack_linears(model)
    assert {m.min_rows for m in model.modules() if isinstance(m, PackedLinear)} == {MIN_ROWS}


@pytest.mark.parametrize("rows", [1, 2, 3, 4, 9])
def test_auto_uses_the_packed_product_from_one_row(mode, monkeypatch, rows):
    """A decode step reads each weight from memory, where packed paid from one
    row (docs/benchmarks.md, "Fused and packed from one row"): every call of
    a packed layer, a decode of one sequence too, multiplies packed, fused
    groups once per group."""
    mode(None)
    assert MIN_ROWS == 1
    model = wide_llama()
    prepack_linears(model)
    calls = []
    real = accel.packed_linear
    monkeypatch.setattr(accel, "packed_linear", lambda x, *a: calls.append(x.shape) or real(x, *a))
    ids = torch.randint(0, 256, (1, rows))
    with torch.inference_mode():
        model.model.layers[0].self_attn.q_proj(torch.randn(1, rows, 512))
        model.model.layers[0].mlp.down_proj(torch.randn(1, rows, 512))
        model(ids)
    # q/k/v one product, o, gate/up one product, down: 4 per layer, lm_head (+ the two above)
    assert len(calls) == 2 + 4 * model.config.num_hidden_layers + 1
    assert all(shape[-2] == rows for shape in calls)



def test_only_a_model_served_on_the_cpu_is_packed(mode):
    """On a GPU the layers stay plain: packing them would only add checks to every call
    there (the packed product runs on the CPU alone)."""
    mode("auto")  # ``on`` also warns that it could not pack
    for device, packed in ((None, True), (torch.device("cpu"), True),
                           (torch.device("cuda"), False), (torch.device("mps"), False)):
        model = wide_llama()
        report = prepack_linears(model, device)
        assert bool(packed_names(model)) is packed, device
        assert packed or report.reason == f"served on {device.type}, not the CPU"


def test_a_refused_engine_leaves_the_callers_model_as_given(mode):
    """The layers are packed last, once every check of the engine has passed: a model
    whose LLM(...) was refused is still transformers' own (a reference computed with it
    afterwards is independent)."""
    mode("on")
    model = wide_llama()
    with pytest.raises(ValueError, match="max_model_len"):
        LLM(model, num_blocks=2, block_size=4, max_model_len=200)
    assert packed_names(model) == []
    LLM(model, num_blocks=64, block_size=4)
    assert packed_names(model)


def test_an_inference_tensor_weight_is_not_packed():
    """An inference tensor keeps no version counter, so an in-place write to it (inside
    inference mode) could not be seen: such a weight stays plain, with the reason."""
    with torch.inference_mode():
        linear = nn.Linear(512, 512)
    assert "inference tensor" in why_not(linear, "on")


def test_a_bias_of_another_dtype_is_named_as_the_bias():
    linear = nn.Linear(512, 512)
    linear.bias = nn.Parameter(linear.bias.detach().double())
    assert why_not(linear, "on") == "its bias is torch.float64, not torch.float32"


# ------------------------------------------------ the rule: the model's, and without C
def test_a_model_with_a_narrow_layer_packs_none(mode):
    """The 256 rule was measured per model: a 128-wide model whose 344-input down
    projections alone were packed ran 0.73-0.98x, so a model is packed whole or not
    at all, by its narrowest packable layer."""
    mode(None)
    model = wide_llama(128, intermediate=344)
    report = prepack_linears(model, fuse="off")
    assert report.replaced == [] and "model.layers.0.mlp.down_proj" in report.skipped
    assert set(report.skipped.values()) == {accel.below_rule(344, 128, 128)}
    assert "narrowest packable linear layer has 128 inputs" in accel.below_rule(344, 128, 128)


def test_without_the_c_kernel_auto_keeps_onednn_s_own_rule(mode, monkeypatch):
    """The 256 rule was measured with the C kernel taking calls of up to 8 rows;
    without it every packed call runs oneDNN, measured slower on small weights:
    then the rule measured for oneDNN, per layer (512 inputs, 512 x 512)."""
    mode(None)
    monkeypatch.setattr(accel.cpu_linear, "unavailable", lambda: "no C compiler (test)")
    tiny = LLM("tiny", num_blocks=8).llm_engine.runner.model.pagedkit_prepack
    assert tiny.replaced == [] and len(tiny.skipped) == 29
    assert "without the C kernel (no C compiler (test)), layers under 512" in str(tiny)
    model = wide_llama()
    report = prepack_linears(model, fuse="off")
    assert "model.layers.0.self_attn.q_proj" in report.replaced
    assert "weights under 262,144 elements" in report.skipped["model.layers.0.self_attn.k_proj"]
    assert accel.below_rule(511, 4096) and accel.below_rule(512, 512) is None


# ---------------------------------------- calls the C kernel must not take
def packed_layer(width: int = 64) -> PackedLinear:
    torch.manual_seed(0)
    layer = PackedLinear(nn.Linear(width, 48), min_rows=1)
    layer.repack()
    return layer


def test_fake_tensors_and_dispatch_modes_take_the_plain_product():
    """Newcomer 52: a forward under FakeTensorMode handed the C kernel a fake
    tensor's pointer (a segfault), and FlopCounterMode counted 0 FLOPs: under a
    dispatch mode, or with a tensor subclass, the call is F.linear's."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.utils.flop_counter import FlopCounterMode

    layer = packed_layer()
    with FakeTensorMode(allow_non_fake_inputs=True) as fake, torch.no_grad():
        out = layer(fake.from_tensor(torch.randn(3, 64)))
    assert out.shape == (3, 48) and type(out) is not torch.Tensor
    with FlopCounterMode(display=False) as flops, torch.no_grad():
        layer(torch.randn(5, 64))
    assert flops.get_total_flops() == 2 * 5 * 64 * 48


def test_jit_trace_vmap_fx_and_sparse_inputs_get_the_right_product():
    """Newcomer 52: a traced packed layer returned uninitialised memory, a trace
    after a weight write stored a traced shape and broke every later call; vmap
    and fx failed on the C kernel's pointer; a sparse input was refused."""
    layer = packed_layer()
    x = torch.randn(4, 64)
    want = F.linear(x, layer.weight, layer.bias)
    with torch.no_grad():
        torch.testing.assert_close(torch.jit.trace(layer, x)(x), want)
        layer.weight.mul_(1.0)  # a write: the next packed call packs again
        torch.testing.assert_close(torch.jit.trace(layer, x)(x), want)
        torch.testing.assert_close(layer(x), want)  # packed again, outside the trace
        torch.testing.assert_close(torch.vmap(layer)(x[:, None]), want[:, None])
        torch.testing.assert_close(layer(x.to_sparse()), want)
    traced = torch.fx.symbolic_trace(layer)
    with torch.no_grad():
        torch.testing.assert_close(traced(x), want)


def test_transforms_forward_ad_nested_and_a_device_context_get_the_right_product():
    """Review of newcomer 52's fixes: a forward inside ``torch.device("meta")``
    made the C kernel's output a meta tensor and wrote through it (a segfault);
    forward-mode AD lost the tangent; vmap over the weights (ensembling) and jvp
    read a wrapped weight's pointer; a nested tensor was refused; torch.compile
    broke its graph at the C call."""
    import torch.autograd.forward_ad as fwAD
    from torch.func import functional_call, jvp, vmap

    layer = packed_layer()
    x = torch.randn(4, 64)
    want = F.linear(x, layer.weight, layer.bias)
    with torch.no_grad():
        with torch.device("meta"):
            out = layer(x)
        torch.testing.assert_close(out, want)
        tangent = torch.randn_like(x)
        with fwAD.dual_level():
            dual = layer(fwAD.make_dual(x, tangent))
            torch.testing.assert_close(fwAD.unpack_dual(dual).tangent,
                                       F.linear(tangent, layer.weight))
        weights = {"weight": torch.stack([layer.weight, 2 * layer.weight]),
                   "bias": torch.stack([layer.bias, layer.bias])}
        both = vmap(lambda p: functional_call(layer, p, (x,)))(weights)
        torch.testing.assert_close(both[1], F.linear(x, 2 * layer.weight, layer.bias))
        _, dy = jvp(lambda w: functional_call(layer, {"weight": w, "bias": layer.bias}, (x,)),
                    (layer.weight,), (torch.ones_like(layer.weight),))
        torch.testing.assert_close(dy, x.sum(-1, keepdim=True).expand(4, 48))
        nested = torch.nested.nested_tensor([x[:1], x[1:]])
        torch.testing.assert_close(layer(nested).unbind()[1], want[1:])
    compiled = torch.compile(layer, backend="eager", fullgraph=True)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), want)


def test_auto_fuses_nothing_in_a_model_it_leaves_plain(mode, monkeypatch):
    """Review: a 512-wide model with 128-input down projections had its q/k/v
    fused (and so packed) while the rule said none of its layers are."""
    from pagedkit.model import fused

    mode(None)
    monkeypatch.delenv(fused.ENV_VAR, raising=False)
    report = prepack_linears(wide_llama(512, intermediate=128))
    assert report.replaced == [] and report.fusion.fused == []
    assert set(report.fusion.skipped.values()) == {accel.narrow_model(128)}
