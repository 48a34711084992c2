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


# ------------------------------------------------------------ sliding window, softcap, sinks
def options_truth(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, scale: float,
                  first_position: int, window=None, softcap=None, sinks=None) -> torch.Tensor:
    """Float64, one query row and head at a time, mask from the spec's rule:
    key k visible to the query at p iff k <= p and (no window or k > p - window)."""
    group = query.shape[1] // key.shape[1]
    out = torch.zeros(query.shape, dtype=torch.float64)
    for j in range(query.shape[0]):
        p = first_position + j
        keep = [k for k in range(key.shape[0]) if k <= p and (window is None or k > p - window)]
        for h in range(query.shape[1]):
            ks, vs = key[keep, h // group].double(), value[keep, h // group].double()
            s = ks @ query[j, h].double() * scale
            if softcap is not None:
                s = softcap * torch.tanh(s / softcap)
            if sinks is not None:
                s = torch.cat([s, sinks[h].double().reshape(1)])
            w = torch.softmax(s, 0)[:len(keep)]
            out[j, h] = w @ vs
    return out


def _release_blocks_before_window(case, first_queries, window, nan_block):
    """Point the table entries wholly before each sequence's window at a NaN block,
    as the engine does once it has returned them to the pool."""
    bs = case.k_cache.shape[1]
    for s, p in enumerate(first_queries):
        gone = max(0, p - window + 1) // bs
        case.block_tables[s, :gone] = nan_block


OPTION_CASES = [  # (window, softcap, sinks scale): each bites on the contexts below
    (5, None, None),     # shorter than a block of 8, not a multiple of it
    (11, None, None),    # longer than a block, crosses block boundaries
    (1, None, None),     # the query alone
    (None, 0.5, None),   # a softcap that flattens the scores
    (None, None, 4.0),   # sinks big enough to soak up most of the weight
    (7, 1.0, 2.0),       # all three together (gpt-oss has windows and sinks)
]


@pytest.mark.parametrize("dtype", DTYPES[:2])
@pytest.mark.parametrize("window,softcap,sink_scale", OPTION_CASES)
def test_decode_and_prefill_options_match_float64_truth(dtype, window, softcap, sink_scale):
    lens, q_lens = [1, 8, 9, 30, 23], [1, 8, 1, 7, 16]
    case = make_case(lens, 8, num_kv_heads=2, head_dim=16, dtype=dtype, seed=3, padding=None)
    nan_block = case.block_tables[0, -1].item()      # a spare block: all NaN
    gen = torch.Generator().manual_seed(1)
    sinks = None if sink_scale is None else sink_scale * torch.randn(4, generator=gen)
    if window is not None:
        _release_blocks_before_window(case, [n - q for n, q in zip(lens, q_lens, strict=True)],
                                      window, nan_block)
    cu = [0]
    for n in q_lens:
        cu.append(cu[-1] + n)
    query = (2 * torch.randn(cu[-1], 4, 16, generator=gen)).to(dtype)
    opts = dict(sliding_window=window, softcap=softcap, sinks=sinks)
    out = ref.paged_prefill_attention(query, case.k_cache, case.v_cache, case.block_tables,
                                      torch.tensor(cu, dtype=torch.int32), case.context_lens,
                                      scale=0.4, **opts)
    truth = torch.cat([options_truth(query[cu[s]:cu[s + 1]], case.keys[s], case.values[s], 0.4,
                                     lens[s] - q_lens[s], window, softcap, sinks)
                       for s in range(len(lens))])
    assert_close(out, truth, dtype)
    plain = torch.cat([options_truth(query[cu[s]:cu[s + 1]], case.keys[s], case.values[s],
                                     0.4, lens[s] - q_lens[s]) for s in range(len(lens))])
    assert (truth - plain).abs().max() > 0.05       # the option bites at these values
    last = [c - 1 for c in cu[1:]]                # decode: the last query row of each sequence
    dec = ref.paged_decode_attention(query[last].contiguous(), case.k_cache, case.v_cache,
                                     case.block_tables, case.context_lens, 0.4, **opts)
    assert_close(dec, truth[last], dtype)


def test_softcap_changes_the_argmax_and_the_window_convention_is_transformers():
    from transformers.masking_utils import and_masks, causal_mask_function, sliding_window_overlay

    rule = and_masks(causal_mask_function, sliding_window_overlay(5))
    zero = torch.tensor(0)
    for p in range(20):
        for k in range(20):
            assert bool(rule(zero, zero, torch.tensor(p), torch.tensor(k))) == (p - 5 < k <= p)
    q = torch.tensor([[[1.0, 0.0]]])
    key = torch.tensor([[[10.0, 0.0]], [[3.0, 0.0]]])     # scores 10 and 3
    value = torch.tensor([[[1.0, 0.0]], [[0.0, 1.0]]])
    out = ref.attention(q, key, value, 1.0, 1)
    capped = ref.attention(q, key, value, 1.0, 1, softcap=0.5)   # both saturate near 0.5
    assert out[0, 0, 0] > 0.99 and 0.4 < capped[0, 0, 0] < 0.6
