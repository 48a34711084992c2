"""Lab 01 exercises: what a KV cache costs and what it saves (paper §2.2, §3).

* `bytes_per_token` — the size formula: 2 (K and V) x layers x KV heads x
  head dim x bytes per element.
* `tokens_processed` — tokens pushed through the model to generate `n`
  tokens, with and without a KV cache: why every serving system caches.
* `kv_bytes_per_token` — the same formula read off a real transformers
  config, where grouped-query attention and an explicit ``head_dim`` hide.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from . import Case, CheckResult, check_function

__all__ = ["CHECKS", "check_bytes_per_token", "check_kv_bytes_per_token",
           "check_tokens_processed"]


def check_bytes_per_token(fn: Callable[[int, int, int, int], int]) -> CheckResult:
    """`bytes_per_token(num_layers, num_kv_heads, head_dim, dtype_bytes)`."""
    both = "every token stores a key AND a value vector per KV head: the factor 2"
    cases = [
        Case((1, 1, 1, 1), 2, both),
        Case((1, 1, 64, 4), 512, f"one head of 64 float32 numbers is 256 bytes; {both}"),
        Case((4, 2, 64, 4), 4096, "the tiny model in float32: 2 x 4 layers x 2 KV heads x 64 "
                                  "x 4 bytes = 4 KiB. Multiply by the number of layers: "
                                  "each layer keeps its own K and V"),
        Case((40, 40, 128, 2), 819_200, "OPT-13B in fp16 (paper §3): 2 x 40 x 40 x 128 x 2 "
                                        "= 819,200 bytes = 800 KiB per token"),
        Case((32, 8, 128, 2), 131_072, "Llama-3-8B: grouped-query attention keeps 8 KV heads "
                                       "(not 32): 128 KiB per token in bf16"),
    ]
    return check_function("bytes_per_token", fn, cases)


def check_tokens_processed(fn: Callable[[int, int, bool], int]) -> CheckResult:
    """`tokens_processed(prompt_len, new_tokens, use_cache)`: token positions fed
    through the model to generate `new_tokens` tokens after a prompt."""
    cached = ("with a cache, the prompt goes through once (prefill) and every later step "
              "feeds only the token sampled last: prompt_len + new_tokens - 1")
    uncached = ("without a cache, step t (t = 0, 1, ...) re-reads the whole sequence so far: "
                "prompt_len + t tokens, summed over the new_tokens steps")
    cases = [
        Case((5, 1, True), 5, "the first new token needs only the prompt's forward pass"),
        Case((5, 1, False), 5, "the first new token needs only the prompt's forward pass"),
        Case((5, 2, True), 6, cached),
        Case((5, 2, False), 11, uncached + ": 5 + 6"),
        Case((10, 100, True), 109, cached),
        Case((10, 100, False), 5_950, uncached + ": 100 x 10 + (0 + 1 + ... + 99)"),
        Case((3, 0, True), 0, "generating nothing runs nothing"),
        Case((3, 0, False), 0, "generating nothing runs nothing"),
    ]
    return check_function("tokens_processed", fn, cases)


class _Config:
    """A transformers config with a one-line repr, so a failing case reads
    ``kv_bytes_per_token(OPTConfig<OPT-13B>, 2)`` instead of a page of JSON.
    Attribute reads (and so ``getattr``/``hasattr``) go to the real config."""

    def __init__(self, config: Any, name: str) -> None:
        self._config, self._name = config, name

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._config, attr)

    def __repr__(self) -> str:
        return f"{type(self._config).__name__}<{self._name}>"


def _configs() -> list[tuple[str, Any, int, int, str]]:
    """(name, config, dtype_bytes, expected bytes per token, hint), built offline from
    the published sizes of each model (no hub access needed)."""
    from transformers import AutoConfig, GPT2Config, LlamaConfig, OPTConfig, Qwen2Config

    from ..models import TINY_DIR

    no_kv = ("this config has no `num_key_value_heads`: every attention head keeps its own "
             "K and V (use getattr(config, 'num_key_value_heads', None) and fall back)")
    return [
        ("tiny", AutoConfig.from_pretrained(TINY_DIR), 4, 4096,
         "the tiny model: 4 layers, 2 KV heads (4 query heads share them), head_dim 64"),
        ("OPT-13B",
         OPTConfig(num_hidden_layers=40, num_attention_heads=40, hidden_size=5120),
         2, 819_200, f"OPT-13B, the paper's 800 KiB per token; {no_kv}"),
        ("Llama-3-8B",
         LlamaConfig(num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
                     hidden_size=4096),
         2, 131_072, "Llama-3-8B uses grouped-query attention: count `num_key_value_heads` "
                     "(8), not `num_attention_heads` (32)"),
        ("Qwen2.5-0.5B",
         Qwen2Config(num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
                     hidden_size=896),
         2, 12_288, "Qwen2.5-0.5B: no `head_dim` in its config, so head_dim = hidden_size "
                    "// num_attention_heads = 64"),
        ("Qwen3-0.6B-like",
         LlamaConfig(num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8,
                     hidden_size=1024, head_dim=128),
         2, 114_688, "a config whose `head_dim` (128) is NOT hidden_size // heads (64): "
                     "when a config states head_dim, use it"),
        ("GPT-2", GPT2Config(n_layer=12, n_head=12, n_embd=768), 2, 36_864,
         f"GPT-2 names its sizes n_layer/n_head/n_embd, but transformers maps the standard "
         f"names onto them; {no_kv}"),
    ]


def check_kv_bytes_per_token(fn: Callable[[Any, int], int]) -> CheckResult:
    """`kv_bytes_per_token(config, dtype_bytes)` from a transformers config."""
    cases = [Case((_Config(config, name), dtype_bytes), expected, hint)
             for name, config, dtype_bytes, expected, hint in _configs()]
    return check_function("kv_bytes_per_token", fn, cases)


CHECKS = {
    "bytes_per_token": check_bytes_per_token,
    "tokens_processed": check_tokens_processed,
    "kv_bytes_per_token": check_kv_bytes_per_token,
}
