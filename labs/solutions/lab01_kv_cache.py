"""Reference solutions of lab 01 (checked by tests/labs/test_exercises.py)."""


def cached_kv_reads(prompt_len: int, new_tokens: int) -> int:
    # decode steps feed output tokens 1 .. new_tokens - 1 (the prefill yields token 0);
    # the one at position prompt_len + j - 1 attends over prompt_len + j positions
    return sum(prompt_len + j for j in range(1, new_tokens))


def max_batch(gpu_bytes: int, num_params: int, param_bytes: int, kv_bytes_per_token: int,
              seq_len: int) -> int:
    left = gpu_bytes - num_params * param_bytes         # what the weights leave
    return max(0, left // (seq_len * kv_bytes_per_token))  # whole sequences only


def kv_bytes_per_token(config, dtype_bytes: int) -> int:
    heads = config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    return 2 * config.num_hidden_layers * kv_heads * head_dim * dtype_bytes
