"""Paged prefill attention: packed query chunks attend causally to their paged K/V.

A step of the engine packs every scheduled token of every sequence into one
row (no padding): sequence s owns query rows ``cu_seqlens_q[s] :
cu_seqlens_q[s + 1]``. Those tokens may be a whole prompt, one chunk of a
long prompt (chunked prefill), the uncached tail of a prompt whose head hit
the prefix cache (paper §4.4), or a single decode token. All of them look
the same from here: the chunk's K/V are already in the cache (`store_kv`
ran first), ``context_lens[s]`` counts every cached token of the sequence
including the chunk, and query token j sits at absolute position ``p =
context_lens[s] - q_len + j`` and attends to cache positions ``0..p``.

One program computes ``BLOCK_M`` query rows of one sequence for one query
head: a FlashAttention-style loop with online softmax (see `paged_decode`)
over the sequence's K/V tiles, each token found through the block table. It
stops at the last position any of its rows may see, and masks the diagonal
tile causally. Its KV head is ``head // (num_q_heads // num_kv_heads)``
(grouped-query attention); the query heads of a group re-read the same K/V,
which the GPU's L2 cache mostly absorbs.

Reference: `pagedkit.kernels.reference.paged_prefill_attention`.
"""

from __future__ import annotations

import torch

from . import checks
from .triton_support import (
    check_attention_dtype,
    dot_precision,
    interpreter_on,
    next_power_of_2,
    tl,
    triton,
)

INTERPRETED = interpreter_on()  # fixed now, when the kernels below are decorated

BLOCK_N = 64  # key tokens per tile


@triton.jit
def _paged_prefill_kernel(
    q_ptr, k_cache_ptr, v_cache_ptr, block_tables_ptr, cu_seqlens_ptr, context_lens_ptr,
    out_ptr, scale,
    stride_q_token, stride_q_head, stride_out_token, stride_out_head, stride_table,
    stride_cache_block, stride_cache_token, stride_cache_head,
    GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr,
    BLOCK_SIZE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    PRECISION: tl.constexpr,
):
    q_tile = tl.program_id(0)
    seq = tl.program_id(1)
    head = tl.program_id(2)
    kv_head = head // GROUP

    q_first = tl.load(cu_seqlens_ptr + seq)
    q_len = tl.load(cu_seqlens_ptr + seq + 1) - q_first
    if q_tile * BLOCK_M < q_len:  # the grid is sized for the longest chunk
        q_start = q_first.to(tl.int64)  # row * stride may pass 2**31
        context_len = tl.load(context_lens_ptr + seq)
        rows = q_tile * BLOCK_M + tl.arange(0, BLOCK_M)
        row_mask = rows < q_len
        position = context_len - q_len + rows               # absolute position of each row
        d = tl.arange(0, BLOCK_D)
        d_mask = d < HEAD_DIM
        q = tl.load(q_ptr + (q_start + rows)[:, None] * stride_q_token + head * stride_q_head
                    + d[None, :], mask=row_mask[:, None] & d_mask[None, :], other=0.0)

        row_max = tl.full([BLOCK_M], float("-inf"), tl.float32)
        row_sum = tl.zeros([BLOCK_M], tl.float32)
        acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)

        # Keys past the tile's last row are in every row's future: stop there.
        kv_end = tl.minimum(context_len, context_len - q_len + (q_tile + 1) * BLOCK_M)
        for tile_start in range(0, kv_end, BLOCK_N):
            n = tile_start + tl.arange(0, BLOCK_N)
            n_mask = n < kv_end
            block = tl.load(block_tables_ptr + seq * stride_table + n // BLOCK_SIZE,
                            mask=n_mask, other=0).to(tl.int64)
            row = block * stride_cache_block + (n % BLOCK_SIZE) * stride_cache_token \
                + kv_head * stride_cache_head
            kv_mask = n_mask[:, None] & d_mask[None, :]
            k = tl.load(k_cache_ptr + row[:, None] + d[None, :], mask=kv_mask, other=0.0)
            v = tl.load(v_cache_ptr + row[:, None] + d[None, :], mask=kv_mask, other=0.0)

            scores = tl.dot(q, tl.trans(k), input_precision=PRECISION) * scale
            visible = n_mask[None, :] & (n[None, :] <= position[:, None])   # causal
            scores = tl.where(visible, scores, float("-inf"))

            # Every row sees key 0 in the first tile, so row_max is finite from then on.
            new_max = tl.maximum(row_max, tl.max(scores, 1))
            alpha = tl.exp(row_max - new_max)
            p = tl.exp(scores - new_max[:, None])
            row_sum = row_sum * alpha + tl.sum(p, 1)
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
            row_max = new_max

        out = acc / row_sum[:, None]
        tl.store(out_ptr + (q_start + rows)[:, None] * stride_out_token + head * stride_out_head
                 + d[None, :], out.to(out_ptr.dtype.element_ty),
                 mask=row_mask[:, None] & d_mask[None, :])


def paged_prefill_attention(query: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                            block_tables: torch.Tensor, cu_seqlens_q: torch.Tensor,
                            context_lens: torch.Tensor, scale: float | None = None, *,
                            check: bool = True) -> torch.Tensor:
    """Triton version of `reference.paged_prefill_attention` (same arguments).

    ``check=False`` skips the checks that read tensor values; the longest
    chunk is still read back to size the grid (one host sync).
    """
    checks.check_prefill(query, k_cache, v_cache, block_tables, cu_seqlens_q, context_lens,
                         values=check)
    check_attention_dtype(query, "paged_prefill_attention")
    total_tokens, num_q_heads, head_dim = query.shape
    _, block_size, num_kv_heads, _ = k_cache.shape
    out = torch.empty((total_tokens, num_q_heads, head_dim), dtype=query.dtype,
                      device=query.device)
    num_seqs = context_lens.shape[0]
    if total_tokens == 0 or num_seqs == 0:
        return out
    scale = head_dim ** -0.5 if scale is None else float(scale)
    max_q_len = int((cu_seqlens_q[1:] - cu_seqlens_q[:-1]).max())
    block_m = 16 if max_q_len <= 16 else 64  # decode-heavy batches waste less of a tile
    block_tables = block_tables.contiguous()
    _paged_prefill_kernel[(triton.cdiv(max_q_len, block_m), num_seqs, num_q_heads)](
        query, k_cache, v_cache, block_tables, cu_seqlens_q.contiguous(),
        context_lens.contiguous(), out, scale,
        query.stride(0), query.stride(1), out.stride(0), out.stride(1), block_tables.stride(0),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        GROUP=num_q_heads // num_kv_heads, HEAD_DIM=head_dim,
        BLOCK_D=max(16, next_power_of_2(head_dim)), BLOCK_SIZE=block_size,
        BLOCK_M=block_m, BLOCK_N=BLOCK_N, PRECISION=dot_precision(query.dtype),
    )
    return out
