"""Page-table, block-map, timeline and contiguous-vs-paged data, from scripted runs."""

import numpy as np
import pytest
from viz_helpers import admit, emit, step

from pagedkit.memory import EventKind, KVCacheManager
from pagedkit.viz import (
    Recorder,
    TraceRequest,
    block_map_data,
    grid_for,
    page_table,
    paged_waste,
    replay,
    timeline,
)
from pagedkit.viz.palette import CACHED_INDEX, FREE_INDEX, UNKNOWN_INDEX


def scattered():
    """A's blocks end up at 0 -> 2 -> 3: B took block 1 in between."""
    kv = KVCacheManager(8, 2, num_swap_blocks=4)
    rec = Recorder.attach(kv)
    admit(kv, "A", "rA", [1, 2])
    admit(kv, "B", "rB", [3, 4])
    kv.allocate_slots("A", [5, 6, 7])
    step(kv, 0)
    return kv, rec


def test_page_table_reads_logical_to_physical():
    _, rec = scattered()
    table = page_table(rec[-1], "A")
    assert table.physical == (0, 2, 3)
    assert [r.logical for r in table.rows] == [0, 1, 2]
    assert [r.num_tokens for r in table.rows] == [2, 2, 1]
    assert table.chain() == "A: 0 -> 2 -> 3" and table.where == "gpu"
    assert table.request == "rA" and table.num_tokens == 5


def test_page_table_of_a_swapped_sequence_points_into_cpu_memory():
    kv, rec = scattered()
    kv.swap_out(["B"])
    rec.cut()
    table = page_table(rec[-1], "B")
    assert table.where == "cpu" and table.chain() == "B: cpu 0"


def test_page_table_of_an_unknown_sequence_names_the_known_ones():
    _, rec = scattered()
    with pytest.raises(KeyError, match=r"'Z' holds no blocks at step 1.*'A', 'B'"):
        page_table(rec[-1], "Z")


def test_block_map_data_colors_fills_badges_and_flashes():
    kv = KVCacheManager(8, 4, enable_prefix_caching=True)
    rec = Recorder.attach(kv)
    admit(kv, "A", "r1", [1, 2, 3, 4, 5, 6])
    kv.fork("A", "B")
    kv.allocate_slots("B", [7])  # copy-on-write of block 1 into block 2
    admit(kv, "C", "r2", [9, 9, 9, 9])
    kv.free("C")  # its full block stays cached
    step(kv, 0)
    d = block_map_data(rec[-1], rec.first_seen)
    assert d.color[0] == d.color[1] == d.color[2] != d.color[3]  # A and B serve r1
    assert d.color[3] == CACHED_INDEX and d.color[4] == FREE_INDEX
    assert np.allclose(d.fill[:5], [1.0, 0.5, 0.75, 1.0, 0.0])
    assert list(d.badge_blocks) == [0] and d.badge_text == ["×2"]
    assert list(d.cow_blocks) == [1, 2] and d.cow_pairs == ((1, 2),)
    assert d.hover[0] \
        == "block 0: 4/4 tokens, ref count 2, shared ×2, owned by A, B (request r1)"
    assert "cached prefix" in d.hover[3] and d.hover[4] == "block 4: free"


def test_block_map_data_for_unknown_owners_and_swapped_blocks():
    kv = KVCacheManager(4, 2, num_swap_blocks=4)
    kv.allocate_slots("early", [1])
    rec = Recorder.attach(kv)
    assert block_map_data(rec[0], rec.first_seen).color[0] == UNKNOWN_INDEX
    kv.allocate_slots("S", [1, 2, 3])
    kv.swap_out(["S"])
    rec.cut()
    d = block_map_data(rec[-1], rec.first_seen)
    assert list(d.cpu_blocks) == [0, 1] and np.allclose(d.cpu_fill, [1.0, 0.5])
    assert "swapped out from GPU block 1" in d.cpu_hover[0]


