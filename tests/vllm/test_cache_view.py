"""The prefix-cache view fed by KV-cache events: recorded vLLM streams (no vLLM
needed), pagedkit's own stream, hand-made edge cases, and a live vLLM (marker
``vllm``)."""

import json
import os
from pathlib import Path

import pytest

from pagedkit.vllm.cache_view import CacheRecording, Place, PrefixCacheMap, serve_live
from pagedkit.vllm.reader import CachedBlocks
from pagedkit.vllm.wire import (
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    EventBatch,
    decode_batch,
    encode_batch,
)

DATA = Path(__file__).parent / "data"
TRACES = sorted(p.stem for p in DATA.glob("shared_prefix_*.json"))  # the recorded traces


def recorded(name):
    rec = json.loads((DATA / f"{name}.json").read_text())
    return rec, [decode_batch(bytes.fromhex(p)) for p in rec["payloads"]]


def stored(hashes, parent, size=4, first=0):
    return BlockStored(list(hashes), parent, list(range(first, first + size * len(hashes))), size)


def batch(*events):
    return EventBatch(0.0, list(events))


# ------------------------------------------------------------ recorded vLLM streams
@pytest.mark.parametrize("name", TRACES)
def test_every_frame_is_the_cache_the_events_so_far_describe(name):
    _, batches = recorded(name)
    recording = CacheRecording().feed_all(batches)
    assert len(recording) == len(batches) + 1 and recording[0].cells == ()
    reference = CachedBlocks()
    places = {}
    for i, b in enumerate(batches, start=1):
        reference.apply_batch(b)
        f = recording[i]
        assert {c.hash: c.copies for c in f.cells} == {h: blk.copies for h, blk in
                                                       reference.blocks.items()}
        assert f.stored == sum(len(e.block_hashes) for e in b.events
                               if isinstance(e, BlockStored))
        assert f.removed_count == sum(len(e.block_hashes) for e in b.events
                                      if isinstance(e, BlockRemoved))
        assert {c.hash for c in f.cells if c.new} == {h for e in b.events
                                                      if isinstance(e, BlockStored)
                                                      for h in e.block_hashes} & set(
            reference.blocks)
        for c in f.cells:  # a name keeps its place for the whole recording
            assert places.setdefault(c.hash, c.place) == c.place
            parent = reference.blocks[c.hash].parent
            if parent is None:
                assert c.place.depth == 0 and c.parent is None
            else:  # one column right of its parent, on its row or below it
                at = recording.places[parent]
                assert c.place.depth == at.depth + 1 and c.place.row >= at.row
                assert c.parent == (at if parent in reference.blocks else None)
        assert len({c.place for c in f.cells}) == len(f.cells)  # no two on one place
        assert not {c.place for c in f.cells} & set(f.removed)


def test_the_evicting_trace_shows_removals_and_the_final_tree():
    _, batches = recorded("shared_prefix_10_blocks")
    view = PrefixCacheMap(CacheRecording().feed_all(batches))
    removals = [f for f in view.recording.frames if f.removed_count]
    assert [(f.index, f.removed_count) for f in removals] == [
        (6, 1), (8, 1), (11, 1), (12, 1), (13, 4), (14, 1), (17, 1)]  # 10 BlockRemoved events
    assert view.text() == ("PrefixCacheMap(batch 17/17: 8 cached blocks (8 copies), this batch "
                           "+0 stored, -1 removed)\n"
                           "   0 ####\n   1 ..##\n   2 ..##\n   3 ..x")
    # the first batch names the two shared prefix blocks, as one chain
    assert view.text(1).splitlines()[1:] == ["   0 ++"]


