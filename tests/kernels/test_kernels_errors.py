"""A learner's mistakes raise an error that names the shapes and values involved.

The checks are shared by the references, the batched path and the Triton
kernels (all call pagedkit.kernels.checks first), so testing them through the
references covers all; the batched path's own cases are at the end, and
test_kernels_triton.py checks that the kernels call them. Every test of a
bad argument to a kernel or an op goes here (tests/README.md).
"""

import pytest
import torch
from kernel_cases import make_case

from pagedkit.kernels import batched, reference
from pagedkit.kernels import reference as ref


@pytest.fixture
def case():
    return make_case([5, 20], block_size=8, num_kv_heads=2, head_dim=16)


def decode(case, query=None, **kw):
    args = dict(query=torch.randn(2, 4, 16) if query is None else query,
                k_cache=case.k_cache, v_cache=case.v_cache, block_tables=case.block_tables,
                context_lens=case.context_lens)
    args.update(kw)
    return ref.paged_decode_attention(**args)


def test_query_heads_not_a_multiple_of_kv_heads(case):
    with pytest.raises(ValueError, match=r"3 heads \(shape \[2, 3, 16\]\).*2 KV heads"):
        decode(case, torch.randn(2, 3, 16))


def test_head_dim_mismatch(case):
    with pytest.raises(ValueError, match=r"head_dim 32 .*\[2, 4, 32\].*head_dim 16"):
        decode(case, torch.randn(2, 4, 32))


def test_block_table_too_short_for_context(case):
    with pytest.raises(ValueError, match=r"context_lens\[1\] = 40 needs 5 blocks of 8 tokens but "
                                         r"block_tables has only 4 columns \(shape \[2, 4\]\)"):
        decode(case, context_lens=torch.tensor([5, 40], dtype=torch.int32))


def test_block_id_outside_the_cache(case):
    tables = case.block_tables.clone()
    tables[0, 0] = 99
    with pytest.raises(ValueError, match=r"block_tables\[0, 0\] = 99 .* 6 blocks"):
        decode(case, block_tables=tables)


def test_empty_context_and_wrong_table_rows(case):
    with pytest.raises(ValueError, match=r"context_lens\[0\] = 0"):
        decode(case, context_lens=torch.tensor([0, 20], dtype=torch.int32))
    with pytest.raises(ValueError, match=r"block_tables must have shape \[2, \*\]"):
        decode(case, block_tables=case.block_tables[:1])


def test_dtype_and_device_mixes(case):
    with pytest.raises(TypeError, match=r"query dtype torch\.float16 differs from the cache dtype"):
        decode(case, torch.randn(2, 4, 16, dtype=torch.float16))
    with pytest.raises(TypeError, match="v_cache dtype"):
        decode(case, v_cache=case.v_cache.half())
    with pytest.raises(ValueError, match="query is on meta but the cache is on cpu"):
        decode(case, torch.empty(2, 4, 16, device="meta"))
    with pytest.raises(TypeError, match="context_lens must be an int32 or int64 tensor"):
        decode(case, context_lens=case.context_lens.float())


def test_non_contiguous_cache(case):
    wide = torch.zeros(case.k_cache.shape[0], 8, 4, 16)[:, :, :2]  # a slice of more heads
    with pytest.raises(ValueError, match=r"k_cache must be contiguous.*shape \[6, 8, 2, 16\]"):
        decode(case, k_cache=wide)
    with pytest.raises(ValueError, match=r"v_cache shape \[6, 8, 2, 8\] differs"):
        decode(case, v_cache=case.v_cache[..., :8].contiguous())


def test_num_splits_must_be_positive(case):
    with pytest.raises(ValueError, match="num_splits must be None or an integer >= 1, got 0"):
        decode(case, num_splits=0)


