"""The Triton kernels against the torch references and against SDPA on the un-paged K/V.

Without a GPU they run in Triton's interpreter on CPU (see conftest.py); with
one, compiled, on the GPU. The interpreter is slow, so the grid covers each
axis (block size, head_dim, GQA ratio, context length around block
boundaries, splits, dtype, padding) without taking their full cross
product, and keeps long contexts few.
"""

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kernel_cases import assert_close, decode_truth, make_case, prefill_truth

from pagedkit import ops
from pagedkit.gpucheck import oracle
from pagedkit.kernels import reference as ref

F32, F16, BF16 = torch.float32, torch.float16, torch.bfloat16
# bfloat16 only where it can run: the interpreter's tl.dot gets it wrong.
GPU_ONLY = pytest.mark.skipif(not torch.cuda.is_available(), reason="bfloat16 needs a GPU")

# (block_size, query heads per KV head, head_dim, dtype): every block size,
# GQA ratio and head_dim (80 is not a power of two) at least once, both dtypes.
DECODE_CASES = [
    (1, 1, 64, F32), (8, 2, 128, F32), (16, 4, 80, F32), (32, 8, 64, F32),
    (16, 1, 128, F16), (8, 8, 80, F16), (32, 2, 64, F16), (1, 4, 128, F16),
    pytest.param(16, 4, 128, BF16, marks=GPU_ONLY),
]
PREFILL_CASES = [
    (1, 1, 64, F32), (8, 2, 128, F16), (16, 4, 80, F32), (32, 8, 64, F16),
    pytest.param(16, 4, 128, BF16, marks=GPU_ONLY),
]


def boundary_lens(block_size: int) -> list[int]:
    """1, a multiple of the block size, one more, one less, and a few blocks' worth."""
    return [1, 2 * block_size, 2 * block_size + 1, max(1, 2 * block_size - 1), 70]


def cu_seqlens(q_lens):
    cu = [0]
    for n in q_lens:
        cu.append(cu[-1] + n)
    return cu


def run_decode(kernels, case, query, **kw):
    """The kernel's output and the reference's, both for the same arguments."""
    device = case.k_cache.device
    args = (query.to(device), case.k_cache, case.v_cache, case.block_tables, case.context_lens)
    out = kernels.paged_decode.paged_decode_attention(*args, **kw)
    return out, ref.paged_decode_attention(*args, scale=kw.get("scale"))


def run_prefill(kernels, case, query, cu):
    device = case.k_cache.device
    args = (query.to(device), case.k_cache, case.v_cache, case.block_tables,
            torch.tensor(cu, dtype=torch.int32, device=device), case.context_lens)
    return kernels.paged_prefill.paged_prefill_attention(*args), ref.paged_prefill_attention(*args)


@pytest.mark.parametrize("block_size,group,head_dim,dtype", DECODE_CASES)
def test_decode(triton_kernels, device, block_size, group, head_dim, dtype):
    lens = boundary_lens(block_size)
    case = make_case(lens, block_size, num_kv_heads=2, head_dim=head_dim, dtype=dtype,
                     seed=block_size + group, padding=None if group % 2 else -1).to(device)
    query = torch.randn(len(lens), 2 * group, head_dim).to(dtype)
    truth = decode_truth(query, case, head_dim ** -0.5)
    for num_splits in (1, 3):
        out, expected = run_decode(triton_kernels, case, query, num_splits=num_splits)
        assert_close(out, truth, dtype)
        assert_close(out, expected.double(), dtype)


