"""The batched CPU path (kernels/batched.py) against a float64 oracle and the
per-sequence torch reference, over every shape class the kernel tests cover.

Caches come from `kernel_cases.make_case`: blocks handed out in random order,
NaN in every slot that holds no token, block tables padded with -1 (out of
range) or with a NaN block. The oracle here is written out in float64 from the
contiguous K/V with an explicit mask, independent of both implementations.
"""

from __future__ import annotations

import pytest
import torch
from kernel_cases import TOLERANCE, assert_close, make_case

from pagedkit import ops
from pagedkit.gpucheck import oracle
from pagedkit.kernels import batched, reference

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
BLOCK_SIZES = [1, 8, 16, 32]
HEAD_DIMS = [64, 80, 128]
GROUPS = [1, 2, 4, 8]


truth = oracle  # float64, every step of the contract spelled out (pagedkit.gpucheck)


def packed_truth(query, cu, case, scale, **options):
    out = torch.zeros(query.shape, dtype=torch.float64)
    for s, (k, v) in enumerate(zip(case.keys, case.values, strict=True)):
        a, b = cu[s], cu[s + 1]
        if b > a:
            out[a:b] = truth(query[a:b], k, v, scale, k.shape[0] - (b - a), **options)
    return out


def contexts(block_size: int) -> list[int]:
    """1, block multiples and their neighbours, and a long one."""
    b = block_size
    return sorted({1, b, b + 1, max(1, b - 1), 2 * b, 3 * b + 1, 150})


def cu_of(q_lens: list[int]) -> list[int]:
    cu = [0]
    for n in q_lens:
        cu.append(cu[-1] + n)
    return cu


# ----------------------------------------------------------------------------- decode
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("group", GROUPS)
@pytest.mark.parametrize("head_dim", HEAD_DIMS)
@pytest.mark.parametrize("block_size", BLOCK_SIZES)
def test_decode_matches_float64_and_the_reference(block_size, head_dim, group, dtype):
    lens = contexts(block_size)
    padding = -1 if group % 2 else None  # out-of-range padding, or a NaN spare block
    case = make_case(lens, block_size, num_kv_heads=2, head_dim=head_dim, dtype=dtype,
                     seed=block_size + head_dim + group, padding=padding)
    query = torch.randn(len(lens), 2 * group, head_dim).to(dtype)
    args = (query, case.k_cache, case.v_cache, case.block_tables, case.context_lens)
    out = batched.paged_decode_attention(*args)
    expected = torch.stack([truth(query[s:s + 1], k, v, head_dim ** -0.5, k.shape[0] - 1)[0]
                            for s, (k, v) in enumerate(zip(case.keys, case.values,
                                                           strict=True))])
    assert_close(out, expected, dtype)
    assert_close(out, reference.paged_decode_attention(*args).double(), dtype)
    assert torch.equal(out, batched.paged_decode_attention(*args, check=False))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("group", GROUPS)
@pytest.mark.parametrize("block_size", BLOCK_SIZES)
def test_prefill_chunks_over_cached_prefixes(block_size, group, dtype):
    """A whole prompt, chunks after cached prefixes (ending mid-block and on a
    block boundary), decodes, empty chunks, in one packed call."""
    b = block_size
    lens = [13, 3 * b + 5, 9, 2 * b, 40, 7, 2 * b + 1]
    q_lens = [13, b + 2, 1, b, 0, 7, 1]
    case = make_case(lens, b, num_kv_heads=2, head_dim=80, dtype=dtype, seed=b * group,
                     padding=None)
    cu = cu_of(q_lens)
    query = torch.randn(cu[-1], 2 * group, 80).to(dtype)
    args = (query, case.k_cache, case.v_cache, case.block_tables,
            torch.tensor(cu, dtype=torch.int32), case.context_lens)
    out = batched.paged_prefill_attention(*args, scale=0.2)
    assert_close(out, packed_truth(query, cu, case, 0.2), dtype)
    assert_close(out, reference.paged_prefill_attention(*args, scale=0.2).double(), dtype)


