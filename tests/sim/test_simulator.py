import math
from collections import Counter
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pagedkit.memory.allocator as allocator_module
import pagedkit.sim.simulator as simulator_module
from pagedkit.memory import ContiguousAllocator, EventBus, EventLog, KVCacheManager
from pagedkit.sim import (
    OPT_13B,
    PAGED,
    PAPER_MANAGERS,
    PRESETS,
    BeamSearch,
    LatencyModel,
    ManagerSpec,
    ParallelSampling,
    SharedPrefix,
    Simulator,
    Trace,
    TraceRequest,
    simulate,
    synthetic_trace,
)


def make_trace(*requests, name="t"):
    """requests: (arrival, prompt_len, output_len) tuples."""
    return Trace(name, tuple(TraceRequest(i, *r) for i, r in enumerate(requests)))


def test_every_request_finishes_with_its_output():
    trace = synthetic_trace("alpaca", rate=20, num_requests=60, seed=1)
    for manager in PAPER_MANAGERS:
        r = simulate(trace, manager, capacity_slots=2048)
        assert [x.request_id for x in r.finished] == list(range(60))
        for req, res in zip(trace, r.requests, strict=True):
            assert res.finish_time > req.arrival and res.first_token_time <= res.finish_time
            assert res.output_len == req.output_len


def test_one_request_alone_takes_one_iteration_per_output_token():
    trace = make_trace((0.0, 10, 5))
    r = simulate(trace, PAGED)
    assert r.num_steps == 5
    assert r.steps.array("num_tokens").tolist() == [10, 1, 1, 1, 1]  # prefill, then decode
    # K/V stored: the prompt, then one more per decode (the token an iteration
    # produces is stored by the next one, which computes it, as in the engine)
    assert r.steps.array("token_states").tolist() == [10, 11, 12, 13, 14]
    assert r.requests[0].finish_time == pytest.approx(r.steps.array("duration").sum())


def test_idle_time_is_skipped_and_arrivals_wait_for_their_time():
    trace = make_trace((0.0, 4, 2), (100.0, 4, 2))
    sim = Simulator(trace, PAGED)
    records = [sim.step() for _ in range(4)]
    assert records[0].admitted == (0,) and records[2].admitted == (1,)
    assert records[2].time == 100.0 and records[3].finished == (1,)
    assert sim.step() is None and sim.done


def test_a_refused_advance_to_leaves_the_simulator_as_it_was():
    """Newcomer 12: advance_to(nan) / advance_to(-1) returned [] as if they meant
    something; refused now, and a time already reached still runs nothing."""
    sim = Simulator(make_trace((0.0, 4, 2), (100.0, 4, 2)), PAGED)
    sim.advance_to(1.0)
    for bad in (math.nan, -1, "x"):
        with pytest.raises((ValueError, TypeError), match="seconds must be"):
            sim.advance_to(bad)
        assert sim.now == 1.0 and sim.next_step_time == 100.0
    assert sim.advance_to(0.5) == [] and sim.now == 1.0  # in the past: already there


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_simulate_takes_a_presets_name_as_the_command_line_does(name):
    """Newcomer 12: simulate(..., model="opt-13b") was a TypeError, while the CLI
    takes --model opt-13b."""
    trace = make_trace((0.0, 4, 2), (0.5, 8, 3))
    expected = simulate(trace, PAGED, model=PRESETS[name]).finished
    for spelling in (name, name.upper()):
        assert simulate(trace, PAGED, model=spelling).finished == expected


def test_advance_to_crosses_an_idle_stretch_only_up_to_the_target():
    trace = make_trace((0.0, 4, 2), (100.0, 4, 2))
    sim = Simulator(trace, PAGED)
    assert sim.next_step_time == 0.0
    assert len(sim.advance_to(1.0)) == 2 and sim.now == 1.0  # request 0, then idle
    assert sim.next_step_time == 100.0
    assert sim.advance_to(50.0) == [] and sim.now == 50.0
    records = sim.advance_to(100.01)
    assert records[0].time == 100.0 and records[0].admitted == (1,)
    sim.run()
    assert sim.next_step_time is None and sim.advance_to(1e9) == []


