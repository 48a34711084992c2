"""Paged attention for a whole step as a few batched tensor ops: the fast CPU path.

`reference.py` loops over sequences: per sequence a gather, a
``repeat_interleave`` for grouped-query attention, scores, mask and softmax —
in every layer of every step. That is the clearest statement of what paged attention
computes, and on a CPU the slowest: a decode step of 64 sequences through 4
layers is 256 tiny attentions, each paying Python and dispatch overhead (and a
thread handoff when torch runs two threads). This module computes the same
numbers with one gather and one masked SDPA call per length bucket (see
`_attend_bucket`), whatever the number of sequences:

1. **Gather** every sequence's blocks at once through its (padded) block-table
   row: ``k_cache.index_select(0, ids)``, ``ids`` ``[num_seqs, max_blocks]``.
   Rows of sequences with fewer blocks are padded with a safe block id (0) — the table
   entries past a sequence's blocks, and those wholly before its sliding
   window, are never used to index the cache (they may be -1, or a block the
   engine has already given to someone else).
2. **Pad the queries** into ``[num_seqs, max_q_len]`` (a decode step has
   ``max_q_len`` 1). Grouped-query attention copies no K/V heads: paper
   §4.1's kernel reads one KV head for all the query heads it serves, and so
   do SDPA's ``enable_gqa`` and, on the spelled-out path, folding each KV
   head's group of query heads into the rows,
   ``[num_seqs, kv_heads, q_len * group, head_dim]``.
3. **Mask** by position: a query at position p sees key k iff ``k <= p`` (and
   ``k > p - sliding_window`` with a window), which also hides every padded
   slot, since a padded slot's position is past the context. First, though,
   the keys and values of slots that hold no token are zeroed: an unused slot
   may hold NaN, and ``0 * NaN`` is NaN, so a -inf score alone would not keep
   it out of the output.
4. **Attend**: torch's ``scaled_dot_product_attention`` with that mask as an
   additive bias and ``enable_gqa`` (each KV head read for its group of query
   heads, never copied) computes scores, softmax and the weighted sum in one
   fused call over all sequences. With a softcap or sinks, which change the
   softmax itself, the same steps are spelled out: per KV head,
   ``scores = q @ K^T`` and ``out = softmax @ V`` as one batched matmul each.

Scores, softmax and the weighted sum run in float32 (as the kernels
accumulate) and the result is cast back to the query's dtype. The options
(sliding window, softcap, sinks) follow the contract in the attention spec;
see `reference.py` for the per-sequence statement of the same math.

Signatures equal `reference.paged_decode_attention` and
`reference.paged_prefill_attention`; `pagedkit.ops` runs these on CPU by
default. The work is padded within length buckets
(about doubling it at most), which on the small models a CPU serves is far
cheaper than one call per sequence.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from . import checks


@dataclass
class _Bucket:
    """What one bucket of sequences reads and where its outputs go; it depends
    only on the block tables and lengths, so every layer of a step shares it."""

    ids: torch.Tensor        # [n * max_read] physical blocks to gather (padding: block 0)
    empty: torch.Tensor      # gathered slots that hold no token (zeroed before use)
    rows: torch.Tensor       # [n, max_q] query row of each padded query (padding: row 0)
    is_query: torch.Tensor   # [n, max_q] which padded queries are real
    bias: torch.Tensor       # [n, max_q, L] 0 where a query sees a key, -inf elsewhere
    num_seqs: int
    max_q: int
    num_slots: int           # L = max_read * block_size
    dense: bool              # every padded query is real (a decode bucket)


#: A bucket's fixed cost in padded token slots: its ~25 small tensor ops cost
#: about as much as gathering and attending over this many slots (250-450 slots
#: measured on a busy 2-core CPU, 2 KV heads of 64, float32). Neighbouring
#: buckets merge when the padding that adds is cheaper than one more bucket.
BUCKET_COST_SLOTS = 512


def _plan(block_tables: torch.Tensor, q_starts: torch.Tensor, q_lens: torch.Tensor,
          context_lens: torch.Tensor, block_size: int,
          sliding_window: int | None) -> list[_Bucket]:
    """Group the sequences into buckets and lay out each bucket's gather and mask.

    A bucket starts as the sequences whose chunk length and context (in
    blocks) each lie within the same power of two, so padding to the bucket's
    longest at most doubles the work, however long the longest request of the
    step is (a ShareGPT-like mix has a long tail). Then neighbouring buckets
    merge while that is cheaper (`BUCKET_COST_SLOTS`): a step of short
    sequences runs as one bucket. Sequences with an empty chunk have no rows
    to compute and join no bucket.
    """
    groups: dict[tuple[int, int], list[tuple[int, int, int]]] = {}
    for s, (ctx, q) in enumerate(zip(context_lens.tolist(), q_lens.tolist(), strict=True)):
        if q == 0:
            continue
        blocks = -(-ctx // block_size)
        if sliding_window is not None:
            blocks -= max(0, ctx - q - sliding_window + 1) // block_size
        groups.setdefault((blocks.bit_length(), q.bit_length()), []).append((s, q, blocks))

    def cost(members: list[tuple[int, int, int]]) -> int:
        return len(members) * max(q for _, q, _ in members) * max(b for *_, b in members)

    merged: list[list[tuple[int, int, int]]] = []
    for key in sorted(groups):
        group = groups[key]
        if merged and (cost(merged[-1] + group) * block_size
                       <= (cost(merged[-1]) + cost(group)) * block_size + BUCKET_COST_SLOTS):
            merged[-1] = merged[-1] + group
        else:
            merged.append(group)
    buckets = []
    for members in merged:
        seqs = sorted(s for s, _, _ in members)
        pick = torch.tensor(seqs, device=q_lens.device) if len(merged) > 1 else slice(None)
        buckets.append(_plan_bucket(block_tables[pick], q_starts[pick], q_lens[pick],
                                    context_lens[pick], block_size, sliding_window))
    return buckets


def _plan_bucket(block_tables: torch.Tensor, q_starts: torch.Tensor, q_lens: torch.Tensor,
                 context_lens: torch.Tensor, block_size: int,
                 sliding_window: int | None) -> _Bucket:
    device = q_lens.device
    ctx, q_lens = context_lens.long(), q_lens.long()
    first_q = ctx - q_lens                                   # position of each chunk's row 0
    # Which logical blocks to read: from the first one the window can see
    # (for the chunk's earliest query) to the last one holding a token.
    end_block = (ctx + block_size - 1) // block_size
    if sliding_window is None:
        start_block = torch.zeros_like(ctx)
    else:
        start_block = (first_q - sliding_window + 1).clamp(min=0) // block_size
    num_read = end_block - start_block
    max_q, max_read = (int(v) for v in torch.stack([q_lens.max(), num_read.max()]).tolist())

    col = torch.arange(max_read, device=device)
    used = col[None, :] < num_read[:, None]                  # [n, max_read]
    # Padding columns look up table column 0 and then block 0: a safe id whose
    # contents are zeroed below; no entry past a sequence's blocks is used.
    safe_col = torch.where(used, start_block[:, None] + col[None, :], 0)
    ids = torch.where(used, block_tables.long().gather(1, safe_col), 0)
    num_slots = max_read * block_size
    key_pos = (start_block[:, None] * block_size
               + torch.arange(num_slots, device=device)[None, :])   # [n, L]
    holds_token = (key_pos < ctx[:, None]) & used.repeat_interleave(block_size, dim=1)

    qi = torch.arange(max_q, device=device)
    is_query = qi[None, :] < q_lens[:, None]                 # [n, max_q]
    rows = torch.where(is_query, q_starts.long()[:, None] + qi[None, :], 0)
    q_pos = first_q[:, None] + qi[None, :]                   # [n, max_q]
    visible = key_pos[:, None, :] <= q_pos[:, :, None]       # [n, max_q, L]
    if sliding_window is not None:
        visible &= key_pos[:, None, :] > q_pos[:, :, None] - sliding_window
    visible &= holds_token[:, None, :]
    bias = torch.zeros(visible.shape, device=device).masked_fill_(~visible, float("-inf"))
    return _Bucket(ids.flatten(), (~holds_token).flatten().nonzero().squeeze(1), rows,
                   is_query, bias, ctx.shape[0], max_q, num_slots, bool(is_query.all()))


def _attend_bucket(query: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                   b: _Bucket, scale: float, softcap: float | None,
                   sinks: torch.Tensor | None) -> torch.Tensor:
    """The outputs of one bucket's real query rows (in the order of ``b.rows[b.is_query]``)."""
    num_q_heads, head_dim = query.shape[1], query.shape[2]
    num_kv_heads = k_cache.shape[2]
    group = num_q_heads // num_kv_heads
    n, max_q, length = b.num_seqs, b.max_q, b.num_slots

    # One gather per cache: [n, L, Hkv, D]. A slot that holds no token (the end
    # of a last block, a padding block) may hold NaN, and 0 * NaN is NaN, so
    # its key and value are zeroed: a masked score alone would not keep it out.
    keys = k_cache.index_select(0, b.ids).view(n, length, num_kv_heads, head_dim)
    values = v_cache.index_select(0, b.ids).view(n, length, num_kv_heads, head_dim)
    if b.empty.numel():
        keys.view(-1, num_kv_heads, head_dim).index_fill_(0, b.empty, 0)
        values.view(-1, num_kv_heads, head_dim).index_fill_(0, b.empty, 0)
    keys, values = keys.float(), values.float()
    q = query[b.rows].float()                                # [n, max_q, Hq, D]
    if softcap is None and sinks is None:
        # Plain attention is one fused call: torch's SDPA reads each KV head
        # for its group of query heads (enable_gqa, no copies), computes the
        # scores, the masked softmax and the weighted sum in float32.
        out = torch.nn.functional.scaled_dot_product_attention(
            q.transpose(1, 2), keys.transpose(1, 2), values.transpose(1, 2),
            attn_mask=b.bias[:, None], scale=scale, enable_gqa=group > 1).transpose(1, 2)
        return (out.flatten(0, 1) if b.dense else out[b.is_query]).to(query.dtype)

    # Softcaps and sinks change the softmax itself: spelled out, with each KV
    # head's group of query heads folded into the rows.
    q = q.view(n, max_q, num_kv_heads, group, head_dim).permute(0, 2, 1, 3, 4)
    q = q.reshape(n, num_kv_heads, max_q * group, head_dim)

    # Per KV head, one batched matmul over all sequences: keys[:, :, h] is a
    # strided [n, L, D] view that BLAS reads in place.
    scores = torch.stack([torch.bmm(q[:, h], keys[:, :, h].transpose(1, 2))
                          for h in range(num_kv_heads)], dim=1).mul_(scale)  # [n, Hkv, q*G, L]
    if softcap is not None:
        scores = torch.tanh(scores.div_(softcap)).mul_(softcap)
    # Every score is finite (empty slots were zeroed), so an additive -inf masks.
    scores = scores.view(n, num_kv_heads, max_q, group, length)
    scores += b.bias[:, None, :, None, :]
    if sinks is None:
        probs = torch.softmax(scores, dim=-1)
    else:
        sink = sinks.float().view(1, num_kv_heads, 1, group, 1)
        top = torch.maximum(scores.amax(dim=-1, keepdim=True), sink)
        weights = torch.exp(scores - top)
        probs = weights / (weights.sum(dim=-1, keepdim=True) + torch.exp(sink - top))
    probs = probs.view(n, num_kv_heads, max_q * group, length)
    out = torch.stack([torch.bmm(probs[:, h], values[:, :, h]).view(n, max_q, group, head_dim)
                       for h in range(num_kv_heads)], dim=2)
    out = out.view(n, max_q, num_q_heads, head_dim)
    return (out.flatten(0, 1) if b.dense else out[b.is_query]).to(query.dtype)