def test_prefill_with_only_empty_chunks_and_no_sequences():
    case = make_case([5, 9], 4, num_kv_heads=1, head_dim=16)
    query = torch.empty(0, 2, 16)
    cu = torch.zeros(3, dtype=torch.int32)
    out = batched.paged_prefill_attention(query, case.k_cache, case.v_cache, case.block_tables,
                                          cu, case.context_lens)
    assert out.shape == (0, 2, 16)
    none = batched.paged_prefill_attention(query, case.k_cache, case.v_cache,
                                           case.block_tables[:0], cu[:1], case.context_lens[:0])
    assert none.shape == (0, 2, 16)


@pytest.mark.parametrize("head_dim", HEAD_DIMS)
def test_prefill_every_head_dim_and_group_of_eight(head_dim):
    lens, q_lens = [1, 17, 64, 33], [1, 17, 30, 0]
    case = make_case(lens, 16, num_kv_heads=1, head_dim=head_dim, seed=head_dim)
    cu = cu_of(q_lens)
    query = torch.randn(cu[-1], 8, head_dim)
    out = batched.paged_prefill_attention(query, case.k_cache, case.v_cache, case.block_tables,
                                          torch.tensor(cu, dtype=torch.int32), case.context_lens)
    assert_close(out, packed_truth(query, cu, case, head_dim ** -0.5), torch.float32)


# ---------------------------------------------------------------------------- options
WINDOWS = [1, 3, 8, 13, 16, 40]  # vs blocks of 8: smaller, equal, not a multiple, several


def forget_blocks_before_window(case, q_lens, block_size, window, fill):
    """Point every table entry wholly before each sequence's window at `fill`
    (-1, or a NaN block): the engine may have given those blocks away."""
    tables = case.block_tables.clone()
    forgotten = 0
    for s, (ctx, q) in enumerate(zip(case.context_lens.tolist(), q_lens, strict=True)):
        if q == 0:
            continue
        first = max(0, ctx - q - window + 1) // block_size
        tables[s, :first] = fill
        forgotten += first
    case.block_tables = tables
    return forgotten


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("window", WINDOWS)
def test_sliding_window_decode_and_prefill_never_read_blocks_before_it(window, dtype):
    bs = 8
    lens = [1, 7, 8, 9, 23, 40, 61, 100]
    case = make_case(lens, bs, num_kv_heads=2, head_dim=64, dtype=dtype, seed=window,
                     spare_blocks=3, padding=None)
    nan_block = int(case.block_tables[0, -1])  # padding=None: a spare block, all NaN
    assert torch.isnan(case.k_cache[nan_block]).all()
    # decode: blocks before the window point at -1 for half, at the NaN block for the rest
    q = torch.randn(len(lens), 4, 64).to(dtype)
    decode_case = make_case(lens, bs, num_kv_heads=2, head_dim=64, dtype=dtype, seed=window,
                            spare_blocks=3, padding=None)
    forgotten = forget_blocks_before_window(decode_case, [1] * len(lens), bs, window,
                                            -1 if window % 2 else nan_block)
    if window <= 16:
        assert forgotten > 0  # the window lets blocks go: the test bites
    out = batched.paged_decode_attention(q, decode_case.k_cache, decode_case.v_cache,
                                         decode_case.block_tables, decode_case.context_lens,
                                         sliding_window=window)
    expected = torch.stack([truth(q[s:s + 1], k, v, 64 ** -0.5, k.shape[0] - 1,
                                  sliding_window=window)[0]
                            for s, (k, v) in enumerate(zip(case.keys, case.values,
                                                           strict=True))])
    assert_close(out, expected, dtype)
    full = torch.stack([truth(q[s:s + 1], k, v, 64 ** -0.5, k.shape[0] - 1)[0]
                        for s, (k, v) in enumerate(zip(case.keys, case.values, strict=True))])
    assert not torch.allclose(expected, full, atol=1e-3)  # the window changes outputs

    # prefill: chunks over cached prefixes, whose earliest query sets the window start
    q_lens = [1, 3, 8, 0, 10, 5, 20, 9]
    forget_blocks_before_window(case, q_lens, bs, window, nan_block)
    cu = cu_of(q_lens)
    query = torch.randn(cu[-1], 4, 64).to(dtype)
    out = batched.paged_prefill_attention(query, case.k_cache, case.v_cache, case.block_tables,
                                          torch.tensor(cu, dtype=torch.int32), case.context_lens,
                                          sliding_window=window)
    assert_close(out, packed_truth(query, cu, case, 64 ** -0.5, sliding_window=window), dtype)
    ref = reference.paged_prefill_attention(
        query, case.k_cache, case.v_cache, case.block_tables,
        torch.tensor(cu, dtype=torch.int32), case.context_lens, sliding_window=window)
    assert_close(out, ref.double(), dtype)


