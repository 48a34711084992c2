"""An engine step's attention: the step's metadata is checked once
(`checks.check_step`, in `forward_context`) and the batched path's buckets
are built once per step, not once per layer, while every layer does its own
store and attention through the ops, by name. Bad metadata inside a real
engine step is refused by name, and the engine is ready afterwards."""

from __future__ import annotations

import pytest
import torch

from pagedkit import LLM, SamplingParams, ops
from pagedkit.kernels import batched, checks
from pagedkit.model import runner as runner_module

GREEDY = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True)
PROMPTS = ["Once upon a time", "The little dog ran"]
NUM_BLOCKS, BLOCK_SIZE = 64, 4


@pytest.fixture(scope="module")
def llm():
    return LLM("tiny", num_blocks=NUM_BLOCKS, block_size=BLOCK_SIZE)


@pytest.fixture(scope="module")
def expected(llm):
    return tokens(llm.generate(PROMPTS, GREEDY, use_tqdm=False))


def tokens(outputs):
    return [o.outputs[0].token_ids for o in outputs]


def test_each_engine_step_checks_and_buckets_its_metadata_once(llm, expected, monkeypatch):
    monkeypatch.delenv("PAGEDKIT_KERNELS", raising=False)
    counts: dict[str, int] = {}

    def count(module, name, key):
        original = module[name] if isinstance(module, dict) else getattr(module, name)

        def counted(*args, **kwargs):
            counts[key] = counts.get(key, 0) + 1
            return original(*args, **kwargs)

        if isinstance(module, dict):
            monkeypatch.setitem(module, name, counted)
        else:
            monkeypatch.setattr(module, name, counted)

    kinds = record_step_kinds(llm, monkeypatch)
    count(checks, "check_step", "step checks")
    count(checks, "check_blocks_cover", "block checks")
    count(batched, "length_buckets", "bucketings")
    count(ops.IMPLEMENTATIONS["batched"], "store_kv", "stores")
    count(batched, "attend", "attends")
    per_step = []
    got = tokens(llm.generate(PROMPTS, GREEDY, use_tqdm=False,
                              on_step=lambda step: per_step.append(counts.copy())
                              or counts.clear()))
    assert got == expected
    layers = llm.llm_engine.runner.model.config.num_hidden_layers
    assert layers > 1  # per step and per layer differ
    assert len(per_step) == len(kinds) >= GREEDY.max_tokens
    # per kind of attention in the step (decodes, chunks: a prefix-cache hit
    # can leave a prompt one token to compute, a decode-shaped chunk)
    for step, (num_decodes, num_seqs) in zip(per_step, kinds, strict=True):
        k = 1 + (0 < num_decodes < num_seqs)
        assert step == {"step checks": 1, "block checks": 1, "bucketings": k,
                        "stores": layers, "attends": k * layers}, (num_decodes, num_seqs)


def record_step_kinds(llm, monkeypatch) -> list[tuple[int, int]]:
    """(num_decodes, num_seqs) of every step the runner packs from now on."""
    pack_step = runner_module.pack_step
    kinds = []

    def recorded(*args, **kwargs):
        packed = pack_step(*args, **kwargs)
        kinds.append((packed[2].num_decodes, packed[2].context_lens.numel()))
        return packed

    monkeypatch.setattr(runner_module, "pack_step", recorded)  # the runner's name for it
    return kinds


def corrupt_slot(meta):
    meta.slot_mapping[-1] = NUM_BLOCKS * BLOCK_SIZE


def corrupt_block(meta):
    meta.block_tables[0, 0] = NUM_BLOCKS


def corrupt_length(meta):
    meta.context_lens[0] += BLOCK_SIZE * meta.block_tables.shape[1]


@pytest.mark.parametrize("corrupt,match", [
    (corrupt_slot, rf"slot_mapping\[\d+\] = {NUM_BLOCKS * BLOCK_SIZE} is past the cache's last "
                   rf"slot {NUM_BLOCKS * BLOCK_SIZE - 1}"),
    (corrupt_block, rf"block_tables\[0, 0\] = {NUM_BLOCKS} is not a block of the cache, which "
                    rf"has {NUM_BLOCKS} blocks"),
    (corrupt_length, r"context_lens\[0\] = \d+ needs \d+ blocks of 4 tokens but block_tables "
                     r"has only \d+ columns"),
])
@pytest.mark.parametrize("at_step", [0, 2])  # the prefill step, a decode step
def test_bad_metadata_inside_an_engine_step_is_refused_by_name(llm, expected, monkeypatch,
                                                                corrupt, match, at_step):
    pack_step = runner_module.pack_step
    steps = []

    def corrupted(*args, **kwargs):
        input_ids, positions, meta, logits = pack_step(*args, **kwargs)
        if len(steps) == at_step:
            corrupt(meta)
        steps.append(meta.num_decodes)
        return input_ids, positions, meta, logits

    monkeypatch.setattr(runner_module, "pack_step", corrupted)
    with pytest.raises(ValueError, match=match):
        llm.generate(PROMPTS, GREEDY, use_tqdm=False)
    assert len(steps) == at_step + 1
    monkeypatch.undo()
    assert tokens(llm.generate(PROMPTS, GREEDY, use_tqdm=False)) == expected


def test_a_plugged_in_decode_function_still_serves_every_layer(llm, expected, monkeypatch):
    """`ops.use_decode_attention` plugs a function in (`ops.override`); a step
    made inside the block uses it for every layer's decodes."""
    kinds = record_step_kinds(llm, monkeypatch)
    calls = []

    def per_sequence(query, k_cache, v_cache, block_table, context_len):
        calls.append(context_len)
        return batched.paged_decode_attention(
            query[None], k_cache, v_cache, block_table[None],
            torch.tensor([context_len], dtype=torch.int32))[0]

    with ops.use_decode_attention(per_sequence):
        assert tokens(llm.generate(PROMPTS, GREEDY, use_tqdm=False)) == expected
    layers = llm.llm_engine.runner.model.config.num_hidden_layers
    assert len(calls) == layers * sum(d for d, _ in kinds) >= layers * (GREEDY.max_tokens - 1)


def test_an_op_swapped_in_the_ops_module_sees_every_layers_call(llm, expected, monkeypatch):
    """Lab 08 records `ops.store_kv` / `ops.paged_*_attention` around a step and
    the engine profile times them: a function swapped in for one of them is
    called for every layer, because a step calls them by these names."""
    kinds = record_step_kinds(llm, monkeypatch)
    calls = {name: 0 for name in ("store_kv", "paged_decode_attention",
                                  "paged_prefill_attention")}

    def recorder(name):
        original = getattr(ops, name)

        def recorded(*args, **kwargs):
            calls[name] += 1
            return original(*args, **kwargs)
        return recorded

    for name in calls:
        monkeypatch.setattr(ops, name, recorder(name))
    assert tokens(llm.generate(PROMPTS, GREEDY, use_tqdm=False)) == expected
    layers = llm.llm_engine.runner.model.config.num_hidden_layers
    assert calls == {
        "store_kv": layers * len(kinds),
        "paged_decode_attention": layers * sum(d > 0 for d, _ in kinds),
        "paged_prefill_attention": layers * sum(d < n for d, n in kinds)}
    assert calls["paged_prefill_attention"] > 0 and calls["paged_decode_attention"] > 0
