"""Queries, keys and values whose head_dim is not at stride 1 are computed
exactly, on every path (tenth newcomer's N5: all three refused them with
'query must be contiguous in head_dim (stride 1)', though the torch paths'
math takes any strides; the Triton kernels, which read head_dim at stride 1,
now take a contiguous copy of such an input, and of no other)."""

import pytest
import torch
from kernel_cases import assert_close, decode_truth, make_case, prefill_truth

from pagedkit.kernels import batched, reference

IMPLEMENTATIONS = ("torch", "batched", "triton")


def ops_of(name, request):
    """decode, prefill and store_kv of one implementation."""
    if name == "torch":
        return reference.paged_decode_attention, reference.paged_prefill_attention, \
            reference.store_kv
    if name == "batched":
        return batched.paged_decode_attention, batched.paged_prefill_attention, batched.store_kv
    kernels = request.getfixturevalue("triton_kernels")
    return (kernels.paged_decode.paged_decode_attention,
            kernels.paged_prefill.paged_prefill_attention, kernels.store_kv.store_kv)


def laid_out(x, layout):
    """`x` ([tokens, heads, head_dim]) with the same values, its head_dim not at stride 1."""
    if layout == "every other element":
        wide = torch.zeros(*x.shape[:2], 2 * x.shape[2], dtype=x.dtype, device=x.device)
        wide[..., ::2] = x
        out = wide[..., ::2]
    else:  # "head_dim outermost": stored [head_dim, tokens, heads]
        out = x.permute(2, 0, 1).contiguous().permute(1, 2, 0)
    assert out.stride(2) != 1 and torch.equal(out, x)
    return out


LAYOUTS = ("every other element", "head_dim outermost")


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("name", IMPLEMENTATIONS)
def test_decode_and_prefill_take_a_query_of_any_strides(name, layout, request, device):
    decode, prefill, _ = ops_of(name, request)
    case = make_case([5, 17, 24], 8, num_kv_heads=2, head_dim=32, seed=1).to(device)
    query = torch.randn(3, 4, 32, generator=torch.Generator().manual_seed(2)).to(device)
    args = (case.k_cache, case.v_cache, case.block_tables, case.context_lens)
    plain = decode(query, *args)
    got = decode(laid_out(query, layout), *args)
    torch.testing.assert_close(got, plain, atol=1e-6, rtol=1e-6)
    assert_close(got.cpu(), decode_truth(query.cpu(), case, 32 ** -0.5), torch.float32)

    cu = [0, 5, 22, 46]
    chunks = torch.randn(46, 4, 32, generator=torch.Generator().manual_seed(3)).to(device)
    cu_t = torch.tensor(cu, dtype=torch.int32, device=device)
    plain = prefill(chunks, case.k_cache, case.v_cache, case.block_tables, cu_t,
                    case.context_lens)
    got = prefill(laid_out(chunks, layout), case.k_cache, case.v_cache, case.block_tables,
                  cu_t, case.context_lens)
    torch.testing.assert_close(got, plain, atol=1e-6, rtol=1e-6)
    assert_close(got.cpu(), prefill_truth(chunks.cpu(), cu, case, 32 ** -0.5), torch.float32)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("name", IMPLEMENTATIONS)
def test_store_kv_takes_keys_and_values_of_any_strides(name, layout, request, device):
    _, _, store = ops_of(name, request)
    gen = torch.Generator().manual_seed(4)
    key, value = (torch.randn(6, 3, 48, generator=gen).to(device) for _ in range(2))
    slots = torch.tensor([39, 0, -1, 17, 8, -5], device=device)
    caches = [torch.zeros(5, 8, 3, 48, device=device) for _ in range(4)]
    store(key, value, caches[0], caches[1], slots)
    store(laid_out(key, layout), laid_out(value, layout), caches[2], caches[3], slots)
    assert torch.equal(caches[2], caches[0]) and torch.equal(caches[3], caches[1])
    assert caches[0].abs().sum() > 0
