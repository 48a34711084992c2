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


# ------------------------------------------------- newcomer 23: refusals that name the real reason
def test_falcon_40b_layer_norm_count_is_served_exactly():
    """Newcomer 23 N2: a Falcon-40B/180B-shaped config (new_decoder_architecture: two
    LayerNorms before the parallel attention and MLP, num_ln_in_parallel_attn = 2) was
    refused as "an attention feature" because the field's name holds ``attn``. It is a
    layer-norm count; the model is served, token for token with generate, under swap."""
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(0)
    config = AutoConfig.for_model("falcon", hidden_size=96, num_hidden_layers=2,
                                  num_attention_heads=4, vocab_size=128, num_kv_heads=2,
                                  new_decoder_architecture=True)
    model = AutoModelForCausalLM.from_config(config).eval()
    assert model.config.num_ln_in_parallel_attn == 2
    prompts = [PROMPT, PROMPT[:3], [*PROMPT[:6], 7, 9, 11, 13]]
    expected = [greedy(model, p) for p in prompts]
    llm = LLM(model, num_blocks=6, block_size=4, device="cpu", preemption_mode="swap")
    out = llm.generate([{"prompt_token_ids": p} for p in prompts],
                       SamplingParams(temperature=0, max_tokens=8, ignore_eos=True),
                       use_tqdm=False)
    assert [list(o.outputs[0].token_ids) for o in out] == expected
    assert llm.llm_engine.memory_stats()["num_preemptions"] > 0


@pytest.mark.parametrize("value,said", [
    ({"alibi": True, "alibi_bias_max": 8, "id2label": {0: "a"}, "return_dict": True},
     "attn_config['alibi'] = True"),
    ({"attn_type": "multihead_attention", "alibi": False}, "attn_config['attn_type'] = "
                                                           "'multihead_attention'"),
    ({"attn_pdrop": 0, "sink_config": {"softcap": 3.0}},
     "attn_config['sink_config']['softcap'] = 3.0"),
    ({"attn_pdrop": 0.1, "clip_qkv": None}, "attn_config (keys ['attn_pdrop'])"),
    (True, "attn_config = True"),
])
def test_a_refused_sub_config_names_its_key_not_the_whole_dict(value, said):
    """Newcomer 23 N8: MPT's refusal printed its whole attn_config (~800 characters of
    id2label and return_dict) instead of the key that matters."""
    assert support._offending("attn_config", value) == said


def test_mpt_is_refused_naming_alibi_in_a_short_message():
    model = tiny_model("mpt")
    with pytest.raises(NotImplementedError) as err:
        LLM(model, num_blocks=16, block_size=4, device="cpu")
    said = str(err.value)
    assert "its config sets attn_config['alibi'] = True, an attention feature" in said
    assert "id2label" not in said and len(said) < 300


def _encoder_decoder_types() -> list[str]:
    """Every model type whose default config is an encoder-decoder (enumerated)."""
    from transformers import AutoConfig
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    found = []
    for model_type in sorted(CONFIG_MAPPING_NAMES):
        try:
            config = AutoConfig.for_model(model_type)
        except Exception:
            continue
        if getattr(config, "is_encoder_decoder", False):
            found.append(model_type)
    return found


def _folder(tmp_path, config=None):
    """A model folder as save_pretrained writes it, less its weights (a refusal said
    before the weights load never needs them), with the tiny model's tokenizer."""
    import shutil
    from pathlib import Path

    from pagedkit import models

    tiny = Path(models.__file__).parent / "tiny"
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tiny / name, tmp_path / name)
    if config is not None:
        config.save_pretrained(tmp_path)
    return tmp_path


ENCODER_DECODER_TYPES = _encoder_decoder_types()


def test_encoder_decoder_types_are_found():
    assert {"t5", "bart", "whisper"} <= set(ENCODER_DECODER_TYPES)


@pytest.mark.parametrize("model_type", ENCODER_DECODER_TYPES)
def test_an_encoder_decoder_folder_is_refused_as_one_before_its_weights_load(model_type,
                                                                             tmp_path):
    """Newcomer 23 N5/N6: a T5 folder failed with transformers' list of ~150 causal-LM
    configs; BART's and Whisper's loaded their decoder alone and were refused for
    encoder_attention_heads, "an attention feature". Each is refused as what it is, before
    any weight loads (the folder holds none)."""
    from transformers import AutoConfig

    config = AutoConfig.for_model(model_type)
    folder = _folder(tmp_path, config)
    with pytest.raises(NotImplementedError) as err:
        LLM(str(folder), device="cpu")
    arch = (config.architectures or [model_type])[0]
    assert (f"{arch} is an encoder-decoder model; pagedkit serves decoder-only models "
            "(docs/architectures.md)") in str(err.value)
    assert repr(str(folder)) in str(err.value)


