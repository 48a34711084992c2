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

Four ideas beyond "follow the table":

* **Online softmax** (Milakov & Gimelshein 2018; FlashAttention): keep a
  running maximum of the scores, a running sum of ``exp(score - max)`` and a
  running ``exp(score - max)``-weighted sum of values; rescale both sums when
  the maximum grows. One pass over K/V, no ``[context]``-sized score vector.
* **Grouped-query attention**: one program serves all the query heads that
  share a KV head, so each K/V tile is read from memory once for the group.
  The group is padded to 16 rows because ``tl.dot`` needs that many; decode
  is bound by memory traffic, not by those wasted multiplies.
* **Split-KV** (flash-decoding): one sequence of 32k tokens would give a GPU
  one program per KV head, leaving most of it idle. So the context is cut
  into ``num_splits`` ranges, each program attends over one range and writes
  its partial result with its log-sum-exp, and a second small kernel,
  `_split_k_reduce_kernel`, merges the partials with the right weights.
  The split count and length are *runtime* arguments: a sequence growing to
  8k tokens reuses the same two compiled kernels (a compile-time split
  count compiled a new pair for every value it took, mid-generation).
* **Options** (docs/kernels.md, "Attention options"): a sliding window
  starts the loop at the window's first key, so the blocks before it are
  never read (the engine may have freed them: they can hold anything, NaN
  included); a softcap squashes scores through ``tanh``; a sink adds one
  logit per head to the softmax denominator and nothing to the values.
  Each is a compile-time switch, so a model without them runs the plain
  kernel.
