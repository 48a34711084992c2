"""Paged attention for a whole step as a few batched tensor ops: the fast CPU path.

`reference.py` loops over sequences: per sequence a gather, a
``repeat_interleave`` for grouped-query attention, scores, mask and softmax —
in every layer of every step. That is the clearest statement of what paged attention
computes, and on a CPU the slowest: a decode step of 64 sequences through 4
layers is 256 tiny attentions, each paying Python and dispatch overhead (and a
thread handoff when torch runs two threads). This module computes the same
numbers with one gather and one masked SDPA call per *bucket* of sequences of
similar lengths, however many sequences there are:

1. **Gather** every sequence's blocks at once through its (padded) block-table
   row: ``k_cache.index_select(0, blocks)``, ``blocks`` ``[n * max_blocks]``.
   Rows of sequences with fewer blocks are padded with a safe block id (0) — the table
   entries past a sequence's blocks, and those wholly before its sliding
   window, are never used to index the cache (they may be -1, or a block the
   engine has already given to someone else).
2. **Pad the queries** into ``[n, max_q_len]`` (a decode has ``max_q_len``
   1). Grouped-query attention copies no K/V heads: paper §4.1's kernel reads
   one KV head for all the query heads it serves, and so do SDPA's
   ``enable_gqa`` and, on the spelled-out path, folding each KV head's group
   of query heads into the rows, ``[n, kv_heads, q_len * group, head_dim]``.
3. **Mask** by position: a query at position p sees key k iff ``k <= p`` (and
   ``k > p - sliding_window`` with a window), which also hides every padded
   slot, since a padded slot's position is past the context. First, though,
   the keys and values of slots that hold no token are zeroed: an unused slot
   may hold NaN, and ``0 * NaN`` is NaN, so a -inf score alone would not keep
   it out of the output.
4. **Attend**: torch's ``scaled_dot_product_attention`` with that mask as an
   additive bias computes scores, softmax and the weighted sum in one fused
   call over all sequences. With a softcap or sinks, which change the softmax
   itself, the same steps are spelled out (`_softmax_attention`).

Scores, softmax and the weighted sum run in float32 (as the kernels
accumulate) and the result is cast back to the query's dtype. The options
(sliding window, softcap, sinks) follow the contract of `reference.attention`.

**Bucket once, attend per layer.** Where each sequence's blocks are, which
slots hold tokens and which key each query sees depend only on the block
tables, the lengths, the block size and the sliding window, never on a
layer's K/V. `bucket_decode` / `bucket_prefill` lay that out (a list of
`Bucket`), and `attend` runs one layer through it. The public ops below do
both; given a `step_cache` dict (an engine step passes one for all its
layers, `pagedkit.ops.StepOps`) they bucket once and reuse it.

Signatures equal `reference.paged_decode_attention`,
`reference.paged_prefill_attention` and `reference.store_kv` (plus
`step_cache`); `pagedkit.ops` runs these on CPU by default. The work is padded
within buckets (about doubling it at most), which on the small models a CPU
serves is far cheaper than one call per sequence.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from . import checks


@dataclass
class Bucket:
    """Sequences of similar lengths that are gathered and attended together:
    what they read and where their outputs go. It depends only on the block
    tables and lengths, so every layer of a step shares it."""

    blocks: torch.Tensor    # [n * max_read] physical blocks to gather (padding: block 0)
    empty: torch.Tensor     # flat indices into the gathered [n * L] slots that hold no token
    bias: torch.Tensor      # [n, 1, max_q, L] float: 0 where a query sees a key, -inf elsewhere
    rows: torch.Tensor      # [n * max_q] the call's query row of each padded query (padding: 0)
    real: torch.Tensor      # which of the n * max_q padded queries are real
    out_rows: torch.Tensor  # the call's row of each real query, in the order of `real`
    num_seqs: int
    max_q: int
    num_slots: int          # L = max_read * block_size: the keys read per sequence
    gathered: dict = field(default_factory=dict)  # a cache's layout -> (K, V) gather
    #                         buffers, reused by the step's layers (`gather_reusing`)


#: A bucket's fixed cost in padded token slots: its ~25 small tensor ops cost
#: about as much as gathering and attending over this many slots (250-450 slots
#: measured on a busy 2-core CPU, 2 KV heads of 64, float32). Neighbouring
#: buckets merge when the padding that adds is cheaper than one more bucket.
BUCKET_COST_SLOTS = 512


def length_buckets(q_lens: list[int], read_lens: list[int],
                   slots_per_read: int = 1) -> list[list[int]]:
    """The sequences with query rows (``q_len > 0``), by index, in buckets.

    A bucket starts as the sequences whose chunk length and read length
    (`read_lens`, in units of `slots_per_read` key slots: blocks here, tokens
    in the bench's floor) each lie within the same power of two, so padding
    to the bucket's longest at most doubles the work, however long the
    longest request of the step is (a ShareGPT-like mix has a long tail).
    Then neighbouring buckets merge while the padded slots that adds cost
    less than one more bucket (`BUCKET_COST_SLOTS`): a step of short
    sequences runs as one bucket. Each bucket's indices ascend.
    """
    groups: dict[tuple[int, int], list[int]] = {}
    for i, (q, read) in enumerate(zip(q_lens, read_lens, strict=True)):
        if q > 0:
            groups.setdefault((read.bit_length(), q.bit_length()), []).append(i)

    def cost(size: tuple[int, int, int]) -> int:  # padded key slots, over query rows
        count, longest_q, longest_read = size
        return count * longest_q * longest_read * slots_per_read

    merged: list[list[int]] = []
    sizes: list[tuple[int, int, int]] = []  # each bucket's (count, longest q, longest read)
    for key in sorted(groups):
        group = groups[key]
        size = (len(group), max(q_lens[i] for i in group), max(read_lens[i] for i in group))
        if merged:
            last = sizes[-1]
            both = (last[0] + size[0], max(last[1], size[1]), max(last[2], size[2]))
            if cost(both) <= cost(last) + cost(size) + BUCKET_COST_SLOTS:
                merged[-1] = merged[-1] + group
                sizes[-1] = both
                continue
        merged.append(group)
        sizes.append(size)
    return [sorted(members) for members in merged]


def bucket_decode(block_tables: torch.Tensor, context_lens: torch.Tensor, block_size: int,
                  sliding_window: int | None = None) -> list[Bucket]:
    """The buckets of `paged_decode_attention` over these tables and lengths:
    one query row per sequence, row s for sequence s. Unchecked: check first
    (`checks.check_decode`)."""
    one_each = torch.arange(context_lens.shape[0] + 1, device=context_lens.device)
    return bucket_prefill(block_tables, one_each, context_lens, block_size, sliding_window)


def bucket_prefill(block_tables: torch.Tensor, cu_seqlens_q: torch.Tensor,
                   context_lens: torch.Tensor, block_size: int,
                   sliding_window: int | None = None) -> list[Bucket]:
    """Group the sequences into buckets (`length_buckets`, by chunk length and
    blocks read) and lay out each bucket's gather and mask. Sequences with an
    empty chunk have no rows to compute and join no bucket. Unchecked: check
    first (`checks.check_prefill`)."""
    cu = cu_seqlens_q.long()
    ctx = context_lens.long()
    q_lens = cu[1:] - cu[:-1]
    first_block = torch.zeros_like(ctx)  # the first block a sequence's queries see
    if sliding_window is not None:
        first_block = (ctx - q_lens - sliding_window + 1).clamp(min=0) // block_size
    num_reads = (ctx + block_size - 1) // block_size - first_block  # blocks it reads
    seqs = torch.stack([q_lens, ctx, first_block, num_reads, cu[:-1]], dim=1)  # [N, 5]
    groups = length_buckets(q_lens.tolist(), num_reads.tolist(), block_size)
    buckets = []
    for members in groups:
        index = torch.tensor(members, device=seqs.device)
        buckets.append(_bucket(block_tables.index_select(0, index), seqs.index_select(0, index),
                               block_size, sliding_window))
    return buckets


def _bucket(tables: torch.Tensor, seqs: torch.Tensor, block_size: int,
            sliding_window: int | None) -> Bucket:
    """One bucket from its members' block-table rows and their rows of
    ``(q_len, context_len, first block, blocks read, first query row)``."""
    q_len, ctx, first_block, num_reads, first_row = seqs.unbind(1)
    n, max_q, max_read = seqs.shape[0], int(q_len.max()), int(num_reads.max())
    device = seqs.device
    # Which blocks to read, padded with block 0: a safe id whose contents are
    # zeroed below; no table entry past a sequence's blocks (or before its
    # window) is used, they may be -1 or a block someone else owns now.
    read = torch.arange(max_read, device=device)
    columns = (first_block[:, None] + read).clamp(max=tables.shape[1] - 1)
    blocks = tables.long().gather(1, columns).masked_fill_(read >= num_reads[:, None], 0)
    # Positions: of each gathered key, and of each padded query
    key_pos = (first_block * block_size)[:, None] + torch.arange(max_read * block_size,
                                                                  device=device)  # [n, L]
    q_pos = (ctx - q_len)[:, None] + torch.arange(max_q, device=device)            # [n, max_q]
    empty = (key_pos >= ctx[:, None]).view(-1).nonzero().squeeze(1)
    hidden = key_pos[:, None, :] > q_pos[:, :, None]                               # [n, max_q, L]
    if sliding_window is not None:
        hidden |= key_pos[:, None, :] <= q_pos[:, :, None] - sliding_window
    bias = torch.zeros(hidden.shape, device=device).masked_fill_(hidden, float("-inf"))
    # A padded query (past its sequence's chunk) reads row 0 and is dropped after.
    is_query = torch.arange(max_q, device=device) < q_len[:, None]                 # [n, max_q]
    rows = torch.where(is_query, first_row[:, None] + torch.arange(max_q, device=device), 0)
    real = is_query.view(-1).nonzero().squeeze(1)
    return Bucket(blocks.view(-1), empty, bias[:, None], rows.view(-1), real,
                  rows.view(-1).index_select(0, real), n, max_q, max_read * block_size)


def gather_reusing(k_cache: torch.Tensor, v_cache: torch.Tensor, index: torch.Tensor,
                   buffers: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """``k_cache.index_select(0, index)`` and the same of `v_cache`, gathered
    into the buffers `buffers` keeps per cache layout for a step's other
    layers, which run one after another: gathering 3.7 MB into a fresh buffer
    took 1.2x (one thread) to 2.5x (two) as long as into a reused one on this
    project's 2-core machine (a new allocation's memory is newly mapped or
    cold). Layers whose caches differ in heads get buffers of their own. The
    bench's floor gathers its rows through it too."""
    layout = k_cache.dtype, k_cache.device, k_cache.shape[1:]
    kept = buffers.get(layout)
    if kept is None:
        kept = buffers[layout] = (k_cache.index_select(0, index),
                                  v_cache.index_select(0, index))
        return kept
    return (torch.index_select(k_cache, 0, index, out=kept[0]),
            torch.index_select(v_cache, 0, index, out=kept[1]))


