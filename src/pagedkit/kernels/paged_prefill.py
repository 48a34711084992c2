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

One program computes a tile of ``BLOCK_M`` rows for one sequence and one KV
head: ``Q_PER_TILE`` query tokens times ``H_PER_TILE`` of the query heads
that share that KV head (grouped-query attention), row ``r`` being token
``r // H_PER_TILE`` and head ``r % H_PER_TILE``. So each K/V tile is read
once for the whole group, not once per query head (4x less traffic for
Llama-3-8B-like heads, 32x for multi-query attention). The loop is
FlashAttention's, with online softmax (see `paged_decode`), over the
sequence's K/V tiles, each token found through the block table; it stops at
the last position any row may see and masks causally.

With a sliding window the loop also *starts* late, at the first key the
tile's earliest row may see: blocks wholly before it are never read, which
matters because the engine may have freed them (they can hold another
sequence's data, or NaN). Softcap and sinks work as in `paged_decode`.

Reference: `pagedkit.kernels.reference.paged_prefill_attention`.
"""

from __future__ import annotations

import torch

from . import checks, launch
from .paged_decode import _softcapped
from .triton_support import (
    check_attention_dtype,
    dot_precision,
    head_dim_at_stride_1,
    interpreter_on,
    next_power_of_2,
    tl,
    triton,
)

INTERPRETED = interpreter_on()  # fixed now, when the kernels below are decorated
DECODE_HEAVY_ROWS = 16  # a tile this small when the longest chunk fills no more rows


@triton.jit(do_not_specialize=["window", "stride_table"])
def _paged_prefill_kernel(
    q_ptr, k_cache_ptr, v_cache_ptr, block_tables_ptr, cu_seqlens_ptr, context_lens_ptr,
    sinks_ptr, out_ptr, scale, softcap, window,
    stride_q_token, stride_q_head, stride_out_token, stride_out_head, stride_table,
    stride_cache_block, stride_cache_token, stride_cache_head,
    GROUP: tl.constexpr, HEAD_CHUNKS: tl.constexpr, Q_PER_TILE: tl.constexpr,
    H_PER_TILE: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr,
    BLOCK_SIZE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    HAS_WINDOW: tl.constexpr, HAS_SOFTCAP: tl.constexpr, HAS_SINKS: tl.constexpr,
    PRECISION: tl.constexpr,
):
    q_tile = tl.program_id(0)
    seq = tl.program_id(1)
    kv_head = tl.program_id(2) // HEAD_CHUNKS
    head_chunk = tl.program_id(2) % HEAD_CHUNKS

    q_first = tl.load(cu_seqlens_ptr + seq)
    q_len = tl.load(cu_seqlens_ptr + seq + 1) - q_first
    if q_tile * Q_PER_TILE < q_len:  # the grid is sized for the longest chunk
        q_start = q_first.to(tl.int64)  # row * stride may pass 2**31
        context_len = tl.load(context_lens_ptr + seq)
        r = tl.arange(0, BLOCK_M)
        token = q_tile * Q_PER_TILE + r // H_PER_TILE        # within the chunk
        in_group = head_chunk * H_PER_TILE + r % H_PER_TILE
        head = kv_head * GROUP + in_group
        row_mask = (r < Q_PER_TILE * H_PER_TILE) & (token < q_len) & (in_group < GROUP)
        position = context_len - q_len + token               # absolute position of each row
        d = tl.arange(0, BLOCK_D)
        d_mask = d < HEAD_DIM
        q_offs = (q_start + token)[:, None] * stride_q_token + head[:, None] * stride_q_head \
            + d[None, :]
        q = tl.load(q_ptr + q_offs, mask=row_mask[:, None] & d_mask[None, :], other=0.0)

        row_max = tl.full([BLOCK_M], float("-inf"), tl.float32)
        row_sum = tl.zeros([BLOCK_M], tl.float32)
        acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)

        # Keys past the tile's last token are in every row's future: stop there.
        last_token = tl.minimum(q_len, (q_tile + 1) * Q_PER_TILE) - 1
        kv_end = context_len - q_len + last_token + 1
        kv_start = 0
        if HAS_WINDOW:  # nor can any row see a key before its first row's window
            kv_start = tl.maximum(context_len - q_len + q_tile * Q_PER_TILE - window + 1, 0)
        for tile_start in range(kv_start, kv_end, BLOCK_N):
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
            if HAS_SOFTCAP:
                scores = _softcapped(scores, softcap)
            visible = n_mask[None, :] & (n[None, :] <= position[:, None])   # causal
            if HAS_WINDOW:
                visible = visible & (n[None, :] > position[:, None] - window)
            scores = tl.where(visible, scores, float("-inf"))

            # A row may see nothing in a tile (a window starting later): keep it at 0.
            new_max = tl.maximum(row_max, tl.max(scores, 1))
            safe = tl.where(new_max > float("-inf"), new_max, 0.0)
            alpha = tl.exp(row_max - safe)
            p = tl.exp(scores - safe[:, None])
            row_sum = row_sum * alpha + tl.sum(p, 1)
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
            row_max = new_max

        if HAS_SINKS:
            sink = tl.load(sinks_ptr + head, mask=row_mask, other=0.0).to(tl.float32)
            top = tl.maximum(row_max, sink)
            rescale = tl.exp(row_max - top)
            row_sum = row_sum * rescale + tl.exp(sink - top)
            acc = acc * rescale[:, None]
        out = acc / tl.where(row_sum > 0, row_sum, 1.0)[:, None]  # padding rows summed nothing
        out_offs = (q_start + token)[:, None] * stride_out_token \
            + head[:, None] * stride_out_head + d[None, :]
        tl.store(out_ptr + out_offs, out.to(out_ptr.dtype.element_ty),
                 mask=row_mask[:, None] & d_mask[None, :])


def prefill_launches(query: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                 block_tables: torch.Tensor, cu_seqlens_q: torch.Tensor,
                 context_lens: torch.Tensor, out: torch.Tensor, scale: float, max_q_len: int, *,
                 sliding_window: int | None, softcap: float | None, sinks: torch.Tensor | None,
                 arch: int) -> list[launch.Launch]:
    """The kernel launch of one prefill call for GPU `arch`."""
    _, num_q_heads, head_dim = query.shape
    _, block_size, num_kv_heads, _ = k_cache.shape
    num_seqs = context_lens.shape[0]
    group = num_q_heads // num_kv_heads
    config = launch.prefill_config(arch, head_dim, query.element_size())
    block_m = config.block_m
    if max_q_len * group <= DECODE_HEAVY_ROWS < block_m:  # decode-heavy: waste less of a tile
        block_m = DECODE_HEAVY_ROWS
    h_per_tile = min(next_power_of_2(group), block_m)   # a tile's heads: the group, if it fits
    head_chunks = triton.cdiv(group, h_per_tile)
    q_per_tile = block_m // h_per_tile
    grid = (triton.cdiv(max_q_len, q_per_tile), num_seqs, num_kv_heads * head_chunks)
    return [launch.Launch(
        _paged_prefill_kernel, grid,
        (query, k_cache, v_cache, block_tables, cu_seqlens_q, context_lens,
         sinks if sinks is not None else out, out, scale, float(softcap or 1.0),
         min(int(sliding_window or 0), 2**31 - 1),
         query.stride(0), query.stride(1), out.stride(0), out.stride(1), block_tables.stride(0),
         k_cache.stride(0), k_cache.stride(1), k_cache.stride(2)),
        dict(GROUP=group, HEAD_CHUNKS=head_chunks, Q_PER_TILE=q_per_tile, H_PER_TILE=h_per_tile,
             HEAD_DIM=head_dim, BLOCK_D=max(16, next_power_of_2(head_dim)),
             BLOCK_SIZE=block_size, BLOCK_M=block_m, BLOCK_N=config.block_n,
             HAS_WINDOW=sliding_window is not None, HAS_SOFTCAP=softcap is not None,
             HAS_SINKS=sinks is not None, PRECISION=dot_precision(query.dtype)),
        launch.Config(block_m, config.block_n, config.num_warps, config.num_stages), "prefill")]


def paged_prefill_attention(query: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                            block_tables: torch.Tensor, cu_seqlens_q: torch.Tensor,
                            context_lens: torch.Tensor, scale: float | None = None, *,
                            sliding_window: int | None = None, softcap: float | None = None,
                            sinks: torch.Tensor | None = None,
                            check: bool = True) -> torch.Tensor:
    """Triton version of `reference.paged_prefill_attention` (same arguments).

    ``check=False`` skips the argument checks (`pagedkit.kernels.checks`):
    the caller vouches for them. The longest chunk is read back to size the
    grid either way (one host sync).
    """
    if check:
        checks.check_prefill(query, k_cache, v_cache, block_tables, cu_seqlens_q, context_lens,
                             sliding_window=sliding_window, softcap=softcap, sinks=sinks)
    check_attention_dtype(query, "paged_prefill_attention")
    query = head_dim_at_stride_1(query)
    total_tokens, num_q_heads, head_dim = query.shape
    out = torch.empty((total_tokens, num_q_heads, head_dim), dtype=query.dtype,
                      device=query.device)
    if total_tokens == 0 or context_lens.shape[0] == 0:
        return out
    scale = head_dim ** -0.5 if scale is None else float(scale)
    max_q_len = int((cu_seqlens_q[1:] - cu_seqlens_q[:-1]).max())
    launch.run_all(prefill_launches(
        query, k_cache, v_cache, block_tables.contiguous(), cu_seqlens_q.contiguous(),
        context_lens.contiguous(), out, scale, max_q_len, sliding_window=sliding_window,
        softcap=None if softcap is None else float(softcap),
        sinks=None if sinks is None else sinks.contiguous(), arch=launch.arch_of(query.device)))
    return out