def test_contiguous_max_holds_seven_opt13b_requests():
    """15,728 slots // 2,048 per reservation = 7, however short the requests."""
    trace = make_trace(*[(0.0, 10, 50)] * 20)
    r = simulate(trace, "max")
    assert r.steps.array("num_running").max() == 7
    assert r.num_preemptions == 0


def test_contiguous_stats_cost_no_scan_of_the_holes_between_changes():
    """The simulator asks for the breakdown every iteration: `stats()` reads
    running totals and the largest hole, cached with the hole list."""
    mem = ContiguousAllocator(10_000, "oracle", 100)
    for i in range(200):
        mem.allocate(i, 10, 10)
    for i in range(0, 200, 2):
        mem.free(i)  # 100 holes of 20 slots
    before = mem.stats()
    assert before.largest_hole == 6000 and len(mem.holes()) == 101

    class Counted(list):
        scans = 0

        def __iter__(self):
            Counted.scans += 1
            return super().__iter__()

    mem._holes = Counted(mem._holes)
    for _ in range(50):
        assert mem.stats() == before
    assert Counted.scans == 0
    mem.allocate("big", 50, 10)  # a change rebuilds both
    assert mem.stats().largest_hole == 6000 - 60 and mem.stats().free == before.free - 60


def test_contiguous_policies_reserve_as_in_the_paper():
    """§6.1: Orca (Pow2) knows the prompt and reserves at most 2x the output
    (25 -> 32), Orca (Oracle) exactly prompt + output, Orca (Max) the limit."""
    trace = make_trace((0.0, 161, 25), (0.0, 100, 338))
    for kind, sizes in (("pow2", [161 + 32, 100 + 512]), ("oracle", [161 + 25, 100 + 338]),
                        ("max", [2048, 2048])):
        sim = Simulator(trace, kind)
        sim.step()
        assert [r.size for r in sim.memory_manager.regions()] == sizes


def test_paged_preempts_newest_and_recomputes():
    # 4 blocks of 4 slots; two requests that each grow to 12 tokens cannot both fit
    trace = make_trace((0.0, 4, 8), (0.0, 4, 8))
    log_bus = EventBus()
    log = EventLog(log_bus)
    sim = Simulator(trace, ManagerSpec("paged", 4), capacity_slots=16, watermark=0,
                    events=log_bus)
    r = sim.run()
    assert r.num_preemptions >= 1 and len(r.finished) == 2
    preempts = [e for e in log if e.kind.value == "preempt"]
    assert {e.mode for e in preempts} == {"recompute"}
    assert {e.seq for e in preempts} == {1}  # the newest goes first
    assert r.requests[1].num_preemptions >= 1 and r.requests[0].num_preemptions == 0
    assert sim.memory.kv.stats().used_blocks == 0


def test_swap_preemption_parks_blocks_in_cpu_memory():
    trace = make_trace((0.0, 4, 8), (0.0, 4, 8))
    log = EventLog(bus := EventBus())
    sim = Simulator(trace, ManagerSpec("paged", 4), capacity_slots=16, watermark=0,
                    preemption="swap", swap_slots=64, events=bus)
    r = sim.run()
    assert len(r.finished) == 2
    kinds = Counter(log.kinds())
    assert kinds["swap_out"] >= 1 and kinds["swap_in"] == kinds["swap_out"]
    assert {e.mode for e in log if e.kind.value == "preempt"} == {"swap"}
    assert sim.memory.kv.stats().swapped_blocks == 0


def test_requests_that_can_never_fit_are_aborted_with_the_reason():
    trace = make_trace((0.0, 2000, 100), (0.0, 10, 10), (1.0, 300, 10))
    r = simulate(trace, PAGED, capacity_slots=256)
    reasons = {x.request_id: x.finish_reason for x in r.requests}
    assert reasons[1] == "stop"
    assert reasons[0].startswith("abort: needs 2100 tokens > max_seq_len 2048")
    assert reasons[2].startswith("abort: needs up to 20 blocks > the pool's 16")
    r = simulate(make_trace((0.0, 10, 10)), "max", capacity_slots=1000)
    assert "region > capacity" in r.requests[0].finish_reason