@pytest.mark.parametrize("group", [1, 4])
def test_softcap_small_enough_to_change_the_argmax(group):
    case = make_case([5, 30, 77], 16, num_kv_heads=2, head_dim=64, seed=group)
    query = 3 * torch.randn(3, 2 * group, 64)
    scale, cap = 1.0, 2.0  # scores of several units: tanh squashes them hard
    args = (query, case.k_cache, case.v_cache, case.block_tables, case.context_lens, scale)
    out = batched.paged_decode_attention(*args, softcap=cap)
    expected = torch.stack([truth(query[s:s + 1], k, v, scale, k.shape[0] - 1, softcap=cap)[0]
                            for s, (k, v) in enumerate(zip(case.keys, case.values,
                                                           strict=True))])
    plain = torch.stack([truth(query[s:s + 1], k, v, scale, k.shape[0] - 1)[0]
                         for s, (k, v) in enumerate(zip(case.keys, case.values, strict=True))])
    assert not torch.equal(expected.argmax(-1), plain.argmax(-1))
    assert_close(out, expected, torch.float32)
    assert_close(out, reference.paged_decode_attention(*args, softcap=cap).double(),
                 torch.float32)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_sinks_large_enough_to_change_outputs_with_window_and_softcap(dtype):
    lens, q_lens = [9, 33, 50, 16], [9, 4, 1, 16]
    case = make_case(lens, 8, num_kv_heads=2, head_dim=64, dtype=dtype, seed=3, padding=None)
    cu = cu_of(q_lens)
    query = torch.randn(cu[-1], 8, 64).to(dtype)
    sinks = torch.linspace(-1.0, 4.0, 8)  # from negligible to dominant, per head
    options = dict(sliding_window=12, softcap=5.0, sinks=sinks)
    args = (query, case.k_cache, case.v_cache, case.block_tables,
            torch.tensor(cu, dtype=torch.int32), case.context_lens)
    out = batched.paged_prefill_attention(*args, **options)
    expected = packed_truth(query, cu, case, 64 ** -0.5, **options)
    no_sink = packed_truth(query, cu, case, 64 ** -0.5, sliding_window=12, softcap=5.0)
    assert (expected - no_sink).abs().max() > 0.1
    assert_close(out, expected, dtype)
    assert_close(out, reference.paged_prefill_attention(*args, **options).double(), dtype)
    # decode, with sinks in another float dtype than the query's
    q1 = torch.randn(4, 8, 64).to(dtype)
    decode = batched.paged_decode_attention(q1, case.k_cache, case.v_cache, case.block_tables,
                                            case.context_lens, sinks=sinks.to(torch.float16))
    assert_close(decode, torch.stack([
        truth(q1[s:s + 1], k, v, 64 ** -0.5, k.shape[0] - 1, sinks=sinks.half())[0]
        for s, (k, v) in enumerate(zip(case.keys, case.values, strict=True))]), dtype)


ONE_SEQ_OPTIONS = [dict(), dict(sliding_window=5), dict(softcap=3.0),
                   dict(sinks=torch.linspace(-1.0, 3.0, 4)),
                   dict(sliding_window=9, softcap=3.0, sinks=torch.linspace(-1.0, 3.0, 4))]


@pytest.mark.parametrize("dtype, head_dim", [(torch.float32, 32), (torch.float16, 80),
                                             (torch.bfloat16, 80)])
@pytest.mark.parametrize("options", ONE_SEQ_OPTIONS, ids=["plain", "window", "softcap", "sinks",
                                                          "all"])
