"""The support check's parts, and that the features it lets through really bite.

test_architectures.py runs every architecture end to end; these pin down the
pieces: refusal before any KV memory is reserved, the paged attention
refusing keywords it does not implement, and, for the window, softcap and
sink models served, that dropping the feature (what pagedkit used to do)
would change transformers' own tokens at the test's values.
"""

from __future__ import annotations

import pytest
import torch
from tiny_configs import tiny_model

from pagedkit import LLM, SamplingParams, ops
from pagedkit.model import attention, support
from pagedkit.model.runner import ModelRunner


def greedy(model, prompt, n=8):
    with torch.inference_mode():
        out = model.generate(torch.tensor([prompt]), max_new_tokens=n, min_new_tokens=n,
                             do_sample=False, eos_token_id=None, pad_token_id=0)
    return out[0, len(prompt):].tolist()


PROMPT = [5, 17, 99, 3, 42, 8, 61, 23, 77, 12, 30]


def _drop_window(model):
    model.config.sliding_window = None
    for m in model.modules():
        if hasattr(m, "sliding_window"):
            m.sliding_window = None


def _drop_softcap(model):
    model.config.attn_logit_softcapping = None
    for m in model.modules():
        if hasattr(m, "attn_logit_softcapping"):
            m.attn_logit_softcapping = None


def _drop_sinks(model):
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("sinks"):
                p.fill_(-1e4)  # exp(-1e4) = 0: as if there were no sink


@pytest.mark.parametrize("model_type,drop", [
    ("mistral", _drop_window), ("mixtral", _drop_window), ("starcoder2", _drop_window),
    ("gemma2", _drop_softcap), ("gpt_oss", _drop_sinks),
])
def test_the_feature_changes_transformers_tokens_at_the_test_values(model_type, drop):
    model = tiny_model(model_type)
    with_feature = greedy(model, PROMPT)
    drop(model)
    assert greedy(model, PROMPT) != with_feature


def test_refused_before_any_kv_memory_is_reserved(monkeypatch):
    def no(*args, **kwargs):
        raise AssertionError("KV memory reserved for a model that is refused")

    monkeypatch.setattr(ModelRunner, "allocate_cache", no)
    # One model per kind of refusal. transformers moves models onto its attention
    # registry over time (Falcon from 5.25, which pagedkit then serves exactly:
    # docs/architectures.md), so a model the installed version lets through is
    # not this test's case; each kind of refusal still needs one model that bites.
    kinds = {"calls the attention function 2 times": ["diffllama"],
             "do not call transformers' attention registry": ["bloom", "falcon", "xglm",
                                                              "openai-gpt"],
             "no attention shape": ["rwkv"]}
    for feature, model_types in kinds.items():
        tried = []
        for model_type in model_types:
            model = tiny_model(model_type)
            try:
                support.check_supported(model, block_size=4, max_model_len=64)
            except NotImplementedError:
                break
            tried.append(model_type)
        else:
            pytest.fail(f"none of {tried} is refused for {feature!r} by this transformers")
        with pytest.raises(NotImplementedError, match=type(model).__name__) as err:
            LLM(model, num_blocks=16, block_size=4, device="cpu")
        assert feature in str(err.value)


def test_unknown_config_attention_fields_are_refused():
    model = tiny_model("llama")
    model.config.attention_chunk_size = 8
    with pytest.raises(NotImplementedError, match=r"LlamaForCausalLM.*attention_chunk_size = 8"):
        support.check_config(model)


class _Layer(torch.nn.Module):
    is_causal = True
    layer_idx = 0


@pytest.mark.parametrize("kwargs,match", [
    ({"block_indices": 1}, r"_Layer passes \['block_indices'\]"),
    ({"dropout": 0.1}, r"dropout 0\.1"),
    ({"is_causal": False}, r"bidirectionally"),
])
def test_the_paged_attention_refuses_what_it_does_not_implement(kwargs, match):
    with pytest.raises(NotImplementedError, match=match):
        attention.attention_options(_Layer(), kwargs)


def test_the_paged_attention_passes_window_softcap_and_sinks():
    sinks = torch.nn.Parameter(torch.ones(4))
    options = attention.attention_options(_Layer(), {
        "sliding_window": 6, "softcap": 0.1, "s_aux": sinks, "position_ids": None,
        "scaling": 0.5, "dropout": 0.0})
    assert options["sliding_window"] == 6 and options["softcap"] == 0.1
    assert torch.equal(options["sinks"], sinks.detach())


def test_docs_render_the_refusal_feature_only():
    msg = str(support.refuse(torch.nn.Linear(1, 1), "it does X"))
    assert support.refusal_feature(msg) == "it does X"


@pytest.mark.parametrize("model_type", ["mistral", "qwen2", "gemma2", "gpt_oss"])
def test_window_softcap_and_sink_models_served_through_the_torch_reference(model_type):
    """test_architectures runs the default CPU path; the reference must agree too."""
    from test_architectures import check_architecture

    with ops.use_backend("torch"):
        assert check_architecture(model_type)["status"] == "served"


#: the multi-head architectures the tenth newcomer served beside transformers
#: (their configs state no num_key_value_heads)
MULTI_HEAD_TYPES = ("gpt2", "gpt_neox", "gptj", "opt", "codegen", "biogpt")


@pytest.mark.parametrize("model_type", MULTI_HEAD_TYPES)
def test_a_stray_num_key_value_heads_is_named_with_what_to_do(model_type):
    """Tenth newcomer's N9: a multi-head model whose config carries a stray
    num_key_value_heads (which its attention ignores: transformers attends with
    every head) was refused with the shapes only. pagedkit sizes its cache from
    the config, so it still refuses, naming the value, why and what to do; and
    what it says to do serves the model, token for token with generate."""
    model = tiny_model(model_type)
    heads = model.config.num_attention_heads
    assert getattr(model.config, "num_key_value_heads", heads) == heads
    expected = greedy(model, PROMPT)
    model.config.num_key_value_heads = heads // 2
    assert greedy(model, PROMPT) == expected  # transformers ignores it
    with pytest.raises(NotImplementedError) as err:
        LLM(model, num_blocks=16, block_size=4, device="cpu")
    said = str(err.value)
    assert f"its config sets num_key_value_heads = {heads // 2}, which " in said
    assert f"does not use: it attends with {heads} KV heads of " in said
    assert (f"Set num_key_value_heads to {heads} in the config (model.config."
            f"num_key_value_heads = {heads} before giving pagedkit the model") in said
    model.config.num_key_value_heads = heads
    out = LLM(model, num_blocks=16, block_size=4, device="cpu").generate(
        [{"prompt_token_ids": PROMPT}], SamplingParams(temperature=0, max_tokens=8,
                                                       ignore_eos=True), use_tqdm=False)
    assert list(out[0].outputs[0].token_ids) == expected
