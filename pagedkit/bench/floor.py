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
hold zeros, never NaN, so the mask alone keeps them out.

pagedkit's throughput as a share of this floor is the cost of everything
paging and serving add: that is the number `bench` reports as ``of floor``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

import torch

from ..model.attention import attention_options
from ..model.threads import intra_op_threads, step_macs, threads_for

NAME = "pagedkit_floor"


@dataclass
class _Step:
    """Where this forward's tokens go: request `seqs[i]` owns `q_lens[i]` rows
    ending at context length `ctx[i]`."""

    caches: list[tuple[torch.Tensor, torch.Tensor]]
    row_seq: torch.Tensor   # [T] request of each token row
    row_pos: torch.Tensor   # [T] its position
    seqs: list[int]
    q_lens: list[int]
    ctx: list[int]


_step: ContextVar[_Step | None] = ContextVar("pagedkit_floor_step", default=None)


@contextmanager
def _forward(step: _Step) -> Iterator[None]:
    token = _step.set(step)
    try:
        yield
    finally:
        _step.reset(token)


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
    k_cache[st.row_seq, st.row_pos] = key[0].transpose(0, 1)
    v_cache[st.row_seq, st.row_pos] = value[0].transpose(0, 1)
    scale = q.shape[-1] ** -0.5 if scaling is None else scaling
    out = torch.empty_like(q)
    buckets: dict[tuple[int, int], list[int]] = {}
    start = 0
    starts = []
    for i, (n, c) in enumerate(zip(st.q_lens, st.ctx, strict=True)):
        starts.append(start)
        start += n
        buckets.setdefault((n.bit_length(), c.bit_length()), []).append(i)
    for members in buckets.values():
        _attend_rows(q, out, k_cache, v_cache, [st.seqs[i] for i in members],
                     [starts[i] for i in members], [st.q_lens[i] for i in members],
                     [st.ctx[i] for i in members], scale)
    return out.unsqueeze(0), None


def _attend_rows(q, out, k_cache, v_cache, seqs, starts, q_lens, ctx, scale) -> None:
    max_q, length = max(q_lens), max(ctx)
    num_kv_heads = k_cache.shape[2]
    idx = torch.tensor(seqs)
    keys = k_cache[idx, :length]                             # [n, L, Hkv, D]
    values = v_cache[idx, :length]
    qi = torch.arange(max_q)
    q_len_t = torch.tensor(q_lens)
    is_query = qi[None, :] < q_len_t[:, None]
    rows = torch.where(is_query, torch.tensor(starts)[:, None] + qi[None, :], 0)
    q_pos = (torch.tensor(ctx) - q_len_t)[:, None] + qi[None, :]
    visible = torch.arange(length)[None, None, :] <= q_pos[:, :, None]
    bias = torch.zeros(visible.shape).masked_fill_(~visible, float("-inf"))
    res = torch.nn.functional.scaled_dot_product_attention(
        q[rows].transpose(1, 2), keys.transpose(1, 2), values.transpose(1, 2),
        attn_mask=bias[:, None], scale=scale,
        enable_gqa=q.shape[1] != num_kv_heads).transpose(1, 2)
    out[rows[is_query]] = res[is_query]


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
        positions = [c - n + j for n, c in zip(q_lens, ctx, strict=True) for j in range(n)]
        row_seq = [s for s, n in zip(active, q_lens, strict=True) for _ in range(n)]
        logits_rows = torch.tensor(q_lens).cumsum(0) - 1
        step = _Step(caches, torch.tensor(row_seq), torch.tensor(positions), active, q_lens, ctx)
        # the engine's thread choice (pagedkit.model.threads), so the work is the same
        with _forward(step), intra_op_threads(threads_for(step_macs(config, len(step_ids)))):
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