def test_events_match_the_engine_vocabulary():
    trace = synthetic_trace("alpaca", rate=50, num_requests=20, seed=2)
    log = EventLog(bus := EventBus())
    sim = Simulator(trace, PAGED, capacity_slots=512, events=bus)
    r = sim.run()
    admits = [e for e in log if e.kind.value == "admit"]
    assert sorted({e.request_id for e in admits}) == list(range(20))
    finishes = [e for e in log if e.kind.value == "finish"]
    assert Counter(e.reason for e in finishes) == {"stop": 20}
    steps = [e for e in log if e.kind.value == "step"]
    assert [e.step for e in steps] == list(range(1, r.num_steps + 1))
    assert (steps[-1].running, steps[-1].waiting, steps[-1].swapped) == (0, 0, 0)
    # every token lands in a block: appends add up to the tokens the trace produced
    assert Counter(log.kinds())["allocate"] >= 20


def test_no_event_is_built_when_nobody_listens(monkeypatch):
    def boom(*args, **kwargs):
        raise AssertionError("an Event was built with no listener")

    for name in ("Admit", "Preempt", "Finish", "Step"):
        monkeypatch.setattr(simulator_module, name, boom)
    monkeypatch.setattr(allocator_module, "Event", boom)
    trace = synthetic_trace("sharegpt", rate=5, num_requests=30, seed=0)
    sim = Simulator(trace, PAGED, capacity_slots=2048)
    while sim.step():  # the exact path too, not only run()
        pass
    assert len(sim.result().finished) == 30


@pytest.mark.parametrize("manager", ["paged", "paged:1", "oracle"])
def test_step_by_step_equals_run(manager):
    """run() batches a lone sequence's appends when nobody listens; stepping
    (as a widget does) calls the allocator per token. Same numbers."""
    trace = synthetic_trace("sharegpt", rate=4, num_requests=60, seed=5)
    stepped = Simulator(trace, manager, capacity_slots=4096)
    while stepped.step():
        pass
    ran = simulate(trace, manager, capacity_slots=4096)
    a, b = stepped.result(), ran
    assert a.num_preemptions == b.num_preemptions > 0 or manager == "oracle"
    for column in ("time", "num_running", "token_states", "internal_fragmentation",
                   "used_blocks"):
        assert np.array_equal(a.steps.array(column), b.steps.array(column)), column


def test_max_num_seqs_caps_the_batch():
    trace = make_trace(*[(0.0, 5, 20)] * 12)
    r = simulate(trace, PAGED, max_num_seqs=5)
    assert r.steps.array("num_running").max() == 5


def test_separate_prefill_runs_prompts_in_their_own_iterations():
    trace = make_trace((0.0, 8, 4), (0.05, 8, 4))
    mixed = Simulator(trace, PAGED, prefill="mixed")
    separate = Simulator(trace, PAGED)  # the default, as the paper's vLLM
    a, b = mixed.run(), separate.run()
    # the second prompt joins request 0's decoding, or runs alone while it waits
    assert a.steps.array("num_tokens").tolist() == [8, 1, 9, 2, 1, 1]
    assert b.steps.array("num_tokens").tolist() == [8, 1, 8, 2, 2, 1]
    assert b.requests[0].finish_time > a.requests[0].finish_time
    # both requests are in the running batch in the third iteration; only the
    # newcomer's prompt is computed when prompts run apart
    assert b.steps.array("num_running").tolist() == [1, 1, 2, 2, 2, 1]
    assert b.steps.array("num_scheduled").tolist() == [1, 1, 1, 2, 2, 1]
    assert a.steps.array("num_scheduled").tolist() == a.steps.array("num_running").tolist()