def attend(query: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
           buckets: list[Bucket], scale: float | None = None, *, softcap: float | None = None,
           sinks: torch.Tensor | None = None) -> torch.Tensor:
    """One layer's attention through `buckets`: the output rows of `query`.

    No checks and no bucketing: for callers that checked the metadata and
    this layer's tensors and built `buckets` from that metadata (the public
    ops below)."""
    scale = query.shape[-1] ** -0.5 if scale is None else scale
    out = torch.empty_like(query)
    for b in buckets:
        out.index_copy_(0, b.out_rows, _attend_bucket(query, k_cache, v_cache, b, scale,
                                                      softcap, sinks))
    return out


def _attend_bucket(query: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                   b: Bucket, scale: float, softcap: float | None,
                   sinks: torch.Tensor | None) -> torch.Tensor:
    """The outputs of one bucket's real query rows (in the order of ``b.out_rows``)."""
    num_q_heads, head_dim = query.shape[1], query.shape[2]
    num_kv_heads = k_cache.shape[2]
    n, length = b.num_seqs, b.num_slots
    # One gather per cache: [n, L, Hkv, D]. A slot that holds no token (the end
    # of a last block, a padding block) may hold NaN, and 0 * NaN is NaN, so
    # its key and value are zeroed: a masked score alone would not keep it out.
    keys, values = gather_reusing(k_cache, v_cache, b.blocks, b.gathered)
    keys = keys.view(n * length, num_kv_heads, head_dim).index_fill_(0, b.empty, 0)
    values = values.view(n * length, num_kv_heads, head_dim).index_fill_(0, b.empty, 0)
    keys = keys.view(n, length, num_kv_heads, head_dim).float().transpose(1, 2)
    values = values.view(n, length, num_kv_heads, head_dim).float().transpose(1, 2)
    q = query.index_select(0, b.rows).view(n, b.max_q, num_q_heads, head_dim)
    q = q.float().transpose(1, 2)                                     # [n, Hq, max_q, D]
    if softcap is None and sinks is None:
        # Plain attention is one fused call: SDPA reads each KV head for its
        # group of query heads (enable_gqa, no copies) and computes the
        # scores, the masked softmax and the weighted sum.
        out = torch.nn.functional.scaled_dot_product_attention(
            q, keys, values, attn_mask=b.bias, scale=scale,
            enable_gqa=num_q_heads != num_kv_heads)
    else:
        out = _softmax_attention(q, keys, values, b.bias, scale, softcap, sinks)
    out = out.transpose(1, 2).reshape(n * b.max_q, num_q_heads, head_dim)
    return out.index_select(0, b.real).to(query.dtype)