"""

from __future__ import annotations

import torch

from . import checks, launch
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

MIN_TOKENS_PER_SPLIT = 256  # below this a split costs more than it saves
REDUCE_BLOCK_S = 16         # splits the reduction merges per step


@triton.jit
def _softcapped(scores, softcap):
    """``softcap * tanh(scores / softcap)``, tanh written with exp (stable at both ends)."""
    return softcap * (1.0 - 2.0 / (tl.exp(2.0 * scores / softcap) + 1.0))


@triton.jit(do_not_specialize=["window", "tokens_per_split", "num_splits", "stride_table"])
def _paged_decode_kernel(
    q_ptr, k_cache_ptr, v_cache_ptr, block_tables_ptr, context_lens_ptr, sinks_ptr,
    out_ptr, partial_out_ptr, partial_lse_ptr,
    scale, softcap, window, tokens_per_split, num_splits,
    stride_q_seq, stride_q_head, stride_out_seq, stride_out_head, stride_table,
    stride_cache_block, stride_cache_token, stride_cache_head,
    NUM_Q_HEADS: tl.constexpr, GROUP: tl.constexpr, BLOCK_G: tl.constexpr,
    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr,
    BLOCK_SIZE: tl.constexpr, BLOCK_N: tl.constexpr, SPLIT: tl.constexpr,
    HAS_WINDOW: tl.constexpr, HAS_SOFTCAP: tl.constexpr, HAS_SINKS: tl.constexpr,
    PRECISION: tl.constexpr,
):
    seq = tl.program_id(0)
    kv_head = tl.program_id(1)
    split = tl.program_id(2)

    context_len = tl.load(context_lens_ptr + seq)
    # The query is at position context_len - 1; a window of W keys starts W - 1 before it.
    first = 0
    if HAS_WINDOW:
        first = tl.maximum(context_len - window, 0)
    start = first + split * tokens_per_split
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

    # Every tile holds at least one token before `end`, so row_max is finite after it.
    for tile_start in range(start, end, BLOCK_N):
        n = tile_start + tl.arange(0, BLOCK_N)           # token positions in the sequence
        n_mask = n < end
        # The paging step: token n lives in physical block table[n // BLOCK_SIZE]
        # at offset n % BLOCK_SIZE. Positions outside [start, end) are never looked up.
        block = tl.load(block_tables_ptr + seq * stride_table + n // BLOCK_SIZE,
                        mask=n_mask, other=0).to(tl.int64)
        row = block * stride_cache_block + (n % BLOCK_SIZE) * stride_cache_token \
            + kv_head * stride_cache_head
        kv_mask = n_mask[:, None] & d_mask[None, :]
        k = tl.load(k_cache_ptr + row[:, None] + d[None, :], mask=kv_mask, other=0.0)
        v = tl.load(v_cache_ptr + row[:, None] + d[None, :], mask=kv_mask, other=0.0)

        scores = tl.dot(q, tl.trans(k), input_precision=PRECISION) * scale  # [BLOCK_G, BLOCK_N]
        if HAS_SOFTCAP:
            scores = _softcapped(scores, softcap)
        scores = tl.where(n_mask[None, :], scores, float("-inf"))

        new_max = tl.maximum(row_max, tl.max(scores, 1))
        alpha = tl.exp(row_max - new_max)  # rescales what was summed so far
        p = tl.exp(scores - new_max[:, None])
        row_sum = row_sum * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
        row_max = new_max

    out_mask = g_mask[:, None] & d_mask[None, :]
    if SPLIT:
        # A split that starts past the context has summed nothing (row_sum == 0):
        # its log-sum-exp is -inf, which gives it weight 0 in the reduction.
        has_tokens = row_sum > 0
        out = acc / tl.where(has_tokens, row_sum, 1.0)[:, None]
        # partial_out: [num_seqs, NUM_Q_HEADS, num_splits, HEAD_DIM]; partial_lse: without HEAD_DIM
        part = (seq * NUM_Q_HEADS + head).to(tl.int64) * num_splits + split
        tl.store(partial_out_ptr + part[:, None] * HEAD_DIM + d[None, :], out, mask=out_mask)
        lse = tl.where(has_tokens, row_max + tl.log(tl.where(has_tokens, row_sum, 1.0)),
                       float("-inf"))
        tl.store(partial_lse_ptr + part, lse, mask=g_mask)
    else:
        if HAS_SINKS:
            # The sink joins the denominator: rescale both sums to max(row_max, sink).
            sink = tl.load(sinks_ptr + head, mask=g_mask, other=0.0).to(tl.float32)
            top = tl.maximum(row_max, sink)
            rescale = tl.exp(row_max - top)
            row_sum = row_sum * rescale + tl.exp(sink - top)
            acc = acc * rescale[:, None]
        out = acc / row_sum[:, None]
        tl.store(out_ptr + seq * stride_out_seq + head[:, None] * stride_out_head + d[None, :],
                 out.to(out_ptr.dtype.element_ty), mask=out_mask)


@triton.jit(do_not_specialize=["num_splits"])
def _split_k_reduce_kernel(
    partial_out_ptr, partial_lse_ptr, sinks_ptr, out_ptr,
    num_splits, stride_out_seq, stride_out_head,
    NUM_Q_HEADS: tl.constexpr, BLOCK_S: tl.constexpr,
    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, HAS_SINKS: tl.constexpr,
):
    """Merge one (sequence, query head)'s split results.

    Split i attended over its range and returned ``o_i`` (normalised within
    the range) and ``lse_i = log(sum of exp(scores in range))``. The full
    softmax gives range i the weight ``exp(lse_i) / (sum_j exp(lse_j) [+
    exp(sink)])``, so the answer is ``sum_i w_i * o_i``. The splits are merged
    ``BLOCK_S`` at a time with the same running-max trick as the attention
    loop, so the split count is a runtime value (no recompile per count).
    """
    seq = tl.program_id(0)
    head = tl.program_id(1)
    s = tl.arange(0, BLOCK_S)
    d = tl.arange(0, BLOCK_D)
    d_mask = d < HEAD_DIM
    base = (seq * NUM_Q_HEADS + head).to(tl.int64) * num_splits

    top = tl.full([], float("-inf"), tl.float32)  # running max of the log-sum-exps (and sink)
    if HAS_SINKS:
        top = tl.load(sinks_ptr + head).to(tl.float32)
    denom = tl.exp(top - tl.where(top > float("-inf"), top, 0.0))   # 1 with a sink, else 0
    acc = tl.zeros([BLOCK_D], tl.float32)
    for first in range(0, num_splits, BLOCK_S):
        s_mask = first + s < num_splits
        lse = tl.load(partial_lse_ptr + base + first + s, mask=s_mask, other=float("-inf"))
        new_top = tl.maximum(top, tl.max(lse, 0))
        safe = tl.where(new_top > float("-inf"), new_top, 0.0)  # all -inf so far: weights 0
        alpha = tl.exp(top - safe)
        weight = tl.exp(lse - safe)
        partial = tl.load(partial_out_ptr + (base + first + s)[:, None] * HEAD_DIM + d[None, :],
                          mask=s_mask[:, None] & d_mask[None, :], other=0.0)
        acc = acc * alpha + tl.sum(partial * weight[:, None], 0)
        denom = denom * alpha + tl.sum(weight, 0)
        top = new_top
    tl.store(out_ptr + seq * stride_out_seq + head * stride_out_head + d,
             (acc / denom).to(out_ptr.dtype.element_ty), mask=d_mask)


def multiprocessors(device: torch.device) -> int | None:
    """The GPU's streaming multiprocessors (None off CUDA), which size the split count."""
    if device.type != "cuda":
        return None
    return torch.cuda.get_device_properties(device).multi_processor_count


def default_num_splits(num_seqs: int, num_kv_heads: int, max_context: int,
                       sms: int | None) -> int:
    """Enough splits to give each of the `sms` streaming multiprocessors about two
    programs, but none shorter than `MIN_TOKENS_PER_SPLIT` tokens. One off a GPU."""
    if sms is None:
        return 1
    wanted = triton.cdiv(2 * sms, num_seqs * num_kv_heads)
    return max(1, min(wanted, triton.cdiv(max_context, MIN_TOKENS_PER_SPLIT)))


