"""pagedkit against vLLM's own recorded events (no vLLM needed to run).

`record_events.py` served two prefix-caching traces on vLLM 0.32's CPU build
(the tiny model, greedy, six requests sharing a 70-token prefix, blocks of
32) and kept every event batch as vLLM's publisher sent it. pagedkit serves
the same traces here with the same number of blocks: its tokens must be
vLLM's, and its events, translated by `WirePublisher`, must be vLLM's event
for event (batch boundaries and timestamps aside), hash for hash — in the
roomy trace and in the 10-block one, where both engines evict cached blocks
and preempt four times.
"""

import json
import os
from pathlib import Path

import pytest

from pagedkit.vllm.reader import replay
from pagedkit.vllm.wire import decode_batch

DATA = Path(__file__).parent / "data"
TRACES = sorted(p.stem for p in DATA.glob("shared_prefix_*.json"))  # not api_*.json

pytestmark = pytest.mark.skipif(
    "PYTHONHASHSEED" in os.environ,
    reason="the recordings name blocks from vLLM's default root (PYTHONHASHSEED unset)")


@pytest.fixture(scope="module", params=TRACES)
def trace(request):
    """The recording and pagedkit's run of the same trace."""
    from pagedkit.vllm.compare import run_pagedkit, shared_prefix_workload

    rec = json.loads((DATA / f"{request.param}.json").read_text())
    with pytest.MonkeyPatch.context() as mp:  # publish hashes as the recording has them
        mp.setenv("VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES", "1" if rec["int_hashes"] else "0")
        run = run_pagedkit("tiny", shared_prefix_workload(**rec["workload"]),
                           num_blocks=rec["num_blocks"])
    vllm_batches = [decode_batch(bytes.fromhex(p)) for p in rec["payloads"]]
    return rec, run, vllm_batches


def test_tokens_equal_vllms(trace):
    rec, run, _ = trace
    assert run.tokens == rec["tokens"]


def test_events_equal_vllms_event_for_event(trace):
    _, run, vllm_batches = trace
    ours = [e for b in run.batches for e in b.events]
    theirs = [e for b in vllm_batches for e in b.events]
    assert ours == theirs
    assert len(run.batches) == len(vllm_batches)  # one batch per step that changed a name


def test_cached_blocks_equal_vllms_hash_for_hash(trace):
    _, run, vllm_batches = trace
    ours, theirs = replay(run.batches), replay(vllm_batches)
    assert ours.state() == theirs.state() and len(ours) > 0
    assert all(prefix is not None for prefix in theirs.chains().values())
    assert theirs.unknown_removals == theirs.conflicts == 0


def test_same_steps_blocks_preemptions_and_hits(trace):
    rec, run, _ = trace
    assert run.blocks_used == rec["blocks_used"]
    assert run.preemptions == rec["preemptions"]
    assert run.cached_tokens == rec["cached_tokens"]
