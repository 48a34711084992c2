"""An engine step's layers through `pagedkit.model.attention.paged_attention`:
each layer's store and attention give exactly what the public ops give called
layer by layer with their checks, on every torch backend (and Triton's
interpreter where it runs), for decode-only, prefill-only and mixed steps,
with layers that differ in sliding window, softcap and sinks; while the
step's metadata is checked once (`checks.check_step`, in `forward_context`),
the layers' calls skip their own checks, and the batched path's buckets are
built once per kind of attention and window."""

from __future__ import annotations

import pytest
import torch
from kernel_cases import PagedCase, make_case

from pagedkit import ops
from pagedkit.kernels import batched, checks, cpu_decode
from pagedkit.model.attention import AttentionMetadata, forward_context, paged_attention

BS = 8
LENS = [9, 30, 17, 1, 40]  # context lengths, the chunk included


@pytest.fixture(autouse=True)
def _clean_choice(monkeypatch):
    monkeypatch.delenv("PAGEDKIT_KERNELS", raising=False)
    ops.set_backend(None)
    yield
    ops.set_backend(None)


class Layer(torch.nn.Module):
    """What `paged_attention` reads of a transformers attention module."""

    def __init__(self, layer_idx: int) -> None:
        super().__init__()
        self.layer_idx = layer_idx


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
    """Each layer through the public ops, with their checks and no shared step_cache."""
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
    """Each layer as an engine step runs it: `paged_attention` inside
    `forward_context`, query and K/V in transformers' layout."""
    gen = torch.Generator().manual_seed(7)
    metadata = AttentionMetadata(**meta, kv_caches=[(c.k_cache, c.v_cache) for c in cases])
    outs = []
    with forward_context(metadata):
        for layer, options in enumerate(LAYER_OPTIONS):
            key = torch.randn(tokens, 2, 32, generator=gen)
            query = torch.randn(tokens, 4, 32, generator=gen)
            kwargs = {"s_aux" if k == "sinks" else k: v for k, v in options.items()}
            out, _ = paged_attention(Layer(layer), query.transpose(0, 1)[None],
                                     key.transpose(0, 1)[None], key.transpose(0, 1)[None],
                                     None, 0.2, **kwargs)
            outs.append(out[0])
    return outs


@pytest.mark.parametrize("kind", STEPS)
@pytest.mark.parametrize("backend", ["batched", "torch"])
def test_a_step_gives_exactly_what_the_public_ops_give_layer_by_layer(backend, kind):
    q_lens, d = STEPS[kind]
    meta, cases, tokens = step_metadata(q_lens, d)
    meta2, cases2, _ = step_metadata(q_lens, d)
    with ops.use_backend(backend):
        expected = by_layer(meta, cases, tokens)
        got = through_step(meta2, cases2, tokens)
    for layer, (e, g) in enumerate(zip(expected, got, strict=True)):
        assert torch.isfinite(g).all() and torch.equal(g, e), (kind, layer)
        assert torch.equal(cases2[layer].k_cache.nan_to_num(), cases[layer].k_cache.nan_to_num())


def test_the_triton_kernels_through_a_step(triton_kernels):
    meta, cases, tokens = step_metadata(*STEPS["mixed"])
    meta2, cases2, _ = step_metadata(*STEPS["mixed"])
    with ops.use_backend("triton"):
        expected = by_layer(meta, cases, tokens)
        got = through_step(meta2, cases2, tokens)
    for e, g in zip(expected, got, strict=True):
        assert torch.equal(g, e)


class Counter:
    """Counts the calls of `module.name` (or of ``module[name]``, a table of functions)."""

    def __init__(self, monkeypatch, module, name):
        self.calls = 0
        table = isinstance(module, dict)
        original = module[name] if table else getattr(module, name)

        def counted(*args, **kwargs):
            self.calls += 1
            return original(*args, **kwargs)

        if table:
            monkeypatch.setitem(module, name, counted)
        else:
            monkeypatch.setattr(module, name, counted)


