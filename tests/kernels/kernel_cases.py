"""Random paged caches for the kernel tests, with the un-paged K/V they hold.

Physical blocks are handed out in a random order, so a sequence's blocks are
scattered and out of order; every slot that holds no token of any sequence
(spare blocks, the unused end of a last block) is NaN, so a kernel that
reads past a context length, or follows a padding entry of a block table,
produces NaN and fails the test. Nothing here uses the code under test.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

TOLERANCE = {  # (atol, rtol) against the float64 truth
    torch.float32: (1e-5, 1e-5),
    torch.float16: (2e-3, 2e-3),
    torch.bfloat16: (2e-2, 2e-2),
}


@dataclass
class PagedCase:
    k_cache: torch.Tensor            # [num_blocks, block_size, num_kv_heads, head_dim]
    v_cache: torch.Tensor
    block_tables: torch.Tensor       # int32 [num_seqs, max_blocks]
    context_lens: torch.Tensor       # int32 [num_seqs]
    keys: list[torch.Tensor]         # per sequence, contiguous [ctx, num_kv_heads, head_dim], CPU
    values: list[torch.Tensor]

    def to(self, device: torch.device | str) -> PagedCase:
        """The cache, tables and lengths on `device` (the un-paged K/V stay on CPU)."""
        return PagedCase(self.k_cache.to(device), self.v_cache.to(device),
                         self.block_tables.to(device), self.context_lens.to(device),
                         self.keys, self.values)


def make_case(context_lens: list[int], block_size: int, num_kv_heads: int, head_dim: int,
              dtype: torch.dtype = torch.float32, *, seed: int = 0, spare_blocks: int = 2,
              pad_columns: int = 1, padding: int | None = -1) -> PagedCase:
    """A cache holding one sequence per entry of `context_lens`.

    Block tables get `pad_columns` extra columns of `padding` (the same id in
    the unused columns of shorter rows): -1 is out of range; None means the
    id of a spare block, which holds NaNs.
    """
    gen = torch.Generator().manual_seed(seed)
    needed = [-(-n // block_size) for n in context_lens]
    num_blocks = sum(needed) + spare_blocks
    shape = (num_blocks, block_size, num_kv_heads, head_dim)
    k_cache = torch.full(shape, float("nan"), dtype=dtype)
    v_cache = torch.full(shape, float("nan"), dtype=dtype)
    order = torch.randperm(num_blocks, generator=gen).tolist()
    width = max(needed, default=0) + pad_columns
    if padding is None:
        assert spare_blocks > 0
        padding = order[-1]
    tables = torch.full((len(context_lens), width), padding, dtype=torch.int32)
    keys, values = [], []
    for s, n in enumerate(context_lens):
        k = torch.randn(n, num_kv_heads, head_dim, generator=gen).to(dtype)
        v = torch.randn(n, num_kv_heads, head_dim, generator=gen).to(dtype)
        blocks, order = order[:needed[s]], order[needed[s]:]
        tables[s, :len(blocks)] = torch.tensor(blocks, dtype=torch.int32)
        for i in range(n):
            k_cache[blocks[i // block_size], i % block_size] = k[i]
            v_cache[blocks[i // block_size], i % block_size] = v[i]
        keys.append(k)
        values.append(v)
    return PagedCase(k_cache, v_cache, tables, torch.tensor(context_lens, dtype=torch.int32),
                     keys, values)


def sdpa_truth(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, scale: float,
               first_position: int) -> torch.Tensor:
    """SDPA in float64 over one sequence's contiguous K/V, with the causal mask
    built from `tril`: query row j sits at `first_position + j`."""
    group = query.shape[1] // key.shape[1]
    q = query.double().transpose(0, 1)
    k = key.double().repeat_interleave(group, dim=1).transpose(0, 1)
    v = value.double().repeat_interleave(group, dim=1).transpose(0, 1)
    mask = torch.ones(query.shape[0], key.shape[0], dtype=torch.bool).tril(first_position)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale).transpose(0, 1)


def decode_truth(query: torch.Tensor, case: PagedCase, scale: float) -> torch.Tensor:
    return torch.stack([
        sdpa_truth(query[s:s + 1], k, v, scale, k.shape[0] - 1)[0]
        for s, (k, v) in enumerate(zip(case.keys, case.values, strict=True))])


def prefill_truth(query: torch.Tensor, cu_seqlens: list[int], case: PagedCase,
                  scale: float) -> torch.Tensor:
    out = torch.zeros(query.shape, dtype=torch.float64)
    for s, (k, v) in enumerate(zip(case.keys, case.values, strict=True)):
        a, b = cu_seqlens[s], cu_seqlens[s + 1]
        if b > a:
            out[a:b] = sdpa_truth(query[a:b], k, v, scale, k.shape[0] - (b - a))
    return out


def assert_close(actual: torch.Tensor, expected: torch.Tensor, dtype: torch.dtype) -> None:
    atol, rtol = TOLERANCE[dtype]
    assert actual.dtype == dtype
    torch.testing.assert_close(actual.cpu().double(), expected.cpu().double(), atol=atol,
                               rtol=rtol)


def run_python(code: str, **env: str) -> subprocess.CompletedProcess:
    """`code` in a fresh interpreter, from this folder (so it can import this
    module), without the kernel settings of this process (TRITON_INTERPRET,
    PAGEDKIT_KERNELS) and with `env` added."""
    full_env = {k: v for k, v in os.environ.items()
                if k not in ("TRITON_INTERPRET", "PAGEDKIT_KERNELS")}
    full_env.update(env)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=full_env, timeout=300, cwd=Path(__file__).parent)
