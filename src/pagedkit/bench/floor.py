"""The floor: what no engine serving this model on this machine can beat.

The same packed forward passes pagedkit runs — every prompt in one step,
then one step per generated token for every unfinished request, unpadded —
but with nothing an engine adds: no scheduler, no block tables, no prefix
cache, no sampling beyond an argmax, no argument checks. K/V live in one
contiguous row per request, ``[num_requests, max_len, kv_heads, head_dim]``
per layer, written in place; attention reads each request's first tokens
straight from its row, in the same length buckets and with the same
masked SDPA call as `pagedkit.kernels.batched` (so the comparison isolates
the paging and the engine, not the attention arithmetic). Rows past a request's length
hold zeros, never NaN, so the mask alone keeps them out. As there, a bucket of
one request reads only its tokens — here its row in place, with no gather —
and its decode needs no mask; the other buckets gather into buffers the
step's layers reuse.

Everything a step's layers share — the buckets, the rows to gather, where
each token's K/V goes, the masks — is built once per step (`_step_buckets`), before
the forward; a layer only writes its K/V, gathers, attends and scatters. The
model is called as pagedkit calls it, asking for no logits it does not use.

pagedkit's throughput as a share of this floor is the cost of everything
paging and serving add: that is the number `bench` reports as ``of floor``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field

import torch

from ..kernels.batched import gather_reusing, length_buckets
from ..model.attention import attention_options
from ..model.threads import step_macs, step_threads

NAME = "pagedkit_floor"


@dataclass
class _Bucket:
    """Requests whose chunk and context lengths are close: one gather, one SDPA."""

    seqs: torch.Tensor      # [n] their cache rows
    length: int             # L: keys read per request (the bucket's longest context)
    rows: torch.Tensor      # [n, max_q] packed query row of each padded query (padding: 0)
    is_query: torch.Tensor  # [n, max_q] which padded queries are real
    out_rows: torch.Tensor  # rows[is_query]: where the real queries' outputs go
    bias: torch.Tensor | None  # [n, 1, max_q, L] 0 where a query sees a key, -inf
    #                            elsewhere; None: one decode, which sees every key
    row: int | None = None  # one request: its cache row, read in place (no gather)
    gathered: dict = field(default_factory=dict)  # gather buffers the step's layers
    #                            reuse (`batched.gather_reusing`)


@dataclass
class _Step:
    """Everything a forward's layers share, built once before it runs."""

    caches: list[tuple[torch.Tensor, torch.Tensor]]
    slots: torch.Tensor     # [T] flat cache slot (request row * max_len + position) per token
    buckets: list[_Bucket]
    in_order: bool          # one bucket whose real queries are the packed rows, in order


_step: ContextVar[_Step | None] = ContextVar("pagedkit_floor_step", default=None)


@contextmanager
def _forward(step: _Step) -> Iterator[None]:
    token = _step.set(step)
    try:
        yield
    finally:
        _step.reset(token)


def _step_buckets(caches, max_len: int, seqs: list[int], q_lens: list[int],
                  ctx: list[int]) -> _Step:
    """Group the requests as `pagedkit.kernels.batched` does (`length_buckets`
    over chunk and context lengths) and lay out each bucket's gather, rows
    and mask."""
    merged = length_buckets(q_lens, ctx)
    starts = [0]
    for n in q_lens:
        starts.append(starts[-1] + n)
    buckets = []
    for members in merged:
        q_len = torch.tensor([q_lens[i] for i in members])
        length = max(ctx[i] for i in members)
        qi = torch.arange(int(q_len.max()))
        is_query = qi[None, :] < q_len[:, None]
        rows = torch.where(is_query, torch.tensor([starts[i] for i in members])[:, None] + qi, 0)
        q_pos = (torch.tensor([ctx[i] for i in members]) - q_len)[:, None] + qi
        visible = torch.arange(length)[None, None, :] <= q_pos[:, :, None]
        one = len(members) == 1
        # one request reads its row in place; its decode sees every key, no mask
        bias = (None if one and q_lens[members[0]] == 1 else
                torch.zeros(visible.shape).masked_fill_(~visible, float("-inf"))[:, None])
        buckets.append(_Bucket(torch.tensor([seqs[i] for i in members]), length, rows,
                               is_query, rows[is_query], bias,
                               row=seqs[members[0]] if one else None))
    slots = torch.tensor([s * max_len + c - n + j for s, n, c in zip(seqs, q_lens, ctx,
                                                                    strict=True)
                          for j in range(n)])
    in_order = len(buckets) == 1 and merged[0] == list(range(len(seqs))) and bool(
        buckets[0].is_query.all())
    return _Step(caches, slots, buckets, in_order)