def test_step_records_tell_the_running_batch_from_what_the_iteration_computed():
    """Fig. 13 counts the running batch (§6.2: requests processed "at the same
    time"); a prompt iteration of `prefill="separate"` computes only newcomers."""
    trace = make_trace((0.0, 8, 6), (0.0, 8, 6), (0.1, 8, 3))
    sim = Simulator(trace, ManagerSpec("paged", 4), capacity_slots=256)
    records = []
    while (record := sim.step()) is not None:
        records.append(record)
    prompt_only = [r for r in records if r.admitted and r.num_running > len(r.admitted)]
    assert prompt_only, "the third request's prompt ran while the others waited"
    for r in prompt_only:
        assert r.num_scheduled == r.num_scheduled_seqs == len(r.admitted) == 1
        assert r.num_tokens == 8
    result = sim.result()
    assert result.mean_scheduled() < result.mean_batch_size()
    assert result.mean_scheduled(sequences=True) == result.mean_scheduled()
    summary = result.summary()
    assert summary["mean_scheduled"] < summary["mean_batch_size"]


def test_contiguous_max_batch_is_seven_however_prompts_are_run():
    """Why Fig. 13 counts the running batch: the paper's Orca (Max) is 7.00 on
    both traces, as many as hold a region; counting what each iteration
    computes, a prompt iteration of one newcomer would pull it below 7."""
    trace = make_trace(*[(0.0, 10, 20 + 7 * i % 23) for i in range(30)])
    steps = simulate(trace, "max").steps
    queued = steps.array("num_waiting") > 0  # while anyone waits, memory is the limit
    w = steps.array("duration")[queued]
    assert np.dot(steps.array("num_running")[queued], w) / w.sum() == pytest.approx(7)
    assert np.dot(steps.array("num_scheduled")[queued], w) / w.sum() < 6.9


def test_bad_options_name_the_value():
    trace = make_trace((0.0, 4, 4))
    with pytest.raises(ValueError,
                       match="preemption must be one of 'recompute', 'swap'; got 'drop'"):
        Simulator(trace, PAGED, preemption="drop")
    with pytest.raises(ValueError, match=r"manager kind must be .* got 'lru'"):
        Simulator(trace, "lru")
    with pytest.raises(ValueError, match=r"a block of 32 slots is more than the capacity's 16 KV"):
        Simulator(trace, "paged:32", capacity_slots=16)
    with pytest.raises(ValueError, match="max_num_seqs must be >= 1, got 0"):
        Simulator(trace, PAGED, max_num_seqs=0)


# --------------------------------------------------------------- properties
requests = st.lists(st.tuples(st.floats(0, 5), st.integers(1, 60), st.integers(1, 60)),
                    min_size=1, max_size=12)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(reqs=requests, kind=st.sampled_from(["max", "pow2", "oracle", "paged"]),
       block_size=st.sampled_from([1, 2, 4, 16]), capacity=st.integers(64, 400),
       preemption=st.sampled_from(["recompute", "swap"]),
       prefill=st.sampled_from(["mixed", "separate"]), watched=st.booleans())
def test_no_request_is_lost(reqs, kind, block_size, capacity, preemption, prefill, watched):
    """Whatever the trace and memory: every request ends, finished with its whole
    output or aborted with a reason, and all memory is returned."""
    trace = make_trace(*sorted(reqs))
    bus = EventBus()
    log = EventLog(bus) if watched else None
    model = LatencyModel(replace(OPT_13B, max_seq_len=100))  # so that "max" regions fit
    sim = Simulator(trace, ManagerSpec(kind, block_size), model=model, capacity_slots=capacity,
                    preemption=preemption, swap_slots=256, prefill=prefill, events=bus)
    result = sim.run()
    assert sorted(r.request_id for r in result.requests) == list(range(len(reqs)))
    for r in result.requests:
        assert r.finish_reason == "stop" or r.finish_reason.startswith("abort: needs")
    steps = result.steps
    held = (steps.array("token_states") + steps.array("reservation")
            + steps.array("internal_fragmentation"))
    assert np.all(held <= capacity)
    if kind == "paged":
        assert sim.memory.kv.stats().used_blocks == 0
        assert sim.memory.kv.stats().swapped_blocks == 0
    else:
        assert len(sim.memory.allocator) == 0
    if log is not None:
        finished = sum(1 for e in log if e.kind.value == "finish" and e.reason == "stop")
        assert finished == len(result.finished)