@pytest.mark.parametrize("backend", ["batched", "native"])
def test_the_checks_and_the_buckets_happen_once_per_step(monkeypatch, backend):
    """Three layers, two windows (None and 12) and a mixed step: the metadata
    is checked once, the layers' calls check nothing, and the buckets are
    built once per kind and window (the C decode kernel needs none)."""
    if backend == "native" and cpu_decode.unavailable():
        pytest.skip(cpu_decode.unavailable())
    meta, cases, tokens = step_metadata(*STEPS["mixed"])
    step_checks = Counter(monkeypatch, checks, "check_step")
    block_checks = Counter(monkeypatch, checks, "check_blocks_cover")
    layer_checks = [Counter(monkeypatch, checks, name)
                    for name in ("check_store_kv", "check_decode", "check_prefill")]
    bucketings = Counter(monkeypatch, batched, "length_buckets")
    stores = Counter(monkeypatch, ops.IMPLEMENTATIONS[backend], "store_kv")
    attends = Counter(monkeypatch, batched, "attend")
    decodes = Counter(monkeypatch, ops.IMPLEMENTATIONS[backend], "paged_decode_attention")
    with ops.use_backend(backend):
        through_step(meta, cases, tokens)
    assert step_checks.calls == 1 and block_checks.calls == 1
    assert [c.calls for c in layer_checks] == [0, 0, 0]
    assert stores.calls == 3 and decodes.calls == 3  # per layer: the work itself
    if backend == "batched":
        # decode and prefill, each without a window (layers 0, 2) and with one (layer 1)
        assert bucketings.calls == 4 and attends.calls == 6
    else:  # only the prefills bucket
        assert bucketings.calls == 2 and attends.calls == 3


def bad_slot(meta):
    meta["slot_mapping"][-1] = 10_000


def bad_block(meta):
    meta["block_tables"][1, 0] = 10_000


def bad_length(meta):
    meta["context_lens"][2] = 100 * BS


def bad_starts(meta):
    meta["cu_seqlens_q"][3] = meta["cu_seqlens_q"][2] - 1


def bad_dtype(meta):
    meta["block_tables"] = meta["block_tables"].float()


@pytest.mark.parametrize("corrupt,error,match", [
    (bad_slot, ValueError, r"slot_mapping\[\d+\] = 10000 is past the cache's last slot"),
    (bad_block, ValueError, r"block_tables\[1, 0\] = 10000 is not a block of the cache"),
    (bad_length, ValueError, rf"context_lens\[2\] = {100 * BS} needs 100 blocks of {BS} "
                             r"tokens but block_tables has only \d+ columns"),
    (bad_starts, ValueError, r"cu_seqlens_q must not decrease"),
    (bad_dtype, TypeError, r"block_tables must be an int32 or int64 tensor, got torch.float32"),
])
def test_bad_metadata_is_refused_by_name_before_any_layer_runs(corrupt, error, match):
    meta, cases, tokens = step_metadata(*STEPS["mixed"])
    corrupt(meta)
    before = [c.k_cache.clone() for c in cases]
    with pytest.raises(error, match=match):
        through_step(meta, cases, tokens)
    for c, b in zip(cases, before, strict=True):  # nothing was written
        assert torch.equal(c.k_cache.nan_to_num(), b.nan_to_num())


@pytest.mark.parametrize("kind", STEPS)
def test_check_false_in_the_metadata_skips_the_step_check(monkeypatch, kind):
    """``check=False`` in the metadata: its builder vouches for it (the
    engine's `pack_step`, tests/model/test_attention_step.py), as with an
    op's ``check=False``: no check runs, and the step computes the same."""
    meta, cases, tokens = step_metadata(*STEPS[kind])
    expected = through_step(meta, cases, tokens)
    meta, cases, tokens = step_metadata(*STEPS[kind])
    called = [Counter(monkeypatch, checks, name) for name in
              ("check_step", "check_index_tensor", "check_slots", "check_blocks_cover")]
    got = through_step(dict(meta, check=False), cases, tokens)
    assert [c.calls for c in called] == [0, 0, 0, 0]
    assert all(torch.equal(a, b) for a, b in zip(got, expected, strict=True))


def test_check_false_skips_every_check_of_an_op(monkeypatch):
    """The ops' ``check=False``: the caller vouches for the arguments, so no
    check runs at all (structure included)."""
    meta, cases, tokens = step_metadata(*STEPS["decode"])
    called = [Counter(monkeypatch, checks, name) for name in
              ("check_store_kv", "check_decode", "check_cache_pair", "check_tokens")]
    key, query = torch.randn(tokens, 2, 32), torch.randn(tokens, 4, 32)
    ops.store_kv(key, key, cases[0].k_cache, cases[0].v_cache, meta["slot_mapping"],
                 check=False)
    ops.paged_decode_attention(query, cases[0].k_cache, cases[0].v_cache,
                               meta["block_tables"], meta["context_lens"], check=False)
    assert [c.calls for c in called] == [0, 0, 0, 0]
    with pytest.raises(ValueError, match="key head_dim 16"):
        ops.store_kv(key[..., :16], key[..., :16], cases[0].k_cache, cases[0].v_cache,
                     meta["slot_mapping"])
