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
   one KV head for all the query heads it serves, and so does folding each
   KV head's group of query heads into its rows, ``[n, kv_heads, q_len *
   group, head_dim]`` (a decode's SDPA and the spelled-out path), or SDPA's
   ``enable_gqa`` (a chunk's).
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
layer's K/V. `make_buckets` lays that out (a list of `Bucket`; a decode is
the case of one query per sequence), and `attend` runs one layer through
it. The public ops below do both; given a `step_cache` dict (an engine
step passes one for all its layers: its `AttentionMetadata.step_cache`)
they bucket once and reuse it.

Signatures equal `reference.paged_decode_attention`,
`reference.paged_prefill_attention` and `reference.store_kv` (plus
`step_cache`); `pagedkit.ops` runs these on CPU by default. The work is padded
within buckets (about doubling it at most), which on the small models a CPU
serves is far cheaper than one call per sequence.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import torch

from . import checks


@dataclass
class Bucket:
    """Sequences of similar lengths that are gathered and attended together:
    what they read and where their outputs go. It depends only on the block
    tables and lengths, so every layer of a step shares it."""

    blocks: torch.Tensor    # [n * max_read] physical blocks to gather (padding: block 0)
    empty: torch.Tensor     # flat indices into the gathered [n * max_read * block_size]
    #                         slots: those among each sequence's first L that hold no token
    bias: torch.Tensor | None  # [n, 1, max_q, L] 0 where a query sees a key, -inf
    #                         elsewhere; None where every query sees every key it reads
    #                         (one sequence's decode without a window)
    # Where a bucket's queries come from and go to; None when `in_order`:
    rows: torch.Tensor | None      # [n * max_q] the call's query row of each padded query
    #                                (padding: 0)
    real: torch.Tensor | None      # which of the n * max_q padded queries are real
    out_rows: torch.Tensor | None  # the call's row of each real query, in the order of `real`
    num_seqs: int
    max_q: int
    num_slots: int          # L: the keys read per sequence (max_read * block_size, or one
    #                         sequence's slots that hold a token)
    in_order: bool          # the call's only bucket, its padded queries every row in order
    #                         (a decode step of similar lengths): no rows to gather or scatter
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


def make_buckets(block_tables: torch.Tensor, cu_seqlens_q: list[int], context_lens: list[int],
                 block_size: int, sliding_window: int | None = None) -> list[Bucket]:
    """The buckets of one call over these tables, query boundaries and
    lengths (host ints: ``cu_seqlens_q.tolist()``; a decode's are ``0, 1,
    ..., n``, one query each). Sequences go into buckets by chunk length and
    blocks read (`length_buckets`); each bucket's gather and mask are laid
    out by `_bucket`. Sequences with an empty chunk have no rows to compute
    and join no bucket. Unchecked: check first (`checks.check_decode`,
    `checks.check_prefill`)."""
    q_lens = [b - a for a, b in itertools.pairwise(cu_seqlens_q)]
    ctx = context_lens
    first_blocks = [0] * len(ctx)  # the first block a sequence's queries see
    if sliding_window is not None:
        first_blocks = [max(0, c - q - sliding_window + 1) // block_size
                        for c, q in zip(ctx, q_lens, strict=True)]
    num_reads = [-(-c // block_size) - f for c, f in zip(ctx, first_blocks, strict=True)]
    groups = length_buckets(q_lens, num_reads, block_size)
    # one bucket of every sequence, each with as many queries: its padded
    # queries are the call's rows in order (a decode step, typically)
    in_order = len(groups) == 1 and len(groups[0]) == len(ctx) and len(set(q_lens)) == 1
    buckets = []
    for members in groups:
        seqs = _Seqs(*([values[s] for s in members]
                       for values in (q_lens, ctx, first_blocks, num_reads, cu_seqlens_q)))
        tables = block_tables if in_order else block_tables.index_select(
            0, torch.tensor(members, device=block_tables.device))
        buckets.append(_bucket(tables, seqs, block_size, sliding_window, in_order))
    return buckets


@dataclass
class _Seqs:
    """A bucket's members, one list entry each, as `make_buckets` computes them."""

    q_lens: list[int]
    context_lens: list[int]
    first_blocks: list[int]  # the first block its queries see (a window lets earlier ones go)
    num_reads: list[int]     # blocks it reads, from its first block to its last token's
    first_rows: list[int]    # its first query row in the call


def _bucket(tables: torch.Tensor, seqs: _Seqs, block_size: int, sliding_window: int | None,
            in_order: bool) -> Bucket:
    """One bucket from its members' block-table rows and `seqs`."""
    device = tables.device
    n, max_q, max_read = len(seqs.q_lens), max(seqs.q_lens), max(seqs.num_reads)
    # The keys read: one sequence reads its slots that hold a token (nothing to
    # zero); several read whole blocks (a shorter slice of the gather would not
    # be contiguous, which SDPA reads slower), the slots past each one's last
    # token zeroed and masked
    first_keys = [f * block_size for f in seqs.first_blocks]
    held = [c - k for c, k in zip(seqs.context_lens, first_keys, strict=True)]
    length = held[0] if n == 1 else max_read * block_size
    # [n, L]: the slots read that hold no token (None: there are none)
    unheld = None if min(held) == length else (
        torch.arange(length, device=device) >= torch.tensor(held, device=device)[:, None])
    empty = torch.empty(0, dtype=torch.long, device=device)  # as flat indices into the gather
    if unheld is not None:
        seq, slot = unheld.nonzero().unbind(1)
        empty = seq * (max_read * block_size) + slot
    if max_q == 1 and sliding_window is None:
        # A query at its sequence's last position sees exactly the slots that
        # hold a token: the mask is that of the unheld slots (none: no mask)
        bias = None if unheld is None else torch.zeros(unheld.shape, device=device).masked_fill_(
            unheld, float("-inf")).view(n, 1, 1, length)
    else:
        q_starts = [c - q for c, q in zip(seqs.context_lens, seqs.q_lens, strict=True)]
        bias = _position_bias(first_keys, q_starts, max_q, length, sliding_window, device)
    rows = real = out_rows = None  # an in-order bucket's padded queries are the call's rows
    if not in_order:
        rows, real = _query_rows(seqs, max_q, device)
        out_rows = rows.index_select(0, real)
    return Bucket(_blocks_to_read(tables, seqs.first_blocks, seqs.num_reads), empty, bias,
                  rows, real, out_rows, n, max_q, length, in_order)


def _query_rows(seqs: _Seqs, max_q: int,
                device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """The call's query row of each padded query ``[n * max_q]`` (a padded
    query past its sequence's chunk reads row 0 and is dropped after), and
    which of them are real."""
    rows = [r + k if k < q else 0 for r, q in zip(seqs.first_rows, seqs.q_lens, strict=True)
            for k in range(max_q)]
    real = [i * max_q + k for i, q in enumerate(seqs.q_lens) for k in range(q)]
    return torch.tensor(rows, device=device), torch.tensor(real, device=device)


def _blocks_to_read(tables: torch.Tensor, first_blocks: list[int],
                    num_reads: list[int]) -> torch.Tensor:
    """``[n * max_read]``: each sequence's blocks from its first one on, padded
    with block 0, a safe id whose slots are zeroed before use. No table entry
    past a sequence's blocks (or before its window) is used: they may be -1,
    or a block someone else owns now."""
    max_read = max(num_reads)
    read = torch.arange(max_read, device=tables.device)
    if any(first_blocks):  # a window has let the first blocks go
        columns = torch.tensor(first_blocks, device=tables.device)[:, None] + read
        blocks = tables.gather(1, columns.clamp_(max=tables.shape[1] - 1))
    else:
        blocks = tables[:, :max_read]
    if min(num_reads) < max_read:
        padding = read >= torch.tensor(num_reads, device=tables.device)[:, None]
        blocks = blocks.masked_fill(padding, 0)
    return blocks.reshape(-1).long()  # (an int32 index costs a conversion per gather)


def _position_bias(first_keys: list[int], q_starts: list[int], max_q: int, length: int,
                   sliding_window: int | None, device: torch.device) -> torch.Tensor:
    """``[n, 1, max_q, L]``: 0 where a query sees a key, -inf elsewhere. A query
    at position p sees key k iff k <= p (and k > p - window), which also hides
    every slot past a sequence's last token from its real queries."""
    key_pos = torch.tensor(first_keys, device=device)[:, None] + torch.arange(length,
                                                                              device=device)
    q_pos = torch.tensor(q_starts, device=device)[:, None] + torch.arange(max_q, device=device)
    hidden = key_pos[:, None, :] > q_pos[:, :, None]                   # [n, max_q, L]
    if sliding_window is not None:
        hidden |= key_pos[:, None, :] <= q_pos[:, :, None] - sliding_window
    return torch.zeros(hidden.shape, device=device).masked_fill_(hidden, float("-inf"))[:, None]


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
    if len(buckets) == 1 and buckets[0].in_order:  # every row, in order: nothing to scatter
        return _attend_bucket(query, k_cache, v_cache, buckets[0], scale, softcap, sinks)
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
    # One gather per cache: [n, max_read * block_size, Hkv, D], of which each
    # sequence reads its first L slots. A slot among them that holds no token
    # (the end of a last block, a padding block) may hold NaN, and 0 * NaN is
    # NaN, so its key and value are zeroed: a masked score alone would not
    # keep it out.
    keys, values = gather_reusing(k_cache, v_cache, b.blocks, b.gathered)
    if b.empty.numel():
        keys.view(-1, num_kv_heads, head_dim).index_fill_(0, b.empty, 0)
        values.view(-1, num_kv_heads, head_dim).index_fill_(0, b.empty, 0)
    keys = keys.view(n, -1, num_kv_heads, head_dim)[:, :length].transpose(1, 2)
    values = values.view(n, -1, num_kv_heads, head_dim)[:, :length].transpose(1, 2)
    q = query if b.in_order else query.index_select(0, b.rows)
    q = q.view(n, b.max_q, num_q_heads, head_dim).transpose(1, 2)  # [n, Hq, max_q, D]
    if q.dtype != torch.float32:  # (a no-op .float() still costs microseconds, per layer)
        q, keys, values = q.float(), keys.float(), values.float()
    sdpa, group = torch.nn.functional.scaled_dot_product_attention, num_q_heads // num_kv_heads
    if softcap is not None or sinks is not None:  # they change the softmax: spelled out
        out = _softmax_attention(q, keys, values, b.bias, scale, softcap, sinks)
    elif b.max_q == 1:
        # A decode: plain attention is one fused call (scores, masked softmax,
        # weighted sum), each KV head's group of query heads as its rows
        # [n, Hkv, group, D], sharing the sequence's one bias row. It reads
        # each KV head once, as SDPA's enable_gqa does, in 0.70x the time (64
        # sequences of 512 slots, 8 query heads over 2; the larger model
        # served 64 requests 1.045x as fast: docs/benchmarks.md).
        out = sdpa(q.reshape(n, num_kv_heads, group, head_dim), keys, values,
                   attn_mask=b.bias, scale=scale).view(n, num_q_heads, 1, head_dim)
    else:  # chunks: folded, the bias would be copied per group (level or slower)
        out = sdpa(q, keys, values, attn_mask=b.bias, scale=scale, enable_gqa=group > 1)
    out = out.transpose(1, 2).reshape(n * b.max_q, num_q_heads, head_dim)
    if not b.in_order:
        out = out.index_select(0, b.real)
    return out if out.dtype == query.dtype else out.to(query.dtype)


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
    scores = scores.view(n, num_kv_heads, group, max_q, -1)
    if bias is not None:
        scores = scores + bias[:, :, None]
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
    if check:
        checks.check_store_kv(key, value, k_cache, v_cache, slot_mapping)
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
    if check:
        checks.check_decode(query, k_cache, v_cache, block_tables, context_lens, num_splits,
                            sliding_window=sliding_window, softcap=softcap, sinks=sinks)
    key = ("decode", k_cache.shape[1], sliding_window)
    buckets = None if step_cache is None else step_cache.get(key)
    if buckets is None:
        buckets = make_buckets(block_tables, list(range(context_lens.shape[0] + 1)),
                               context_lens.tolist(), k_cache.shape[1], sliding_window)
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
    if check:
        checks.check_prefill(query, k_cache, v_cache, block_tables, cu_seqlens_q, context_lens,
                             sliding_window=sliding_window, softcap=softcap, sinks=sinks)
    key = ("prefill", k_cache.shape[1], sliding_window)
    buckets = None if step_cache is None else step_cache.get(key)
    if buckets is None:
        buckets = make_buckets(block_tables, cu_seqlens_q.tolist(), context_lens.tolist(),
                               k_cache.shape[1], sliding_window)
        if step_cache is not None:
            step_cache[key] = buckets
    return attend(query, k_cache, v_cache, buckets, scale, softcap=softcap, sinks=sinks)