def test_side_by_side_at_the_same_clock():
    """What the contiguous-vs-paged widget does: two managers, one trace, one clock."""
    trace = synthetic_trace("sharegpt", rate=4, num_requests=40, seed=2)
    contiguous, paged = Simulator(trace, "pow2"), Simulator(trace, "paged")
    for t in (1.0, 5.0, 10.0):
        contiguous.advance_to(t)
        paged.advance_to(t)
        assert contiguous.now >= t and paged.now >= t
        assert contiguous.memory_manager.stats().num_requests == len(contiguous.running)
        assert paged.memory_manager.stats().used_blocks > 0
    assert isinstance(contiguous.memory_manager, ContiguousAllocator)
    assert isinstance(paged.memory_manager, KVCacheManager)


_MEMO_CASES = [(m, {}) for m in (*PAPER_MANAGERS, ManagerSpec("paged", 4))] + [
    (PAGED, {"preemption": "swap"}), (PAGED, {"sharing": ParallelSampling(2)}),
    (PAGED, {"sharing": ParallelSampling(2), "preemption": "swap"})]


@pytest.mark.parametrize("manager, options", _MEMO_CASES,
                         ids=lambda x: x.label if isinstance(x, ManagerSpec) else str(x))
def test_the_blocked_head_memo_changes_no_decision(manager, options, monkeypatch):
    """`Memory.blocked` (a waiting head that did not fit is not asked again until
    memory is freed) only saves work: with it disabled, every step is the same
    (also when swapping out frees GPU memory, and with sequences that share)."""
    from pagedkit.sim.managers import Memory

    trace = synthetic_trace("sharegpt", rate=8, num_requests=150, seed=6)
    cls = type(Simulator(trace, manager).memory)
    calls = Counter()
    admit = cls.try_admit

    def counted(self, *args):
        calls[memo] += 1
        return admit(self, *args)

    monkeypatch.setattr(cls, "try_admit", counted)
    memo = "on"
    kept = simulate(trace, manager, capacity_slots=5000, progress=False, **options)
    monkeypatch.setattr(Memory, "blocked", property(lambda self: None, lambda self, v: None),
                        raising=False)
    memo = "off"
    asked = simulate(trace, manager, capacity_slots=5000, progress=False, **options)
    assert calls["off"] > 2 * calls["on"]  # the memo saved asking again
    assert kept.steps == asked.steps
    assert kept.requests == asked.requests


# A request id is any hashable value (lab 02 names its requests "A", "B", ...):
# the simulator keys nothing on its value, so a renamed trace runs exactly alike,
# its results in trace order. All arrive together and the pool is tight, so
# preempted requests go back to the queue by arrival order (ties: trace order).
_ID_KINDS = {"int": [0, 1, 2, 3, 4, 5], "int, not in arrival order": [5, 3, 9, 0, 7, 1],
             "str": ["A", "B", "C", "D", "E", "F"], "mixed": [3, "A", 0, ("x", 1), "0", 2.5],
             "negative int": [-1, -2, -3, -4, -5, -6]}
_ID_RUNS = [(manager, None) for manager in PAPER_MANAGERS] + [
    (PAGED, sharing) for sharing in (ParallelSampling(2), BeamSearch(2), SharedPrefix(16))]


@pytest.mark.parametrize("kind", list(_ID_KINDS))
@pytest.mark.parametrize("manager, sharing", _ID_RUNS, ids=lambda x: getattr(x, "label", x))
@pytest.mark.parametrize("preemption", ["recompute", "swap"])
def test_any_hashable_request_id_runs_like_its_place_in_the_trace(kind, manager, sharing,
                                                                  preemption):
    lens = [(40, 30), (24, 50), (60, 20), (8, 70), (33, 33), (50, 45)]
    def run(ids):
        trace = Trace("ids", tuple(TraceRequest(i, 0.0, p, o)
                                   for i, (p, o) in zip(ids, lens, strict=True)))
        return simulate(trace, manager, capacity_slots=256, sharing=sharing,
                        preemption=preemption, progress=False)
    ids = _ID_KINDS[kind]
    base, named = run(range(len(lens))), run(ids)
    assert [r.request_id for r in named.requests] == ids
    assert [replace(r, request_id=i) for i, r in enumerate(named.requests)] == base.requests
    assert named.steps == base.steps and named.num_preemptions == base.num_preemptions
    assert base.num_preemptions > 0 or not manager.paged  # paged: the queue order is used


