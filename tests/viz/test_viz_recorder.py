"""The recorder: scripted event sequences become the frames we expect, and a
random walk over a real KVCacheManager never makes the picture disagree with it."""

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st
from viz_helpers import admit, emit, step

from pagedkit.memory import EventBus, KVCacheManager
from pagedkit.scheduler import Finish, SchedulerEventKind, Step
from pagedkit.viz import Recorder
from pagedkit.viz.frames import CACHED, FREE, RUNNING, SWAPPED, USED, WAITING


def recorded(num_blocks=16, block_size=4, **kw):
    kv = KVCacheManager(num_blocks, block_size, **kw)
    return kv, Recorder.attach(kv)


def test_starts_with_one_empty_frame_and_cuts_at_step_events():
    kv, rec = recorded()
    assert len(rec) == 1 and rec[0].memory.free == 16 and rec[0].step is None
    admit(kv, "A", "r1", [1, 2, 3, 4, 5])
    assert len(rec) == 1  # nothing is cut before the step ends
    step(kv, 7)
    f = rec[1]
    assert (f.index, f.step) == (1, 7)
    assert f.tables == {"A": (0, 1)}
    assert f.blocks[0] == f.blocks[0].__class__(USED, ("A",), 1, 4)
    assert f.blocks[1].num_tokens == 1
    assert f.request("A") == "r1" and f.seq_status == {"A": RUNNING}
    assert f.event_counts == {"allocate": 2, "append": 2, "admit": 1, "step": 1}
    assert f.memory.used == 2 and f.memory.tokens == 5 and f.memory.free == 14


def test_fork_shares_and_cow_copies_the_partial_block():
    kv, rec = recorded()
    admit(kv, "A", "r1", [1, 2, 3, 4, 5])
    kv.fork("A", "B")
    step(kv, 0)
    f = rec[-1]
    assert f.tables == {"A": (0, 1), "B": (0, 1)}
    assert f.blocks[1].owners == ("A", "B") and f.blocks[1].ref_count == 2
    assert f.memory.shared == 2 and f.copies == ()
    kv.allocate_slots("B", [6])  # B writes into the shared last block: copy-on-write
    step(kv, 1)
    f = rec[-1]
    assert f.copies == ((1, 2),)
    assert f.tables == {"A": (0, 1), "B": (0, 2)}
    assert f.blocks[1].owners == ("A",) and f.blocks[1].ref_count == 1
    assert f.blocks[2].owners == ("B",) and f.blocks[2].num_tokens == 2
    assert f.memory.shared == 1
    step(kv, 2)
    assert rec[-1].copies == ()  # the flash lasts one frame


def test_free_leaves_cached_blocks_and_a_cache_hit_revives_them():
    kv, rec = recorded(enable_prefix_caching=True)
    prompt = list(range(10))  # two full blocks (cached when freed) and a partial one
    admit(kv, "A", "r1", prompt)
    kv.free("A")
    emit(kv, SchedulerEventKind.FINISH, "A", "stop")
    step(kv, 0)
    f = rec[-1]
    assert [b.status for b in f.blocks[:3]] == [CACHED, CACHED, FREE]
    assert f.blocks[0].num_tokens == 4 and f.memory.cached == 2 and f.memory.used == 0
    assert f.tables == {} and f.seq_status == {}
    hits = kv.cached_prefix("B", prompt)
    assert hits == [0, 1]
    kv.allocate_slots("B", prompt[8:], hits)
    step(kv, 1)
    f = rec[-1]
    assert f.tables["B"][:2] == (0, 1) and f.event_counts["cache_hit"] == 2
    assert f.blocks[0].status == USED and f.blocks[0].owners == ("B",)
    assert f.memory.cached == 0


def test_evicting_a_cached_block_makes_it_free():
    kv, rec = recorded(num_blocks=2, block_size=2, enable_prefix_caching=True)
    kv.allocate_slots("A", [1, 2])
    kv.free("A")
    rec.cut()
    assert rec[-1].blocks[0].status == CACHED
    kv.allocate_slots("B", [7, 8, 9, 10])  # needs both blocks: block 0 is evicted
    rec.cut()
    f = rec[-1]
    assert f.event_counts["evict"] == 1
    assert f.memory.cached == 0 and f.blocks[0].owners == ("B",)
    kv.free("B")
    kv.allocator.evict_all_cached()
    rec.cut()
    assert rec[-1].memory.free == 2 and rec[-1].memory.cached == 0


