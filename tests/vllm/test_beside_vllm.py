"""pagedkit against the real vLLM, live (marker ``vllm``: skipped without it,
failed with PAGEDKIT_REQUIRE_VLLM=1). Each vLLM engine takes about ten
seconds to build on two cores, so each test builds one and runs several
workloads on it."""

import json
import os
import subprocess
import sys

import pytest

import pagedkit.vllm.compare as cmp
from pagedkit.vllm.models import ARCHITECTURES, save_tiny
from pagedkit.vllm.wire import AllBlocksCleared, BlockRemoved, BlockStored, EventBatch, encode_batch

pytestmark = pytest.mark.vllm


def test_our_records_and_bytes_are_vllms():
    """Same fields in the same order (a newer vLLM that adds one fails here), and
    the same MessagePack bytes, both ways."""
    import dataclasses

    import msgspec
    from vllm.distributed import kv_events as theirs

    for ours in (BlockStored, BlockRemoved, AllBlocksCleared):
        vllm_cls = getattr(theirs, ours.__name__)
        assert [f.name for f in dataclasses.fields(ours)] == list(vllm_cls.__struct_fields__)
        assert len(vllm_cls.__struct_fields__) - len(vllm_cls.__struct_defaults__) == ours.REQUIRED
    events = [BlockStored([b"\x01" * 32, 7], None, list(range(64)), 32, extra_keys=[None, ("s",)],
                          group_idx=0, kv_cache_spec_kind="full_attention"),
              BlockRemoved([2**63 + 5], group_idx=0), AllBlocksCleared()]
    batch = EventBatch(1234.5, events, 0)
    vllm_batch = theirs.KVEventBatch(ts=1234.5, events=[
        theirs.BlockStored(block_hashes=[b"\x01" * 32, 7], parent_block_hash=None,
                           token_ids=list(range(64)), block_size=32, lora_id=None, medium="GPU",
                           lora_name=None, extra_keys=[None, ("s",)], group_idx=0,
                           kv_cache_spec_kind="full_attention"),
        theirs.BlockRemoved(block_hashes=[2**63 + 5], medium="GPU", group_idx=0),
        theirs.AllBlocksCleared()], data_parallel_rank=0)
    assert encode_batch(batch) == msgspec.msgpack.encode(vllm_batch)
    assert msgspec.msgpack.decode(encode_batch(batch), type=theirs.KVEventBatch) == vllm_batch


def event_lists(run):
    return [e for b in run.batches for e in b.events]


def test_prefix_caching_traces_event_for_event():
    """Greedy requests sharing a prefix, blocks of 32, a roomy cache and one so
    small that both engines evict cached blocks and preempt: the same tokens,
    the same events (event for event), so the same cached blocks hash for
    hash, the same blocks in use after every step, preemptions and hits."""
    roomy = cmp.shared_prefix_workload(6, max_tokens=40)
    tight = cmp.shared_prefix_workload(6, max_tokens=60)
    results = cmp.compare_all([roomy], num_blocks=64) + cmp.compare_all([tight], num_blocks=10)
    for c in results:
        v, p = c.runs["vllm"], c.runs["pagedkit"]
        assert all(c.equal), c.table()
        assert event_lists(v) == event_lists(p)
        assert c.caches_equal and len(v.cache) > 0
        assert v.blocks_used == p.blocks_used
        assert (v.preemptions, v.cached_tokens) == (p.preemptions, p.cached_tokens)
    assert results[0].runs["vllm"].preemptions == 0 < results[1].runs["vllm"].preemptions
    assert any(isinstance(e, BlockRemoved) for e in event_lists(results[1].runs["vllm"]))


def test_a_reset_is_all_blocks_cleared_in_both():
    from pagedkit import LLM
    from pagedkit.vllm.publish import WirePublisher

    work = cmp.shared_prefix_workload(2, max_tokens=4)
    engine = cmp.VllmEngine(cmp.tiny_model_dir(), num_blocks=32)
    try:
        engine.run(work)
        assert engine.llm.reset_prefix_cache() is not False
        theirs = engine.run(cmp.Workload([[5, 6, 7]], [1])).batches
    finally:
        engine.close()
    llm = LLM("tiny", block_size=32, num_blocks=32)
    pub = WirePublisher(llm)
    llm.generate(work.prompts, None, use_tqdm=False)
    assert llm.reset_prefix_cache()
    llm.generate([[5, 6, 7]], None, use_tqdm=False)
    ours = pub.batches[-1:]
    assert [b.events for b in theirs] == [b.events for b in ours] == [[AllBlocksCleared()]]


@pytest.mark.parametrize("arch", sorted(ARCHITECTURES))
def test_tokens_equal_on_the_bench_workloads(arch, tmp_path):
    """Every request of `pagedkit bench`'s ShareGPT- and Alpaca-shaped
    workloads, greedy, on a random two-layer model of each architecture
    (the tiny model for "llama" is test_recorded's and the test above's)."""
    folder = save_tiny(arch, tmp_path / arch)
    works = [cmp.bench_workload(6, dataset=d) for d in ("sharegpt", "alpaca")]
    for c in cmp.compare_all(works, folder, num_blocks=128):
        assert all(c.equal), c.table()
        assert c.caches_equal


