"""Checks for lab 09 (beyond PagedAttention): two short calculations about
where serving goes next — a quantized KV cache and speculative decoding.

The KV-cache answers come from the engine's own `KVCacheSpec`, so the
learner's arithmetic is held against what `LLMEngine` sizes its cache with.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from ..model.kv_cache import KVCacheSpec
from . import Case, CheckResult, check_function

__all__ = ["CHECKS", "check_expected_tokens_per_step", "check_tokens_that_fit"]

_DTYPES = {1: torch.float8_e4m3fn, 2: torch.float16, 4: torch.float32}
GIB = 2**30


def _fit(memory_bytes, num_layers, num_kv_heads, head_dim, dtype_bytes, block_size) -> int:
    spec = KVCacheSpec(num_layers, num_kv_heads, head_dim, _DTYPES[dtype_bytes])
    return spec.num_blocks_for(memory_bytes, block_size) * block_size


def check_tokens_that_fit(fn: Callable) -> CheckResult:
    """`tokens_that_fit(memory_bytes, num_layers, num_kv_heads, head_dim, dtype_bytes,
    block_size)`: token slots in the whole blocks a budget holds."""
    specs = [
        ((20 * GIB, 32, 32, 128, 2, 16), "Llama-2-7B in fp16: 2 x 32 x 32 x 128 x 2 bytes = "
                                         "512 KiB per token"),
        ((20 * GIB, 32, 32, 128, 1, 16), "the same model with an FP8 (1-byte) KV cache"),
        ((20 * GIB, 32, 8, 128, 2, 16), "Llama-3-8B: grouped-query attention stores 8 KV heads, "
                                        "not 32"),
        ((10**9, 40, 40, 128, 2, 16), "OPT-13B-like in fp16 with 1 GB: count whole blocks only "
                                      "(round down), then multiply by block_size"),
        ((10**9, 40, 40, 128, 2, 32), "the same with blocks of 32: a partial block is no use"),
        ((8 * 2**20, 4, 2, 64, 4, 16), "pagedkit's tiny model in float32 with 8 MiB"),
    ]
    cases = [Case(args, _fit(*args), hint) for args, hint in specs]
    return check_function("tokens_that_fit", fn, cases)


def _expected_tokens(alpha: float, k: int) -> float:
    # Leviathan et al. 2023, eq. (1): E = (1 - alpha^(k+1)) / (1 - alpha)
    return float(k + 1) if alpha == 1 else (1 - alpha ** (k + 1)) / (1 - alpha)


def check_expected_tokens_per_step(fn: Callable) -> CheckResult:
    """`expected_tokens_per_step(acceptance_rate, num_draft_tokens)` for speculative
    decoding with independent acceptances."""
    specs = [
        ((0.0, 4), "nothing accepted: the target model's own token still comes out (1)"),
        ((0.5, 1), "one draft token: 1 (the target's token) + 0.5 (the draft, if accepted)"),
        ((0.8, 4), "draft i counts only if drafts 1..i were all accepted: 1 + a + a^2 + ... "
                   "+ a^k"),
        ((0.6, 7), "a geometric series"),
        ((1.0, 5), "every draft accepted: k + 1 tokens (mind a division by zero)"),
        ((0.9, 0), "no drafts: plain decoding, 1 token per step"),
    ]
    cases = [Case(args, _expected_tokens(*args), hint) for args, hint in specs]
    return check_function(
        "expected_tokens_per_step", fn, cases,
        equal=lambda got, want: _as_float(got) is not None and math.isclose(
            _as_float(got), want, rel_tol=1e-9))


def _as_float(value) -> float | None:
    """A number in any form a learner may return: int, float, numpy or torch scalar."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


CHECKS = {
    "tokens_that_fit": check_tokens_that_fit,
    "expected_tokens_per_step": check_expected_tokens_per_step,
}
