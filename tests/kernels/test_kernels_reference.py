"""The torch references (what pagedkit.ops runs on CPU) against SDPA on un-paged K/V."""

import pytest
import torch
from kernel_cases import assert_close, decode_truth, make_case, prefill_truth
from pagedkit.kernels import reference as ref

DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def test_store_kv_writes_each_token_into_its_slot_and_skips_negative_slots():
    k_cache = torch.zeros(4, 2, 3, 8)
    v_cache = torch.zeros(4, 2, 3, 8)
    key, value = torch.randn(4, 3, 8), torch.randn(4, 3, 8)
    slots = torch.tensor([7, 0, -1, 4])
    ref.store_kv(key, value, k_cache, v_cache, slots)
    for i, slot in enumerate([7, 0, None, 4]):
        if slot is not None:
            assert torch.equal(k_cache[slot // 2, slot % 2], key[i])
            assert torch.equal(v_cache[slot // 2, slot % 2], value[i])
    written = {(0, 0), (3, 1), (2, 0)}
    for b in range(4):
        for o in range(2):
            if (b, o) not in written:
                assert not k_cache[b, o].any() and not v_cache[b, o].any()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("block_size,group", [(1, 1), (8, 2), (16, 4), (32, 8)])
def test_decode_matches_sdpa_on_contiguous_kv(dtype, block_size, group):
    lens = [1, block_size, block_size + 1, max(1, 2 * block_size - 1), 70]
    case = make_case(lens, block_size, num_kv_heads=2, head_dim=64, dtype=dtype, seed=block_size)
    query = torch.randn(len(lens), 2 * group, 64).to(dtype)
    out = ref.paged_decode_attention(query, case.k_cache, case.v_cache, case.block_tables,
                                     case.context_lens, num_splits=3)
    assert_close(out, decode_truth(query, case, 64 ** -0.5), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_prefill_matches_sdpa_with_cached_prefix_chunks_and_decodes(dtype):
    # full prompt, chunk after a cached prefix, a decode, a chunk ending mid-block
    lens, q_lens = [13, 40, 9, 33], [13, 7, 1, 16]
    case = make_case(lens, 8, num_kv_heads=2, head_dim=32, dtype=dtype, padding=None)
    cu = [0]
    for n in q_lens:
        cu.append(cu[-1] + n)
    query = torch.randn(cu[-1], 4, 32).to(dtype)
    out = ref.paged_prefill_attention(query, case.k_cache, case.v_cache, case.block_tables,
                                      torch.tensor(cu, dtype=torch.int32), case.context_lens,
                                      scale=0.3)
    assert_close(out, prefill_truth(query, cu, case, 0.3), dtype)


def test_copy_blocks_copies_whole_blocks_and_nothing_else():
    cache = torch.randn(6, 4, 2, 8)
    before = cache.clone()
    ref.copy_blocks(cache, torch.tensor([[0, 3], [5, 1]]))
    assert torch.equal(cache[3], before[0]) and torch.equal(cache[1], before[5])
    for b in (0, 2, 4, 5):
        assert torch.equal(cache[b], before[b])
