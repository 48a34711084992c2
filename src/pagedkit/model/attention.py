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

What a layer passes besides Q/K/V is read, never dropped: `sliding_window`
(Mistral, Gemma 2/3, Qwen2 per `layer_types`), `softcap` (Gemma 2) and
`s_aux`, the attention sinks of gpt-oss, go to the paged kernels; flags
the model forwards to every layer that say nothing about attention
(`PASSED_THROUGH`) are let by; anything else raises. Whether a model's
layers really all come through here, once each, with the shapes the cache
was sized for, is what `pagedkit.model.support` checks, by recording the
calls of a probe forward (`recording`).
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import torch

from .. import ops
from ..kernels import checks

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
    #: check the tensors above once, at the step's start (`forward_context`); False:
    #: their builder vouches for them, as the engine's `pack_step` does
    check: bool = True
    #: what the step's layers share: the batched path keeps its buckets here
    step_cache: dict = field(default_factory=dict)


#: The keyword arguments the paged path implements.
HANDLED = frozenset({"scaling", "dropout", "sliding_window", "softcap", "s_aux", "is_causal"})
#: What transformers forwards from a model's ``forward`` to every attention call,
#: none of which changes the attention computed.
PASSED_THROUGH = frozenset({
    "position_ids", "cache_position", "use_cache", "output_attentions", "output_router_logits",
    "output_hidden_states", "return_dict", "past_key_values", "past_key_value",
    "position_embeddings", "layer_idx",
})


def _cache_shape_differs(module, query, key, value, k_cache) -> str:
    """Why `module`'s keys and values do not fit the paged cache, sized from
    the config: a config's num_key_value_heads the architecture ignores (GPT-2
    and GPT-NeoX attend with all their heads whatever it says) is named with
    what to do; any other shape (e.g. multi-head latent attention) is described."""
    name = f"{type(module).__name__} (layer {module.layer_idx})"
    stated = getattr(getattr(module, "config", None), "num_key_value_heads", None)
    if (key.shape == value.shape and key.shape[3] == k_cache.shape[3] == query.shape[3]
            and stated == k_cache.shape[2] != key.shape[1] and not _reads_kv_heads(module)):
        return (f"its config sets num_key_value_heads = {stated}, which {name} does not use: "
                f"it attends with {key.shape[1]} KV heads of {key.shape[3]} (keys "
                f"{list(key.shape)}, [1, heads, tokens, head_dim]), and pagedkit sizes its "
                f"cache from the config, so it would hold {stated}. Set num_key_value_heads to "
                f"{key.shape[1]} in the config (model.config.num_key_value_heads = "
                f"{key.shape[1]} before giving pagedkit the model, or in its config.json), or "
                "leave it out")
    return (f"{name} attends with queries {list(query.shape)}, keys {list(key.shape)} and "
            f"values {list(value.shape)} ([1, heads, tokens, head_dim]), but the paged cache "
            f"holds K and V alike as {k_cache.shape[2]} KV heads of {k_cache.shape[3]}, sized "
            "from the config (e.g. multi-head latent attention, or heads the config does not "
            "state)")


def _reads_kv_heads(module) -> bool:
    """Whether `module`'s class reads num_key_value_heads (JetMoe's does: its
    keys are that many heads, repeated per expert), so a config's value is
    the model's, not a stray one; True where its source cannot be read."""
    try:
        return "num_key_value_heads" in inspect.getsource(type(module))
    except (OSError, TypeError):
        return True


def attention_options(module: torch.nn.Module, kwargs: dict[str, Any]) -> dict[str, Any]:
    """The paged kernels' options for one attention call; raises on anything else.

    transformers' own SDPA function silently ignores unknown keyword
    arguments, which is how a model's softcap or sinks got lost; here an
    argument is either implemented or refused."""
    name = type(module).__name__
    unknown = sorted(set(kwargs) - HANDLED - PASSED_THROUGH)
    if unknown:
        raise NotImplementedError(
            f"{name} passes {unknown} to the attention function, which pagedkit's paged "
            "attention does not implement")
    if kwargs.get("dropout") or 0.0:
        raise NotImplementedError(f"{name} asks for attention dropout {kwargs['dropout']}: "
                                  "pagedkit serves models in eval mode only (model.eval())")
    if kwargs.get("is_causal") is False or getattr(module, "is_causal", True) is False:
        raise NotImplementedError(f"{name} attends bidirectionally (is_causal=False); the paged "
                                  "kernels are causal")
    sinks = kwargs.get("s_aux")
    return {"sliding_window": kwargs.get("sliding_window"), "softcap": kwargs.get("softcap"),
            "sinks": None if sinks is None else sinks.detach()}


@dataclass
class AttentionCall:
    """One attention call seen during a `recording` forward."""

    module: str  # class name
    layer_idx: int | None
    query_shape: tuple[int, ...]  # [1, q_heads, tokens, head_dim]
    key_shape: tuple[int, ...]
    value_shape: tuple[int, ...]
    kwargs: dict[str, Any]
    mask: Any  # what the model passed as attention_mask (see `recording`)


@dataclass
class Recording:
    """The attention calls of a forward, and the masks transformers built for it."""

    calls: list[AttentionCall] = field(default_factory=list)
    # id(mask tensor) -> the mask function transformers built it from
    mask_functions: dict[int, Any] = field(default_factory=dict)


_current: ContextVar[AttentionMetadata | None] = ContextVar("pagedkit_attention", default=None)
_recording: ContextVar[Recording | None] = ContextVar("pagedkit_recording", default=None)


