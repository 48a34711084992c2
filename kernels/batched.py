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
   it out of the output. A bucket of one sequence (the tail of a step, where
   fixed costs weigh most) reads only its slots that hold a token instead:
   nothing to zero, and a decode without a window needs no mask.
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

**Plan once, attend per layer.** Where each sequence's blocks are, which
slots hold tokens and which key each query sees depend only on the block
tables, the lengths, the block size and the sliding window, never on a
layer's K/V. So the work is split in two: `plan_decode` / `plan_prefill`
lay out the buckets' gathers and masks (a `Plan`), and `attend` runs one
layer's attention through a plan with no checks and no planning of its own.
The public ops below do both per call; an engine step plans once for all its
layers (`pagedkit.ops.StepOps`, which also runs the value checks once).
`store_kv` is split the same way (`plan_store`, `store`): one
``index_copy_`` per cache, the tokens with a negative slot left out once.

Signatures equal `reference.paged_decode_attention`,
`reference.paged_prefill_attention` and `reference.store_kv`;
`pagedkit.ops` runs these on CPU by default. The work is padded within
length buckets (about doubling it at most), which on the small models a CPU
serves is far cheaper than one call per sequence.
"""

from __future__ import annotations

import array
import itertools
from dataclasses import dataclass, field

import torch

from . import checks


@dataclass
class _Bucket:
    """What one bucket of sequences reads and where its outputs go; it depends
    only on the block tables and lengths, so every layer of a step shares it."""

    ids: torch.Tensor               # [n * max_read] physical blocks to gather (padding: 0)
    empty: torch.Tensor | None      # gathered slots that hold no token (zeroed before use);
    #                                 None: one sequence, which reads only its first L slots
    bias: torch.Tensor | None       # [n, 1, max_q, L] 0 where a query sees a key, -inf
    #                                 elsewhere (1: every head); None: every query sees
    #                                 every key (one decode)
    rows: torch.Tensor | None       # [n, max_q] query row of each padded query (padding: 0);
    #                                 None: they are the call's rows 0 .. n * max_q - 1
    real: torch.Tensor | None       # which of the n * max_q padded queries are real (None: all)
    out_rows: torch.Tensor | None   # the call's row of each real query (None: the plan's
    #                                 only bucket, whose real queries are every row in order)
    num_seqs: int
    max_q: int
    num_slots: int                  # L: the keys read per sequence (max_read * block_size,
    #                                 or one sequence's slots that hold a token)
    gathered: dict = field(default_factory=dict)  # a cache's layout -> (K, V) gather
    #                                 buffers, which the step's layers reuse (`gather_kv`)


@dataclass
class Plan:
    """How one call's sequences are bucketed, gathered and masked (`plan_decode`,
    `plan_prefill`): everything `attend` needs besides a layer's tensors."""

    buckets: list[_Bucket]


@dataclass
class StorePlan:
    """Where `store` writes a call's tokens (`plan_store`)."""

    slots: torch.Tensor          # int64 slot of each token written
    tokens: torch.Tensor | None  # which tokens those are (None: all of them, in order)


@dataclass
class _Seqs:
    """A call's sequences as the planner sees them, one list entry per
    sequence (lists, not an object per sequence: a step plans 64 of them)."""

    first_rows: list[int]    # its first query row in the call
    q_lens: list[int]
    context_lens: list[int]  # cached tokens, its chunk included
    first_blocks: list[int]  # the first logical block its queries see (a window lets
    #                          earlier ones go)
    num_reads: list[int]     # blocks it reads: first_block .. the last one holding a token


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