def test_prefill_bad_cu_seqlens_and_chunk_longer_than_context(case):
    query = torch.randn(6, 4, 16)

    def prefill(cu, lens=(5, 20)):
        return ref.paged_prefill_attention(query, case.k_cache, case.v_cache, case.block_tables,
                                           torch.tensor(cu, dtype=torch.int32),
                                           torch.tensor(lens, dtype=torch.int32))

    with pytest.raises(ValueError, match=r"end at the 6 query tokens .*\[0, 2, 5\]"):
        prefill([0, 2, 5])
    with pytest.raises(ValueError, match=r"must not decrease.*cu_seqlens_q\[1\] = 7"):
        prefill([0, 7, 6])
    with pytest.raises(ValueError,
                       match=r"sequence 0 has 6 query tokens but context_lens\[0\] = 5"):
        prefill([0, 6, 6])
    with pytest.raises(ValueError, match=r"cu_seqlens_q must have shape \[3\]"):
        prefill([0, 6])


def test_store_kv_slot_past_the_cache_and_head_mismatch(case):
    key = torch.randn(2, 2, 16)
    with pytest.raises(ValueError, match=r"slot_mapping\[1\] = 48 is past the cache's last "
                                         r"slot 47"):
        ref.store_kv(key, key, case.k_cache, case.v_cache, torch.tensor([0, 48]))
    with pytest.raises(ValueError, match=r"key has 4 heads \(shape \[2, 4, 16\]\) but the cache "
                                         r"has 2 KV heads"):
        ref.store_kv(torch.randn(2, 4, 16), key, case.k_cache, case.v_cache,
                     torch.tensor([0, 1]))
    with pytest.raises(ValueError, match=r"slot_mapping must have shape \[2\]"):
        ref.store_kv(key, key, case.k_cache, case.v_cache, torch.tensor([0, 1, 2]))


def test_copy_blocks_bad_pairs():
    cache = torch.zeros(4, 2, 8)
    with pytest.raises(ValueError, match=r"block_pairs\[1\] = \[2, 4\]: block 4 is outside"):
        ref.copy_blocks(cache, torch.tensor([[0, 1], [2, 4]]))
    with pytest.raises(ValueError, match="destination block twice"):
        ref.copy_blocks(cache, torch.tensor([[0, 1], [2, 1]]))
    with pytest.raises(ValueError, match="block 1 is both a destination"):
        ref.copy_blocks(cache, torch.tensor([[0, 1], [1, 2]]))
    with pytest.raises(ValueError, match="cache must be contiguous"):
        ref.copy_blocks(torch.zeros(4, 2, 8).transpose(0, 1), torch.tensor([[0, 1]]))


@pytest.mark.parametrize("kw,err,match", [
    (dict(sliding_window=0), ValueError, r"sliding_window must be None or an integer >= 1.*0"),
    (dict(sliding_window=True), ValueError, r"sliding_window .* got True"),
    (dict(sliding_window=4.0), ValueError, r"sliding_window .* got 4\.0"),
    (dict(softcap=0.0), ValueError, r"softcap must be None or a finite number > 0, got 0\.0"),
    (dict(softcap=float("inf")), ValueError, r"softcap .* got inf"),
    (dict(softcap=-1), ValueError, r"softcap .* got -1"),
    (dict(sinks=torch.zeros(3)), ValueError, r"sinks must have shape \[4\].*got \[3\]"),
    (dict(sinks=torch.zeros(4, 1)), ValueError, r"sinks must have shape \[4\].*got \[4, 1\]"),
    (dict(sinks=torch.zeros(4, dtype=torch.long)), TypeError, r"floating-point.*int64"),
    (dict(sinks=[0.0] * 4), TypeError, r"floating-point tensor, got list"),
])
def test_attention_options_are_checked(case, kw, err, match):
    with pytest.raises(err, match=match):
        decode(case, **kw)
    with pytest.raises(err, match=match):
        ref.paged_prefill_attention(torch.randn(2, 4, 16), case.k_cache, case.v_cache,
                                    case.block_tables, torch.tensor([0, 1, 2], dtype=torch.int32),
                                    case.context_lens, **kw)


