"""The build track beside the real vLLM (#28): the reference pieces of labs
03-07, plugged into pagedkit's engine, serve the bench workload (shared
prefix, forked samples, preemption) with the tokens vLLM's CPU build gives on
the same tiny model — what lab 08's track cell shows where vLLM is installed.
Marked ``vllm``: skipped without it, failed with PAGEDKIT_REQUIRE_VLLM=1."""

import importlib.util
import re
from pathlib import Path

import pytest

from pagedkit.exercises import track

SOLUTIONS = Path(__file__).resolve().parents[2] / "labs" / "solutions"


def _reference():
    namespace = {}
    for path in sorted(SOLUTIONS.glob("lab0[3-7]_*.py")):
        spec = importlib.util.spec_from_file_location(f"track_vllm_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        namespace.update(vars(module))
    return track.Pieces.from_namespace(namespace)


@pytest.mark.vllm
def test_the_track_serves_vllms_tokens():
    requests = track.bench_requests()
    run = track.lockstep(_reference(), requests, **track.SCENARIOS["memory"])
    assert run.passed, repr(run)
    assert run.num_preemptions > 0 and run.num_cached_tokens > 0
    assert run.outputs == track.vllm_tokens(requests)


def test_without_vllm_the_comparison_says_why(monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "vllm" else find_spec(name, *a))
    assert "not installed" in track.vllm_missing()
    with pytest.raises(RuntimeError, match="vLLM is not installed here"):
        track.vllm_tokens(track.bench_requests(2))


find_spec = importlib.util.find_spec


def test_without_vllm_both_ways_in_say_how_to_install_it(monkeypatch):
    """Newcomer finding 10: docs/vllm.md's `compare` said how to install vLLM,
    its `VllmEngine` example a bare "No module named 'vllm'"."""
    import os

    from pagedkit.vllm import compare as cmp

    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "vllm" else find_spec(name, *a))
    monkeypatch.delenv("VLLM_ENABLE_V1_MULTIPROCESSING", raising=False)
    said = f"vLLM is not installed here: {cmp.INSTALL_HINT}"
    with pytest.raises(ModuleNotFoundError, match=re.escape(said)):
        cmp.VllmEngine(cmp.tiny_model_dir(), num_blocks=16)
    assert "VLLM_ENABLE_V1_MULTIPROCESSING" not in os.environ  # nothing set on the way
    with pytest.raises(ModuleNotFoundError, match=re.escape(said)):
        cmp.compare_all([cmp.Workload([[1, 2]], [2])])
