"""The embedded "tiny" model: the shapes the engine relies on, offline loading, and
deterministic, readable greedy output."""

import json
import socket
import subprocess
import sys

import pytest
import torch

from pagedkit.models import TINY_DIR, load_tiny

PROMPT = "Once upon a time, there was a little"


@pytest.fixture(scope="module")
def tiny():
    torch.set_num_threads(1)  # a fixed thread count keeps float reductions reproducible
    return load_tiny()


def greedy(model, tokenizer, prompt: str, n: int) -> list[int]:
    ids = tokenizer(prompt, return_tensors="pt")
    out = model.generate(**ids, max_new_tokens=n, min_new_tokens=n, do_sample=False)
    return out[0, ids["input_ids"].shape[1]:].tolist()


def test_config_has_the_shapes_the_engine_must_handle(tiny):
    model, tokenizer = tiny
    c = model.config
    assert c.model_type == "llama" and type(model).__name__ == "LlamaForCausalLM"
    assert (c.num_hidden_layers, c.hidden_size, c.head_dim) == (4, 256, 64)
    assert c.num_attention_heads * c.head_dim == c.hidden_size
    assert c.num_key_value_heads < c.num_attention_heads  # grouped-query attention
    assert c.num_attention_heads % c.num_key_value_heads == 0
    assert c.max_position_embeddings == 2048
    assert c.rope_parameters["rope_type"] == "default"
    assert c.tie_word_embeddings
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    assert c.vocab_size == len(tokenizer) == 1024


def test_special_tokens_agree_between_model_tokenizer_and_generation_config(tiny):
    model, tokenizer = tiny
    assert tokenizer.eos_token_id == model.config.eos_token_id
    assert tokenizer.bos_token_id == model.config.bos_token_id
    assert tokenizer.pad_token_id == model.config.pad_token_id
    assert len({tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.pad_token_id}) == 3
    gen = json.loads((TINY_DIR / "generation_config.json").read_text())
    assert gen["eos_token_id"] == tokenizer.eos_token_id
    assert gen["bos_token_id"] == tokenizer.bos_token_id


def test_loaded_in_eval_mode_in_the_requested_dtype():
    model, _ = load_tiny(dtype=torch.bfloat16)
    assert not model.training
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}


def test_default_dtype_is_float32_and_upcasts_the_stored_weights_exactly(tiny):
    from safetensors import safe_open

    model, _ = tiny
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    with safe_open(TINY_DIR / "model.safetensors", "pt") as f:
        stored = f.get_tensor("model.embed_tokens.weight")
    assert stored.dtype == torch.float16
    assert torch.equal(stored.float(), model.model.embed_tokens.weight)


def test_a_bad_dtype_is_refused_by_name():
    with pytest.raises(TypeError, match="int64"):
        load_tiny(dtype=torch.int64)


def test_loading_twice_gives_identical_weights(tiny):
    model, _ = tiny
    again, _ = load_tiny()
    a, b = model.state_dict(), again.state_dict()
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_greedy_continuation_is_stable_readable_and_not_degenerate(tiny):
    model, tokenizer = tiny
    first = greedy(model, tokenizer, PROMPT, 24)
    assert greedy(model, tokenizer, PROMPT, 24) == first
    assert len(set(first)) >= 12, first  # not one token (or a short loop) repeated
    text = tokenizer.decode(first, skip_special_tokens=True)
    assert text.strip() and all(ch.isprintable() or ch in "\n" for ch in text), repr(text)
    assert sum(ch.isalpha() for ch in text) > len(text) / 2, repr(text)


def test_greedy_continuation_is_the_documented_one(tiny):
    """Pinned (docs/tiny_model.md quotes it): retraining the model changes this text,
    and then the doc must change too. Every step of it wins its argmax by > 0.4 logits,
    far above float32 noise on any CPU."""
    model, tokenizer = tiny
    prompt = "There once was a shy mouse named Sam."
    text = tokenizer.decode(greedy(model, tokenizer, prompt, 16))
    assert text == " He lived in a hole under a big tree. He loved to run and jump"


def test_loads_through_the_auto_classes_with_the_network_cut(tiny, monkeypatch):
    """What an engine does with a model folder, offline: HF_HUB_OFFLINE=1, and any
    socket connection raises, so a download attempt could not pass unnoticed."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    def refuse(*args, **kwargs):
        raise OSError("network access attempted while loading the tiny model")

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    tokenizer = AutoTokenizer.from_pretrained(TINY_DIR)
    model = AutoModelForCausalLM.from_pretrained(TINY_DIR, dtype=torch.float32).eval()
    reference, reference_tokenizer = tiny
    assert greedy(model, tokenizer, PROMPT, 12) == greedy(reference, reference_tokenizer,
                                                          PROMPT, 12)


def test_import_does_not_load_torch_or_transformers():
    code = ("import sys, pagedkit.models; "
            "print(sorted({'torch', 'transformers'} & set(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "[]"