# The plans of the last few calls. Every layer of a step passes the same block
# tables and lengths, so all layers but the first reuse the first one's plan
# (and skip re-checking values already checked). A plan is found by comparing
# the metadata's *contents* with the copies kept here, never by identity.
_PLANS: list[tuple[tuple, tuple[torch.Tensor, ...], list[_Bucket], bool]] = []
_MAX_PLANS = 4


def _find_plan(scalars: tuple, tensors: tuple[torch.Tensor, ...]) -> int | None:
    for i, (key, kept, _, _) in enumerate(_PLANS):
        if key == scalars and all(a.shape == b.shape and a.dtype == b.dtype
                                  and torch.equal(a, b) for a, b in zip(kept, tensors,
                                                                        strict=True)):
            return i
    return None


def _remember(scalars: tuple, tensors: tuple[torch.Tensor, ...], plan: list[_Bucket],
              checked: bool) -> None:
    _PLANS.insert(0, (scalars, tuple(t.clone() for t in tensors), plan, checked))
    del _PLANS[_MAX_PLANS:]


def _run(query: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
         plan: list[_Bucket], scale: float, softcap: float | None,
         sinks: torch.Tensor | None) -> torch.Tensor:
    if len(plan) == 1:  # one bucket holds every row, in packed order
        return _attend_bucket(query, k_cache, v_cache, plan[0], scale, softcap, sinks)
    out = torch.empty_like(query)
    for b in plan:
        out[b.rows[b.is_query]] = _attend_bucket(query, k_cache, v_cache, b, scale, softcap,
                                                 sinks)
    return out


