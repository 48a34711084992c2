"""Paged decode attention: one new query token per sequence, K/V read through its block table.

This is the PagedAttention kernel of the paper (§4.1). A sequence's keys and
values are not contiguous: they sit in fixed-size blocks scattered anywhere
in the cache, and ``block_tables[s]`` lists them in order. The kernel
streams the sequence's tokens through on-chip memory a tile of ``BLOCK_N``
tokens at a time; for each token of a tile it looks up its block
(``block_tables[s, n // block_size]``) and its offset in it
(``n % block_size``), so a tile may span several blocks and a block may be
smaller than a tile. Nothing is gathered into a contiguous copy first; that
is the reference's shortcut (`reference.paged_decode_attention`).

Three ideas beyond "follow the table":

* **Online softmax** (Milakov & Gimelshein 2018; FlashAttention): keep a
  running maximum of the scores, a running sum of ``exp(score - max)`` and a
  running ``exp(score - max)``-weighted sum of values; rescale both sums when
  the maximum grows. One pass over K/V, no ``[context]``-sized score vector.
* **Grouped-query attention**: one program serves all the query heads that
  share a KV head, so each K/V tile is read from memory once for the group.
  The group is padded to 16 rows because ``tl.dot`` needs that many; decode
  is bound by memory traffic, not by those wasted multiplies.
* **Split-K** (flash-decoding): one sequence of 32k tokens would give a GPU
  one program per KV head, leaving most of it idle. So the context is cut
  into ``num_splits`` ranges, each program attends over one range and writes
  its partial result with its log-sum-exp, and a second small kernel,
  `_split_k_reduce_kernel`, merges the partials with the right weights.
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

BLOCK_N = 64                # tokens per tile
MIN_TOKENS_PER_SPLIT = 256  # below this a split costs more than it saves


@triton.jit
def _paged_decode_kernel(
    q_ptr, k_cache_ptr, v_cache_ptr, block_tables_ptr, context_lens_ptr,
    out_ptr, partial_out_ptr, partial_lse_ptr,
    scale, tokens_per_split,
    stride_q_seq, stride_q_head, stride_out_seq, stride_out_head, stride_table,
    stride_cache_block, stride_cache_token, stride_cache_head,
    NUM_Q_HEADS: tl.constexpr, GROUP: tl.constexpr, BLOCK_G: tl.constexpr,
    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr,
    BLOCK_SIZE: tl.constexpr, BLOCK_N: tl.constexpr, NUM_SPLITS: tl.constexpr,
    PRECISION: tl.constexpr,
):
    seq = tl.program_id(0)
    kv_head = tl.program_id(1)
    split = tl.program_id(2)

    context_len = tl.load(context_lens_ptr + seq)
    start = split * tokens_per_split
    end = tl.minimum(start + tokens_per_split, context_len)

    # The query heads of this KV head's group, one per row (padded to BLOCK_G).
    g = tl.arange(0, BLOCK_G)
    d = tl.arange(0, BLOCK_D)
    head = kv_head * GROUP + g
    g_mask = g < GROUP
    d_mask = d < HEAD_DIM
    q = tl.load(q_ptr + seq * stride_q_seq + head[:, None] * stride_q_head + d[None, :],
                mask=g_mask[:, None] & d_mask[None, :], other=0.0)

    row_max = tl.full([BLOCK_G], float("-inf"), tl.float32)  # of the scores so far
    row_sum = tl.zeros([BLOCK_G], tl.float32)                 # of exp(score - row_max)
    acc = tl.zeros([BLOCK_G, BLOCK_D], tl.float32)            # of exp(score - row_max) * v

    for tile_start in range(start, end, BLOCK_N):
        n = tile_start + tl.arange(0, BLOCK_N)           # token positions in the sequence
        n_mask = n < end
        # The paging step: token n lives in physical block table[n // BLOCK_SIZE]
        # at offset n % BLOCK_SIZE. Positions past the context are never looked up.
        block = tl.load(block_tables_ptr + seq * stride_table + n // BLOCK_SIZE,
                        mask=n_mask, other=0).to(tl.int64)
        row = block * stride_cache_block + (n % BLOCK_SIZE) * stride_cache_token \
            + kv_head * stride_cache_head
        kv_mask = n_mask[:, None] & d_mask[None, :]
        k = tl.load(k_cache_ptr + row[:, None] + d[None, :], mask=kv_mask, other=0.0)
        v = tl.load(v_cache_ptr + row[:, None] + d[None, :], mask=kv_mask, other=0.0)

        scores = tl.dot(q, tl.trans(k), input_precision=PRECISION) * scale  # [BLOCK_G, BLOCK_N]
        scores = tl.where(n_mask[None, :], scores, float("-inf"))

        new_max = tl.maximum(row_max, tl.max(scores, 1))
        alpha = tl.exp(row_max - new_max)  # rescales what was summed so far
        p = tl.exp(scores - new_max[:, None])
        row_sum = row_sum * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
        row_max = new_max

    # A split that starts past the context has summed nothing (row_sum == 0);
    # the reduction skips it, but keep its numbers finite anyway.
    has_tokens = row_sum > 0
    row_sum = tl.where(has_tokens, row_sum, 1.0)
    out = acc / row_sum[:, None]
    out_mask = g_mask[:, None] & d_mask[None, :]
    if NUM_SPLITS == 1:
        tl.store(out_ptr + seq * stride_out_seq + head[:, None] * stride_out_head + d[None, :],
                 out.to(out_ptr.dtype.element_ty), mask=out_mask)
    else:
        # partial_out: [num_seqs, NUM_Q_HEADS, NUM_SPLITS, HEAD_DIM]; partial_lse: without HEAD_DIM
        part = (seq * NUM_Q_HEADS + head) * NUM_SPLITS + split
        tl.store(partial_out_ptr + part[:, None] * HEAD_DIM + d[None, :], out, mask=out_mask)
        lse = tl.where(has_tokens, row_max + tl.log(row_sum), float("-inf"))
        tl.store(partial_lse_ptr + part, lse, mask=g_mask)


@triton.jit
def _split_k_reduce_kernel(
    partial_out_ptr, partial_lse_ptr, context_lens_ptr, out_ptr,
    tokens_per_split, stride_out_seq, stride_out_head,
    NUM_Q_HEADS: tl.constexpr, NUM_SPLITS: tl.constexpr, BLOCK_S: tl.constexpr,
    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr,
):
    """Merge one (sequence, query head)'s split results.

    Split i attended over its range and returned ``o_i`` (normalised within
    the range) and ``lse_i = log(sum of exp(scores in range))``. The full
    softmax gives range i the weight ``exp(lse_i) / sum_j exp(lse_j)``, so the
    answer is ``sum_i w_i * o_i``, computed stably by subtracting max(lse).
    """
    seq = tl.program_id(0)
    head = tl.program_id(1)
    context_len = tl.load(context_lens_ptr + seq)
    used_splits = tl.cdiv(context_len, tokens_per_split)   # later splits saw no tokens

    s = tl.arange(0, BLOCK_S)
    d = tl.arange(0, BLOCK_D)
    s_mask = s < used_splits
    part = (seq * NUM_Q_HEADS + head) * NUM_SPLITS + s
    lse = tl.load(partial_lse_ptr + part, mask=s_mask, other=float("-inf"))
    weight = tl.exp(lse - tl.max(lse, 0))
    weight = weight / tl.sum(weight, 0)
    partial = tl.load(partial_out_ptr + part[:, None] * HEAD_DIM + d[None, :],
                      mask=s_mask[:, None] & (d[None, :] < HEAD_DIM), other=0.0)
    out = tl.sum(partial * weight[:, None], 0)
    tl.store(out_ptr + seq * stride_out_seq + head * stride_out_head + d,
             out.to(out_ptr.dtype.element_ty), mask=d < HEAD_DIM)


def default_num_splits(num_seqs: int, num_kv_heads: int, max_context: int,
                       device: torch.device) -> int:
    """Enough splits to give every streaming multiprocessor about two programs,
    but none shorter than `MIN_TOKENS_PER_SPLIT` tokens. One on CPU."""
    if device.type != "cuda":
        return 1
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    wanted = triton.cdiv(2 * sms, num_seqs * num_kv_heads)
    return max(1, min(wanted, triton.cdiv(max_context, MIN_TOKENS_PER_SPLIT)))


def paged_decode_attention(query: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                           block_tables: torch.Tensor, context_lens: torch.Tensor,
                           scale: float | None = None, *, num_splits: int | None = None,
                           check: bool = True) -> torch.Tensor:
    """Triton version of `reference.paged_decode_attention` (same arguments).

    `num_splits`: how many ranges to cut the longest possible context
    (``block_tables.shape[1] * block_size``) into; None picks one from the
    GPU's size, 1 is the single-pass kernel. ``check=False`` skips the checks
    that read tensor values, which cost a host sync.
    """
    checks.check_decode(query, k_cache, v_cache, block_tables, context_lens, num_splits,
                        values=check)
    check_attention_dtype(query, "paged_decode_attention")
    num_seqs, num_q_heads, head_dim = query.shape
    _, block_size, num_kv_heads, _ = k_cache.shape
    out = torch.empty((num_seqs, num_q_heads, head_dim), dtype=query.dtype, device=query.device)
    if num_seqs == 0:
        return out
    scale = head_dim ** -0.5 if scale is None else float(scale)

    max_context = max(1, block_tables.shape[1] * block_size)
    if num_splits is None:
        num_splits = default_num_splits(num_seqs, num_kv_heads, max_context, query.device)
    tokens_per_split = triton.cdiv(triton.cdiv(max_context, num_splits), BLOCK_N) * BLOCK_N
    num_splits = triton.cdiv(max_context, tokens_per_split)  # rounding may leave fewer

    if num_splits == 1:
        partial_out = partial_lse = out  # unused by the single-pass kernel
    else:
        partial_out = torch.empty((num_seqs, num_q_heads, num_splits, head_dim),
                                  dtype=torch.float32, device=query.device)
        partial_lse = torch.empty((num_seqs, num_q_heads, num_splits),
                                  dtype=torch.float32, device=query.device)
    group = num_q_heads // num_kv_heads
    block_tables, context_lens = block_tables.contiguous(), context_lens.contiguous()
    _paged_decode_kernel[(num_seqs, num_kv_heads, num_splits)](
        query, k_cache, v_cache, block_tables, context_lens,
        out, partial_out, partial_lse,
        scale, tokens_per_split,
        query.stride(0), query.stride(1), out.stride(0), out.stride(1), block_tables.stride(0),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        NUM_Q_HEADS=num_q_heads, GROUP=group, BLOCK_G=max(16, next_power_of_2(group)),
        HEAD_DIM=head_dim, BLOCK_D=max(16, next_power_of_2(head_dim)),
        BLOCK_SIZE=block_size, BLOCK_N=BLOCK_N, NUM_SPLITS=num_splits,
        PRECISION=dot_precision(query.dtype),
    )
    if num_splits > 1:
        _split_k_reduce_kernel[(num_seqs, num_q_heads)](
            partial_out, partial_lse, context_lens, out,
            tokens_per_split, out.stride(0), out.stride(1),
            NUM_Q_HEADS=num_q_heads, NUM_SPLITS=num_splits,
            BLOCK_S=next_power_of_2(num_splits),
            HEAD_DIM=head_dim, BLOCK_D=next_power_of_2(head_dim),
        )
    return out
