"""Paged attention for a whole step as a few batched tensor ops: the fast CPU path.

`reference.py` loops over sequences: per sequence a gather, a
``repeat_interleave`` for grouped-query attention, scores, mask and softmax —
in every layer of every step. That is the clearest statement of what paged attention
computes, and on a CPU the slowest: a decode step of 64 sequences through 4
layers is 256 tiny attentions, each paying Python and dispatch overhead (and a
thread handoff when torch runs two threads). This module computes the same
numbers with one gather and two batched matrix multiplications (per KV head
and per length bucket, see `_attend`), whatever the number of sequences:

1. **Gather** every sequence's blocks at once through its (padded) block-table
   row: ``k_cache.index_select(0, ids)``, ``ids`` ``[num_seqs, max_blocks]``.
   Rows of sequences with fewer blocks are padded with a safe block id (0) — the table
   entries past a sequence's blocks, and those wholly before its sliding
   window, are never used to index the cache (they may be -1, or a block the
   engine has already given to someone else).
2. **Pad the queries** into ``[num_seqs, max_q_len]`` (a decode step has
   ``max_q_len`` 1) and fold each KV head's group of query heads into the row
   dimension, ``[num_seqs, kv_heads, q_len * group, head_dim]``: grouped-query
   attention without copying K/V heads (paper §4.1's kernel reads one KV head
   for all the query heads it serves; this is the matmul form of that).
3. **Mask** by position: a query at position p sees key k iff ``k <= p`` (and
   ``k > p - sliding_window`` with a window), which also hides every padded
   slot, since a padded slot's position is past the context. First, though,
   the keys and values of slots that hold no token are zeroed: an unused slot
   may hold NaN, and ``0 * NaN`` is NaN, so a -inf score alone would not keep
   it out of the output.
4. **Multiply** per KV head: ``scores = q @ K^T`` and ``out = softmax @ V`` as
   one batched matmul over all sequences each; ``K[:, :, h]`` is a strided
   view that BLAS reads in place, so the gathered K/V are never copied again.

Scores, softmax and the weighted sum run in float32 (as the kernels
accumulate) and the result is cast back to the query's dtype. The options
(sliding window, softcap, sinks) follow the contract in the attention spec;
see `reference.py` for the per-sequence statement of the same math.

Signatures equal `reference.paged_decode_attention` and
`reference.paged_prefill_attention`; `pagedkit.ops` runs these on CPU by
default. The work is padded within length buckets (at most doubling it), which
on the small models a CPU serves is far cheaper than one call per sequence.
"""

from __future__ import annotations

import torch

from . import checks