def _softmax_attention(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
                       bias: torch.Tensor, scale: float, softcap: float | None,
                       sinks: torch.Tensor | None) -> torch.Tensor:
    """What SDPA computes, spelled out, with a softcap and sinks: they change
    the softmax itself. q ``[n, Hq, max_q, D]``, keys and values ``[n, Hkv,
    L, D]``; each KV head's group of query heads is folded into its rows, so
    a KV head is read once for its group (no copies)."""
    n, num_q_heads, max_q, head_dim = q.shape
    num_kv_heads = keys.shape[1]
    group = num_q_heads // num_kv_heads
    q = q.reshape(n, num_kv_heads, group * max_q, head_dim)          # rows: (head, query)
    scores = (q @ keys.transpose(2, 3)).mul_(scale)                  # [n, Hkv, G * max_q, L]
    if softcap is not None:
        scores = torch.tanh(scores.div_(softcap)).mul_(softcap)
    # Every score is finite (empty slots were zeroed), so an additive -inf masks.
    scores = scores.view(n, num_kv_heads, group, max_q, -1) + bias[:, :, None]
    if sinks is None:
        probs = torch.softmax(scores, dim=-1)
    else:
        sink = sinks.float().view(1, num_kv_heads, group, 1, 1)
        top = torch.maximum(scores.amax(dim=-1, keepdim=True), sink)
        weights = torch.exp(scores - top)
        probs = weights / (weights.sum(dim=-1, keepdim=True) + torch.exp(sink - top))
    out = probs.view(n, num_kv_heads, group * max_q, -1) @ values    # [n, Hkv, G * max_q, D]
    return out.view(n, num_q_heads, max_q, head_dim)