def _plan(block_tables: torch.Tensor, first_rows: list[int], q_lens: list[int],
          context_lens: list[int], block_size: int, sliding_window: int | None) -> Plan:
    """Group the sequences into buckets (`length_buckets`, by chunk length and
    blocks read) and lay out each bucket's gather and mask. Sequences with an
    empty chunk have no rows to compute and join no bucket. The lengths come
    as host ints: planning is a little Python arithmetic and a handful of
    tensor ops per bucket.
    """
    if sliding_window is None:
        first_blocks = [0] * len(q_lens)
    else:
        first_blocks = [0 if q <= 0 else max(0, ctx - q - sliding_window + 1) // block_size
                        for q, ctx in zip(q_lens, context_lens, strict=True)]
    num_reads = [-(-ctx // block_size) - first
                 for ctx, first in zip(context_lens, first_blocks, strict=True)]
    seqs = _Seqs(first_rows, q_lens, context_lens, first_blocks, num_reads)
    merged = length_buckets(q_lens, num_reads, block_size)
    tables = block_tables.tolist() if merged else []
    return Plan([_plan_bucket(tables, seqs, members, block_size, sliding_window,
                              block_tables.device, whole=len(merged) == 1)
                 for members in merged])


def _plan_bucket(tables: list[list[int]], seqs: _Seqs, members: list[int], block_size: int,
                 sliding_window: int | None, device: torch.device, whole: bool) -> _Bucket:
    n = len(members)
    q_lens = [seqs.q_lens[s] for s in members]
    firsts = [seqs.first_blocks[s] for s in members]
    reads = [seqs.num_reads[s] for s in members]
    # each member's gathered slots that hold a token
    held = [seqs.context_lens[s] - first * block_size
            for s, first in zip(members, firsts, strict=True)]
    max_q, max_read = max(q_lens), max(reads)
    num_slots = max_read * block_size
    # Which blocks to read, padded with block 0: a safe id whose contents are
    # zeroed below; no table entry past a sequence's blocks (or before its
    # window) is used, they may be -1 or a block someone else owns now.
    ids: list[int] = []
    for s, first, read in zip(members, firsts, reads, strict=True):
        ids += tables[s][first:first + read]
        if read < max_read:
            ids += [0] * (max_read - read)

    if n == 1:
        # One sequence reads exactly its slots that hold a token: nothing to
        # zero, and a decode without a window sees all of them (no mask).
        num_slots, empty_slots = held[0], None
    else:
        # [n, L]: the gathered slots that hold no token, past each member's `held`
        unheld = torch.arange(num_slots, device=device) >= ints_tensor(held, device)[:, None]
        empty_slots = unheld.view(-1).nonzero().squeeze(1)  # their flat indices, ascending
    if max_q == 1 and sliding_window is None:
        bias = None if n == 1 else _decode_bias(unheld)
    else:
        # where each member's queries sit: its first key's position, its first query's
        starts = [(first * block_size, seqs.context_lens[s] - q)
                  for s, first, q in zip(members, firsts, q_lens, strict=True)]
        bias = _position_bias(starts, max_q, num_slots, sliding_window, device)

    first_rows = [seqs.first_rows[s] for s in members]
    out_rows = (first_rows if max_q == 1 else
                [row + k for row, q in zip(first_rows, q_lens, strict=True) for k in range(q)])
    dense = min(q_lens) == max_q                          # every padded query is real
    in_order = out_rows == list(range(len(out_rows)))
    rows = real = None
    if not (whole and dense and in_order):
        rows = ints_tensor(out_rows if max_q == 1 else
                           [row + k if k < q else 0
                            for row, q in zip(first_rows, q_lens, strict=True)
                            for k in range(max_q)], device).view(n, max_q)
    if not dense:
        real = ints_tensor([i * max_q + k for i, q in enumerate(q_lens) for k in range(q)],
                           device)
    out = None if whole and in_order else ints_tensor(out_rows, device)
    return _Bucket(ints_tensor(ids, device), empty_slots, bias, rows, real, out, n, max_q,
                   num_slots)


def _position_bias(starts: list[tuple[int, int]], max_q: int, num_slots: int,
                   sliding_window: int | None, device: torch.device) -> torch.Tensor:
    """``[n, 1, max_q, L]``: 0 where a query sees a key, -inf elsewhere, from
    positions: each member's ``(first key's position, first query's position)``.

    A query at position p sees key k iff k <= p (and k > p - window): the
    padded slots, past the context, are hidden too, for every real query."""
    n = len(starts)
    starts = ints_tensor([v for pair in starts for v in pair], device).view(n, 2)
    key_pos = starts[:, :1] + torch.arange(num_slots, device=device)   # [n, L]
    q_pos = starts[:, 1:] + torch.arange(max_q, device=device)         # [n, max_q]
    hidden = key_pos[:, None, :] > q_pos[:, :, None]                   # [n, max_q, L]
    if sliding_window is not None:
        hidden |= key_pos[:, None, :] <= q_pos[:, :, None] - sliding_window
    return torch.zeros(hidden.shape, device=device).masked_fill_(hidden, float("-inf"))[:, None]


def _decode_bias(unheld: torch.Tensor) -> torch.Tensor:
    """The `_position_bias` of one query per sequence at its last position
    (a decode, or a chunk of one token) without a window, from the slots
    that hold no token (`unheld`, ``[n, L]``) alone: that query sees every
    key up to its own, so the keys it does not see are exactly its gathered
    slots past the context. Two ops instead of the eight of the positional
    mask, the same values (0 or -inf) in the same places."""
    n, num_slots = unheld.shape
    bias = torch.zeros(unheld.shape, device=unheld.device).masked_fill_(unheld, float("-inf"))
    return bias.view(n, 1, 1, num_slots)


#: array typecodes of the integer dtypes host ints are handed over as
_TYPECODES = {torch.int32: "i", torch.int64: "q"}


def ints_tensor(values: list[int], device: torch.device | str,
                dtype: torch.dtype = torch.long) -> torch.Tensor:
    """Host ints as a tensor on `device`. ``torch.tensor(list)`` converts them
    one by one (~0.3 us each on a CPU here: most of a step's planning and
    packing); an array of C ints is handed over in one piece (a value that
    does not fit `dtype` raises OverflowError, as it does in torch.tensor)."""
    if not values:
        return torch.empty(0, dtype=dtype, device=device)
    return torch.frombuffer(array.array(_TYPECODES[dtype], values), dtype=dtype).to(device)


def plan_decode(block_tables: torch.Tensor, context_lens: torch.Tensor, block_size: int,
                sliding_window: int | None = None) -> Plan:
    """The plan of `paged_decode_attention` over these tables and lengths:
    one query row per sequence, row s for sequence s. Unchecked: check first
    (`checks.check_decode`)."""
    ctx = context_lens.tolist()
    return _plan(block_tables, list(range(len(ctx))), [1] * len(ctx), ctx, block_size,
                 sliding_window)


def plan_prefill(block_tables: torch.Tensor, cu_seqlens_q: torch.Tensor,
                 context_lens: torch.Tensor, block_size: int,
                 sliding_window: int | None = None) -> Plan:
    """The plan of `paged_prefill_attention` over these tables, query
    boundaries and lengths. Unchecked: check first (`checks.check_prefill`)."""
    cu = cu_seqlens_q.tolist()
    return _plan(block_tables, cu[:-1], [b - a for a, b in itertools.pairwise(cu)],
                 context_lens.tolist(), block_size, sliding_window)


def _attend_bucket(query: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                   b: _Bucket, scale: float, softcap: float | None,
                   sinks: torch.Tensor | None) -> torch.Tensor:
    """The outputs of one bucket's real query rows (in the order of ``b.out_rows``)."""
    num_q_heads, head_dim = query.shape[1], query.shape[2]
    num_kv_heads = k_cache.shape[2]
    group = num_q_heads // num_kv_heads
    n, max_q, length = b.num_seqs, b.max_q, b.num_slots

    # One gather per cache: [n, L, Hkv, D]. A slot that holds no token (the end
    # of a last block, a padding block) may hold NaN, and 0 * NaN is NaN, so
    # its key and value are zeroed: a masked score alone would not keep it out.
    # (One sequence reads only its slots that hold a token: nothing to zero.)
    keys, values = gather_kv(k_cache, v_cache, b.ids, b.gathered)  # [len(ids), bs, Hkv, D]
    keys = keys.view(n, -1, num_kv_heads, head_dim)
    values = values.view(n, -1, num_kv_heads, head_dim)
    if b.empty is None:  # one sequence: its first `length` slots
        keys, values = keys[:, :length], values[:, :length]
    elif b.empty.numel():
        keys.view(-1, num_kv_heads, head_dim).index_fill_(0, b.empty, 0)
        values.view(-1, num_kv_heads, head_dim).index_fill_(0, b.empty, 0)
    keys, values = _float32(keys), _float32(values)
    # A decode step's one bucket reads the queries as they are; others gather theirs.
    q = _float32(query.view(n, max_q, num_q_heads, head_dim) if b.rows is None
                 else query[b.rows])                         # [n, max_q, Hq, D]
    if softcap is None and sinks is None:
        # Plain attention is one fused call: torch's SDPA reads each KV head
        # for its group of query heads (enable_gqa, no copies), computes the
        # scores, the masked softmax and the weighted sum in float32.
        out = torch.nn.functional.scaled_dot_product_attention(
            q.transpose(1, 2), keys.transpose(1, 2), values.transpose(1, 2),
            attn_mask=b.bias, scale=scale, enable_gqa=group > 1).transpose(1, 2)
        return _as(_real_rows(out, b), query.dtype)

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
    if b.bias is not None:
        scores += b.bias[:, :, :, None, :]
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
    return _as(_real_rows(out.view(n, max_q, num_q_heads, head_dim), b), query.dtype)


def gather_kv(k_cache: torch.Tensor, v_cache: torch.Tensor, index: torch.Tensor,
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


def _float32(t: torch.Tensor) -> torch.Tensor:
    return _as(t, torch.float32)


def _as(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """`t` in `dtype` (``t.to(dtype)``, skipped when it is already: even a
    no-op call costs microseconds, and a step makes dozens per layer)."""
    return t if t.dtype == dtype else t.to(dtype)


def _real_rows(out: torch.Tensor, b: _Bucket) -> torch.Tensor:
    """``[n, max_q, Hq, D]`` padded outputs -> those of the real queries."""
    out = out.flatten(0, 1)
    return out if b.real is None else out.index_select(0, b.real)


def attend(query: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, plan: Plan,
           scale: float | None = None, *, softcap: float | None = None,
           sinks: torch.Tensor | None = None) -> torch.Tensor:
    """One layer's attention through `plan`: the output rows of `query`.

    No checks and no planning: for callers that checked the metadata and
    this layer's tensors and built `plan` from that metadata (the public ops
    below; `pagedkit.ops.StepOps` for every layer of an engine step)."""
    scale = query.shape[-1] ** -0.5 if scale is None else scale
    if len(plan.buckets) == 1 and plan.buckets[0].out_rows is None:  # every row, in order
        return _attend_bucket(query, k_cache, v_cache, plan.buckets[0], scale, softcap, sinks)
    out = torch.empty_like(query)
    for b in plan.buckets:
        out.index_copy_(0, b.out_rows, _attend_bucket(query, k_cache, v_cache, b, scale,
                                                      softcap, sinks))
    return out


def plan_store(slot_mapping: torch.Tensor) -> StorePlan:
    """Where `store` writes: the slots of the tokens whose slot is not negative
    (a negative slot skips its token). Looks at the values: one host sync."""
    slots = slot_mapping.long()
    if slots.numel() and int(slots.min()) < 0:
        tokens = (slots >= 0).nonzero().squeeze(1)
        return StorePlan(slots.index_select(0, tokens), tokens)
    return StorePlan(slots, None)


def store(key: torch.Tensor, value: torch.Tensor, k_cache: torch.Tensor,
          v_cache: torch.Tensor, plan: StorePlan) -> None:
    """Write the planned tokens' K/V: one ``index_copy_`` per cache, viewed as
    ``[num_slots, num_kv_heads, head_dim]``. No checks (see `store_kv`)."""
    if plan.tokens is not None:
        key, value = key.index_select(0, plan.tokens), value.index_select(0, plan.tokens)
    k_cache.view(-1, *k_cache.shape[2:]).index_copy_(0, plan.slots, key)
    v_cache.view(-1, *v_cache.shape[2:]).index_copy_(0, plan.slots, value)


def store_kv(key: torch.Tensor, value: torch.Tensor, k_cache: torch.Tensor,
             v_cache: torch.Tensor, slot_mapping: torch.Tensor, *, check: bool = True) -> None:
    """Write each new token's key and value into its slot; a negative slot
    skips the token. The contract of `reference.store_kv`."""
    checks.check_store_kv(key, value, k_cache, v_cache, slot_mapping, values=check)
    store(key, value, k_cache, v_cache, plan_store(slot_mapping))


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
    plan = plan_decode(block_tables, context_lens, k_cache.shape[1], sliding_window)
    return attend(query, k_cache, v_cache, plan, scale, softcap=softcap, sinks=sinks)


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
    plan = plan_prefill(block_tables, cu_seqlens_q, context_lens, k_cache.shape[1],
                        sliding_window)
    return attend(query, k_cache, v_cache, plan, scale, softcap=softcap, sinks=sinks)
