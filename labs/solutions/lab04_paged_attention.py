"""Reference solutions for lab 04 (PagedAttention).

The test suite runs every check of `pagedkit.exercises.lab04` against
these, so they stay in step with the checks. Try the exercises first.
"""

import torch


def gather_kv(cache, block_table, num_tokens):
    """The sequence's first `num_tokens` vectors, ``[num_tokens, heads, head_dim]``."""
    block_size = cache.shape[1]
    num_blocks = -(-num_tokens // block_size)           # only the blocks that hold tokens
    blocks = cache[block_table[:num_blocks].long()]     # [num_blocks, block_size, H, D]
    return blocks.flatten(0, 1)[:num_tokens]            # drop the unfilled tail


def paged_decode_attention(query, k_cache, v_cache, block_table, context_len):
    """One new token's attention over its paged K/V; query ``[Hq, D]``."""
    k = gather_kv(k_cache, block_table, context_len)    # [T, Hkv, D]
    v = gather_kv(v_cache, block_table, context_len)
    group = query.shape[0] // k.shape[1]                # query heads per KV head
    k = k.repeat_interleave(group, dim=1)               # head h reads KV head h // group
    v = v.repeat_interleave(group, dim=1)
    scores = torch.einsum("hd,thd->ht", query, k) / query.shape[-1] ** 0.5
    return torch.einsum("ht,thd->hd", torch.softmax(scores, dim=-1), v)


def online_softmax_update(row_max, row_sum, acc, scores, v):
    """One tile of the kernel's loop: fold `scores` ``[n]`` and `v` ``[n, D]`` in."""
    new_max = torch.maximum(torch.as_tensor(row_max), scores.max())
    alpha = torch.exp(row_max - new_max)                # rescales what was summed so far
    p = torch.exp(scores - new_max)
    return new_max, row_sum * alpha + p.sum(), acc * alpha + p @ v


def merge_splits(outs, lses):
    """Split-K's reduction: weight split i by exp(lse_i - logsumexp(lses))."""
    weights = torch.exp(lses - lses.max())              # empty splits (-inf) get 0
    weights = weights / weights.sum()
    return weights @ outs