def store_kv(key: torch.Tensor, value: torch.Tensor, k_cache: torch.Tensor,
             v_cache: torch.Tensor, slot_mapping: torch.Tensor, *, check: bool = True) -> None:
    """Write each new token's key and value into its slot, one ``index_copy_``
    per cache viewed as ``[num_slots, num_kv_heads, head_dim]``; a negative
    slot skips the token (found with one host sync). The contract of
    `reference.store_kv`."""
    checks.check_store_kv(key, value, k_cache, v_cache, slot_mapping, values=check)
    slots = slot_mapping.long()
    if slots.numel() and int(slots.min()) < 0:
        tokens = (slots >= 0).nonzero().squeeze(1)
        slots = slots.index_select(0, tokens)
        key, value = key.index_select(0, tokens), value.index_select(0, tokens)
    k_cache.view(-1, *k_cache.shape[2:]).index_copy_(0, slots, key)
    v_cache.view(-1, *v_cache.shape[2:]).index_copy_(0, slots, value)


def paged_decode_attention(query: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                           block_tables: torch.Tensor, context_lens: torch.Tensor,
                           scale: float | None = None, *, sliding_window: int | None = None,
                           softcap: float | None = None, sinks: torch.Tensor | None = None,
                           num_splits: int | None = None, check: bool = True,
                           step_cache: dict | None = None) -> torch.Tensor:
    """One new query token per sequence over its paged K/V, all sequences at
    once; the contract of `reference.paged_decode_attention`. `step_cache`:
    a dict shared by the calls of one engine step (whose layers read the same
    tables), which keeps the buckets per block size and window; None: this
    call's own."""
    checks.check_decode(query, k_cache, v_cache, block_tables, context_lens, num_splits,
                        values=check, sliding_window=sliding_window, softcap=softcap,
                        sinks=sinks)
    key = ("decode", k_cache.shape[1], sliding_window)
    buckets = None if step_cache is None else step_cache.get(key)
    if buckets is None:
        buckets = bucket_decode(block_tables, context_lens, k_cache.shape[1], sliding_window)
        if step_cache is not None:
            step_cache[key] = buckets
    return attend(query, k_cache, v_cache, buckets, scale, softcap=softcap, sinks=sinks)


def paged_prefill_attention(query: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                            block_tables: torch.Tensor, cu_seqlens_q: torch.Tensor,
                            context_lens: torch.Tensor, scale: float | None = None, *,
                            sliding_window: int | None = None, softcap: float | None = None,
                            sinks: torch.Tensor | None = None, check: bool = True,
                            step_cache: dict | None = None) -> torch.Tensor:
    """Packed query chunks over their sequences' paged K/V (cached prefix plus
    the chunk), all sequences at once; the contract of
    `reference.paged_prefill_attention`. `step_cache`: as in
    `paged_decode_attention`."""
    checks.check_prefill(query, k_cache, v_cache, block_tables, cu_seqlens_q, context_lens,
                         values=check, sliding_window=sliding_window, softcap=softcap,
                         sinks=sinks)
    key = ("prefill", k_cache.shape[1], sliding_window)
    buckets = None if step_cache is None else step_cache.get(key)
    if buckets is None:
        buckets = bucket_prefill(block_tables, cu_seqlens_q, context_lens, k_cache.shape[1],
                                 sliding_window)
        if step_cache is not None:
            step_cache[key] = buckets
    return attend(query, k_cache, v_cache, buckets, scale, softcap=softcap, sinks=sinks)
