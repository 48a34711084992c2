"""The PagedAttention operations in plain torch: what each Triton kernel computes.

Read these side by side with the kernels (``store_kv.py``,
``paged_decode.py``, ``paged_prefill.py``, ``copy_blocks.py``); the
signatures are the same. Each reference does the obvious thing: *gather* a
sequence's blocks into one contiguous K and V, then compute `attention`
over them, written out step by step (scores, softcap, mask, softmax with an
optional sink). The kernels compute the
same numbers without the gather: they follow the block table while they
stream K/V through on-chip memory (paper §4.1), which is the whole point.

These run on any device and any float dtype (bfloat16 included) and need no
Triton; they are what `pagedkit.ops` runs on CPU.

Cache layout, per layer, for K and for V: ``[num_blocks, block_size,
num_kv_heads, head_dim]``. Token ``i`` of a sequence sits in logical block
``i // block_size`` at offset ``i % block_size``; its slot is
``block_tables[s, i // block_size] * block_size + i % block_size``.
"""

from __future__ import annotations

import torch

from . import checks


def store_kv(key: torch.Tensor, value: torch.Tensor, k_cache: torch.Tensor,
             v_cache: torch.Tensor, slot_mapping: torch.Tensor, *, check: bool = True) -> None:
    """Write each new token's key and value into its physical slot (paper §4.1).

    key/value: ``[num_tokens, num_kv_heads, head_dim]``; slot_mapping:
    ``[num_tokens]`` ints, ``block * block_size + offset``; a negative slot
    means "skip this token" (e.g. padding).
    """
    if check:
        checks.check_store_kv(key, value, k_cache, v_cache, slot_mapping)
    keep = slot_mapping >= 0
    slots = slot_mapping[keep].long()
    # A cache viewed as [num_slots, heads, head_dim]: slot = block * block_size + offset.
    k_cache.view(-1, *k_cache.shape[2:])[slots] = key[keep]
    v_cache.view(-1, *v_cache.shape[2:])[slots] = value[keep]


def gather_kv(cache: torch.Tensor, block_table: torch.Tensor, num_tokens: int,
              first_block: int = 0) -> torch.Tensor:
    """One sequence's cached vectors of positions ``first_block * block_size ..
    num_tokens - 1``, made contiguous: ``[tokens, num_kv_heads, head_dim]``.
    Only the blocks that hold them are read; the rest of the row is padding,
    and the entries before `first_block` (blocks a sliding window has let go)
    may be anything."""
    block_size = cache.shape[1]
    num_blocks = -(-num_tokens // block_size)
    blocks = cache[block_table[first_block:num_blocks].long()]     # [n, block_size, H, D]
    return blocks.flatten(0, 1)[:num_tokens - first_block * block_size]


def first_visible_block(first_position: int, block_size: int,
                        sliding_window: int | None) -> int:
    """The first logical block a query at `first_position` (or later) can see.

    With a window of w keys, the query at position p sees ``p - w + 1 .. p``;
    every block that ends before that is never read (the engine may have given
    it back to the pool, so it can hold anything, NaN included)."""
    if sliding_window is None:
        return 0
    return max(0, first_position - sliding_window + 1) // block_size


def attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, scale: float,
              first_position: int, *, key_offset: int = 0, sliding_window: int | None = None,
              softcap: float | None = None, sinks: torch.Tensor | None = None) -> torch.Tensor:
    """Causal grouped-query attention of one sequence over contiguous K/V.

    query ``[q_len, num_q_heads, D]`` holds the tokens at absolute positions
    ``first_position .. first_position + q_len - 1``; key/value
    ``[kv_len, num_kv_heads, D]`` hold positions ``key_offset .. key_offset +
    kv_len - 1``. Query head h reads KV head ``h // (num_q_heads //
    num_kv_heads)`` (grouped-query attention). Step by step, in float32 (or
    float64 for float64 inputs):

    1. score ``s = (q . k) * scale``;
    2. `softcap` (Gemma 2): ``s = softcap * tanh(s / softcap)``;
    3. a query at position p sees key k iff ``k <= p`` and, with a
       `sliding_window` of w, ``k > p - w`` (w keys, its own included; the
       convention of transformers' ``sliding_window_overlay``);
    4. `sinks` (gpt-oss), one logit per query head, joins each softmax's
       denominator and adds no value: the head can attend "nowhere".
    """
    q_len, kv_len = query.shape[0], key.shape[0]
    group = query.shape[1] // key.shape[1]
    compute = torch.promote_types(query.dtype, torch.float32)
    q = query.to(compute)
    k = key.to(compute).repeat_interleave(group, dim=1)
    v = value.to(compute).repeat_interleave(group, dim=1)
    scores = torch.einsum("qhd,khd->hqk", q, k) * scale                 # [heads, q_len, kv_len]
    if softcap is not None:
        scores = softcap * torch.tanh(scores / softcap)
    q_pos = torch.arange(first_position, first_position + q_len, device=query.device)[:, None]
    k_pos = torch.arange(key_offset, key_offset + kv_len, device=query.device)[None, :]
    visible = k_pos <= q_pos
    if sliding_window is not None:
        visible &= k_pos > q_pos - sliding_window
    scores = scores.masked_fill(~visible, float("-inf"))
    if sinks is not None:
        sink = sinks.to(compute)[:, None, None].expand(-1, q_len, 1)
        scores = torch.cat([scores, sink], dim=-1)
    probs = torch.softmax(scores, dim=-1)
    if sinks is not None:
        probs = probs[..., :-1]                                           # the sink adds no value
    return torch.einsum("hqk,khd->qhd", probs, v).to(query.dtype)


