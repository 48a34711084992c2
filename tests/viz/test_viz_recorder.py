"""The recorder reads what it draws: every frame equals an independent reading
of the real memory (and the scheduler's queues) at the moment it was cut.

`reading` below is that independent reading: it walks every block of the pool
through the allocator's public getters and every sequence the *test* knows
through `kv.block_table`, and counts the totals itself. It shares no code
with the recorder, which reads only the blocks a step's events named and
takes its totals from ``kv.stats()``. A hypothesis state machine drives a
`KVCacheManager` through forks, copy-on-write, prefix-cache hits and
evictions, swaps of single sequences and of whole groups, sliding-window
releases and aborts; the simulator and the engine are checked the same way,
step by step, with their queues."""

from collections import defaultdict
from itertools import chain

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from viz_helpers import admit, emit, step, tiny_llama

from pagedkit.memory import KVCacheManager
from pagedkit.memory.block_table import NULL_BLOCK
from pagedkit.scheduler import Finish, SchedulerEventKind, Step
from pagedkit.sim import BeamSearch, ParallelSampling, SharedPrefix, Simulator, synthetic_trace
from pagedkit.viz import Recorder
from pagedkit.viz.frames import CACHED, FREE, RUNNING, SWAPPED, USED, WAITING, MemoryCounts


# ------------------------------------------------------ the independent reading
def reading(kv, seqs):
    """What memory holds now, read block by block: (blocks, memory, tables,
    swapped tables, CPU blocks). Owners are compared as sets: a frame lists
    them in page-table order."""
    pool = kv.allocator
    known = [s for s in dict.fromkeys(seqs) if s in kv]
    gpu = {s: tuple(kv.table(s).blocks) for s in known
           if s not in kv.swapped_tables() and kv.table(s).blocks}
    cpu = {s: tuple(kv.table(s).blocks) for s in known
           if s in kv.swapped_tables() and kv.table(s).blocks}
    holders = defaultdict(set)
    for s, table in gpu.items():
        for b in table:
            if b != NULL_BLOCK:
                holders[b].add(s)
    blocks = []
    for b in range(pool.num_blocks):
        ref = pool.ref_count(b)
        status = USED if ref else CACHED if pool.block_hash(b) is not None else FREE
        blocks.append((status, frozenset(holders[b]), ref, pool.num_tokens(b)))
    used = sum(1 for s, _, _, _ in blocks if s == USED)
    cached = sum(1 for s, _, _, _ in blocks if s == CACHED)
    cpu_owners = defaultdict(set)
    for s, table in cpu.items():
        for c in table:
            if c != NULL_BLOCK:
                cpu_owners[c].add(s)
    assert len(cpu_owners) == (kv.swap_pool.num_used_blocks if kv.swap_pool else 0)
    memory = MemoryCounts(used=used, cached=cached, free=pool.num_blocks - used - cached,
                          shared=sum(1 for _, _, r, _ in blocks if r > 1),
                          tokens=sum(t for s, _, _, t in blocks if s == USED),
                          swapped=len(cpu_owners))
    swapped = {c: (frozenset(o), kv.swap_pool.num_tokens(c)) for c, o in cpu_owners.items()}
    return blocks, memory, gpu, cpu, swapped


def assert_reads(frame, kv, seqs, copies=None, from_block=None):
    """`frame` is exactly what `reading` sees (and, if given, this step's copy-on-write
    copies and each CPU block's GPU origin)."""
    blocks, memory, gpu, cpu, swapped = reading(kv, seqs)
    got = [(s.status, frozenset(s.owners), s.ref_count, s.num_tokens) for s in frame.blocks]
    wrong = [(b, got[b], blocks[b]) for b in range(len(blocks)) if got[b] != blocks[b]]
    assert not wrong, f"blocks differ (block, frame, memory): {wrong[:5]}"
    assert frame.memory == memory
    assert dict(frame.tables) == gpu
    assert dict(frame.swapped_tables) == cpu
    assert {c: (frozenset(s.owners), s.num_tokens) for c, s in frame.swapped.items()} == swapped
    if copies is not None:
        assert list(frame.copies) == copies
    if from_block is not None:
        assert {c: s.from_block for c, s in frame.swapped.items()} == \
            {c: from_block[c] for c in swapped}