@pytest.mark.parametrize("context", [1, 7, 8, 9, 25, 33])
def test_one_sequence_reads_only_its_slots_that_hold_a_token(context, options, dtype, head_dim):
    """A bucket of one sequence (the tail of a step) gathers its blocks and
    reads only its slots that hold a token: the NaN after its last token in
    its last block, and the NaN padding block, are never read; with a window,
    the table entries wholly before it are -1 (blocks given back) and are never
    read either. Decode, a whole prompt and a chunk after a cached prefix, with
    every option, against float64."""
    bs = 8
    case = make_case([context], bs, num_kv_heads=2, head_dim=head_dim, dtype=dtype,
                     seed=context, padding=None, pad_columns=2)
    if context % bs:
        last = int(case.block_tables[0, (context - 1) // bs])
        assert torch.isnan(case.k_cache[last, context % bs:]).all()  # the tail is NaN
    (k, v), = zip(case.keys, case.values, strict=True)
    query = torch.randn(context, 4, head_dim).to(dtype)
    window = options.get("sliding_window")

    def tables(q_len: int) -> torch.Tensor:  # the entries before the window given back
        first = 0 if window is None else max(0, context - q_len - window + 1) // bs
        t = case.block_tables.clone()
        t[0, :first] = -1
        return t

    bucket, = batched.make_buckets(tables(1), [0, 1], case.context_lens.tolist(), bs, window)
    first_block = 0 if window is None else max(0, context - window) // bs
    # it reads only its slots that hold a token: nothing to zero, and a plain
    # decode needs no mask at all
    assert bucket.num_slots == context - first_block * bs and not bucket.empty.numel()
    if not options:
        assert bucket.bias is None
    out = batched.paged_decode_attention(query[-1:], case.k_cache, case.v_cache, tables(1),
                                         case.context_lens, **options)
    assert torch.isfinite(out).all()
    assert_close(out, truth(query[-1:], k, v, head_dim ** -0.5, context - 1, **options), dtype)
    for q_len in sorted({context, max(1, context // 2), 1}):  # whole prompt, chunks
        cu = torch.tensor([0, q_len], dtype=torch.int32)
        out = batched.paged_prefill_attention(query[-q_len:], case.k_cache, case.v_cache,
                                              tables(q_len), cu, case.context_lens, **options)
        assert torch.isfinite(out).all()
        assert_close(out, truth(query[-q_len:], k, v, head_dim ** -0.5, context - q_len,
                                **options), dtype)


def test_buckets_gather_into_the_same_buffers_for_every_layer():
    """The layers of a step reuse the buckets' gather buffers (a fresh buffer
    is slower to fill): the second layer's outputs come from its own cache,
    not the first layer's K/V left in the buffer; a layer whose cache has
    other heads gets buffers of its own (resizing one would warn, and a
    future torch refuses it)."""
    import warnings

    case = make_case([5, 17, 40, 3], 8, num_kv_heads=2, head_dim=16, seed=1)
    other = make_case([5, 17, 40, 3], 8, num_kv_heads=1, head_dim=32, seed=1)
    assert torch.equal(case.block_tables, other.block_tables)  # same seed: same blocks
    query = torch.randn(4, 4, 16)
    buckets = batched.make_buckets(case.block_tables, list(range(5)), case.context_lens.tolist(),
                                   8)
    assert any(b.num_seqs > 1 for b in buckets)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no buffer is resized
        one = batched.attend(query, case.k_cache, case.v_cache, buckets)
        buffers = [list(b.gathered.values()) for b in buckets]
        # the next layer: the same tables over another layer's cache (NaN stays NaN)
        two = batched.attend(query, -case.k_cache, 0.5 * case.v_cache, buckets)
        assert all(next(iter(b.gathered.values()))[0] is kept[0][0]
                   for b, kept in zip(buckets, buffers, strict=True))
        wide = torch.randn(4, 2, 32)
        three = batched.attend(wide, other.k_cache, other.v_cache, buckets)  # 1 KV head of 32
        assert all(len(b.gathered) == 2 for b in buckets)
    for out, q, c, sign, factor in ((one, query, case, 1, 1.0), (two, query, case, -1, 0.5),
                                    (three, wide, other, 1, 1.0)):
        scale = q.shape[-1] ** -0.5
        assert_close(out, torch.stack([
            truth(q[s:s + 1], sign * k, factor * v, scale, k.shape[0] - 1)[0]
            for s, (k, v) in enumerate(zip(c.keys, c.values, strict=True))]),
            torch.float32)
    assert not torch.allclose(one, two)


def test_nan_in_every_unused_slot_never_reaches_the_output():
    """A context that ends mid-block leaves NaN in the rest of its last block, and
    padding points at a NaN block: both are gathered (it is one batched gather)
    and must be masked on values, not only on scores."""
    case = make_case([3, 17, 2], 8, num_kv_heads=1, head_dim=16, padding=None, pad_columns=3)
    query = torch.randn(3, 2, 16)
    out = batched.paged_decode_attention(query, case.k_cache, case.v_cache, case.block_tables,
                                         case.context_lens)
    assert torch.isfinite(out).all()
    atol, rtol = TOLERANCE[torch.float32]
    for s, (k, v) in enumerate(zip(case.keys, case.values, strict=True)):
        torch.testing.assert_close(out[s].double(),
                                   truth(query[s:s + 1], k, v, 0.25, k.shape[0] - 1)[0],
                                   atol=atol, rtol=rtol)


def test_ops_runs_the_batched_path_on_cpu():
    case = make_case([3, 17, 9], block_size=4, num_kv_heads=2, head_dim=16)
    query = torch.randn(3, 4, 16)
    args = (query, case.k_cache, case.v_cache, case.block_tables, case.context_lens)
    with ops.use_backend("batched"):
        assert ops.backend("cpu") == "batched"
        assert torch.equal(ops.paged_decode_attention(*args),
                           ops.paged_decode_attention_batched(*args))
    with ops.use_backend("torch"):
        assert torch.equal(ops.paged_decode_attention(*args),
                           ops.paged_decode_attention_reference(*args))


def test_one_bucket_and_many_give_the_same_rows():
    """Contexts within one power of two of blocks run as one padded bucket; the
    same sequences mixed with short ones run in several, scattered back."""
    lens = [17, 20, 30, 32]  # 2 blocks of 16 each: one bucket
    case = make_case(lens, 16, num_kv_heads=2, head_dim=64, seed=5)
    query = torch.randn(len(lens), 4, 64)
    args = (query, case.k_cache, case.v_cache, case.block_tables, case.context_lens)
    assert len(batched.make_buckets(case.block_tables, list(range(len(lens) + 1)),
                                    case.context_lens.tolist(), 16)) == 1
    expected = torch.stack([truth(query[s:s + 1], k, v, 64 ** -0.5, k.shape[0] - 1)[0]
                            for s, (k, v) in enumerate(zip(case.keys, case.values,
                                                           strict=True))])
    assert_close(batched.paged_decode_attention(*args), expected, torch.float32)


def test_each_call_buckets_the_contents_it_is_given_and_checks_them():
    """A direct call keeps nothing between calls (an engine step buckets once for
    all its layers through the step's `step_cache` instead): a table changed in place
    (same tensor, new contents) is read anew, and a bad block id is refused."""
    case = make_case([5, 20, 9], 4, num_kv_heads=1, head_dim=16, seed=2, spare_blocks=0)
    query = torch.randn(3, 2, 16)

    def call():
        return batched.paged_decode_attention(query, case.k_cache, case.v_cache,
                                              case.block_tables, case.context_lens)

    def expected():
        return torch.stack([truth(query[s:s + 1], k, v, 0.25, k.shape[0] - 1)[0]
                            for s, (k, v) in enumerate(zip(case.keys, case.values,
                                                           strict=True))])

    assert_close(call(), expected(), torch.float32)
    assert_close(call(), expected(), torch.float32)  # the same call again
    # swap the first blocks of sequences 0 and 1, in the cache and in the table
    a, b = int(case.block_tables[0, 0]), int(case.block_tables[1, 0])
    for cache in (case.k_cache, case.v_cache):
        cache[[a, b]] = cache[[b, a]]
    case.block_tables[0, 0], case.block_tables[1, 0] = b, a
    assert_close(call(), expected(), torch.float32)
    case.block_tables[1, 2] = case.k_cache.shape[0]  # past the cache's last block
    with pytest.raises(ValueError, match=r"block_tables\[1, 2\]"):
        call()
