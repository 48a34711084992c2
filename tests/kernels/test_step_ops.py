"""`ops.StepOps`: the ops of one step for all its layers give exactly what the
public ops give called layer by layer, on every torch backend (and Triton's
interpreter where it runs), for decode-only, prefill-only and mixed steps,
with layers that differ in sliding window, softcap, sinks and cache; while
the value checks and the batched path's buckets happen once per step."""

from __future__ import annotations

import pytest
import torch
from kernel_cases import PagedCase, make_case

from pagedkit import ops
from pagedkit.kernels import batched, checks

BS = 8
LENS = [9, 30, 17, 1, 40]  # context lengths, the chunk included


@pytest.fixture(autouse=True)
def _clean_choice(monkeypatch):
    monkeypatch.delenv("PAGEDKIT_KERNELS", raising=False)
    ops.set_backend(None)
    yield
    ops.set_backend(None)


def step_metadata(q_lens: list[int], num_decodes: int, seed: int = 0):
    """A step over `LENS`, its first `num_decodes` sequences decoding, and three
    layers' caches (the same blocks, NaN where no token is; each layer its own K/V)."""
    case = make_case(LENS, BS, num_kv_heads=2, head_dim=32, seed=seed, padding=None)
    cases = [PagedCase(case.k_cache * (1 + layer), case.v_cache - layer, case.block_tables,
                       case.context_lens, [], []) for layer in range(3)]
    cu = [0]
    for n in q_lens:
        cu.append(cu[-1] + n)
    tables, ctx = cases[0].block_tables, cases[0].context_lens
    # The new tokens' slots: the chunk's positions, through the table
    slots = [int(tables[s, p // BS]) * BS + p % BS
             for s, (c, q) in enumerate(zip(LENS, q_lens, strict=True)) for p in range(c - q, c)]
    return dict(slot_mapping=torch.tensor(slots), block_tables=tables, context_lens=ctx,
                cu_seqlens_q=torch.tensor(cu, dtype=torch.int32),
                num_decodes=num_decodes), cases, cu[-1]


LAYER_OPTIONS = [  # what differs per layer: windowed and full layers, softcap, sinks
    {},
    {"sliding_window": 12},
    {"softcap": 4.0, "sinks": torch.linspace(-1.0, 2.0, 4)},
]
STEPS = {
    "decode": ([1, 1, 1, 1, 1], 5),
    "prefill": ([9, 5, 17, 1, 3], 0),
    "mixed": ([1, 1, 4, 1, 40], 2),
}


def by_layer(meta, cases, tokens, **options_override):
    """Each layer through the public ops, as the engine called them before StepOps."""
    gen = torch.Generator().manual_seed(7)
    d = meta["num_decodes"]
    outs = []
    for case, options in zip(cases, LAYER_OPTIONS, strict=True):
        key = torch.randn(tokens, 2, 32, generator=gen)
        query = torch.randn(tokens, 4, 32, generator=gen)
        ops.store_kv(key, key, case.k_cache, case.v_cache, meta["slot_mapping"])
        parts = []
        if d:
            parts.append(ops.paged_decode_attention(
                query[:d], case.k_cache, case.v_cache, meta["block_tables"][:d],
                meta["context_lens"][:d], 0.2, **options))
        if d < len(LENS):
            parts.append(ops.paged_prefill_attention(
                query[d:], case.k_cache, case.v_cache, meta["block_tables"][d:],
                meta["cu_seqlens_q"][d:] - d, meta["context_lens"][d:], 0.2, **options))
        outs.append(torch.cat(parts))
    return outs


def through_step(meta, cases, tokens):
    gen = torch.Generator().manual_seed(7)
    step = ops.StepOps(**meta)
    outs = []
    for case, options in zip(cases, LAYER_OPTIONS, strict=True):
        key = torch.randn(tokens, 2, 32, generator=gen)
        query = torch.randn(tokens, 4, 32, generator=gen)
        step.store_kv(key, key, case.k_cache, case.v_cache)
        outs.append(step.attention(query, case.k_cache, case.v_cache, 0.2, **options))
    return outs, step


@pytest.mark.parametrize("kind", STEPS)
@pytest.mark.parametrize("backend", ["batched", "torch"])
def test_a_step_gives_exactly_what_the_public_ops_give_layer_by_layer(backend, kind):
    q_lens, d = STEPS[kind]
    meta, cases, tokens = step_metadata(q_lens, d)
    meta2, cases2, _ = step_metadata(q_lens, d)
    with ops.use_backend(backend):
        expected = by_layer(meta, cases, tokens)
        got, _ = through_step(meta2, cases2, tokens)
    for layer, (e, g) in enumerate(zip(expected, got, strict=True)):
        assert torch.isfinite(g).all() and torch.equal(g, e), (kind, layer)
        assert torch.equal(cases2[layer].k_cache.nan_to_num(), cases[layer].k_cache.nan_to_num())


def test_the_triton_kernels_through_a_step(triton_kernels):
    meta, cases, tokens = step_metadata(*STEPS["mixed"])
    meta2, cases2, _ = step_metadata(*STEPS["mixed"])
    with ops.use_backend("triton"):
        expected = by_layer(meta, cases, tokens)
        got, _ = through_step(meta2, cases2, tokens)
    for e, g in zip(expected, got, strict=True):
        assert torch.equal(g, e)


class Counter:
    def __init__(self, monkeypatch, module, name, when=lambda *a, **k: True):
        self.calls = 0
        original = getattr(module, name)

        def counted(*args, **kwargs):
            self.calls += bool(when(*args, **kwargs))
            return original(*args, **kwargs)

        monkeypatch.setattr(module, name, counted)


def test_the_value_checks_and_the_buckets_happen_once_per_step(monkeypatch):
    """Three layers, two windows (None and 12) and a mixed step: one slot
    check, block checks and bucketings once per kind and window."""
    meta, cases, tokens = step_metadata(*STEPS["mixed"])
    slot_checks = Counter(monkeypatch, checks, "check_store_kv", lambda *a, values: values)
    block_checks = Counter(monkeypatch, checks, "check_blocks_cover")
    bucketings = Counter(monkeypatch, batched, "length_buckets")
    stores = Counter(monkeypatch, batched, "store_kv")
    attends = Counter(monkeypatch, batched, "attend")
    through_step(meta, cases, tokens)
    assert slot_checks.calls == 1
    # decode and prefill, each without a window (layers 0, 2) and with one (layer 1)
    assert block_checks.calls == 4 and bucketings.calls == 4
    assert stores.calls == 3 and attends.calls == 6  # per layer: the work itself


def test_value_checks_are_rerun_for_a_layer_whose_cache_differs():
    """Slots and block ids inside layer 0's cache are outside a smaller one's."""
    meta, cases, tokens = step_metadata(*STEPS["decode"])
    tables = meta["block_tables"]
    top_block = max(int(b) for s, c in enumerate(LENS) for b in tables[s, :-(-c // BS)])
    top_slot = int(meta["slot_mapping"].max())
    step = ops.StepOps(**meta)
    query, key = torch.randn(tokens, 4, 32), torch.randn(tokens, 2, 32)
    for case in cases[:2]:
        step.store_kv(key, key, case.k_cache, case.v_cache)
        step.attention(query, case.k_cache, case.v_cache)
    small = cases[2].k_cache[:top_slot // BS].clone()
    with pytest.raises(ValueError, match=rf"slot_mapping\[\d\] = {top_slot} is past the cache's "
                                         rf"last slot {top_slot // BS * BS - 1}"):
        step.store_kv(key, key, small, small.clone())
    small = cases[2].k_cache[:top_block].clone()
    with pytest.raises(ValueError, match=rf"block_tables\[\d, \d\] = {top_block} is not a block "
                                         rf"of the cache, which has {top_block} blocks"):
        step.attention(query, small, small.clone())


def test_every_layer_still_gets_its_structure_checks():
    meta, cases, tokens = step_metadata(*STEPS["mixed"])
    step = ops.StepOps(**meta)
    query, key = torch.randn(tokens, 4, 32), torch.randn(tokens, 2, 32)
    step.store_kv(key, key, cases[0].k_cache, cases[0].v_cache)
    step.attention(query, cases[0].k_cache, cases[0].v_cache)
    half = cases[1].k_cache.half(), cases[1].v_cache.half()
    with pytest.raises(TypeError, match=r"key dtype torch\.float32 differs from the cache dtype "
                                        r"torch\.float16"):
        step.store_kv(key, key, *half)
    with pytest.raises(ValueError, match=r"query has 3 heads .* not a multiple of the cache's "
                                         r"2 KV heads"):
        step.attention(torch.randn(tokens, 3, 32), cases[1].k_cache, cases[1].v_cache)
    with pytest.raises(ValueError, match=rf"cu_seqlens_q must start at 0 and end at the "
                                         rf"{tokens - 3} query tokens"):
        step.attention(query[:tokens - 1], cases[1].k_cache, cases[1].v_cache)
    with pytest.raises(ValueError, match="sliding_window must be None or an integer >= 1"):
        step.attention(query, cases[1].k_cache, cases[1].v_cache, sliding_window=0)


def test_a_layer_is_refused_as_the_public_op_would_refuse_it():
    """Each layer's own tensors and options are checked in every layer: one
    that differs from the layers before it in anything a check reads (its
    strides, an option's type, its sinks) is refused by name."""
    meta, cases, tokens = step_metadata(*STEPS["decode"])
    step = ops.StepOps(**meta)
    query, key = torch.randn(tokens, 4, 32), torch.randn(tokens, 2, 32)
    for case in cases:
        step.store_kv(key, key, case.k_cache, case.v_cache)
        step.attention(query, case.k_cache, case.v_cache, sliding_window=1)
    k, v = cases[0].k_cache, cases[0].v_cache
    with pytest.raises(ValueError, match="sliding_window must be None or an integer >= 1"):
        step.attention(query, k, v, sliding_window=True)  # True == 1, but it is refused
    wide = torch.randn(tokens, 2, 64)[..., ::2]  # same shape and dtype, other strides
    with pytest.raises(ValueError, match="key must be contiguous in head_dim"):
        step.store_kv(wide, wide, k, v)
    with pytest.raises(ValueError, match=r"sinks must have shape \[4\]"):
        step.attention(query, k, v, sinks=torch.zeros(3))
    step.attention(query, k, v, sinks=torch.zeros(4))
    with pytest.raises(TypeError, match="sinks must be None or a floating-point tensor"):
        step.attention(query, k, v, sinks=torch.zeros(4, dtype=torch.long))
    step.attention(query, k, v, softcap=1.0)
    with pytest.raises(ValueError, match="softcap must be None or a finite number > 0"):
        step.attention(query, k, v, softcap=True)  # True == 1.0, but it is refused
    # the same shape and dtype as the caches checked above, other strides
    strided = k.permute(3, 2, 1, 0).contiguous().permute(3, 2, 1, 0)
    assert strided.shape == k.shape and not strided.is_contiguous()
    with pytest.raises(ValueError, match="k_cache must be contiguous"):
        step.attention(query, strided, v)
    with pytest.raises(ValueError, match="k_cache must be contiguous"):
        step.store_kv(key, key, strided, v)


def test_check_false_skips_the_value_checks_only(monkeypatch):
    meta, cases, tokens = step_metadata(*STEPS["decode"])
    block_checks = Counter(monkeypatch, checks, "check_blocks_cover")
    step = ops.StepOps(**meta, check=False)
    query, key = torch.randn(tokens, 4, 32), torch.randn(tokens, 2, 32)
    step.store_kv(key, key, cases[0].k_cache, cases[0].v_cache)
    step.attention(query, cases[0].k_cache, cases[0].v_cache)
    assert block_checks.calls == 0
    with pytest.raises(ValueError, match="key head_dim 16"):
        step.store_kv(key[..., :16], key[..., :16], cases[0].k_cache, cases[0].v_cache)