# ------------------------------------------------------------ the state machine
class PoolWalk(RuleBasedStateMachine):
    """Drive a small pool through everything a scheduler does to it; end a step
    now and then, and compare the frame cut there with the reading."""

    @initialize(caching=st.booleans())
    def start(self, caching):
        self.kv = KVCacheManager(12, 4, enable_prefix_caching=caching, num_swap_blocks=10)
        self.rec = Recorder(self.kv)
        self.seqs, self.copies, self.from_block, self.n = [], [], {}, 0
        assert_reads(self.rec[0], self.kv, self.seqs)

    def _name(self):
        self.n += 1
        return f"s{self.n}"

    def _gpu(self):
        return [s for s in self.seqs if s in self.kv.tables()]

    def _cpu(self):
        return [s for s in self.seqs if s in self.kv.swapped_tables()]

    @rule(prefix=st.integers(0, 2), size=st.integers(0, 9))
    def new(self, prefix, size):
        tokens = [prefix] * 4 + list(range(size))  # shared first blocks: cache hits
        seq = self._name()
        hits = self.kv.cached_prefix(seq, tokens)
        copies = self.kv.allocate_slots(seq, tokens[len(hits) * 4:], hits)
        if copies is not None:
            self.seqs.append(seq)
            self.copies += copies

    @precondition(lambda self: self._gpu())
    @rule(pick=st.integers(0, 50), size=st.integers(1, 6))
    def grow(self, pick, size):
        live = self._gpu()
        copies = self.kv.allocate_slots(live[pick % len(live)], list(range(size)))
        self.copies += copies or []

    @precondition(lambda self: self._gpu())
    @rule(pick=st.integers(0, 50))
    def fork(self, pick):
        live = self._gpu()
        child = self._name()
        self.kv.fork(live[pick % len(live)], child)
        self.seqs.append(child)

    @precondition(lambda self: self._gpu() or self._cpu())
    @rule(pick=st.integers(0, 50))
    def finish(self, pick):
        every = self._gpu() + self._cpu()
        seq = every[pick % len(every)]
        self.kv.free(seq)
        self.kv.events.emit(Finish(seq, None, "stop"))

    @precondition(lambda self: self._gpu())
    @rule(pick=st.integers(0, 50), computed=st.integers(0, 12))
    def abort_uncomputed(self, pick, computed):
        """An admission undone: the prefix-cache names past `computed` tokens go."""
        live = self._gpu()
        seq = live[pick % len(live)]
        self.kv.free_uncomputed([(seq, min(computed, self.kv.num_tokens(seq)))])

    @precondition(lambda self: self._gpu())
    @rule(pick=st.integers(0, 50), count=st.integers(1, 3))
    def swap_out(self, pick, count):
        """One sequence, or a group of them sharing blocks (which then move once)."""
        live = self._gpu()
        group = live[pick % len(live):][:count]
        if self.kv.can_swap_out(group):
            for gpu, cpu in self.kv.swap_out(group):
                self.from_block[cpu] = gpu

    @precondition(lambda self: self._cpu())
    @rule(count=st.integers(1, 3))
    def swap_in(self, count):
        group = self._cpu()[:count]
        if self.kv.can_swap_in(group):
            self.kv.swap_in(group)

    @precondition(lambda self: self._gpu())
    @rule(pick=st.integers(0, 50), window=st.integers(1, 9))
    def slide(self, pick, window):
        live = self._gpu()
        seq = live[pick % len(live)]
        self.kv.release_outside_window(seq, self.kv.num_tokens(seq), window)

    @rule()
    def evict_cache(self):
        self.kv.allocator.evict_all_cached()

    @rule(number=st.integers(0, 10_000))
    def end_step(self, number):
        self.kv.events.emit(Step(number))
        frame = self.rec[-1]
        assert frame.step == number
        assert_reads(frame, self.kv, self.seqs, self.copies, self.from_block)
        self.copies = []

    @invariant()
    def one_frame_per_step(self):
        if hasattr(self, "rec"):
            assert len(self.rec) == 1 + sum(f.step is not None for f in self.rec)

    def teardown(self):
        if hasattr(self, "rec"):
            assert_reads(self.rec.cut(), self.kv, self.seqs, self.copies, self.from_block)


PoolWalk.TestCase.settings = settings(max_examples=120, stateful_step_count=40, deadline=None,
                                      suppress_health_check=[HealthCheck.too_slow])
TestFramesReadTheManager = PoolWalk.TestCase


# --------------------------------------------- the check fails on wrong readings
class DeafToForks(Recorder):
    """Misses that a fork touched a block: its owners and ref count go stale."""

    def on_event(self, event):
        if event.kind.value != "fork":
            super().on_event(event)


class Renumbering(Recorder):
    """Drops released entries, renumbering the table (what the old recorder drew)."""

    def cut(self, step=None):
        frame = super().cut(step)
        frame.tables.update({s: tuple(b for b in t if b != NULL_BLOCK)
                             for s, t in frame.tables.items()})
        return frame