@pytest.mark.parametrize("name", TRACES)
def test_pagedkits_stream_draws_the_same_tree_batch_by_batch(name):
    """pagedkit serving the recorded trace, its events published in vLLM's format
    and fed live (WirePublisher.subscribe), draws what vLLM's recording draws."""
    if "PYTHONHASHSEED" in os.environ:
        pytest.skip("the recordings name blocks from vLLM's default root")
    from pagedkit.vllm.compare import run_pagedkit, shared_prefix_workload

    rec, batches = recorded(name)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES", "1" if rec["int_hashes"] else "0")
        run = run_pagedkit("tiny", shared_prefix_workload(**rec["workload"]),
                           num_blocks=rec["num_blocks"])
    ours = PrefixCacheMap(CacheRecording().feed_all(run.batches))
    theirs = PrefixCacheMap(CacheRecording().feed_all(batches))
    assert len(ours.recording) == len(theirs.recording)
    for i in range(len(theirs.recording)):
        assert ours.text(i) == theirs.text(i)
        assert ours.recording[i].cells == theirs.recording[i].cells


# ---------------------------------------------------------------- edge cases
def test_branches_go_below_and_keep_their_parents_column_plus_one():
    rec = CacheRecording()
    rec.feed(batch(stored([1, 2], None)))
    rec.feed(batch(stored([3], 2, first=100)))          # continues row 0
    rec.feed(batch(stored([4], 2, first=200)))          # a branch: row 1
    rec.feed(batch(stored([5], 1, first=300)))          # a branch off block 1: row 2
    rec.feed(batch(stored([6], None, first=400)))       # a new root: row 3
    assert rec.places == {1: Place(0, 0), 2: Place(1, 0), 3: Place(2, 0), 4: Place(2, 1),
                          5: Place(1, 2), 6: Place(0, 3)}
    assert PrefixCacheMap(rec).text().splitlines()[1:] == [
        "   0 ###", "   1 ..#", "   2 .#", "   3 +"]


def test_copies_removals_a_clear_and_bytes_payloads():
    rec = CacheRecording()
    rec.feed(encode_batch(batch(stored([1, 2], None))))  # MessagePack bytes, as on the wire
    f = rec.feed(batch(stored([1, 2], None)))  # the same content computed twice
    assert [c.copies for c in f.cells] == [2, 2] and f.num_copies == 4 and f.num_cached == 2
    f = rec.feed(batch(BlockRemoved([2])))  # one copy goes: the name stays, no cross
    assert f.removed == () and f.removed_count == 1 and f.num_copies == 3
    f = rec.feed(batch(BlockRemoved([2])))  # the last copy: a cross where it was
    assert f.removed == (Place(1, 0),) and [c.hash for c in f.cells] == [1]
    view = PrefixCacheMap(rec)
    assert view.text(2).splitlines()[1] == "   0 ++"  # stored by that batch
    assert view.text(3).splitlines()[1] == "   0 2#"
    assert view.text(4).splitlines()[1] == "   0 2x"
    f = rec.feed(batch(AllBlocksCleared()))
    assert f.cleared and f.cells == () and f.removed == (Place(0, 0),)
    assert "all cleared" in repr(view)
    f = rec.feed(batch(stored([2], 1, first=50)))  # parent unknown now: stream view of a late join
    assert f.cells[0].place == Place(1, 0) and not f.cells[0].prefix_known


def test_a_stream_that_began_late_draws_orphans_as_roots():
    rec = CacheRecording()
    f = rec.feed(batch(stored([7], 99)))  # its parent was stored before we listened
    assert f.cells[0].place == Place(0, 0) and f.cells[0].parent is None
    assert not f.cells[0].prefix_known


def test_the_figure_has_a_point_per_cell_cross_and_copy():
    rec = CacheRecording()
    rec.feed(batch(stored([1, 2], None), stored([1], None)))
    rec.feed(batch(stored([3], 1, first=90), BlockRemoved([2])))
    view = PrefixCacheMap(rec)
    fig = view.figure(2)
    edges, cells, new, gone, copies = fig.data[:5]
    assert list(cells.x) == [0, 2 - 1] and list(cells.y) == [0, 1]  # 1 at (0,0), 3 at (1,1)
    assert list(new.x) == [1] and list(new.y) == [1]
    assert list(gone.x) == [1] and list(gone.y) == [0]
    assert list(copies.text) == ["×2"]
    assert list(edges.x) == [0, 1, None]
    assert "batch 2/2" in fig.layout.title.text and "−1 removed" in fig.layout.title.text


