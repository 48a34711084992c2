"""Reference solutions of lab 01 (checked by tests/labs/test_exercises.py)."""


def bytes_per_token(num_layers: int, num_kv_heads: int, head_dim: int, dtype_bytes: int) -> int:
    return 2 * num_layers * num_kv_heads * head_dim * dtype_bytes  # K and V, every layer


def tokens_processed(prompt_len: int, new_tokens: int, use_cache: bool) -> int:
    if new_tokens == 0:
        return 0
    if use_cache:
        return prompt_len + new_tokens - 1  # prefill once, then one token per step
    # step t re-reads prompt_len + t tokens, t = 0 .. new_tokens - 1
    return new_tokens * prompt_len + new_tokens * (new_tokens - 1) // 2


def kv_bytes_per_token(config, dtype_bytes: int) -> int:
    heads = config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    return 2 * config.num_hidden_layers * kv_heads * head_dim * dtype_bytes