def _planned(kind: str, query: torch.Tensor, k_cache: torch.Tensor,
             tensors: tuple[torch.Tensor, ...], sliding_window: int | None, check: bool,
             run_checks, make_plan) -> list[_Bucket]:
    """The plan for these metadata (reused if a recent call had the same), with
    the value checks run once per plan when `check` asks for them."""
    scalars = (kind, str(query.device), tuple(k_cache.shape[:2]), query.shape[0],
               sliding_window)
    hit = _find_plan(scalars, tensors)
    checked = hit is not None and _PLANS[hit][3]
    run_checks(values=check and not checked)
    if hit is not None:
        _, kept, plan, was_checked = _PLANS[hit]
        _PLANS[hit] = (scalars, kept, plan, was_checked or check)
        return plan
    plan = make_plan()
    _remember(scalars, tensors, plan, check)
    return plan


def paged_decode_attention(query: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                           block_tables: torch.Tensor, context_lens: torch.Tensor,
                           scale: float | None = None, *, sliding_window: int | None = None,
                           softcap: float | None = None, sinks: torch.Tensor | None = None,
                           num_splits: int | None = None, check: bool = True) -> torch.Tensor:
    """One new query token per sequence over its paged K/V, all sequences at
    once; the contract of `reference.paged_decode_attention`."""
    def run_checks(values: bool) -> None:
        checks.check_decode(query, k_cache, v_cache, block_tables, context_lens, num_splits,
                            values=values, sliding_window=sliding_window, softcap=softcap,
                            sinks=sinks)

    def make_plan() -> list[_Bucket]:
        starts = torch.arange(query.shape[0], device=query.device)
        return _plan(block_tables, starts, torch.ones_like(starts), context_lens,
                     k_cache.shape[1], sliding_window)

    plan = _planned("decode", query, k_cache, (block_tables, context_lens), sliding_window,
                    check, run_checks, make_plan)
    scale = query.shape[-1] ** -0.5 if scale is None else scale
    return _run(query, k_cache, v_cache, plan, scale, softcap, sinks)


