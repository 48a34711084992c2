"""The model side: KV cache tensors, attention routed through them, the runner
that packs a step into one forward pass, and the sampler."""

from .attention import ATTENTION_NAME, AttentionMetadata, forward_context, paged_attention
from .kv_cache import KVCacheSpec
from .runner import ModelRunner, pack_step
from .sampler import filter_logits, sample

__all__ = [
    "ATTENTION_NAME",
    "AttentionMetadata",
    "KVCacheSpec",
    "ModelRunner",
    "filter_logits",
    "forward_context",
    "pack_step",
    "paged_attention",
    "sample",
]