def _one_sequence(query: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                  block_table: torch.Tensor, context_len: int, scale: float,
                  sliding_window: int | None, softcap: float | None,
                  sinks: torch.Tensor | None) -> torch.Tensor:
    """`attention` of one sequence's queries (the last ``len(query)`` positions
    of its context) over the blocks they can see."""
    first_position = context_len - query.shape[0]
    first = first_visible_block(first_position, k_cache.shape[1], sliding_window)
    k = gather_kv(k_cache, block_table, context_len, first)
    v = gather_kv(v_cache, block_table, context_len, first)
    return attention(query, k, v, scale, first_position, key_offset=first * k_cache.shape[1],
                     sliding_window=sliding_window, softcap=softcap, sinks=sinks)


def paged_decode_attention(query: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                           block_tables: torch.Tensor, context_lens: torch.Tensor,
                           scale: float | None = None, *, sliding_window: int | None = None,
                           softcap: float | None = None, sinks: torch.Tensor | None = None,
                           num_splits: int | None = None, check: bool = True) -> torch.Tensor:
    """Attention of one new query token per sequence over its paged K/V (paper §4.1).

    query ``[num_seqs, num_q_heads, head_dim]``; block_tables
    ``[num_seqs, max_blocks_per_seq]`` (entries past a sequence's blocks are
    padding and never read); context_lens ``[num_seqs]`` cached tokens, the
    new token's included. Returns ``[num_seqs, num_q_heads, head_dim]``.
    `sliding_window`, `softcap` and `sinks` are the options of `attention`.
    `num_splits` only matters to the Triton kernel (split-KV); it is checked
    and then ignored here.
    """
    if check:
        checks.check_decode(query, k_cache, v_cache, block_tables, context_lens, num_splits,
                            sliding_window=sliding_window, softcap=softcap, sinks=sinks)
    scale = query.shape[-1] ** -0.5 if scale is None else scale
    out = torch.empty_like(query)
    for s, ctx in enumerate(context_lens.tolist()):
        out[s] = _one_sequence(query[s:s + 1], k_cache, v_cache, block_tables[s], ctx, scale,
                               sliding_window, softcap, sinks)[0]
    return out


def paged_prefill_attention(query: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                            block_tables: torch.Tensor, cu_seqlens_q: torch.Tensor,
                            context_lens: torch.Tensor, scale: float | None = None, *,
                            sliding_window: int | None = None, softcap: float | None = None,
                            sinks: torch.Tensor | None = None,
                            check: bool = True) -> torch.Tensor:
    """Causal attention of packed query chunks over their sequences' paged K/V.

    Sequence s owns query rows ``cu_seqlens_q[s] : cu_seqlens_q[s + 1]``
    (q_len tokens). ``context_lens[s]`` counts its cached tokens *including*
    this chunk, whose K/V `store_kv` has already written; so query token j
    sits at position ``context_lens[s] - q_len + j`` and sees cache positions
    ``0..`` that position (the last `sliding_window` of them with a window). A
    cached prefix (a prefix-cache hit, paper §4.4, or the earlier chunks of a
    chunked prefill) is simply read from the cache; a sequence with q_len 1
    is a decode step.
    """
    if check:
        checks.check_prefill(query, k_cache, v_cache, block_tables, cu_seqlens_q, context_lens,
                             sliding_window=sliding_window, softcap=softcap, sinks=sinks)
    scale = query.shape[-1] ** -0.5 if scale is None else scale
    out = torch.empty_like(query)
    bounds = cu_seqlens_q.tolist()
    for s, ctx in enumerate(context_lens.tolist()):
        start, end = bounds[s], bounds[s + 1]
        if start == end:
            continue
        out[start:end] = _one_sequence(query[start:end], k_cache, v_cache, block_tables[s], ctx,
                                       scale, sliding_window, softcap, sinks)
    return out


def copy_blocks(cache: torch.Tensor, block_pairs: torch.Tensor, *, check: bool = True) -> None:
    """Copy whole blocks ``cache[src] -> cache[dst]`` in place, one per row of
    `block_pairs` ``[n, 2]``: the copy in copy-on-write (paper §4.4).

    Call it once per cache tensor (K and V of every layer).
    """
    if check:
        checks.check_copy_blocks(cache, block_pairs)
    pairs = block_pairs.long()
    cache[pairs[:, 1]] = cache[pairs[:, 0]]