def test_a_view_follows_new_batches_until_moved_back():
    rec = CacheRecording()
    view = PrefixCacheMap(rec)
    rec.feed(batch(stored([1], None)))
    rec.feed(batch(stored([2], 1, first=9)))
    assert view.index == 2
    view.index = 1
    rec.feed(batch(BlockRemoved([2])))
    assert view.index == 1 and view.player.last == 3


def test_feed_refuses_a_bad_batch_and_keeps_the_recording_as_it_was():
    rec = CacheRecording()
    rec.feed(batch(stored([1], None)))
    before = (list(rec.frames), list(rec.batches), dict(rec.places), rec.cache.state())
    with pytest.raises(TypeError, match="not a KV cache event: 'stored'"):
        rec.feed(batch(stored([2], 1, first=9), "stored"))
    with pytest.raises(ValueError, match="3 token ids for 1 blocks of 4"):
        rec.feed(batch(stored([2], 1, first=9), BlockStored([3], 1, [1, 2, 3], 4)))
    assert (list(rec.frames), list(rec.batches), dict(rec.places), rec.cache.state()) == before


# ---------------------------------------------------------------- a live vLLM
@pytest.mark.vllm
def test_a_live_vllm_draws_what_its_recording_drew():
    """vLLM serving the 10-block trace in this process, its events fed into the
    view after every step: the same events as the run's replay, and the same
    tree, batch by batch, as the recording of the same trace."""
    from pagedkit.vllm.compare import VllmEngine, shared_prefix_workload, tiny_model_dir

    rec, batches = recorded("shared_prefix_10_blocks")
    work = shared_prefix_workload(**rec["workload"])
    engine = VllmEngine(tiny_model_dir(), num_blocks=rec["num_blocks"])
    try:
        engine.warm_up(work.prompts[0])
        live = CacheRecording()
        view = PrefixCacheMap(live)
        run = serve_live(engine, work, live)
    finally:
        engine.close()
    assert run.tokens == rec["tokens"]
    assert [e for b in live.batches for e in b.events] == [e for b in run.batches
                                                          for e in b.events]
    recorded_view = PrefixCacheMap(CacheRecording().feed_all(batches))
    assert len(live) == len(recorded_view.recording)
    assert [view.text(i) for i in range(len(live))] == [recorded_view.text(i)
                                                        for i in range(len(live))]
    assert live.cache.state() == run.cache.state()


def test_the_events_command_prints_each_batch_and_its_tree():
    from pagedkit.vllm.__main__ import describe_batch

    _, batches = recorded("shared_prefix_64_blocks")
    rec = CacheRecording()
    first = describe_batch(rec, 0, batches[0], tree=True)
    assert first == "batch 0: BlockStored -> 2 cached blocks (2 copies)\n   0 ++"
    assert describe_batch(rec, 1, batches[1]) == ("batch 1: BlockStored -> 3 cached blocks "
                                                  "(3 copies)")
    assert len(rec) == 3 and rec[2].seq == 1


def test_a_live_widget_follows_new_batches(monkeypatch):
    """The widget's figure (a plotly FigureWidget, built as a notebook shows it)
    is redrawn with each new batch while the view follows the recording."""
    pytest.importorskip("ipywidgets")
    pytest.importorskip("anywidget")
    rec = CacheRecording()
    view = PrefixCacheMap(rec)
    _ = view.widget
    fig = view._figure_widget
    assert list(fig.data[1].x) == []
    rec.feed(batch(stored([1, 2], None)))
    assert list(fig.data[1].x) == [0, 1] and "batch 1/1" in fig.layout.title.text
    rec.feed(batch(BlockRemoved([2])))  # within the throttle's interval: drawn at the
    view.player.flush()                   # end of the cell (a notebook flushes it then)
    assert list(fig.data[1].x) == [0] and list(fig.data[3].x) == [1]