@pytest.mark.parametrize("ids", [[0, 0], ["A", "A"], [1, 1.0], ["A", 0, "A"]])
def test_a_trace_refuses_two_requests_with_one_id(ids):
    requests = tuple(TraceRequest(i, 0.0, 4, 4) for i in ids)
    with pytest.raises(ValueError, match=f"both have the id {ids[-1]!r}"):
        Trace("dup", requests)


@pytest.mark.parametrize("request_id", [[1], {"a": 1}, {1}, ([1], 2)])
def test_an_unhashable_request_id_is_refused(request_id):
    with pytest.raises(TypeError, match="not hashable"):
        TraceRequest(request_id, 0.0, 4, 4)


# --------------------------------------------------- what attention reads
def _held(sim, seq):
    """Token states `seq` holds now: stored in its blocks or region, or held back."""
    if sim.spec.paged:
        return sim.memory.kv.table(seq.seq_id).num_tokens + seq.pending
    return sim.memory.allocator.region(seq.seq_id).used + seq.pending


_CONTEXT_RUNS = [(m, None, p, f) for m in (*PAPER_MANAGERS, ManagerSpec("paged", 1),
                                            ManagerSpec("paged", 4))
                 for p in ("recompute", "swap") for f in ("mixed", "separate")] + [
    (PAGED, s, p, "mixed") for s in (ParallelSampling(3), BeamSearch(2), BeamSearch(4),
                                     SharedPrefix(16), SharedPrefix(40))
    for p in ("recompute", "swap")]


@pytest.mark.parametrize("watched", [False, True], ids=["lazy", "watched"])
@pytest.mark.parametrize("manager, sharing, preemption, prefill", _CONTEXT_RUNS,
                         ids=lambda x: getattr(x, "label", x))
def test_attention_reads_the_token_states_the_cache_holds(manager, sharing, preemption,
                                                          prefill, watched):
    """Every iteration's `context_tokens` (what the roofline charges attention
    for) is the token states the batch's sequences hold while it runs: a
    prompt iteration reads its prompt (and what it recomputes), a decode the
    prompt and every token generated before it. Shared blocks are read by each
    sequence that holds them. Checked at every step, prompts and decodes,
    preemptions by recompute and by swap, every manager."""
    lens = [(40, 30), (24, 50), (60, 20), (8, 70), (33, 33), (50, 45), (17, 9)]
    trace = Trace("ctx", tuple(TraceRequest(i, 0.01 * i, p, o) for i, (p, o) in enumerate(lens)))
    model = LatencyModel(replace(OPT_13B, max_seq_len=200))
    bus = EventBus()
    log = EventLog(bus) if watched else None
    sim = Simulator(trace, manager, model=model, capacity_slots=320, sharing=sharing,
                    preemption=preemption, prefill=prefill, swap_slots=4096,
                    events=bus if watched else None)
    held, execute, usage = [], sim._execute, sim.memory.usage

    def counting_execute(prefill_tokens, admitted, preempted, batch):
        def counted_usage(*args):
            # taken while the iteration runs: nothing of the batch is freed yet
            held.append(sum(_held(sim, s) for g in batch for s in g.seqs))
            return usage(*args)
        sim.memory.usage = counted_usage
        return execute(prefill_tokens, admitted, preempted, batch)

    sim._execute = counting_execute
    result = sim.run(progress=False)
    assert result.steps.array("context_tokens").tolist() == held
    assert len(held) > 50
    assert log is None or len(log) > 0
    assert result.num_preemptions > 0 or not manager.paged  # the recomputed prompts are read too