def test_the_frame_check_catches_a_wrong_reading():
    kv = KVCacheManager(8, 4)
    rec = DeafToForks(kv)
    kv.allocate_slots("A", [1, 2, 3, 4, 5])
    step(kv, 0)
    assert_reads(rec[-1], kv, ["A"])
    kv.fork("A", "B")
    step(kv, 1)
    with pytest.raises(AssertionError, match="blocks differ"):
        assert_reads(rec[-1], kv, ["A", "B"])

    kv = KVCacheManager(8, 4)
    rec = Renumbering(kv)
    kv.allocate_slots("A", list(range(10)))
    kv.release_outside_window("A", 10, 3)  # keys 0..7 are behind the window: blocks 0, 1 go
    step(kv, 0)
    assert rec[-1].tables["A"] == (2,)
    with pytest.raises(AssertionError):
        assert_reads(rec[-1], kv, ["A"])
    assert Recorder(kv).frames[0].tables["A"] == (NULL_BLOCK, NULL_BLOCK, 2)


# ------------------------------------------------------------- scripted frames
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
    assert f.requests.swapped == 1 and f.requests.running == 0 and f.preemptions == 1
    assert f.seq_status == {"A": SWAPPED, "A2": SWAPPED}
    assert rec.cpu_blocks_seen == 3
    kv.swap_in(["A", "A2"])
    step(kv, 2)
    f = rec[-1]
    assert f.swapped == {} and f.swapped_tables == {}
    assert f.tables == {"A": tuple(kv.block_ids("A")), "A2": tuple(kv.block_ids("A2"))}
    assert f.seq_status == {"A": RUNNING, "A2": RUNNING}
    assert f.memory.shared == 1


def test_a_sliding_window_keeps_logical_numbers():
    """Released blocks stay in the table as `NULL_BLOCK`: block i is entry i."""
    kv, rec = recorded()
    admit(kv, "A", "r1", list(range(14)))
    kv.release_outside_window("A", 14, 5)  # keys before 10 are never read again
    step(kv, 0)
    f = rec[-1]
    assert f.tables["A"] == (NULL_BLOCK, NULL_BLOCK, 2, 3)
    assert f.released_blocks("A") == 2
    assert [b.status for b in f.blocks[:4]] == [FREE, FREE, USED, USED]


def test_a_bare_manager_has_no_queues_unless_the_step_event_brings_them():
    kv, rec = recorded(num_swap_blocks=4)
    admit(kv, "a", "r1", [1, 2])
    admit(kv, "b", "r2", [3, 4])
    kv.fork("b", "b2")
    emit(kv, SchedulerEventKind.ADMIT, "b2", "r2")  # two samples, one request
    step(kv, 0)
    assert rec[-1].requests.running == 2  # requests holding GPU memory
    kv.swap_out(["a"])
    emit(kv, SchedulerEventKind.PREEMPT, "a", "swap")
    step(kv, 1)
    f = rec[-1]
    assert (f.requests.running, f.requests.swapped, f.requests.waiting) == (1, 1, 0)
    assert f.preemptions == 1 and f.seq_status == {"b": RUNNING, "b2": RUNNING, "a": SWAPPED}
    kv.events.emit(Step(2, running=2, waiting=7, swapped=0))
    assert rec[-1].requests.waiting == 7  # a scheduler's own counts, when it sends them
    step(kv, 3)
    assert rec[-1].requests.waiting == 0


def test_colors_follow_requests_in_order_first_seen():
    kv, rec = recorded()
    admit(kv, "x", "r9", [1])
    admit(kv, "y", "r3", [2])
    step(kv, 0)
    assert list(rec.first_seen) == ["r9", "r3"]


def test_attach_late_reads_the_blocks_and_tables_already_there():
    kv = KVCacheManager(8, 4, enable_prefix_caching=True)
    kv.allocate_slots("A", list(range(6)))
    kv.allocate_slots("B", list(range(100, 104)))
    kv.free("B")
    rec = Recorder.attach(kv)
    f = rec[0]
    assert f.memory.used == 2 and f.memory.cached == 1 and f.memory.tokens == 6
    assert f.blocks[0].owners == ("A",) and f.tables == {"A": (0, 1)}
    assert_reads(f, kv, ["A", "B"])


