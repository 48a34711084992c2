"""An engine step's attention: the batched path's buckets are built once per
step, not once per layer, while every layer does its own store and
attention through the ops, by name. The engine's metadata is right as
`pack_step` builds it, so the step skips `checks.check_step`
(``check=False``): every step of engines of every kind packs metadata that
passes it."""

from __future__ import annotations

import pytest
import torch

from pagedkit import LLM, SamplingParams, ops
from pagedkit.kernels import batched, checks, cpu_decode
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


@pytest.mark.parametrize("backend", ["batched", "native"])
def test_each_engine_step_buckets_its_metadata_once_and_vouches_for_it(llm, expected,
                                                                       monkeypatch, backend):
    """The batched path buckets each kind of attention once per step; the C
    decode kernel (native) needs no buckets, so only the chunks are bucketed."""
    if backend == "native" and cpu_decode.unavailable():
        pytest.skip(cpu_decode.unavailable())
    monkeypatch.setenv("PAGEDKIT_KERNELS", backend)
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
    count(ops.IMPLEMENTATIONS[backend], "store_kv", "stores")
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
        if backend == "native":
            k -= num_decodes > 0
        expected_counts = {"bucketings": k, "stores": layers, "attends": k * layers}
        assert step == {key: n for key, n in expected_counts.items() if n}, \
            (num_decodes, num_seqs)


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


def window_model():
    """Two layers that slide over 6 keys (Mistral): the engine releases the
    blocks before the window, whose entries `pack_step` shows as block 0."""
    from transformers import MistralConfig, MistralForCausalLM

    torch.manual_seed(0)
    config = MistralConfig(vocab_size=96, hidden_size=64, intermediate_size=128,
                           num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                           max_position_embeddings=512, sliding_window=6)
    return MistralForCausalLM(config).eval()


SAMPLED = SamplingParams(n=3, temperature=0.8, seed=1, max_tokens=8, ignore_eos=True)
BEAMS = SamplingParams(n=2, use_beam_search=True, temperature=0, max_tokens=6, ignore_eos=True)
#: engines of every kind of step: decodes and prefills together, chunks of a
#: prompt, prefix-cache hits, forks with copy-on-write (n > 1, beams),
#: preemption by recompute and by swap, blocks released behind a window
ENGINES = {
    "roomy": (dict(num_blocks=64, block_size=4), [GREEDY, SAMPLED, BEAMS]),
    "chunked": (dict(num_blocks=64, block_size=4, enable_chunked_prefill=True,
                     max_num_batched_tokens=5), [GREEDY, SAMPLED]),
    "recompute": (dict(num_blocks=10, block_size=2, preemption_mode="recompute"),
                  [GREEDY, SAMPLED]),
    "swap": (dict(num_blocks=10, block_size=2, preemption_mode="swap", swap_space=1),
             [GREEDY, SAMPLED]),
    "window": (dict(num_blocks=64, block_size=4),
               [SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)]),
}


@pytest.mark.parametrize("kind", ENGINES)
def test_every_step_an_engine_packs_passes_the_step_check(kind, monkeypatch):
    """What `pack_step` vouches for, checked: each step's packed metadata
    passes `checks.check_step` (the index tensors, slots and block ids inside
    the cache, tables that cover the lengths, query boundaries), while the
    engine's own step runs it with ``check=False``."""
    engine_args, params = ENGINES[kind]
    llm = LLM(window_model() if kind == "window" else "tiny", **engine_args)
    pack_step, checked, preempted = runner_module.pack_step, [], []

    def checking(*args, **kwargs):
        input_ids, positions, meta, logits = pack_step(*args, **kwargs)
        assert meta.check is False and meta.kv_caches
        checks.check_step(meta.slot_mapping, meta.block_tables, meta.context_lens,
                          meta.cu_seqlens_q, meta.num_decodes, meta.kv_caches[0][0])
        checked.append((meta.num_decodes, meta.context_lens.numel()))
        return input_ids, positions, meta, logits

    monkeypatch.setattr(runner_module, "pack_step", checking)
    kv, released = llm.llm_engine.kv, []
    release = kv.release_outside_window

    def counting(*args):
        blocks = release(*args)
        released.extend(blocks)
        return blocks

    monkeypatch.setattr(kv, "release_outside_window", counting)
    prompts = [[5 + i] * (3 + 4 * i) for i in range(4)]  # shared leading blocks: cache hits
    requests = [(p, sp) for p in prompts for sp in params]
    outs = llm.generate([p for p, _ in requests], [sp for _, sp in requests], use_tqdm=False,
                        on_step=lambda step: preempted.extend(step.preempted))
    assert len(outs) == len(requests) and len(checked) >= 6
    assert any(d == n for d, n in checked) and any(d < n for d, n in checked)  # both kinds
    if kind in ("recompute", "swap"):
        assert preempted
    assert bool(released) == (kind == "window")


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
