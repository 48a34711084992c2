"""Reference solutions for lab 09 (beyond). The test suite runs the checks in
`pagedkit.exercises.lab09` against these."""


def tokens_that_fit(memory_bytes, num_layers, num_kv_heads, head_dim, dtype_bytes, block_size):
    """Token slots in the whole blocks that fit a KV-cache budget."""
    bytes_per_token = 2 * num_layers * num_kv_heads * head_dim * dtype_bytes
    blocks = memory_bytes // (bytes_per_token * block_size)
    return blocks * block_size


def best_num_drafts(acceptance_rate, draft_cost, max_drafts):
    """The k with the most tokens per unit of time; the smallest on a tie."""
    def tokens_per_step(k):  # 1 + a + ... + a^k: draft i counts if drafts 1..i were accepted
        return sum(acceptance_rate ** i for i in range(k + 1))

    rates = [tokens_per_step(k) / (1 + k * draft_cost) for k in range(max_drafts + 1)]
    best = max(rates)
    return next(k for k, r in enumerate(rates) if r >= best * (1 - 1e-12))