def test_swap_out_and_back_in_moves_a_group_and_its_sharing():
    kv, rec = recorded(num_swap_blocks=8)
    admit(kv, "A", "r1", [1, 2, 3, 4, 5])
    kv.fork("A", "A2")
    emit(kv, SchedulerEventKind.ADMIT, "A2", "r1")
    kv.allocate_slots("A2", [9])
    step(kv, 0)
    kv.swap_out(["A", "A2"])
    for seq in ("A", "A2"):
        emit(kv, SchedulerEventKind.PREEMPT, seq, "swap")
    step(kv, 1)
    f = rec[-1]
    assert f.tables == {} and f.memory.used == 0
    assert f.swapped_tables == {"A": (0, 1), "A2": (0, 2)}
    assert f.swapped[0].owners == ("A", "A2") and f.swapped[0].from_block == 0
    assert f.swapped[2].num_tokens == 2
    assert f.memory.swapped == 3 == kv.stats().swapped_blocks
    assert f.requests.swapped == 1 and f.requests.running == 0
    assert f.seq_status == {"A": SWAPPED, "A2": SWAPPED}
    assert rec.cpu_blocks_seen == 3
    kv.swap_in(["A", "A2"])
    step(kv, 2)
    f = rec[-1]
    assert f.swapped == {} and f.swapped_tables == {}
    assert f.tables == {"A": tuple(kv.block_ids("A")), "A2": tuple(kv.block_ids("A2"))}
    assert f.seq_status == {"A": RUNNING, "A2": RUNNING}
    assert f.memory.shared == 1


def test_preempt_recompute_and_finish_move_request_counts():
    kv, rec = recorded()
    admit(kv, "a", "r1", [1, 2])
    admit(kv, "b", "r2", [3, 4])
    kv.fork("b", "b2")
    emit(kv, SchedulerEventKind.ADMIT, "b2", "r2")  # two samples, one request
    step(kv, 0)
    assert rec[-1].requests.running == 2
    kv.free("a")
    emit(kv, SchedulerEventKind.PREEMPT, "a", "recompute")
    step(kv, 1)
    f = rec[-1]
    assert (f.requests.running, f.requests.waiting) == (1, 1) and f.preemptions == 1
    assert f.seq_status["a"] == WAITING
    for seq in ("b", "b2"):
        kv.free(seq)
        emit(kv, SchedulerEventKind.FINISH, seq, "length")
    step(kv, 2)
    assert rec[-1].requests.running == 0 and rec[-1].preemptions == 0


def test_step_event_can_carry_the_schedulers_own_queue_counts():
    kv, rec = recorded()
    kv.events.emit(Step(0, running=2, waiting=7, swapped=0))
    assert rec[-1].requests.waiting == 7
    step(kv, 1)
    assert rec[-1].requests.waiting == 0  # derived again without the counts


def test_colors_follow_requests_in_order_first_seen():
    kv, rec = recorded()
    admit(kv, "x", "r9", [1])
    admit(kv, "y", "r3", [2])
    step(kv, 0)
    assert list(rec.first_seen) == ["r9", "r3"]


def test_attach_late_takes_over_blocks_in_use_with_unknown_owners():
    kv = KVCacheManager(8, 4, enable_prefix_caching=True)
    kv.allocate_slots("A", list(range(6)))
    kv.allocate_slots("B", list(range(100, 104)))
    kv.free("B")
    rec = Recorder.attach(kv)
    f = rec[0]
    assert f.memory.used == 2 and f.memory.cached == 1 and f.memory.tokens == 6
    assert f.blocks[0].owners == ()


def test_attach_names_what_it_needs():
    with pytest.raises(TypeError, match="events") as refused:
        Recorder.attach(object())
    assert "a paged pagedkit.sim Simulator (Simulator(trace, 'paged'))" in str(refused.value)
    with pytest.raises(ValueError, match="num_blocks must be >= 1"):
        Recorder(EventBus(), 0, 4)


def test_close_stops_listening_and_frame_listeners_hear_every_cut():
    kv, rec = recorded()
    heard = []
    stop = rec.on_frame(heard.append)
    step(kv, 0)
    stop()
    step(kv, 1)
    assert [f.step for f in heard] == [0]
    rec.close()
    assert not rec.listening and not kv.events
    step(kv, 2)
    assert len(rec) == 3


# -------------------------------------------------------------------- property
# "new" and "fork" twice as often: forked groups to swap whole
ops = st.lists(st.tuples(st.sampled_from(["new", "new", "grow", "fork", "fork", "free",
                                          "swap_out", "swap_in", "swap_out_group",
                                          "swap_in_group"]),
                         st.integers(0, 5), st.integers(1, 9)), max_size=40)