def decode_launches(query: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                block_tables: torch.Tensor, context_lens: torch.Tensor, out: torch.Tensor,
                scale: float, *, sliding_window: int | None, softcap: float | None,
                sinks: torch.Tensor | None, num_splits: int | None,
                arch: int, sms: int | None) -> list[launch.Launch]:
    """The kernel launches of one decode call (one, or two with splits) for GPU `arch`
    with `sms` multiprocessors (None: no GPU, one split unless `num_splits` says more)."""
    num_seqs, num_q_heads, head_dim = query.shape
    _, block_size, num_kv_heads, _ = k_cache.shape
    config = launch.decode_config(arch, head_dim, query.element_size())
    # The longest range of keys any query may see: the table's width, or the window.
    span = max(1, block_tables.shape[1] * block_size)
    if sliding_window is not None:
        span = min(span, sliding_window)
    if num_splits is None:
        num_splits = default_num_splits(num_seqs, num_kv_heads, span, sms)
    tokens_per_split = triton.cdiv(triton.cdiv(span, num_splits), config.block_n) * config.block_n
    num_splits = triton.cdiv(span, tokens_per_split)  # rounding may leave fewer
    split = num_splits > 1
    if split:
        partial_out = torch.empty((num_seqs, num_q_heads, num_splits, head_dim),
                                  dtype=torch.float32, device=query.device)
        partial_lse = torch.empty((num_seqs, num_q_heads, num_splits),
                                  dtype=torch.float32, device=query.device)
    else:
        partial_out = partial_lse = out  # unused by the single-pass kernel
    sinks_arg = sinks if sinks is not None else out  # unused without sinks
    group = num_q_heads // num_kv_heads
    block_d = max(16, next_power_of_2(head_dim))
    launches = [launch.Launch(
        _paged_decode_kernel, (num_seqs, num_kv_heads, num_splits),
        (query, k_cache, v_cache, block_tables, context_lens, sinks_arg,
         out, partial_out, partial_lse,
         scale, float(softcap or 1.0), min(int(sliding_window or 0), 2**31 - 1),
         tokens_per_split, num_splits,
         query.stride(0), query.stride(1), out.stride(0), out.stride(1), block_tables.stride(0),
         k_cache.stride(0), k_cache.stride(1), k_cache.stride(2)),
        dict(NUM_Q_HEADS=num_q_heads, GROUP=group, BLOCK_G=max(16, next_power_of_2(group)),
             HEAD_DIM=head_dim, BLOCK_D=block_d, BLOCK_SIZE=block_size,
             BLOCK_N=config.block_n, SPLIT=split, HAS_WINDOW=sliding_window is not None,
             HAS_SOFTCAP=softcap is not None, HAS_SINKS=sinks is not None and not split,
             PRECISION=dot_precision(query.dtype)),
        config, "decode_split" if split else "decode")]
    if split:
        launches.append(launch.Launch(
            _split_k_reduce_kernel, (num_seqs, num_q_heads),
            (partial_out, partial_lse, sinks_arg, out, num_splits, out.stride(0), out.stride(1)),
            dict(NUM_Q_HEADS=num_q_heads, BLOCK_S=REDUCE_BLOCK_S, HEAD_DIM=head_dim,
                 BLOCK_D=block_d, HAS_SINKS=sinks is not None),
            launch.Config(num_warps=4, num_stages=1), "split_reduce"))
    return launches


def paged_decode_attention(query: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                           block_tables: torch.Tensor, context_lens: torch.Tensor,
                           scale: float | None = None, *, sliding_window: int | None = None,
                           softcap: float | None = None, sinks: torch.Tensor | None = None,
                           num_splits: int | None = None, check: bool = True) -> torch.Tensor:
    """Triton version of `reference.paged_decode_attention` (same arguments).

    `num_splits`: how many ranges to cut the longest possible context
    (``block_tables.shape[1] * block_size``, or the window if shorter) into;
    None picks one from the GPU's size, 1 is the single-pass kernel.
    ``check=False`` skips the argument checks (`pagedkit.kernels.checks`):
    the caller vouches for them.
    """
    if check:
        checks.check_decode(query, k_cache, v_cache, block_tables, context_lens, num_splits,
                            sliding_window=sliding_window, softcap=softcap, sinks=sinks)
    check_attention_dtype(query, "paged_decode_attention")
    query = head_dim_at_stride_1(query)
    num_seqs, num_q_heads, head_dim = query.shape
    out = torch.empty((num_seqs, num_q_heads, head_dim), dtype=query.dtype, device=query.device)
    if num_seqs == 0:
        return out
    scale = head_dim ** -0.5 if scale is None else float(scale)
    launch.run_all(decode_launches(
        query, k_cache, v_cache, block_tables.contiguous(), context_lens.contiguous(), out,
        scale, sliding_window=sliding_window, softcap=None if softcap is None else float(softcap),
        sinks=None if sinks is None else sinks.contiguous(), num_splits=num_splits,
        arch=launch.arch_of(query.device), sms=multiprocessors(query.device)))
    return out