def _attend(query: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
            block_tables: torch.Tensor, q_starts: torch.Tensor, q_lens: torch.Tensor,
            context_lens: torch.Tensor, scale: float, sliding_window: int | None,
            softcap: float | None, sinks: torch.Tensor | None) -> torch.Tensor:
    """Packed queries ``[T, Hq, D]`` (sequence s owns rows ``q_starts[s] :
    q_starts[s] + q_lens[s]``, the last q_lens[s] positions of its context)
    attending to their paged K/V. Returns ``[T, Hq, D]``.

    Sequences are padded to the longest of their *bucket*: a bucket holds the
    sequences whose chunk length and context (in blocks) each lie within the
    same power of two, so padding at most doubles the work, however long the
    longest request of the step is (a ShareGPT-like mix has a long tail).
    """
    out = torch.empty_like(query)
    if query.shape[0] == 0 or context_lens.shape[0] == 0:
        return out
    block_size = k_cache.shape[1]
    buckets: dict[tuple[int, int], list[int]] = {}
    for s, (ctx, q) in enumerate(zip(context_lens.tolist(), q_lens.tolist(), strict=True)):
        if q == 0:
            continue  # an empty chunk: no rows to compute
        blocks = -(-ctx // block_size)
        if sliding_window is not None:
            blocks -= max(0, ctx - q - sliding_window + 1) // block_size
        buckets.setdefault((q.bit_length(), blocks.bit_length()), []).append(s)
    for seqs in buckets.values():
        pick = torch.tensor(seqs, device=query.device) if len(buckets) > 1 else slice(None)
        rows, values = _attend_padded(query, k_cache, v_cache, block_tables[pick],
                                      q_starts[pick], q_lens[pick], context_lens[pick], scale,
                                      sliding_window, softcap, sinks)
        out[rows] = values
    return out


def _attend_padded(query: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                   block_tables: torch.Tensor, q_starts: torch.Tensor, q_lens: torch.Tensor,
                   context_lens: torch.Tensor, scale: float, sliding_window: int | None,
                   softcap: float | None, sinks: torch.Tensor | None
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """`_attend` for some sequences, padded to the longest of them: returns
    the query rows computed and their outputs."""
    num_q_heads, head_dim = query.shape[1], query.shape[2]
    num_seqs = context_lens.shape[0]
    block_size, num_kv_heads = k_cache.shape[1], k_cache.shape[2]
    group = num_q_heads // num_kv_heads
    device = query.device
    ctx = context_lens.long()
    q_lens = q_lens.long()
    first_q = ctx - q_lens                                   # position of each chunk's row 0

    # Which logical blocks to read: from the first one the window can see
    # (for the chunk's earliest query) to the last one holding a token.
    end_block = (ctx + block_size - 1) // block_size
    if sliding_window is None:
        start_block = torch.zeros_like(ctx)
    else:
        start_block = (first_q - sliding_window + 1).clamp(min=0) // block_size
    num_read = torch.where(q_lens > 0, end_block - start_block, 0)
    max_q, max_read = (int(v) for v in torch.stack([q_lens.max(), num_read.max()]).tolist())

    col = torch.arange(max_read, device=device)
    logical = start_block[:, None] + col[None, :]            # [S, max_read]
    used = col[None, :] < num_read[:, None]
    # Padding columns look up table column 0 and then block 0: a safe id whose
    # contents are masked out below; no entry past a sequence's blocks is used.
    safe_col = torch.where(used, logical, 0)
    ids = torch.where(used, block_tables.long().gather(1, safe_col), 0)
    num_slots = max_read * block_size
    key_pos = (start_block[:, None] * block_size
               + torch.arange(num_slots, device=device)[None, :])   # [S, L]
    holds_token = (key_pos < ctx[:, None]) & used.repeat_interleave(block_size, dim=1)

    # One gather per cache: [S, L, Hkv, D]. A slot that holds no token (the end
    # of a last block, a padding block) may hold NaN, and 0 * NaN is NaN, so
    # its key and value are zeroed: a masked score alone would not keep it out.
    flat_ids = ids.flatten()
    keys = k_cache.index_select(0, flat_ids).view(num_seqs, num_slots, num_kv_heads, head_dim)
    values = v_cache.index_select(0, flat_ids).view(num_seqs, num_slots, num_kv_heads, head_dim)
    empty = (~holds_token).flatten().nonzero().squeeze(1)
    if empty.numel():
        keys.view(-1, num_kv_heads, head_dim).index_fill_(0, empty, 0)
        values.view(-1, num_kv_heads, head_dim).index_fill_(0, empty, 0)
    keys, values = keys.float(), values.float()

    # Queries padded to [S, max_q]; each KV head's group folded into the rows.
    qi = torch.arange(max_q, device=device)
    is_query = qi[None, :] < q_lens[:, None]                 # [S, max_q]
    rows = torch.where(is_query, q_starts.long()[:, None] + qi[None, :], 0)
    q = query[rows].float()                                  # [S, max_q, Hq, D]
    q = q.view(num_seqs, max_q, num_kv_heads, group, head_dim).permute(0, 2, 1, 3, 4)
    q = q.reshape(num_seqs, num_kv_heads, max_q * group, head_dim)

    # Per KV head, one batched matmul over all sequences: keys[:, :, h] is a
    # strided [S, L, D] view that BLAS reads in place.
    scores = torch.stack([torch.bmm(q[:, h], keys[:, :, h].transpose(1, 2))
                          for h in range(num_kv_heads)], dim=1).mul_(scale)  # [S, Hkv, q*G, L]
    if softcap is not None:
        scores = torch.tanh(scores.div_(softcap)).mul_(softcap)
    q_pos = first_q[:, None] + qi[None, :]                   # [S, max_q]
    visible = key_pos[:, None, :] <= q_pos[:, :, None]       # [S, max_q, L]
    if sliding_window is not None:
        visible &= key_pos[:, None, :] > q_pos[:, :, None] - sliding_window
    visible &= holds_token[:, None, :]
    # Every score is finite (empty slots were zeroed), so an additive -inf masks.
    bias = torch.zeros(visible.shape, device=device).masked_fill_(~visible, float("-inf"))
    scores = scores.view(num_seqs, num_kv_heads, max_q, group, num_slots)
    scores += bias[:, None, :, None, :]
    if sinks is None:
        probs = torch.softmax(scores, dim=-1)
    else:
        sink = sinks.float().view(1, num_kv_heads, 1, group, 1)
        top = torch.maximum(scores.amax(dim=-1, keepdim=True), sink)
        weights = torch.exp(scores - top)
        probs = weights / (weights.sum(dim=-1, keepdim=True) + torch.exp(sink - top))
    probs = probs.view(num_seqs, num_kv_heads, max_q * group, num_slots)
    out = torch.stack([torch.bmm(probs[:, h], values[:, :, h]).view(
        num_seqs, max_q, group, head_dim) for h in range(num_kv_heads)], dim=2)
    out = out.view(num_seqs, max_q, num_q_heads, head_dim)
    return rows[is_query], out[is_query].to(query.dtype)     # back to packed rows


def paged_decode_attention(query: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                           block_tables: torch.Tensor, context_lens: torch.Tensor,
                           scale: float | None = None, *, sliding_window: int | None = None,
                           softcap: float | None = None, sinks: torch.Tensor | None = None,
                           num_splits: int | None = None, check: bool = True) -> torch.Tensor:
    """One new query token per sequence over its paged K/V, all sequences at
    once; the contract of `reference.paged_decode_attention`."""
    checks.check_decode(query, k_cache, v_cache, block_tables, context_lens, num_splits,
                        values=check, sliding_window=sliding_window, softcap=softcap,
                        sinks=sinks)
    scale = query.shape[-1] ** -0.5 if scale is None else scale
    num_seqs = query.shape[0]
    starts = torch.arange(num_seqs, device=query.device)
    return _attend(query, k_cache, v_cache, block_tables, starts, torch.ones_like(starts),
                   context_lens, scale, sliding_window, softcap, sinks)


def paged_prefill_attention(query: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                            block_tables: torch.Tensor, cu_seqlens_q: torch.Tensor,
                            context_lens: torch.Tensor, scale: float | None = None, *,
                            sliding_window: int | None = None, softcap: float | None = None,
                            sinks: torch.Tensor | None = None,
                            check: bool = True) -> torch.Tensor:
    """Packed query chunks over their sequences' paged K/V (cached prefix plus
    the chunk), all sequences at once; the contract of
    `reference.paged_prefill_attention`."""
    checks.check_prefill(query, k_cache, v_cache, block_tables, cu_seqlens_q, context_lens,
                         values=check, sliding_window=sliding_window, softcap=softcap,
                         sinks=sinks)
    scale = query.shape[-1] ** -0.5 if scale is None else scale
    cu = cu_seqlens_q.long()
    return _attend(query, k_cache, v_cache, block_tables, cu[:-1], cu[1:] - cu[:-1],
                   context_lens, scale, sliding_window, softcap, sinks)
