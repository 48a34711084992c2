"""The KV cache tensors and their size.

Per layer, keys and values each live in one tensor of shape
``[num_blocks, block_size, num_kv_heads, head_dim]`` (the layout of vLLM's
Triton kernels, flash-attn and nano-vllm): block ``b`` is ``cache[b]``, and
token slot ``s`` is ``cache.view(-1, num_kv_heads, head_dim)[s]``.

One token costs ``2 (K and V) x layers x KV heads x head dim x bytes`` —
for a 13B model (40 layers, 40 heads of 128, fp16) that is 800 KB per token,
which is why the KV cache, not the weights, limits how many requests fit.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .._validation import check_int


@dataclass(frozen=True)
class KVCacheSpec:
    """The shape of one model's KV cache."""

    num_layers: int
    num_kv_heads: int
    head_dim: int
    dtype: torch.dtype

    @classmethod
    def from_config(cls, config, dtype: torch.dtype) -> KVCacheSpec:
        """Read the shape off a transformers config (Llama, Qwen2, GPT-2, ...)."""
        config = config.get_text_config() if hasattr(config, "get_text_config") else config
        heads = config.num_attention_heads
        kv_heads = getattr(config, "num_key_value_heads", None) or heads
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
        return cls(config.num_hidden_layers, kv_heads, head_dim, dtype)

    @property
    def bytes_per_token(self) -> int:
        """2 (K and V) x layers x KV heads x head dim x bytes per element."""
        elem = torch.empty((), dtype=self.dtype).element_size()
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * elem

    def bytes_per_block(self, block_size: int) -> int:
        """Bytes of one block of `block_size` tokens (a whole number >= 1)."""
        return self.bytes_per_token * check_int("block_size", block_size, minimum=1)

    def num_blocks_for(self, memory_bytes: int, block_size: int) -> int:
        """How many blocks a memory budget holds."""
        check_int("kv_cache_memory", memory_bytes, minimum=1)
        return memory_bytes // self.bytes_per_block(block_size)

    def allocate(self, num_blocks: int, block_size: int, device: torch.device | str,
                 *, pin_memory: bool = False) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """One zeroed (K, V) pair per layer."""
        shape = (num_blocks, block_size, self.num_kv_heads, self.head_dim)

        def one() -> torch.Tensor:
            return torch.zeros(shape, dtype=self.dtype, device=device, pin_memory=pin_memory)

        return [(one(), one()) for _ in range(self.num_layers)]
