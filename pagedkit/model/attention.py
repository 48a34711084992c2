"""Route a transformers model's attention through the paged KV cache.

transformers looks each attention layer's function up by name in its
attention registry (``AttentionInterface``). Registering ``"pagedkit"``
there, and switching a model to it, is all it takes for Llama, Qwen2,
GPT-2, ... to run unchanged on our cache: the model still computes its own
queries, keys, values and positions; we only decide where K/V are stored and
which of them each query sees.

A forward pass runs on one packed row of tokens from many sequences, so the
layer needs to know which token belongs where. That per-step description,
`AttentionMetadata`, is set around the forward by `forward_context` (vLLM
does the same with its ``set_forward_context``) instead of being threaded
through every model's ``forward`` signature. Outside such a step — say a
learner calls ``model.generate`` on a model an engine is serving — the
``"pagedkit"`` functions hand over to transformers' SDPA attention and mask,
so the model keeps working as before.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

import torch

from .. import ops

ATTENTION_NAME = "pagedkit"


@dataclass
class AttentionMetadata:
    """Where this step's tokens go and what they see (decode sequences first)."""

    slot_mapping: torch.Tensor  # [num_tokens] physical slot of each new token
    block_tables: torch.Tensor  # [num_seqs, max_blocks] int32
    context_lens: torch.Tensor  # [num_seqs] int32: tokens in the cache after this step
    cu_seqlens_q: torch.Tensor  # [num_seqs + 1] int32: query rows of each sequence
    num_decodes: int  # the first num_decodes sequences contribute one token each
    kv_caches: list[tuple[torch.Tensor, torch.Tensor]]  # per layer (K, V)
    check: bool = True  # let the ops check values (a host sync per call on a GPU)


_current: ContextVar[AttentionMetadata | None] = ContextVar("pagedkit_attention", default=None)


@contextmanager
def forward_context(metadata: AttentionMetadata) -> Iterator[None]:
    """Make `metadata` visible to every attention layer during one forward."""
    token = _current.set(metadata)
    try:
        yield
    finally:
        _current.reset(token)


def paged_attention(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor,
                    value: torch.Tensor, attention_mask: torch.Tensor | None,
                    scaling: float | None = None, dropout: float = 0.0,
                    **kwargs) -> tuple[torch.Tensor, None]:
    """The attention function transformers calls for every layer.

    `query` is ``[1, q_heads, tokens, head_dim]`` and `key`/`value`
    ``[1, kv_heads, tokens, head_dim]`` (not yet repeated for grouped-query
    attention). Store the new K/V into their slots, then attend through the
    block tables. Returns ``[1, tokens, q_heads, head_dim]``.
    """
    meta = _current.get()
    if meta is None:
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        return sdpa_attention_forward(module, query, key, value, attention_mask,
                                      scaling=scaling, dropout=dropout, **kwargs)
    q = query[0].transpose(0, 1)
    k_cache, v_cache = meta.kv_caches[module.layer_idx]
    ops.store_kv(key[0].transpose(0, 1), value[0].transpose(0, 1), k_cache, v_cache,
                 meta.slot_mapping, check=meta.check)
    d = meta.num_decodes
    parts = []
    if d:
        parts.append(ops.paged_decode_attention(
            q[:d].contiguous(), k_cache, v_cache, meta.block_tables[:d], meta.context_lens[:d],
            scaling, check=meta.check))
    if d < meta.context_lens.numel():
        parts.append(ops.paged_prefill_attention(
            q[d:].contiguous(), k_cache, v_cache, meta.block_tables[d:],
            meta.cu_seqlens_q[d:] - d, meta.context_lens[d:], scaling, check=meta.check))
    out = parts[0] if len(parts) == 1 else torch.cat(parts)
    return out.unsqueeze(0), None


def _mask(*args, **kwargs):
    """Inside an engine step the paged kernels apply causality themselves, so
    transformers builds no mask; outside one, SDPA's mask as usual."""
    if _current.get() is not None:
        return None
    from transformers.masking_utils import sdpa_mask

    return sdpa_mask(*args, **kwargs)


def register() -> str:
    """Register the paged attention with transformers (idempotent); returns its name."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(ATTENTION_NAME, paged_attention)
    AttentionMaskInterface.register(ATTENTION_NAME, _mask)
    return ATTENTION_NAME