def test_decode_long_contexts_split_k_matches_single_pass(triton_kernels, device):
    lens = [2049, 700]
    case = make_case(lens, 16, num_kv_heads=1, head_dim=64, seed=7).to(device)
    # A strided query (every other head of a bigger tensor): the kernel follows strides.
    query = torch.randn(2, 8, 64)[:, ::2]
    truth = decode_truth(query, case, 0.1)
    single, _ = run_decode(triton_kernels, case, query, num_splits=1, scale=0.1)
    split, expected = run_decode(triton_kernels, case, query, num_splits=5, scale=0.1)
    default, _ = run_decode(triton_kernels, case, query, scale=0.1)  # the GPU picks splits
    for out in (single, split, default):
        assert_close(out, truth, F32)
    assert_close(split, expected.double(), F32)


@pytest.mark.parametrize("block_size,group,head_dim,dtype", PREFILL_CASES)
def test_prefill_with_cached_prefix_chunks_and_decodes(triton_kernels, device, block_size, group,
                                                        head_dim, dtype):
    # a whole prompt, a chunk after a cached prefix ending mid-block, a decode,
    # a long chunk (a 64-row query tile) after a one-block prefix
    lens = [2 * block_size + 1, 3 * block_size + 5, block_size, 70]
    q_lens = [2 * block_size + 1, block_size + 3, 1, 70 - block_size]
    case = make_case(lens, block_size, num_kv_heads=2, head_dim=head_dim, dtype=dtype,
                     seed=group, padding=None).to(device)
    cu = cu_seqlens(q_lens)
    query = torch.randn(cu[-1], 2 * group, head_dim).to(dtype)
    out, expected = run_prefill(triton_kernels, case, query, cu)
    assert_close(out, prefill_truth(query, cu, case, head_dim ** -0.5), dtype)
    assert_close(out, expected.double(), dtype)