def test_grid_shape_grows_with_the_pool():
    assert grid_for(64).columns == 16 and grid_for(64).rows == 4
    assert grid_for(1000).columns == 32 and grid_for(4096).columns == 64
    assert grid_for(10, columns=4).rows == 3
    g = grid_for(64)
    assert (g.column(17), g.row(17), g.cpu_row(0)) == (1, 1, 5)
    with pytest.raises(ValueError, match="columns must be >= 1"):
        grid_for(8, columns=0)


def test_timeline_series_line_up_with_frames():
    kv = KVCacheManager(4, 2)
    rec = Recorder.attach(kv)
    admit(kv, "a", "r1", [1, 2, 3])
    step(kv, 0)
    admit(kv, "b", "r2", [1, 2, 3])
    step(kv, 1)
    kv.free("b")
    emit(kv, EventKind.PREEMPT, "b", "recompute")
    step(kv, 2)
    t = timeline(rec.frames)
    assert t.index == (0, 1, 2, 3)
    assert t.used == (0, 2, 4, 2) and t.free == (4, 2, 0, 2)
    assert t.running == (0, 1, 2, 1) and t.waiting == (0, 0, 0, 1)
    assert t.preemptions == (0, 0, 0, 1) and t.total_preemptions == 1
    assert t.peak_used == 4 and len(t) == 4
    with pytest.raises(ValueError, match="empty"):
        timeline([])


def test_replay_steps_both_memories_over_the_same_trace():
    trace = [TraceRequest("a", 6, 4), TraceRequest("b", 6, 4), TraceRequest("c", 6, 10, 1)]
    cmp = replay(trace, num_blocks=8, block_size=4, policy="max", max_seq_len=16)
    assert len(cmp.contiguous) == len(cmp.paged) == len(cmp)
    assert cmp.capacity == 32
    first = cmp.contiguous[1]
    # max policy: every request reserves 16 slots, so only two fit at once
    assert [r.size for r in first.regions] == [16, 16] and first.waiting == 0
    assert first.stats.token_states == 12 and first.stats.reservation == 8  # 2 x (10 - 6)
    assert first.stats.internal_fragmentation == 12  # 2 x (16 - 10)
    second = cmp.contiguous[2]
    assert second.waiting == 1 and second.external_fragmentation == 0
    paged = cmp.paged[2]
    # paged: a and b decoded to 7 tokens (2 blocks each), c started with 6 (2 blocks)
    assert paged.requests.running == 3 and paged.memory.used == 6
    w = paged_waste(paged)
    assert (w.tokens, w.unfilled, w.free) == (20, 4, 8)
    last_c, last_p = cmp.contiguous[-1], cmp.paged[-1]
    assert last_c.stats.num_requests == 0 and last_p.memory.used == 0
    assert last_c.running == last_c.waiting == 0 and last_p.requests.running == 0


def test_replay_preempts_paged_requests_when_blocks_run_out():
    trace = [TraceRequest(i, 7, 9) for i in range(4)]  # 4 x 16 tokens in 12 blocks of 4
    cmp = replay(trace, num_blocks=12, block_size=4)
    assert sum(f.preemptions for f in cmp.paged) > 0
    assert all(f.memory.used <= 12 for f in cmp.paged)
    assert cmp.paged[-1].memory.used == 0 and cmp.contiguous[-1].stats.num_requests == 0


def test_replay_rejects_what_can_never_run():
    with pytest.raises(ValueError, match="needs 40 tokens, more than the 32 slots"):
        replay([TraceRequest("big", 30, 10)], num_blocks=8, block_size=4)
    with pytest.raises(ValueError, match="empty"):
        replay([], num_blocks=8, block_size=4)
    with pytest.raises(ValueError, match="unique"):
        replay([TraceRequest(1, 2, 2), TraceRequest("1", 2, 2)], num_blocks=8, block_size=4)
    with pytest.raises(TypeError, match="prompt_len"):
        replay([object()], num_blocks=8, block_size=4)
