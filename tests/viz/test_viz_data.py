"""Page-table, block-map, timeline and contiguous-vs-paged data, from scripted runs."""

import numpy as np
import pytest
from viz_helpers import admit, emit, step

from pagedkit.memory import KVCacheManager
from pagedkit.scheduler import SchedulerEventKind, Step
from pagedkit.sim import (
    OPT_13B,
    ManagerSpec,
    Simulator,
    StepClock,
    Trace,
    TraceRequest,
    synthetic_trace,
)
from pagedkit.viz import (
    Recorder,
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
    assert table.described() == ("page table of sequence A (request rA): logical blocks 0-2 "
                                 "are physical blocks 0, 2, 3")
    assert table.request == "rA" and table.num_tokens == 5


def test_page_table_keeps_logical_numbers_past_a_sliding_window():
    """Row i is logical block i: released blocks stay as released rows, on GPU and
    in swap memory (the old recorder renumbered the table from its first live block)."""
    kv = KVCacheManager(8, 2, num_swap_blocks=8)
    rec = Recorder.attach(kv)
    admit(kv, "A", "rA", list(range(9)))  # blocks 0..4
    kv.release_outside_window("A", 9, 4)  # keys before 6 are never read: blocks 0, 1, 2 go
    step(kv, 0)
    table = page_table(rec[-1], "A")
    assert [r.logical for r in table.rows] == [0, 1, 2, 3, 4]
    assert table.physical == (None, None, None, 3, 4) and table.num_released == 3
    assert [r.released for r in table.rows] == [True, True, True, False, False]
    assert [r.num_tokens for r in table.rows] == [0, 0, 0, 2, 1] and table.num_tokens == 3
    assert table.chain() == "A: released ×3 -> 3 -> 4"
    kv.swap_out(["A"])
    rec.cut()
    table = page_table(rec[-1], "A")
    assert table.where == "cpu" and table.physical == (None, None, None, 0, 1)
    assert table.chain() == "A: released ×3 -> cpu 0 -> cpu 1"
    assert table.described() == ("page table of sequence A (request rA), swapped out: logical "
                                 "blocks 0-2 released by the sliding window; logical blocks 3-4 "
                                 "are CPU blocks 0, 1")


def test_page_table_of_a_swapped_sequence_points_into_cpu_memory():
    kv, rec = scattered()
    kv.swap_out(["B"])
    rec.cut()
    table = page_table(rec[-1], "B")
    assert table.where == "cpu" and table.chain() == "B: cpu 0"
    assert table.described() == ("page table of sequence B (request rB), swapped out: logical "
                                 "block 0 is CPU block 0")


def test_page_table_of_an_unknown_sequence_names_the_known_ones():
    _, rec = scattered()
    with pytest.raises(KeyError, match=r"'Z' holds no blocks at step 1.*'A', 'B'"):
        page_table(rec[-1], "Z")


def test_block_map_data_colors_fills_badges_and_flashes():
    kv = KVCacheManager(8, 4, enable_prefix_caching=True)
    rec = Recorder.attach(kv)
    admit(kv, "A", "r1", [1, 2, 3, 4, 5, 6])
    kv.fork("A", "B")
    emit(kv, SchedulerEventKind.ADMIT, "B", "r1")  # a second sample of r1
    kv.allocate_slots("B", [7])  # copy-on-write of block 1 into block 2
    admit(kv, "C", "r2", [9, 9, 9, 9])
    kv.free("C")  # its full block stays cached
    step(kv, 0)
    d = block_map_data(rec[-1], rec.first_seen, rec.shades)
    # A and B serve r1: one hue, B (r1's second sequence) in its second shade (issue #26)
    assert d.color[0] == d.color[1] == d.color[2] - 1 != d.color[3]
    assert rec.shades == {"A": 0, "B": 1}  # C was freed before any frame held it
    same = block_map_data(rec[-1], rec.first_seen)  # without shades: all in the base
    assert same.color[0] == same.color[2]
    assert d.color[3] == CACHED_INDEX and d.color[4] == FREE_INDEX
    assert np.allclose(d.fill[:5], [1.0, 0.5, 0.75, 1.0, 0.0])
    assert list(d.badge_blocks) == [0] and d.badge_text == ["×2"]
    assert list(d.cow_blocks) == [1, 2] and d.cow_pairs == ((1, 2),)
    assert d.hover[0] \
        == "block 0: 4/4 tokens, ref count 2, shared ×2, owned by A, B (request r1)"
    assert "cached prefix" in d.hover[3] and d.hover[4] == "block 4: free"


def test_block_map_data_for_unknown_owners_and_swapped_blocks():
    kv = KVCacheManager(4, 2, num_swap_blocks=4)
    kv.allocator.allocate()  # held outside any page table: owner unknown
    rec = Recorder.attach(kv)
    assert block_map_data(rec[0], rec.first_seen).color[0] == UNKNOWN_INDEX
    kv.allocate_slots("S", [1, 2, 3])
    kv.swap_out(["S"])
    rec.cut()
    d = block_map_data(rec[-1], rec.first_seen)
    assert list(d.cpu_blocks) == [0, 1] and len(d.cpu_color) == 2
    assert "swapped out from GPU block 1, 2/2 tokens" in d.cpu_hover[0]
    assert "1/2 tokens" in d.cpu_hover[1]


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
    emit(kv, SchedulerEventKind.PREEMPT, "b", "recompute")
    kv.events.emit(Step(2, running=1, waiting=1, swapped=0))  # a bare manager has no queues
    t = timeline(rec.frames)
    assert t.index == (0, 1, 2, 3)
    assert t.used == (0, 2, 4, 2) and t.free == (4, 2, 0, 2)
    assert t.running == (0, 1, 2, 1) and t.waiting == (0, 0, 0, 1)
    assert t.preemptions == (0, 0, 0, 1) and t.total_preemptions == 1
    assert t.peak_used == 4 and len(t) == 4
    with pytest.raises(ValueError, match="empty"):
        timeline([])


def test_replay_steps_both_memories_over_the_same_trace():
    # c arrives at step 1; every iteration lasts one step (StepClock)
    trace = [TraceRequest("a", 0, 6, 4), TraceRequest("b", 0, 6, 4), TraceRequest("c", 1, 6, 10)]
    cmp = replay(trace, num_blocks=8, block_size=4, policy="max", max_seq_len=16)
    assert len(cmp.contiguous) == len(cmp.paged) == len(cmp.times) == len(cmp)
    assert cmp.capacity == 32 and cmp.times[:3] == (0.0, 1.0, 2.0)
    first = cmp.contiguous[1]
    # max policy: every request reserves 16 slots, so only two fit at once; an
    # admitted request holds its prompt (the token its prefill produced is
    # stored when the next iteration computes it, as in the engine)
    assert [(r.request, r.size) for r in first.regions] == [("a", 16), ("b", 16)]
    assert first.waiting == 0 and first.running == 2
    assert first.stats.token_states == 12 and first.stats.reservation == 8  # 2 x (10 - 6)
    assert first.stats.internal_fragmentation == 12  # 2 x (16 - 10)
    second = cmp.contiguous[2]
    assert second.waiting == 1 and second.next_size == 16
    assert second.external_fragmentation == 0  # nothing is free to strand
    paged = cmp.paged[2]
    # paged: a and b hold 7 tokens (2 blocks each), c joined with its 6
    assert paged.requests.running == 3 and paged.memory.used == 6
    assert {paged.request(s): t for s, t in paged.tables.items()}["c"] == (4, 5)
    w = paged_waste(paged)
    assert (w.tokens, w.unfilled, w.free) == (20, 4, 8)
    last_c, last_p = cmp.contiguous[-1], cmp.paged[-1]
    assert last_c.stats.num_requests == 0 and last_p.memory.used == 0
    assert last_c.running == last_c.waiting == 0 and last_p.requests.running == 0


def test_replay_is_two_simulators_stepped_together():
    """The paged side is exactly what `pagedkit.sim.Simulator` does alone."""
    trace = [TraceRequest(i, 0, 7, 9) for i in range(4)]  # 4 x 16 tokens in 12 blocks of 4
    cmp = replay(trace, num_blocks=12, block_size=4)
    assert sum(f.preemptions for f in cmp.paged) > 0
    assert all(f.memory.used <= 12 for f in cmp.paged)
    assert cmp.paged[-1].memory.used == 0 and cmp.contiguous[-1].stats.num_requests == 0
    alone = Simulator(Trace("t", tuple(trace)), ManagerSpec("paged", 4), capacity_slots=48,
                      prefill="mixed", model=StepClock())
    records = []
    while (record := alone.step()) is not None:
        records.append(record)
    paged_done = next(i for i, f in enumerate(cmp.paged)
                      if i and not f.requests.running and not f.requests.waiting)
    assert paged_done == len(records) == cmp.times[paged_done]
    assert [f.preemptions for f in cmp.paged[1:paged_done + 1]] == \
        [len(r.preempted) for r in records]


def test_replay_takes_simulator_traces_with_their_arrival_times():
    trace = Trace("t", (TraceRequest(0, 0.0, 4, 3), TraceRequest(1, 5.0, 4, 3)))
    cmp = replay(trace, num_blocks=8, block_size=4)
    # request 1 arrives at step 5: the idle steps between are skipped, not lost
    assert cmp.times == (0.0, 1.0, 2.0, 3.0, 6.0, 7.0, 8.0)
    assert [f.requests.running for f in cmp.paged] == [0, 1, 1, 0, 1, 1, 0]
    assert [len(f.regions) for f in cmp.contiguous] == [0, 1, 1, 0, 1, 1, 0]
    # in seconds, with the simulator's roofline clock: arrivals keep their times
    real = synthetic_trace("alpaca", rate=20, num_requests=12, seed=0)
    cmp = replay(real, num_blocks=64, block_size=16, model=OPT_13B)
    assert list(cmp.times) == sorted(cmp.times) and len(cmp) > 12
    admitted = next(i for i, f in enumerate(cmp.paged) if f.requests.running)
    assert cmp.times[admitted - 1] < real.requests[0].arrival <= cmp.times[admitted]
    assert cmp.paged[-1].memory.used == 0 and not cmp.contiguous[-1].regions


def test_replay_rejects_what_can_never_run():
    # the simulators' own rule: a prompt of 30 and 9 stored outputs take 10 blocks
    with pytest.raises(ValueError, match=r"'big' never fits the paged memory of 32 "
                                         r"slots: it needs up to 10 blocks > the pool's 8"):
        replay([TraceRequest("big", 0, 30, 10)], num_blocks=8, block_size=4)
    # paged stores no KV for the last token (33 tokens fit 32 slots); an oracle region
    # reserves it: each side is asked its own rule
    with pytest.raises(ValueError, match=r"'edge' never fits the contiguous \(oracle\) memory "
                                         "of 32 slots: it needs a 33-slot region > capacity"):
        replay([TraceRequest("edge", 0, 30, 3)], num_blocks=8, block_size=4, policy="oracle")
    with pytest.raises(ValueError, match=r"'r' never fits the contiguous \(pow2\) memory of "
                                         "24 slots: it needs a 36-slot region > capacity"):
        replay([TraceRequest("r", 0, 4, 17)], num_blocks=6, block_size=4, max_seq_len=64)
    with pytest.raises(ValueError, match=r"needs 21 tokens \(prompt 4 \+ output 17\), more than "
                                         "max_seq_len=20"):
        replay([TraceRequest("r", 0, 4, 17)], num_blocks=6, block_size=4, max_seq_len=20)
    with pytest.raises(ValueError, match="output_len of request 'r' must be >= 1"):
        replay([TraceRequest("r", 0, 4, 0)], num_blocks=6, block_size=4)
    with pytest.raises(ValueError, match="request 'r' arrives at -1"):
        replay([TraceRequest("r", -1, 4, 2)], num_blocks=6, block_size=4)
    with pytest.raises(ValueError, match="policy must be one of"):
        replay([TraceRequest("r", 0, 4, 2)], num_blocks=6, block_size=4, policy="paged")
    with pytest.raises(ValueError, match="empty"):
        replay([], num_blocks=8, block_size=4)
    with pytest.raises(ValueError, match="unique"):
        replay([TraceRequest(1, 0, 2, 2), TraceRequest("1", 0, 2, 2)], num_blocks=8,
               block_size=4)
    with pytest.raises(TypeError, match="prompt_len"):
        replay([object()], num_blocks=8, block_size=4)


def test_each_sequence_of_a_request_has_its_shade_of_one_hue():
    """Issue #26: all beams of a request were drawn in one color. A request keeps
    one hue; its sequences take its shades in the order they appear (4, then
    round again), every shade distinct and none the free, cached or unknown
    color; a request seen later never changes an earlier one's colors."""
    from pagedkit.viz.palette import (
        FILL_SCALE,
        NUM_INDICES,
        OWNER_COLORS,
        SHADES,
        owner_color_index,
    )

    first_seen = {"r1": 0, "r2": 1}
    r1 = [owner_color_index("r1", first_seen, rank) for rank in range(len(SHADES) + 1)]
    assert r1[:len(SHADES)] == list(range(2, 2 + len(SHADES))) and r1[-1] == r1[0]
    r2 = owner_color_index("r2", first_seen)
    assert r2 == 2 + len(SHADES) and owner_color_index("r3", first_seen) == UNKNOWN_INDEX
    colors = [c for _, c in FILL_SCALE]
    assert len(colors) == NUM_INDICES
    shades = colors[2:2 + len(SHADES)]
    assert shades[0] == OWNER_COLORS[0] and len(set(shades)) == len(SHADES)
    assert not set(shades) & {colors[FREE_INDEX], colors[CACHED_INDEX], colors[UNKNOWN_INDEX]}


@pytest.mark.parametrize("name", ["watermak", "prefil", "max_num_seq", "premption", "block"])
def test_replay_refuses_an_option_it_has_not_by_its_own_name(name):
    """Newcomer 41: a misspelled option was Simulator.__init__'s TypeError."""
    from pagedkit.viz.replay import REPLAY_OPTIONS

    with pytest.raises(TypeError, match=rf"replay\(\) got an unexpected keyword argument "
                                        rf"'{name}'.*the simulators' options it passes on: "
                                        + ", ".join(REPLAY_OPTIONS)):
        replay([TraceRequest("a", 0, 4, 4)], num_blocks=8, block_size=4, **{name: 1})


@pytest.mark.parametrize("max_seq_len", [1, 5, 13])
def test_replay_names_max_seq_len_when_a_request_is_longer(max_seq_len):
    """Newcomer 41: the refusal named the paged memory, not the limit."""
    trace = [TraceRequest("a", 0, 4, 4), TraceRequest("b", 0, 10, 4)]
    first = next(r for r in trace if r.total_len > max_seq_len)
    with pytest.raises(ValueError, match=rf"request '{first.request_id}' needs "
                                         rf"{first.total_len} tokens \(prompt {first.prompt_len} "
                                         rf"\+ output {first.output_len}\), more than "
                                         rf"max_seq_len={max_seq_len}: give max_seq_len=14 or "
                                         "more"):
        replay(trace, num_blocks=8, block_size=4, max_seq_len=max_seq_len)
    assert len(replay(trace, num_blocks=8, block_size=4, max_seq_len=14)) > 0
