"""Tiny random models of several architectures, saved as folders both engines load.

vLLM loads a model from a folder (config + safetensors); pagedkit takes the
same folder's weights as a transformers object. `save_tiny(arch, dir)`
writes a two-layer random model of `arch` with 32-token blocks' worth of
heads and a 1024-token vocabulary, float32, so the two engines can be held
against each other on architectures other than the embedded Llama.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

#: architecture -> (transformers config class name, its arguments beyond the common ones)
ARCHITECTURES: dict[str, tuple[str, dict[str, Any]]] = {
    "llama": ("LlamaConfig", {}),
    "qwen2": ("Qwen2Config", {}),
    "qwen3": ("Qwen3Config", {"head_dim": 32}),
    "mistral": ("MistralConfig", {"sliding_window": None}),
    "gemma": ("GemmaConfig", {"head_dim": 32}),
    "phi3": ("Phi3Config", {}),
    "olmo2": ("Olmo2Config", {}),
    "granite": ("GraniteConfig", {}),
    "stablelm": ("StableLmConfig", {}),
    "gpt2": ("GPT2Config", {}),
}

IDS = dict(bos_token_id=0, eos_token_id=1, pad_token_id=2)  # inside the small vocabulary
COMMON = dict(vocab_size=1024, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
              tie_word_embeddings=False, **IDS)
GPT2 = dict(vocab_size=1024, n_embd=128, n_layer=2, n_head=4, n_positions=1024, **IDS)


def save_tiny(arch: str, folder: str | Path, seed: int = 0) -> Path:
    """A random two-layer `arch` model (float32) saved in `folder`."""
    import torch
    import transformers
    from transformers import AutoModelForCausalLM

    if arch not in ARCHITECTURES:
        raise ValueError(f"architecture must be one of {sorted(ARCHITECTURES)}, got {arch!r}")
    name, extra = ARCHITECTURES[arch]
    config = getattr(transformers, name)(**(GPT2 if arch == "gpt2" else COMMON), **extra)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    with torch.no_grad():  # random weights larger than the init's, so greedy paths vary
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(0, 0.08)
    folder = Path(folder)
    model.save_pretrained(folder)
    return folder