@pytest.mark.parametrize("file", ["config.json", "tokenizer.json", "model.safetensors",
                                  "generation_config.json"])
def test_a_file_given_as_the_model_is_refused_as_a_file(file):
    """Newcomer 23 N3: a model folder's file gave torch.load's UnpicklingError."""
    from pathlib import Path

    from pagedkit import models

    path = str(Path(models.__file__).parent / "tiny" / file)
    with pytest.raises(ValueError) as err:
        LLM(path, device="cpu")
    assert (f"model path {path!r} is a file; give the folder that holds config.json and the "
            "weights (a model folder, not a file)") in str(err.value)


def test_a_folder_without_config_json_is_refused_naming_it(tmp_path):
    """Newcomer 23 N4: a folder with tokenizer files only gave transformers'
    "Unrecognized model ... Should have a model_type key"."""
    folder = _folder(tmp_path)
    with pytest.raises(FileNotFoundError) as err:
        LLM(str(folder), device="cpu")
    said = str(err.value)
    assert f"no config.json in {str(folder)!r} (it holds tokenizer.json, " in said
    assert "model='tiny'" in said


def _decoder_alone_types() -> list[tuple[str, str]]:
    """Every (model type, causal-LM class) whose class is an encoder-decoder family's
    decoder built alone: the family's default config is an encoder-decoder and the
    class takes that config (BartForCausalLM; enumerated, not picked)."""
    import transformers
    from transformers import AutoConfig
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    found = []
    for model_type, name in sorted(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.items()):
        try:
            config = AutoConfig.for_model(model_type)
        except Exception:
            continue
        cls = getattr(transformers, name, None)
        if (getattr(config, "is_encoder_decoder", False) and cls is not None
                and cls.config_class is type(config)):
            found.append((model_type, name))
    return found


DECODER_ALONE_TYPES = _decoder_alone_types()


def test_decoder_alone_types_are_found():
    assert {"bart", "mbart", "plbart", "marian", "pegasus", "blenderbot", "blenderbot-small",
            "prophetnet"} <= {t for t, _name in DECODER_ALONE_TYPES}


def _decoder_alone_said(model_type: str, arch: str, said: str) -> None:
    """The refusal names the real reason (the family's decoder alone) and what to do,
    not an encoder field as "an attention feature"."""
    assert (f"pagedkit cannot serve {arch}" in said and
            f"it is the decoder of the encoder-decoder family {model_type!r} built alone "
            "(is_encoder_decoder = False): its layers keep their cross-attention to an encoder "
            "and its config still describes the encoder (" in said)
    assert said.endswith("; pagedkit serves decoder-only model families; serve it with "
                         "transformers' generate, or pick a decoder-only model pagedkit serves "
                         "(docs/architectures.md)")
    assert "attention feature" not in said


def _decoder_alone_model(model_type: str, arch: str):
    import warnings

    import transformers
    from tiny_configs import _shrink
    from transformers import AutoConfig

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = _shrink(AutoConfig.for_model(model_type))
        for name, value in config.to_dict().items():  # the sizes _shrink does not know
            if isinstance(value, int) and not isinstance(value, bool):
                tiny = {"attention_heads": 4, "_layers": 2, "ffn_dim": 64}
                for end, size in tiny.items():
                    if name.endswith(end) and value > size:
                        setattr(config, name, size)
        model = getattr(transformers, arch)(config)
    assert model.config.is_encoder_decoder is False  # what the causal-LM class sets
    return model.eval()


@pytest.mark.parametrize(("model_type", "arch"), DECODER_ALONE_TYPES)
def test_a_decoder_alone_folder_is_refused_for_what_it_is_before_its_weights_load(
        model_type, arch, tmp_path):
    """Issue #26: a BartForCausalLM folder (is_encoder_decoder False) was refused after
    its weights loaded, for encoder_attention_heads, "an attention feature pagedkit does
    not implement"; without weights, with OSError. The folder holds the config the
    causal-LM class saves, and no weights."""
    config = _decoder_alone_model(model_type, arch).config
    config.architectures = [arch]
    folder = _folder(tmp_path, config)
    with pytest.raises(NotImplementedError) as err:
        LLM(str(folder), device="cpu")
    _decoder_alone_said(model_type, arch, str(err.value))
    assert repr(str(folder)) in str(err.value)


@pytest.mark.parametrize(("model_type", "arch"), DECODER_ALONE_TYPES)
def test_a_decoder_alone_model_object_is_refused_for_what_it_is(model_type, arch):
    with pytest.raises(NotImplementedError) as err:
        LLM(_decoder_alone_model(model_type, arch), num_blocks=16, block_size=4, device="cpu")
    _decoder_alone_said(model_type, arch, str(err.value))