def test_a_seeded_root_names_blocks_alike(tmp_path):
    """PYTHONHASHSEED roots every block name, in vLLM and pagedkit alike (a
    process of its own: pagedkit reads the seed when it is imported)."""
    out = tmp_path / "c.json"
    env = {**os.environ, "PYTHONHASHSEED": "7"}
    run = subprocess.run([sys.executable, "-m", "pagedkit", "vllm", "compare", "--requests",
                          "3", "--num-blocks", "32", "--json", str(out), "--no-progress"],
                         check=True, env=env, capture_output=True, text=True)
    result = json.loads(out.read_text())
    assert result["tokens_equal"] == 3 and result["caches_equal"]
    # newcomer 36: vLLM's ~60 log lines came on stdout, before the table
    assert "(MainProcess" not in run.stdout and "INFO" not in run.stdout, run.stdout[:2000]
    assert "(MainProcess" in run.stderr  # its logs are not lost: on stderr


def test_bench_runs_vllm_beside_pagedkit():
    from pagedkit.bench.engine import DEFAULT_SYSTEMS, benchmark

    assert "vllm" in DEFAULT_SYSTEMS
    report = benchmark("tiny", num_requests=4, systems=("pagedkit", "vllm"), log=lambda _: None)
    result = report.result("vllm")
    assert result is not None and result.outputs_differing == 0
    assert report.as_dict()["results"][1]["tokens_per_s"] > 0


def test_profile_splits_vllms_step_as_pagedkits_and_leaves_vllm_as_it_was():
    from vllm.model_executor.layers.attention.attention import Attention
    from vllm.model_executor.layers.linear import UnquantizedLinearMethod

    from pagedkit.bench.engine import PROFILE_PARTS, benchmark, format_report

    methods = (Attention.forward, UnquantizedLinearMethod.apply)
    report = benchmark("tiny", num_requests=3, systems=("pagedkit", "vllm"), profile=True,
                       log=lambda _: None)
    assert (Attention.forward, UnquantizedLinearMethod.apply) == methods
    for profile in (report.profile, report.vllm_profile):
        parts = profile["seconds"]
        assert set(parts) == set(PROFILE_PARTS)
        assert all(parts[p] > 0 for p in ("scheduling", "linear layers", "attention",
                                          "model other", "sampling"))
        assert abs(sum(parts.values()) - profile["total_s"]) < 1e-6
    text = format_report(report)
    # one row per part, vLLM's beside pagedkit's (the report's prepack line names them too)
    assert "vllm profile" in text and text.count("\n  linear layers") == 1


@pytest.mark.parametrize("algo", ["sha256", "sha256_cbor"])
@pytest.mark.parametrize("salt", [None, "", "a", "b", "é" * 40])
def test_a_salted_block_is_named_as_vllm_names_it(algo, salt):
    """vLLM's own functions (kv_cache_utils) name a request's blocks from its
    cache_salt; pagedkit's table gives each the same name."""
    from vllm import SamplingParams
    from vllm.utils.hashing import get_hash_fn_by_name
    from vllm.v1.core import kv_cache_utils as theirs
    from vllm.v1.request import Request

    from pagedkit.memory import KVCacheManager
    from pagedkit.memory.block_hash import HASH_FUNCTIONS

    tokens = list(range(3, 3 + 70))
    request = Request("r", tokens, SamplingParams(max_tokens=1), None, cache_salt=salt)
    names, parent = [], None
    theirs.init_none_hash(get_hash_fn_by_name(algo))
    try:
        for start in range(0, 64, 32):
            extra, _ = theirs.generate_block_hash_extra_keys(request, start, start + 32, 0)
            parent = theirs.hash_block_tokens(get_hash_fn_by_name(algo), parent,
                                              tokens[start:start + 32], extra)
            names.append(parent)
    finally:  # vLLM's default, as an engine built next would set it
        theirs.init_none_hash(get_hash_fn_by_name("sha256"))
    kv = KVCacheManager(8, 32, enable_prefix_caching=True, hash_fn=HASH_FUNCTIONS[algo])
    kv.allocate_slots("A", tokens, cache_salt=salt)
    assert kv.table("A").block_hashes == names


def test_salted_requests_share_blocks_and_events_as_in_vllm():
    """Both engines serve the same salted requests (vLLM's TokensPrompt with a
    cache_salt): the same tokens, the same prefix hits (the same salt shares,
    another salt or none never does; "" is none), and the same events, so
    the same names hash for hash, the salt published on each first block."""
    work = cmp.shared_prefix_workload(6, max_tokens=8)
    work.cache_salts = ["a", "a", "b", None, "b", ""]
    c = cmp.compare(work, num_blocks=64)
    v, p = c.runs["vllm"], c.runs["pagedkit"]
    assert all(c.equal), c.table()
    assert v.cached_tokens == p.cached_tokens == [0, 64, 0, 0, 64, 64]
    assert event_lists(v) == event_lists(p)
    assert c.caches_equal
    stored = [e for e in event_lists(p) if isinstance(e, BlockStored)]
    assert [e.extra_keys[0] for e in stored] == [("a",), ("b",), None]