def _attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """transformers' attention-function hook: store K/V into the rows, attend."""
    st = _step.get()
    if st is None:
        raise RuntimeError("the floor's attention runs only inside its own forward passes")
    options = attention_options(module, {"dropout": dropout, **kwargs})
    if any(value is not None for value in options.values()):
        raise NotImplementedError(
            f"the floor computes plain causal attention, and {type(module).__name__} asks for "
            f"{ {k: v for k, v in options.items() if v is not None} }; benchmark a model "
            "without sliding windows, softcaps or sinks")
    q = query[0].transpose(0, 1)                             # [T, Hq, D]
    k_cache, v_cache = st.caches[module.layer_idx]
    kv_heads, head_dim = k_cache.shape[2:]
    k_cache.view(-1, kv_heads, head_dim).index_copy_(0, st.slots, key[0].transpose(0, 1))
    v_cache.view(-1, kv_heads, head_dim).index_copy_(0, st.slots, value[0].transpose(0, 1))
    scale = head_dim ** -0.5 if scaling is None else scaling
    out = None if st.in_order else torch.empty_like(q)
    for b in st.buckets:
        if b.row is not None:  # one request: its row, in place
            keys = k_cache[b.row:b.row + 1, :b.length]   # [1, L, Hkv, D]
            values = v_cache[b.row:b.row + 1, :b.length]
        else:  # [n, L, Hkv, D]
            keys, values = gather_reusing(k_cache[:, :b.length], v_cache[:, :b.length], b.seqs,
                                     b.gathered)
        rows = q[b.rows].transpose(1, 2)  # [n, Hq, max_q, D]
        n, q_heads, max_q = rows.shape[:3]
        if max_q == 1 and q_heads != kv_heads:  # a decode's groups as rows, as pagedkit's
            #                                     CPU attention does (batched._attend_bucket)
            rows = rows.reshape(n, kv_heads, q_heads // kv_heads, head_dim)
        res = torch.nn.functional.scaled_dot_product_attention(
            rows, keys.transpose(1, 2), values.transpose(1, 2), attn_mask=b.bias, scale=scale,
            enable_gqa=max_q > 1 and q_heads != kv_heads).reshape(n, q_heads, max_q, head_dim
                                                                   ).transpose(1, 2)
        if out is None:
            return res.flatten(0, 1).unsqueeze(0), None
        out[b.out_rows] = res[b.is_query]
    return out.unsqueeze(0), None


def _no_mask(*args, **kwargs):
    return None


def prepare(model) -> None:
    """Switch `model`'s attention to the floor's (registered with transformers)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(NAME, _attention)
    AttentionMaskInterface.register(NAME, _no_mask)
    model.set_attn_implementation(NAME)


@torch.inference_mode()
def generate(model, prompts: list[list[int]], output_lens: list[int],
             on_step: Callable[[int], None] | None = None
             ) -> tuple[list[list[int]], list[float]]:
    """Greedy tokens for every prompt (exactly its output length), and the time
    each request's first token appeared. `model` must have gone through `prepare`."""
    config = model.config.get_text_config()
    heads = config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    dtype = next(model.parameters()).dtype
    max_len = max(len(p) + o for p, o in zip(prompts, output_lens, strict=True))
    shape = (len(prompts), max_len, kv_heads, head_dim)
    caches = [(torch.zeros(shape, dtype=dtype), torch.zeros(shape, dtype=dtype))
              for _ in range(config.num_hidden_layers)]
    tokens: list[list[int]] = [[] for _ in prompts]
    first_token = [0.0] * len(prompts)
    active = list(range(len(prompts)))
    step_ids = [t for p in prompts for t in p]
    q_lens = [len(p) for p in prompts]
    ctx = list(q_lens)
    while active:
        step = _step_buckets(caches, max_len, active, q_lens, ctx)
        positions = [c - n + j for n, c in zip(q_lens, ctx, strict=True) for j in range(n)]
        # all rows' logits in a decode step, else each request's last row
        logits_rows = 0 if len(step_ids) == len(active) else torch.tensor(q_lens).cumsum(0) - 1
        # the engine's thread choice (pagedkit.model.threads), so the work is the same
        with _forward(step), step_threads(step_macs(config, len(step_ids)), key=(NAME, id(model))):
            logits = model(input_ids=torch.tensor([step_ids]),
                           position_ids=torch.tensor([positions]), use_cache=False,
                           logits_to_keep=logits_rows).logits[0]
        picks = logits.argmax(-1).tolist()
        now = time.perf_counter()
        for s, t in zip(active, picks, strict=True):
            if not tokens[s]:
                first_token[s] = now
            tokens[s].append(t)
        if on_step is not None:
            on_step(len(picks))
        keep = [i for i, s in enumerate(active) if len(tokens[s]) < output_lens[s]]
        active = [active[i] for i in keep]
        step_ids = [tokens[s][-1] for s in active]
        ctx = [ctx[i] + 1 for i in keep]
        q_lens = [1] * len(active)
    return tokens, first_token
