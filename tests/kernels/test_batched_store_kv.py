"""The batched `store_kv` (one ``index_copy_`` per cache) against the readable
reference (boolean-mask indexing), over the kernel tests' shape classes: every
block size, head count and head_dim class, every float dtype, int32 and int64
slots, negative slots anywhere (or everywhere), no tokens at all, and strided
keys (views into a fused K/V projection, as a model hands them over)."""

from __future__ import annotations

import pytest
import torch

from pagedkit import ops
from pagedkit.kernels import batched, reference

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
BLOCK_SIZES = [1, 8, 16, 32]
HEADS = [(1, 64), (2, 80), (8, 128)]  # (num_kv_heads, head_dim)


def slots_with_skips(num_slots: int, num_tokens: int, skip_every: int | None,
                     gen: torch.Generator) -> torch.Tensor:
    """Distinct slots in random order, every `skip_every`-th one negative."""
    slots = torch.randperm(num_slots, generator=gen)[:num_tokens]
    if skip_every:
        slots[::skip_every] = -1 - torch.arange(len(slots[::skip_every]))  # -1, -2, ...
    return slots


def both(key, value, k_cache, v_cache, slots):
    """Caches after the reference and after the batched store (from the same start)."""
    expected = k_cache.clone(), v_cache.clone()
    got = k_cache.clone(), v_cache.clone()
    reference.store_kv(key, value, *expected, slots)
    batched.store_kv(key, value, *got, slots)
    return expected, got


@pytest.mark.parametrize("slot_dtype", [torch.int64, torch.int32])
@pytest.mark.parametrize("skip_every", [None, 3, 1])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("heads,head_dim", HEADS)
@pytest.mark.parametrize("block_size", BLOCK_SIZES)
def test_store_kv_equals_the_reference(block_size, heads, head_dim, dtype, skip_every,
                                       slot_dtype):
    gen = torch.Generator().manual_seed(block_size * heads + head_dim)
    num_blocks = 6
    shape = (num_blocks, block_size, heads, head_dim)
    k_cache = torch.randn(shape, generator=gen).to(dtype)
    v_cache = torch.randn(shape, generator=gen).to(dtype)
    num_tokens = min(num_blocks * block_size, 13)
    kv = torch.randn(num_tokens, 2, heads, head_dim, generator=gen).to(dtype)
    key, value = kv[:, 0], kv[:, 1]  # strided: views into one [tokens, 2, heads, dim]
    slots = slots_with_skips(num_blocks * block_size, num_tokens, skip_every, gen).to(slot_dtype)
    (ek, ev), (gk, gv) = both(key, value, k_cache, v_cache, slots)
    assert torch.equal(gk, ek) and torch.equal(gv, ev)
    written = int((slots >= 0).sum())
    changed = (gk != k_cache).flatten(2).any(-1).sum()
    assert int(changed) == written  # the test bites: exactly the kept tokens' slots changed


def test_store_kv_writes_each_token_into_its_slot_and_skips_negative_slots():
    k_cache, v_cache = torch.zeros(4, 2, 3, 8), torch.zeros(4, 2, 3, 8)
    key, value = torch.randn(4, 3, 8), torch.randn(4, 3, 8)
    batched.store_kv(key, value, k_cache, v_cache, torch.tensor([7, 0, -1, 4]))
    for i, slot in enumerate([7, 0, None, 4]):
        if slot is not None:
            assert torch.equal(k_cache[slot // 2, slot % 2], key[i])
            assert torch.equal(v_cache[slot // 2, slot % 2], value[i])
    assert int((k_cache != 0).flatten(2).any(-1).sum()) == 3


def test_no_tokens_and_only_skipped_tokens_write_nothing():
    k_cache, v_cache = torch.randn(3, 4, 2, 16), torch.randn(3, 4, 2, 16)
    before = k_cache.clone(), v_cache.clone()
    empty = torch.empty(0, 2, 16)
    batched.store_kv(empty, empty, k_cache, v_cache, torch.empty(0, dtype=torch.long))
    key = torch.randn(3, 2, 16)
    batched.store_kv(key, key, k_cache, v_cache, torch.tensor([-1, -5, -2]))
    assert torch.equal(k_cache, before[0]) and torch.equal(v_cache, before[1])


def test_ops_store_kv_runs_the_batched_store_on_cpu(monkeypatch):
    calls = []
    monkeypatch.delenv("PAGEDKIT_KERNELS", raising=False)
    with ops.use_backend("auto"):
        auto = str(ops.backend("cpu"))  # native (the C decode kernel) stores as batched does
    assert ops.IMPLEMENTATIONS[auto]["store_kv"] is ops.store_kv_batched
    monkeypatch.setitem(ops.IMPLEMENTATIONS[auto], "store_kv",
                        lambda *a, **k: calls.append(a) or None)
    k_cache = torch.zeros(2, 4, 1, 8)
    key = torch.ones(1, 1, 8)
    with ops.use_backend("auto"):
        ops.store_kv(key, key, k_cache, k_cache.clone(), torch.tensor([3]))
    assert len(calls) == 1
    with ops.use_backend("torch"):
        ops.store_kv(key, key, k_cache, k_cache.clone(), torch.tensor([3]))
    assert len(calls) == 1 and torch.equal(k_cache[0, 3], key[0])