@settings(max_examples=80, deadline=None)
@given(ops)
def test_frames_always_agree_with_the_manager(script):
    """Whatever happens, a cut frame says what the manager says: also when a
    forked group is swapped out and back whole, its shared blocks moving once."""
    kv = KVCacheManager(12, 4, enable_prefix_caching=True, num_swap_blocks=12)
    rec = Recorder.attach(kv)
    seqs: list[str] = []
    group_of: dict[str, str] = {}  # sequence -> the sequence its group was forked from
    for n, (op, pick, size) in enumerate(script):
        live = [s for s in seqs if s in kv and not kv.is_swapped(s)]
        away = [s for s in seqs if s in kv and kv.is_swapped(s)]
        groups: dict[str, list[str]] = {}
        for s in seqs:
            if s in kv:
                groups.setdefault(group_of[s], []).append(s)
        if op == "new":
            tokens = [pick % 2] * 4 + list(range(size))  # shared prefixes: cache hits
            seq = f"s{n}"
            hits = kv.cached_prefix(seq, tokens)
            if kv.allocate_slots(seq, tokens[len(hits) * 4:], hits) is not None:
                seqs.append(seq)
                group_of[seq] = seq
        elif op == "grow" and live:
            kv.allocate_slots(live[pick % len(live)], list(range(size % 5)))
        elif op == "fork" and live:
            child, parent = f"s{n}", live[pick % len(live)]
            kv.fork(parent, child)
            seqs.append(child)
            group_of[child] = group_of[parent]
        elif op == "free" and (live or away):
            seq = (live + away)[pick % len(live + away)]
            kv.free(seq)
            kv.events.emit(Finish(seq, None, "abort"))  # as the scheduler
        elif op == "swap_out" and live and kv.can_swap_out(live[pick % len(live):][:1]):
            kv.swap_out([live[pick % len(live)]])
        elif op == "swap_in" and away and kv.can_swap_in(away[:1]):
            kv.swap_in(away[:1])
        elif op in ("swap_out_group", "swap_in_group"):
            out = op == "swap_out_group"
            whole = [g for g in groups.values()
                     if len(g) > 1 and all(kv.is_swapped(s) != out for s in g)]
            if whole:
                group = whole[pick % len(whole)]
                distinct = {b for s in group for b in (
                    kv.block_ids(s) if out else kv._swapped[s].blocks)}
                if out and kv.can_swap_out(group):
                    kv.swap_out(group)
                elif not out and kv.can_swap_in(group):
                    kv.swap_in(group)
                else:
                    continue
                event(op)
                frame = rec.cut()
                where = frame.swapped_tables if out else frame.tables
                moved = {b for s in group for b in where[s]}
                assert len(moved) == len(distinct)  # shared blocks travelled once
                check(frame, kv, seqs)
        if n % 3 == 0:
            kv.events.emit(Step(n))
            check(rec[-1], kv, seqs)
    check(rec.cut(), kv, seqs)


def check(frame, kv, seqs):
    stats = kv.stats()
    m = frame.memory
    assert (m.used, m.cached, m.tokens, m.swapped) == (
        stats.used_blocks, stats.cached_blocks, stats.tokens_stored, stats.swapped_blocks)
    assert m.free == stats.free_blocks
    pool = kv.allocator
    for b, state in enumerate(frame.blocks):
        assert state.ref_count == pool.ref_count(b)
        if state.status == USED:
            assert state.num_tokens == pool.num_tokens(b)
        assert (state.status == CACHED) == (pool.is_free(b) and pool.block_hash(b) is not None)
    gpu = {s: tuple(kv.block_ids(s)) for s in seqs if s in kv and not kv.is_swapped(s)
           and kv.block_ids(s)}
    assert dict(frame.tables) == gpu
    assert set(frame.swapped_tables) == {s for s in seqs if s in kv and kv.is_swapped(s)}
    for seq, blocks in gpu.items():
        for b in blocks:
            assert seq in frame.blocks[b].owners
    for seq, cpu in frame.swapped_tables.items():
        assert len(cpu) == len(kv._swapped[seq].blocks)
        for c in cpu:
            assert seq in frame.swapped[c].owners


def test_attach_finds_a_pool_behind_memory_kv_as_in_the_simulator():
    from types import SimpleNamespace

    kv = KVCacheManager(8, 4)
    sim = SimpleNamespace(events=kv.events, memory=SimpleNamespace(kv=kv))
    rec = Recorder.attach(sim)
    kv.allocate_slots("A", [1])
    rec.cut()
    assert rec.num_blocks == 8 and rec[-1].tables == {"A": (0,)}
