"""Reference solutions for lab 09 (beyond). The test suite runs the checks in
`pagedkit.exercises.lab09` against these."""


def tokens_that_fit(memory_bytes, num_layers, num_kv_heads, head_dim, dtype_bytes, block_size):
    """Token slots in the whole blocks that fit a KV-cache budget."""
    bytes_per_token = 2 * num_layers * num_kv_heads * head_dim * dtype_bytes
    blocks = memory_bytes // (bytes_per_token * block_size)
    return blocks * block_size


def expected_tokens_per_step(acceptance_rate, num_draft_tokens):
    """Tokens one target-model step yields: 1 + a + a^2 + ... + a^k."""
    return sum(acceptance_rate ** i for i in range(num_draft_tokens + 1))
