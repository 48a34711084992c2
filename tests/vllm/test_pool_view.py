"""vLLM's block pool read in-process into pagedkit's frames (vLLM 0.32 only):
the version and process checks (no vLLM needed), and (marker ``vllm``) the
frames of a live vLLM serving the 10-block trace against what vLLM itself
reports — blocks in use after every step, preemptions, and the cache its
events describe."""

from types import SimpleNamespace

import pytest

from pagedkit.memory.block_table import NULL_BLOCK
from pagedkit.viz.frames import CACHED, FREE, USED
from pagedkit.vllm.pool_view import VllmPoolRecorder, check_version, external_id


@pytest.mark.parametrize("version", ["0.31.2", "0.33.0", "1.0.0", "0.3.2"])
def test_a_vllm_whose_internals_were_not_checked_is_refused(version):
    with pytest.raises(RuntimeError, match=f"this is vLLM {version}, where that reading is "
                                           "not known to be right.*PrefixCacheMap"):
        VllmPoolRecorder(SimpleNamespace(), version=version)


def test_known_versions_pass_the_check():
    check_version("0.32.0")
    check_version("0.32.1.dev3")


def test_an_engine_in_another_process_is_refused():
    llm = SimpleNamespace(llm_engine=SimpleNamespace(engine_core=SimpleNamespace()))
    with pytest.raises(RuntimeError, match="VLLM_ENABLE_V1_MULTIPROCESSING=0"):
        VllmPoolRecorder(llm, version="0.32.0")


@pytest.mark.parametrize("internal, external", [
    ("run1-r0-a8f12a9c", "run1-r0"), ("r5-0123abcd", "r5"), ("r5", "r5"),
    ("x-ABCDEF12", "x-ABCDEF12"), ("a-1234567", "a-1234567")])
def test_external_ids_drop_vllms_random_suffix_only(internal, external):
    assert external_id(internal) == external


@pytest.mark.vllm
def test_the_pool_of_a_live_vllm_step_by_step():
    from pagedkit.viz import BlockMap, Timeline
    from pagedkit.vllm.cache_view import CacheRecording, serve_live
    from pagedkit.vllm.compare import VllmEngine, shared_prefix_workload, tiny_model_dir

    work = shared_prefix_workload(6, max_tokens=60)
    engine = VllmEngine(tiny_model_dir(), num_blocks=10)
    try:
        engine.warm_up(work.prompts[0])
        pool = VllmPoolRecorder(engine.llm)
        live = CacheRecording()
        run = serve_live(engine, work, live, on_step=pool.cut)
    finally:
        engine.close()
    frames = pool.frames[1:]
    assert [f.memory.used for f in frames] == run.blocks_used  # vLLM's own free-block count
    assert sum(f.preemptions for f in frames) == run.preemptions == 4
    assert pool.num_blocks == 10 and pool.block_size == 32
    for f in pool.frames:
        counts = {s: sum(b.status == s for b in f.blocks) for s in (USED, CACHED, FREE)}
        assert (counts[USED], counts[CACHED], counts[FREE]) == (f.memory.used, f.memory.cached,
                                                                  f.memory.free)
        assert sum(counts.values()) == 10
        for seq, table in f.tables.items():
            assert f.request(seq).startswith("run1-r")
            for b in table:
                assert b != NULL_BLOCK and f.blocks[b].status == USED and seq in f.blocks[b].owners
        assert all(0 <= b.num_tokens <= 32 for b in f.blocks)
        assert all(b.ref_count == len(b.owners) for b in f.blocks if b.status == USED)
    last = pool.frames[-1]
    assert last.memory.used == 0 and last.memory.cached == live.cache.num_copies == 8
    assert "0 used" in repr(BlockMap(pool)) and "4 preemptions so far" in repr(Timeline(pool))