@contextmanager
def recording() -> Iterator[Recording]:
    """Record every paged attention call (and mask) made inside the block.

    While recording, the mask function hands the model transformers' real
    boolean mask instead of None and remembers which index function made it,
    so a layer's call can be compared with what transformers would do."""
    rec = Recording()
    token = _recording.set(rec)
    try:
        yield rec
    finally:
        _recording.reset(token)


@contextmanager
def forward_context(metadata: AttentionMetadata) -> Iterator[None]:
    """Make `metadata` visible to every attention layer during one forward,
    checked once for all of them unless ``metadata.check`` is False
    (`checks.check_step`: its index tensors, slots and block ids inside the
    cache, tables that cover the lengths); the layers' calls then skip
    their own checks."""
    if metadata.check and metadata.kv_caches:
        checks.check_step(metadata.slot_mapping, metadata.block_tables, metadata.context_lens,
                          metadata.cu_seqlens_q, metadata.num_decodes, metadata.kv_caches[0][0])
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
    block tables: the decodes' rows (the first ``num_decodes`` sequences, one
    row each) through `ops.paged_decode_attention`, the prompt chunks' through
    `ops.paged_prefill_attention`. Returns ``[1, tokens, q_heads, head_dim]``.

    The ops are called by their names in `pagedkit.ops` (a function put in
    place of one, lab 08's call recorder, sees every layer), without their
    argument checks: `forward_context` checked the step's metadata, and the
    support probe, which records its calls, checks each layer's in full.
    """
    meta = _current.get()
    if meta is None:  # not an engine step: transformers' own attention
        return _transformers_attention(module, query, key, value, attention_mask,
                                       scaling=scaling, dropout=dropout, **kwargs)
    rec = _recording.get()
    if rec is not None:
        rec.calls.append(AttentionCall(type(module).__name__, getattr(module, "layer_idx", None),
                                       tuple(query.shape), tuple(key.shape), tuple(value.shape),
                                       dict(kwargs, scaling=scaling, dropout=dropout),
                                       attention_mask))
    options = attention_options(module, dict(kwargs, dropout=dropout))
    k_cache, v_cache = meta.kv_caches[module.layer_idx]
    if key.shape != value.shape or key.shape[1] != k_cache.shape[2] \
            or key.shape[3] != k_cache.shape[3] or query.shape[3] != key.shape[3]:
        raise NotImplementedError(_cache_shape_differs(module, query, key, value, k_cache))
    check = rec is not None  # the support probe (recording) checks each op in full; a
    #                          step's metadata was checked once, in forward_context
    # [1, heads, tokens, head_dim] -> [tokens, heads, head_dim], the ops' layout
    query = query[0].transpose(0, 1)
    ops.store_kv(key[0].transpose(0, 1), value[0].transpose(0, 1), k_cache, v_cache,
                 meta.slot_mapping, check=check)
    d, num_seqs = meta.num_decodes, meta.context_lens.shape[0]
    outs = []
    if d:
        outs.append(ops.paged_decode_attention(
            query[:d], k_cache, v_cache, meta.block_tables[:d], meta.context_lens[:d],
            scaling, **options, check=check, step_cache=meta.step_cache))
    if d < num_seqs or not d:  # prompt chunks (with no sequence at all, prefill returns
        #                        the empty result in the right shape)
        outs.append(ops.paged_prefill_attention(
            query[d:], k_cache, v_cache, meta.block_tables[d:], meta.cu_seqlens_q[d:] - d,
            meta.context_lens[d:], scaling, **options, check=check,
            step_cache=meta.step_cache))
    out = outs[0] if len(outs) == 1 else torch.cat(outs)
    return out.unsqueeze(0), None


def _transformers_attention(module, query, key, value, attention_mask, **kwargs):
    """SDPA, or where it would drop an argument (softcap, sinks) the eager
    function of the model's own modeling file, given the additive mask it expects."""
    if kwargs.get("softcap") is not None or kwargs.get("s_aux") is not None:
        eager = getattr(sys.modules[type(module).__module__], "eager_attention_forward", None)
        if eager is not None:
            if attention_mask is not None and attention_mask.dtype == torch.bool:
                attention_mask = torch.zeros_like(attention_mask, dtype=query.dtype).masked_fill(
                    ~attention_mask, torch.finfo(query.dtype).min)
            return eager(module, query, key, value, attention_mask, **kwargs)
        raise NotImplementedError(
            f"{type(module).__name__} asks for a softcap or attention sinks outside an engine "
            "step, and its modeling file has no eager_attention_forward to compute them "
            "(transformers' SDPA would drop them); generate through pagedkit's LLM instead")
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)


def _mask(*args, **kwargs):
    """Inside an engine step the paged kernels apply causality (and windows)
    themselves, so transformers builds no mask; outside one, SDPA's mask as
    usual. While `recording`, the real mask, remembered with its function."""
    from transformers.masking_utils import sdpa_mask

    rec = _recording.get()
    if rec is not None:
        mask = sdpa_mask(*args, **dict(kwargs, allow_is_causal_skip=False))
        if mask is not None:
            rec.mask_functions[id(mask)] = kwargs.get("mask_function")
        return mask
    if _current.get() is not None:
        return None
    return sdpa_mask(*args, **kwargs)


def register() -> str:
    """Register the paged attention with transformers (idempotent); returns its name."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(ATTENTION_NAME, paged_attention)
    AttentionMaskInterface.register(ATTENTION_NAME, _mask)
    return ATTENTION_NAME