def test_prefill_of_decodes_only_equals_decode(triton_kernels, device):
    case = make_case([5, 33, 16], 16, num_kv_heads=2, head_dim=32, seed=3).to(device)
    query = torch.randn(3, 4, 32)
    prefill, _ = run_prefill(triton_kernels, case, query, [0, 1, 2, 3])
    decode, _ = run_decode(triton_kernels, case, query)
    torch.testing.assert_close(prefill, decode, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("dtype", [F32, F16, BF16])
def test_store_kv_equals_reference(triton_kernels, device, dtype):
    k_cache = torch.randn(5, 8, 3, 48).to(dtype).to(device)
    v_cache = torch.randn(5, 8, 3, 48).to(dtype).to(device)
    # strided key/value: views into a fused [tokens, 2, heads, dim] projection
    kv = torch.randn(6, 2, 3, 48).to(dtype).to(device)
    key, value = kv[:, 0], kv[:, 1]
    slots = torch.tensor([39, 0, -1, 17, 8, -5], device=device)
    expected_k, expected_v = k_cache.clone(), v_cache.clone()
    ref.store_kv(key, value, expected_k, expected_v, slots)
    triton_kernels.store_kv.store_kv(key, value, k_cache, v_cache, slots)
    assert torch.equal(k_cache, expected_k) and torch.equal(v_cache, expected_v)


@pytest.mark.parametrize("dtype", [F32, BF16])
def test_copy_blocks_equals_reference(triton_kernels, device, dtype):
    cache = torch.randn(6, 16, 4, 40).to(dtype).to(device)  # 2560 values a block: three chunks
    pairs = torch.tensor([[0, 3], [5, 1], [2, 2]], dtype=torch.int32, device=device)
    expected = cache.clone()
    ref.copy_blocks(expected, pairs)
    triton_kernels.copy_blocks.copy_blocks(cache, pairs)
    assert torch.equal(cache, expected)


@pytest.mark.skipif(torch.cuda.is_available(), reason="the interpreter runs on CPU only")
def test_attention_refuses_bfloat16_in_the_interpreter(triton_kernels):
    case = make_case([3], 4, num_kv_heads=1, head_dim=16, dtype=BF16)
    query = torch.randn(1, 1, 16, dtype=BF16)
    with pytest.raises(TypeError, match=r"bfloat16 on CPU is refused .* issue 11584"):
        triton_kernels.paged_decode.paged_decode_attention(
            query, case.k_cache, case.v_cache, case.block_tables, case.context_lens)
    with pytest.raises(TypeError, match="bfloat16 on CPU is refused"):
        triton_kernels.paged_prefill.paged_prefill_attention(
            query, case.k_cache, case.v_cache, case.block_tables,
            torch.tensor([0, 1], dtype=torch.int32), case.context_lens)


def test_kernels_check_their_arguments(triton_kernels, device):
    case = make_case([5, 20], 8, num_kv_heads=2, head_dim=16).to(device)
    with pytest.raises(ValueError, match=r"context_lens\[1\] = 40 needs 5 blocks"):
        triton_kernels.paged_decode.paged_decode_attention(
            torch.randn(2, 2, 16, device=device), case.k_cache, case.v_cache, case.block_tables,
            torch.tensor([5, 40], dtype=torch.int32, device=device))
    with pytest.raises(ValueError, match=r"slot_mapping\[0\] = 48 is past"):
        key = torch.randn(1, 2, 16, device=device)
        triton_kernels.store_kv.store_kv(key, key, case.k_cache, case.v_cache,
                                         torch.tensor([48], device=device))


def test_ops_forced_to_triton_runs_the_kernels(triton_kernels, device, monkeypatch):
    monkeypatch.delenv("PAGEDKIT_KERNELS", raising=False)
    case = make_case([9, 30], 8, num_kv_heads=2, head_dim=32, seed=5).to(device)
    query = torch.randn(2, 4, 32)
    calls = []
    kernel = triton_kernels.paged_decode.paged_decode_attention
    monkeypatch.setattr(triton_kernels.paged_decode, "paged_decode_attention",
                        lambda *a, **k: calls.append(1) or kernel(*a, **k))
    ops.set_backend("triton")
    try:
        assert ops.backend(device) == "triton"
        out = ops.paged_decode_attention(query.to(device), case.k_cache, case.v_cache,
                                         case.block_tables, case.context_lens)
    finally:
        ops.set_backend(None)
    assert calls == [1]
    assert_close(out, decode_truth(query, case, 32 ** -0.5), F32)


@settings(max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_random_shapes(triton_kernels, device, data):
    block_size = data.draw(st.sampled_from([1, 2, 4, 8, 16]), label="block_size")
    num_kv_heads = data.draw(st.integers(1, 2), label="num_kv_heads")
    group = data.draw(st.sampled_from([1, 2, 4]), label="group")
    head_dim = data.draw(st.sampled_from([16, 24, 32, 48]), label="head_dim")
    lens = data.draw(st.lists(st.integers(1, 90), min_size=1, max_size=3), label="context_lens")
    q_lens = [data.draw(st.integers(1, n), label="q_len") for n in lens]
    num_splits = data.draw(st.sampled_from([None, 1, 2, 3]), label="num_splits")
    seed = data.draw(st.integers(0, 2**16), label="seed")
    case = make_case(lens, block_size, num_kv_heads, head_dim, seed=seed,
                     spare_blocks=data.draw(st.integers(1, 3), label="spare_blocks"),
                     pad_columns=2, padding=None).to(device)
    gen = torch.Generator().manual_seed(seed)
    num_q_heads = num_kv_heads * group

    query = torch.randn(len(lens), num_q_heads, head_dim, generator=gen)
    out, _ = run_decode(triton_kernels, case, query, num_splits=num_splits)
    assert_close(out, decode_truth(query, case, head_dim ** -0.5), F32)

    cu = cu_seqlens(q_lens)
    query = torch.randn(cu[-1], num_q_heads, head_dim, generator=gen)
    out, _ = run_prefill(triton_kernels, case, query, cu)
    assert_close(out, prefill_truth(query, cu, case, head_dim ** -0.5), F32)


def test_attention_kernels_take_half_bfloat_or_single_precision(triton_kernels):
    case = make_case([3], 4, num_kv_heads=1, head_dim=16, dtype=torch.float64)
    query = torch.randn(1, 1, 16, dtype=torch.float64)
    with pytest.raises(TypeError, match=r"take float16, bfloat16 or float32, got torch\.float64"):
        triton_kernels.paged_decode.paged_decode_attention(
            query, case.k_cache, case.v_cache, case.block_tables, case.context_lens)
    with pytest.raises(TypeError, match=r"take float16, bfloat16 or float32, got torch\.float64"):
        triton_kernels.paged_prefill.paged_prefill_attention(
            query, case.k_cache, case.v_cache, case.block_tables,
            torch.tensor([0, 1], dtype=torch.int32), case.context_lens)


# ------------------------------------------------------------------ attention options
# sliding window / softcap / sinks (docs/kernels.md, "Attention options"), against an
# oracle of their own: float64 over the un-paged K/V, an explicit mask, the sink as one
# extra logit. Windows smaller and larger than a block, not multiples of it, crossing
# block and tile boundaries; the blocks wholly before a window hold NaN (the engine may
# have freed them) and their table entries point at a NaN block.
options_truth = oracle  # float64, the options spelled out (pagedkit.gpucheck)


def poison_before_window(case, q_lens, window):
    """NaN into every block wholly before each sequence's window, and its table entry
    pointed at a NaN spare block: a kernel that reads one returns NaN."""
    bs = case.k_cache.shape[1]
    spare = int(case.block_tables[0, -1])  # make_case(padding=None): a NaN spare block
    poisoned = 0
    for s, (n, q_len) in enumerate(zip(case.context_lens.tolist(), q_lens, strict=True)):
        window_start = n - q_len - window + 1          # p_min - window + 1
        for b in range(max(0, window_start) // bs):    # (b + 1) * bs <= window_start
            block = int(case.block_tables[s, b])
            case.k_cache[block] = float("nan")
            case.v_cache[block] = float("nan")
            case.block_tables[s, b] = spare
            poisoned += 1
    return poisoned


WINDOW_LENS = [1, 8, 9, 30, 70]  # block size 8: inside one block, exactly one, crossing many


@pytest.mark.parametrize("window", [1, 5, 8, 13, 100])
def test_decode_sliding_window_never_reads_blocks_before_it(triton_kernels, device, window):
    case = make_case(WINDOW_LENS, 8, num_kv_heads=2, head_dim=32, seed=window, padding=None)
    poisoned = poison_before_window(case, [1] * len(WINDOW_LENS), window)
    assert poisoned > 0 or window == 100
    case = case.to(device)
    query = torch.randn(len(WINDOW_LENS), 4, 32)
    truth = torch.stack([options_truth(query[s:s + 1], k, v, 32 ** -0.5, k.shape[0] - 1,
                                       sliding_window=window)[0]
                         for s, (k, v) in enumerate(zip(case.keys, case.values, strict=True))])
    for num_splits in (1, 3):
        out = triton_kernels.paged_decode.paged_decode_attention(
            query.to(device), case.k_cache, case.v_cache, case.block_tables, case.context_lens,
            sliding_window=window, num_splits=num_splits)
        assert_close(out, truth, F32)


@pytest.mark.parametrize("window", [1, 7, 16, 29])
def test_prefill_sliding_window_never_reads_blocks_before_it(triton_kernels, device, window):
    # a whole prompt spanning three query tiles, a chunk after a cached prefix, a decode
    lens, q_lens = [150, 45, 70], [150, 13, 1]
    case = make_case(lens, 8, num_kv_heads=2, head_dim=32, seed=window, padding=None)
    assert poison_before_window(case, q_lens, window) > 0
    case = case.to(device)
    cu = cu_seqlens(q_lens)
    query = torch.randn(cu[-1], 4, 32)
    truth = torch.cat([options_truth(query[cu[s]:cu[s + 1]], k, v, 32 ** -0.5,
                                     k.shape[0] - q_lens[s], sliding_window=window)
                       for s, (k, v) in enumerate(zip(case.keys, case.values, strict=True))])
    out = triton_kernels.paged_prefill.paged_prefill_attention(
        query.to(device), case.k_cache, case.v_cache, case.block_tables,
        torch.tensor(cu, dtype=torch.int32, device=device), case.context_lens,
        sliding_window=window)
    assert_close(out, truth, F32)


def softcap_and_sink_case(device, dtype):
    """Large scores (nearly one-hot attention) so that a softcap of 2 flattens them, and
    sinks from -10 (no weight) to 40 (above every score: most of the weight)."""
    case = make_case([40, 17], 8, num_kv_heads=2, head_dim=16, dtype=dtype, seed=11,
                     padding=None).to(device)
    query = (3 * torch.randn(2, 8, 16)).to(dtype)
    sinks = torch.linspace(-10, 40, 8)
    return case, query, sinks


@pytest.mark.parametrize("dtype", [F32, F16])
def test_decode_softcap_and_sinks_change_the_output_as_the_oracle_says(triton_kernels, device,
                                                                       dtype):
    case, query, sinks = softcap_and_sink_case(device, dtype)
    scale = 1.0

    def truth(**kw):
        return torch.stack([options_truth(query[s:s + 1], k, v, scale, k.shape[0] - 1, **kw)[0]
                            for s, (k, v) in enumerate(zip(case.keys, case.values,
                                                           strict=True))])

    plain, capped = truth(), truth(softcap=2.0)
    sunk, everything = truth(sinks=sinks), truth(softcap=2.0, sinks=sinks, sliding_window=11)
    # the options bite: the output's largest coordinate moves, sinks shrink the outputs
    assert (plain.argmax(-1) != capped.argmax(-1)).any()
    assert (plain - sunk).abs().max() > 0.3
    for num_splits in (1, 2):
        def run(num_splits=num_splits, **kw):
            return triton_kernels.paged_decode.paged_decode_attention(
                query.to(device), case.k_cache, case.v_cache, case.block_tables,
                case.context_lens, scale, num_splits=num_splits, **kw)
        assert_close(run(softcap=2.0), capped, dtype)
        assert_close(run(sinks=sinks.to(device)), sunk, dtype)
        assert_close(run(softcap=2.0, sinks=sinks.to(device), sliding_window=11), everything,
                     dtype)


@pytest.mark.parametrize("dtype", [F32, F16])
def test_prefill_softcap_and_sinks_match_the_oracle(triton_kernels, device, dtype):
    case, _, sinks = softcap_and_sink_case(device, dtype)
    q_lens = [40, 5]
    cu = cu_seqlens(q_lens)
    query = (3 * torch.randn(cu[-1], 8, 16)).to(dtype)

    def truth(**kw):
        return torch.cat([options_truth(query[cu[s]:cu[s + 1]], k, v, 1.0,
                                        k.shape[0] - q_lens[s], **kw)
                          for s, (k, v) in enumerate(zip(case.keys, case.values, strict=True))])

    def run(**kw):
        return triton_kernels.paged_prefill.paged_prefill_attention(
            query.to(device), case.k_cache, case.v_cache, case.block_tables,
            torch.tensor(cu, dtype=torch.int32, device=device), case.context_lens, 1.0, **kw)

    capped, sunk = truth(softcap=2.0), truth(sinks=sinks)
    assert (truth().argmax(-1) != capped.argmax(-1)).any()
    assert (truth() - sunk).abs().max() > 0.3
    assert_close(run(softcap=2.0), capped, dtype)
    assert_close(run(sinks=sinks.to(device)), sunk, dtype)
    assert_close(run(softcap=2.0, sinks=sinks.to(device), sliding_window=11),
                 truth(softcap=2.0, sinks=sinks, sliding_window=11), dtype)
