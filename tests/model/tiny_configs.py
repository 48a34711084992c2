"""Every causal-LM architecture of the installed transformers, at a tiny size.

The architectures come from transformers' own auto mapping
(``MODEL_FOR_CAUSAL_LM_MAPPING_NAMES``), not from a hand-picked list. Each
default config is shrunk field by field (whatever size fields it has), and
the attention features it has are set to values that bite on short prompts:
a window of `WINDOW` tokens (shorter than the prompts, not a multiple of the
block size), a softcap small enough to flatten the scores, large sinks.
"""

from __future__ import annotations

import warnings

import torch

VOCAB = 128
WINDOW = 6  # with blocks of 4: not a multiple, shorter than the longer prompts
SOFTCAP = 0.1  # random scores are ~0.5; a cap of 0.1 flattens them
SINK_SCALE = 3.0  # sinks ~N(0, 3): a head can send most of its weight nowhere
SEED = 0
MAX_PARAMS = 6_000_000

_SIZES = {  # field -> tiny value, applied where the default config has the field
    "vocab_size": VOCAB, "hidden_size": 64, "n_embd": 64, "d_model": 64, "dim": 64,
    "intermediate_size": 96, "n_inner": 96, "ffn_dim": 96, "moe_intermediate_size": 32,
    "shared_expert_intermediate_size": 32, "expert_intermediate_size": 32,
    "num_hidden_layers": 2, "n_layer": 2, "num_layers": 2, "n_layers": 2,
    "num_attention_heads": 4, "n_head": 4, "n_heads": 4, "num_heads": 4,
    "num_key_value_heads": 2, "head_dim": 16, "kv_channels": 16,
    "num_experts": 4, "num_local_experts": 4, "n_routed_experts": 4, "num_experts_per_tok": 2,
    "n_shared_experts": 1, "first_k_dense_replace": 1, "n_group": 1, "topk_group": 1,
    "max_position_embeddings": 128, "n_positions": 128, "rotary_dim": 8,
    "sliding_window": WINDOW, "attn_logit_softcapping": SOFTCAP,
    "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2,
    "initializer_range": 0.2, "tie_word_embeddings": False,
}
_FEATURES = {"use_sliding_window": True, "max_window_layers": 1}


def causal_lm_types() -> list[str]:
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    return sorted(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)


def tiny_config(model_type: str):
    """The default config of `model_type`, shrunk (sub-configs too); None for
    encoder-decoders."""
    from transformers import AutoConfig

    default = AutoConfig.for_model(model_type)
    if getattr(default, "is_encoder_decoder", False):
        return None
    return _shrink(default)


def _shrink(config):
    """A copy of `config` with every size field it has made tiny."""
    changes = {k: v for k, v in {**_SIZES, **_FEATURES}.items() if hasattr(config, k)}
    if getattr(config, "multi_query", False):
        changes.pop("num_key_value_heads", None)  # derived from multi_query (GPT-BigCode)
    if "layer_types" in config.to_dict():
        changes["layer_types"] = None  # recomputed for 2 layers where the config knows how
    if getattr(config, "is_decoder", None) is False:
        changes["is_decoder"] = True  # encoders with an LM head, used causally
    for key in getattr(config, "sub_configs", {}) or {}:
        sub = getattr(config, key, None)
        if sub is not None and hasattr(sub, "to_dict"):
            changes[key] = _shrink(sub)
    return _retry(type(config), changes)


def _retry(make, changes):
    """Make the config, dropping the changes it rejects one at a time."""
    changes = dict(changes)
    for _ in range(len(changes) + 1):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return make(**changes)
        except Exception as err:
            bad = next((k for k in changes if k in str(err)), None)
            if bad is None:
                bad = "layer_types" if changes.get("layer_types", 0) is None else None
            if bad is None:
                raise
            changes.pop(bad)
    raise RuntimeError(f"{make.__name__}: no tiny config")


def tiny_model(model_type: str):
    """A seeded fp32 random-weight model of `model_type` in eval mode, sinks scaled."""
    from transformers import AutoModelForCausalLM

    config = tiny_config(model_type)
    if config is None:
        return None
    with torch.device("meta"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        size = sum(p.numel() for p in AutoModelForCausalLM.from_config(config).parameters())
    if size > MAX_PARAMS:
        raise ValueError(f"the shrunk config still has {size:,} parameters (over {MAX_PARAMS:,})")
    torch.manual_seed(SEED)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("sinks"):
                p.normal_(0.0, SINK_SCALE)
    return model.eval()
