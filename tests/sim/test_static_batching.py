"""Static (request-level) batching against iteration-level, the paper's §2.3 / §6 contrast."""

import pytest

from pagedkit.sim import (
    PAGED,
    PAPER_MANAGERS,
    ManagerSpec,
    Simulator,
    Trace,
    TraceRequest,
    simulate,
    synthetic_trace,
)
from pagedkit.sim.cli import main


def make_trace(*requests):
    """requests: (arrival, prompt_len, output_len) tuples."""
    return Trace("t", tuple(TraceRequest(i, *r) for i, r in enumerate(requests)))


SETTINGS = [(m, prefill, "recompute") for m in PAPER_MANAGERS for prefill in ("separate", "mixed")]
SETTINGS += [(ManagerSpec("paged", 4), prefill, preemption)
             for prefill in ("separate", "mixed") for preemption in ("recompute", "swap")]


@pytest.mark.parametrize("manager, prefill, preemption", SETTINGS,
                         ids=lambda v: getattr(v, "label", v))
def test_static_never_lets_a_request_in_while_one_runs(manager, prefill, preemption):
    """Nothing joins the running batch (admitted or swapped in) unless it was empty."""
    trace = synthetic_trace("sharegpt", rate=8, num_requests=120, seed=4)
    sim = Simulator(trace, manager, capacity_slots=6000, prefill=prefill,
                    preemption=preemption, swap_slots=4000, batching="static")
    held_back = batches = 0
    while True:
        before, swapped = {id(g) for g in sim.running}, {id(g) for g in sim.swapped}
        record = sim.step()
        if record is None:
            break
        if before:
            joined = {id(g) for g in sim.running} - before
            swapped_in = swapped - {id(g) for g in sim.swapped}
            assert not (joined or swapped_in or record.admitted), \
                f"step {record.step}: a request joined a running batch"
            held_back += record.num_waiting > 0
        else:
            batches += bool(record.admitted)
    result = sim.result()
    assert len(result.finished) == len(trace) and result.extra["batching"] == "static"
    assert batches > 1 and held_back > 100  # it bit: requests waited while a batch ran
    if manager.paged:  # preemption still happens inside a batch of 4-token blocks
        assert result.num_preemptions > 0


def test_a_static_batch_runs_to_its_last_request():
    """Two regions of Orca (Max): the third request takes the first free region
    under iteration-level batching, but waits for the whole batch under static."""
    trace = make_trace((0.0, 10, 2), (0.0, 10, 8), (0.0, 10, 2))
    first = {}
    for batching in ("iteration", "static"):
        sim = Simulator(trace, "max", capacity_slots=2 * 2048, batching=batching)
        records = []
        while (record := sim.step()) is not None:
            records.append(record)
        first[batching] = next(r.step for r in records if 2 in r.admitted)
        finished = {i: r.step for r in records for i in r.finished}
        assert first[batching] == finished[0 if batching == "iteration" else 1] + 1
    assert first["iteration"] < first["static"]


@pytest.mark.parametrize("manager", [*PAPER_MANAGERS, ManagerSpec("paged", 4)],
                         ids=lambda m: m.label)
def test_static_batching_serves_fewer_requests_per_second(manager):
    """Finished requests leave idle slots until the batch drains (paper §2.3, Fig. 1's
    motivation for Orca): at a load that keeps a queue, throughput falls."""
    trace = synthetic_trace("sharegpt", rate=6, num_requests=100, seed=5)
    runs = {b: simulate(trace, manager, batching=b, progress=False)
            for b in ("iteration", "static")}
    assert all(len(r.finished) == len(trace) for r in runs.values())
    assert runs["static"].throughput() < 0.9 * runs["iteration"].throughput()
    assert runs["static"].mean_batch_size() < runs["iteration"].mean_batch_size()


def test_iteration_is_the_default_and_recorded():
    trace = synthetic_trace("alpaca", rate=30, num_requests=200, seed=2)
    default = simulate(trace, PAGED, capacity_slots=3000, progress=False)
    explicit = simulate(trace, PAGED, capacity_slots=3000, batching="iteration",
                        progress=False)
    static = simulate(trace, PAGED, capacity_slots=3000, batching="static", progress=False)
    assert default.extra["batching"] == "iteration"
    assert default.steps == explicit.steps
    assert static.steps != default.steps


def test_bad_batching_is_refused_naming_the_value_and_the_choices():
    with pytest.raises(ValueError,
                       match="batching must be one of 'iteration', 'static'; got 'dynamic'"):
        Simulator(make_trace((0.0, 4, 4)), PAGED, batching="dynamic")


def test_cli_takes_batching(capsys):
    argv = ["--dataset", "sharegpt", "--rate", "6", "--requests", "150", "--manager", "max",
            "--json", "--no-progress"]
    assert main(argv) == 0
    iteration = capsys.readouterr().out
    assert main([*argv, "--batching", "static"]) == 0
    static = capsys.readouterr().out
    assert iteration != static
    with pytest.raises(SystemExit):
        main([*argv, "--batching", "dynamic"])
    assert "invalid choice: 'dynamic'" in capsys.readouterr().err


@pytest.mark.parametrize("option, spellings", [
    ("batching", ["Static", "STATIC", " static ", "Iteration", "ITERATION"]),
    ("preemption", ["Swap", "SWAP", "Recompute"]), ("prefill", ["Mixed", "SEPARATE"])])
def test_mode_names_are_read_without_regard_to_case(option, spellings):
    """Newcomer 13: `Simulator(batching="Static")` was refused while `manager="Max"`
    and `model="OPT-13B"` were taken: the simulator's modes are read as its
    managers are (`_validation.choice_name`), and simulate the same; a wrong
    one is still refused, naming it as given."""
    trace = synthetic_trace("sharegpt", rate=4.0, num_requests=12, seed=1)
    for spelling in spellings:
        options = {option: spelling, "swap_slots": 4000}
        read = spelling.strip().lower()
        sim = Simulator(trace, "paged", capacity_slots=2048, **options)
        assert getattr(sim, option) == read
        result = sim.run()
        same = Simulator(trace, "paged", capacity_slots=2048, **{**options, option: read}).run()
        timeless = [{k: v for k, v in r.summary().items() if k != "wall_seconds"}
                    for r in (result, same)]
        assert timeless[0] == timeless[1], spelling
        with pytest.raises(ValueError, match=f"{option} must be one of .*; got {spelling + 'x'!r}"):
            Simulator(trace, "paged", **{option: spelling + "x"})