def paged_prefill_attention(query: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                            block_tables: torch.Tensor, cu_seqlens_q: torch.Tensor,
                            context_lens: torch.Tensor, scale: float | None = None, *,
                            sliding_window: int | None = None, softcap: float | None = None,
                            sinks: torch.Tensor | None = None,
                            check: bool = True) -> torch.Tensor:
    """Packed query chunks over their sequences' paged K/V (cached prefix plus
    the chunk), all sequences at once; the contract of
    `reference.paged_prefill_attention`."""
    def run_checks(values: bool) -> None:
        checks.check_prefill(query, k_cache, v_cache, block_tables, cu_seqlens_q, context_lens,
                             values=values, sliding_window=sliding_window, softcap=softcap,
                             sinks=sinks)

    def make_plan() -> list[_Bucket]:
        cu = cu_seqlens_q.long()
        return _plan(block_tables, cu[:-1], cu[1:] - cu[:-1], context_lens, k_cache.shape[1],
                     sliding_window)

    plan = _planned("prefill", query, k_cache, (block_tables, cu_seqlens_q, context_lens),
                    sliding_window, check, run_checks, make_plan)
    scale = query.shape[-1] ** -0.5 if scale is None else scale
    return _run(query, k_cache, v_cache, plan, scale, softcap, sinks)
