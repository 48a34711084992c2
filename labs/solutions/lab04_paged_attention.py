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
    """One tile of the kernel's loop: fold `scores` ``[n]`` and `v` ``[n, D]`` in.
    Masked scores are -inf; while every score seen is masked the state stays
    (-inf, 0, zeros), so a finite stand-in replaces the max in the exponents."""
    new_max = torch.maximum(torch.as_tensor(row_max), scores.max())
    safe = torch.where(torch.isinf(new_max), torch.zeros_like(new_max), new_max)
    alpha = torch.exp(row_max - safe)                   # rescales what was summed so far
    p = torch.exp(scores - safe)                        # exp(-inf) = 0 for masked scores
    return new_max, row_sum * alpha + p.sum(), acc * alpha + p @ v


def merge_states(out_a, lse_a, out_b, lse_b):
    """Two partial results (each normalized over its own keys) -> the result over
    both, with its log-sum-exp, so merges chain (split-KV, flash-decoding)."""
    lse = torch.logaddexp(lse_a, lse_b)                 # log(exp(lse_a) + exp(lse_b)), stably
    if torch.isinf(lse):                                # both sides empty: nothing to weigh
        return torch.zeros_like(out_a), lse
    return torch.exp(lse_a - lse) * out_a + torch.exp(lse_b - lse) * out_b, lse


try:  # Triton has no macOS wheels; the kernel exercise needs it
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover
    triton = None

if triton is not None:
    @triton.jit
    def paged_kernel(q_ptr, k_cache_ptr, v_cache_ptr, block_table_ptr, out_ptr,
                     context_len, scale, stride_block, stride_token, stride_head,
                     BLOCK_SIZE: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr):
        """One program per head: its query attends over the paged K/V, tile by tile."""
        head = tl.program_id(0)
        d = tl.arange(0, HEAD_DIM)
        q = tl.load(q_ptr + head * HEAD_DIM + d)
        row_max = tl.full([1], float("-inf"), tl.float32)
        row_sum = tl.zeros([1], tl.float32)
        acc = tl.zeros([HEAD_DIM], tl.float32)
        for tile_start in range(0, context_len, BLOCK_N):
            n = tile_start + tl.arange(0, BLOCK_N)   # token positions of this tile
            n_mask = n < context_len
            # ---- YOUR CODE: the block-table lookup
            block = tl.load(block_table_ptr + n // BLOCK_SIZE, mask=n_mask, other=0).to(tl.int64)
            row = block * stride_block + (n % BLOCK_SIZE) * stride_token + head * stride_head
            # ---- your code ends here
            k = tl.load(k_cache_ptr + row[:, None] + d[None, :], mask=n_mask[:, None], other=0.0)
            v = tl.load(v_cache_ptr + row[:, None] + d[None, :], mask=n_mask[:, None], other=0.0)
            scores = tl.sum(q[None, :] * k, 1) * scale
            scores = tl.where(n_mask, scores, float("-inf"))
            new_max = tl.maximum(row_max, tl.max(scores, 0))
            alpha = tl.exp(row_max - new_max)
            p = tl.exp(scores - new_max)
            row_sum = row_sum * alpha + tl.sum(p, 0)
            acc = acc * alpha + tl.sum(p[:, None] * v, 0)
            row_max = new_max
        tl.store(out_ptr + head * HEAD_DIM + d, acc / row_sum)