def test_recorder_names_what_it_needs():
    with pytest.raises(TypeError, match="KVCacheManager") as refused:
        Recorder.attach(object())
    assert "a paged pagedkit.sim Simulator (Simulator(trace, 'paged'))" in str(refused.value)
    kv = KVCacheManager(4, 4)
    with pytest.raises(TypeError, match=r"give it the KVCacheManager \(Recorder\(kv\)\)"):
        Recorder(kv.events)
    with pytest.raises(TypeError, match="no running / waiting / swapped queues"):
        Recorder(kv, scheduler=object())
    trace = synthetic_trace("alpaca", rate=5, num_requests=2, seed=0)
    with pytest.raises(TypeError, match="KVCacheManager"):
        Recorder.attach(Simulator(trace, "pow2"))  # contiguous: regions, not blocks


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


def test_attach_finds_a_manager_behind_memory_kv_as_in_the_simulator():
    from types import SimpleNamespace

    kv = KVCacheManager(8, 4)
    rec = Recorder.attach(SimpleNamespace(events=kv.events, memory=SimpleNamespace(kv=kv)))
    kv.allocate_slots("A", [1])
    rec.cut()
    assert rec.num_blocks == 8 and rec[-1].tables == {"A": (0,)}


# ------------------------------------------------ the simulator and the engine
def queued(scheduler):
    """(status, group, live sequences) for every group in the queues, read here."""
    for status, queue in ((RUNNING, scheduler.running), (WAITING, scheduler.waiting),
                          (SWAPPED, scheduler.swapped)):
        for group in queue:
            seqs = [s for s in group.seqs if not getattr(s, "is_finished", False)]
            yield status, group, seqs


def assert_reads_queues(frame, kv, scheduler):
    """The frame reads memory (over every queued sequence, waiting ones included: they
    must hold none) and the queues; it names the requests of the sequences that run or
    are swapped out."""
    groups = list(queued(scheduler))
    seqs = [s.seq_id for _, _, ss in groups for s in ss]
    assert_reads(frame, kv, seqs)
    assert (frame.requests.running, frame.requests.waiting, frame.requests.swapped) == (
        len(scheduler.running), len(scheduler.waiting), len(scheduler.swapped))
    holding = [(st_, g, ss) for st_, g, ss in groups if st_ != WAITING]
    assert dict(frame.request_of) == {s.seq_id: g.request_id for _, g, ss in holding for s in ss}
    assert dict(frame.seq_status) == {s.seq_id: st_ for st_, _, ss in holding for s in ss}


@pytest.mark.parametrize("sharing", [None, ParallelSampling(3), BeamSearch(3),
                                     SharedPrefix(40)], ids=str)
@pytest.mark.parametrize("preemption", ["swap", "recompute"])
def test_simulator_frames_read_its_memory_and_queues(sharing, preemption):
    trace = synthetic_trace("alpaca", rate=40, num_requests=30, seed=1)
    sim = Simulator(trace, "paged:8", capacity_slots=8 * 40, preemption=preemption,
                    swap_slots=8 * 200, sharing=sharing, max_num_seqs=64)
    rec = Recorder.attach(sim)
    checked = []
    rec.on_frame(lambda f: (assert_reads_queues(f, sim.memory_manager, sim), checked.append(f)))
    records = []
    while (r := sim.step()) is not None:
        records.append(r)
    assert len(checked) == len(records) == len(rec) - 1
    assert [f.preemptions for f in rec[1:]] == [len(r.preempted) for r in records]
    assert sum(r.preempted != () for r in records) > 0  # the pool was short: it preempted
    if preemption == "swap":
        assert any(f.memory.swapped for f in rec)
    if sharing is not None and not isinstance(sharing, SharedPrefix):
        assert any(f.memory.shared for f in rec)


def test_engine_frames_read_its_memory_and_queues():
    model = tiny_llama()
    from pagedkit import LLM, SamplingParams

    llm = LLM(model, num_blocks=12, block_size=4,
              preemption_mode="swap", enable_prefix_caching=True)
    engine = llm.llm_engine
    rec = Recorder.attach(llm)
    assert rec.scheduler is engine.scheduler
    rec.on_frame(lambda f: assert_reads_queues(f, engine.kv, engine.scheduler))
    prompts = [[1, 2, 3, 4, 5, 6, 7], [8, 9, 10, 11, 12], [1, 2, 3, 4, 5, 6, 7, 8, 9]]
    params = SamplingParams(max_tokens=10, n=2, temperature=0.8, seed=7)
    llm.generate(prompts, params, use_tqdm=False)
    assert len(rec) > 10 and sum(f.preemptions for f in rec) > 0
    assert any(f.memory.swapped for f in rec) and any(f.memory.shared for f in rec)
    assert set(chain.from_iterable(f.request_of.values() for f in rec)) == {"0", "1", "2"}