def test_window_skips_the_value_check_only_for_blocks_before_it(case):
    # sequence 1 (20 tokens, blocks of 8): a window of 5 at position 19 needs block 1 (15..19)
    # onwards, so block 0's entry may be anything; block 1's may not
    tables = case.block_tables.clone()
    tables[1, 0] = 99
    decode(case, block_tables=tables, sliding_window=5)
    with pytest.raises(ValueError, match=r"block_tables\[1, 0\] = 99"):
        decode(case, block_tables=tables)
    tables[1, 1] = 99
    with pytest.raises(ValueError, match=r"block_tables\[1, 1\] = 99"):
        decode(case, block_tables=tables, sliding_window=5)


# ----------------------------------------------- the batched path: the same checks
@pytest.mark.parametrize("bad,match", [
    (dict(sliding_window=0), "sliding_window"),
    (dict(sliding_window=True), "sliding_window"),
    (dict(softcap=-1.0), "softcap"),
    (dict(softcap=float("inf")), "softcap"),
    (dict(sinks=torch.zeros(3)), "sinks"),
])
def test_bad_options_are_refused_by_the_shared_checks(bad, match):
    case = make_case([4], 4, num_kv_heads=1, head_dim=8)
    query = torch.randn(1, 2, 8)
    with pytest.raises((ValueError, TypeError), match=match):
        batched.paged_decode_attention(query, case.k_cache, case.v_cache, case.block_tables,
                                       case.context_lens, **bad)


@pytest.mark.parametrize("window", [None, 3])
def test_a_table_with_no_columns_is_refused_by_name(window):
    """`checks.check_blocks_cover` reduces over the used block ids; a table
    of zero columns has none, and is refused for its width (it crashed inside
    torch's min() before), decode and prefill alike."""
    case = make_case([5, 9], 4, num_kv_heads=1, head_dim=8)
    empty = case.block_tables[:, :0]
    with pytest.raises(ValueError, match=r"context_lens\[1\] = 9 needs 3 blocks of 4 tokens "
                                         r"but block_tables has only 0 columns"):
        batched.paged_decode_attention(torch.randn(2, 2, 8), case.k_cache, case.v_cache,
                                       empty, case.context_lens, sliding_window=window)
    cu = torch.tensor([0, 1, 3], dtype=torch.int32)
    with pytest.raises(ValueError, match="has only 0 columns"):
        batched.paged_prefill_attention(torch.randn(3, 2, 8), case.k_cache, case.v_cache,
                                        empty, cu, case.context_lens, sliding_window=window)


@pytest.mark.parametrize("store", [reference.store_kv, batched.store_kv])
def test_bad_input_is_refused_alike_and_nothing_is_written(store):
    k_cache, v_cache = torch.zeros(6, 8, 2, 16), torch.zeros(6, 8, 2, 16)
    key = torch.randn(2, 2, 16)
    with pytest.raises(ValueError, match=r"slot_mapping\[1\] = 48 is past the cache's last "
                                         r"slot 47"):
        store(key, key, k_cache, v_cache, torch.tensor([0, 48]))
    with pytest.raises(ValueError, match=r"key has 4 heads \(shape \[2, 4, 16\]\) but the cache "
                                         r"has 2 KV heads"):
        store(torch.randn(2, 4, 16), key, k_cache, v_cache, torch.tensor([0, 1]))
    with pytest.raises(ValueError, match=r"slot_mapping must have shape \[2\]"):
        store(key, key, k_cache, v_cache, torch.tensor([0, 1, 2]))
    with pytest.raises(TypeError, match=r"key dtype torch.float16 differs from the cache dtype"):
        store(key.half(), key, k_cache, v_cache, torch.tensor([0, 1]))
    with pytest.raises(TypeError, match=r"slot_mapping must be an int32 or int64 tensor"):
        store(key, key, k_cache, v_cache, torch.tensor([0.0, 1.0]))
    assert not k_cache.any() and not v_cache.any()
