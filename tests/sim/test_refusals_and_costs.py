"""The simulator's refusals, its swap cost and its attention context (newcomer 17's report).

Each case refused says the value, the limit and what to do instead; nothing is
silently ignored or silently wrong."""

import dataclasses
import itertools

import pytest

import pagedkit
from pagedkit.memory import EventKind
from pagedkit.model.kv_cache import KVCacheSpec
from pagedkit.sim import Simulator, experiments, simulate, synthetic_trace
from pagedkit.sim.cli import main
from pagedkit.sim.latency import OPT_13B, OPT_66B, OPT_175B, PRESETS, LatencyModel, StepClock
from pagedkit.sim.managers import ManagerSpec
from pagedkit.sim.sharing import BeamSearch, ParallelSampling
from pagedkit.sim.trace import Trace, TraceRequest

SMALL = synthetic_trace("alpaca", rate=10, num_requests=6, seed=0)


# ------------------------------------------------ 1. a group wider than a step
@pytest.mark.parametrize("sharing, max_num_seqs, prefill, batching", [
    (kind(width), limit, prefill, batching)
    for kind, width in itertools.product((ParallelSampling, BeamSearch), (2, 3, 6))
    for limit in range(1, width)
    for prefill, batching in (("separate", "iteration"), ("mixed", "iteration"),
                              ("separate", "static"))])
def test_a_group_wider_than_max_num_seqs_is_refused_at_construction(
        sharing, max_num_seqs, prefill, batching):
    option = "n" if isinstance(sharing, ParallelSampling) else "width"
    width = sharing.n if option == "n" else sharing.width
    with pytest.raises(ValueError) as e:
        Simulator(SMALL, "paged", sharing=sharing, max_num_seqs=max_num_seqs, prefill=prefill,
                  batching=batching)
    message = str(e.value)
    assert f"{option}={width}" in message and f"max_num_seqs is {max_num_seqs}" in message
    assert f"lower {option} to {max_num_seqs} or less" in message
    assert f"max_num_seqs={width} or more" in message


@pytest.mark.parametrize("sharing", [ParallelSampling(3), BeamSearch(3)])
def test_a_group_exactly_as_wide_as_max_num_seqs_runs(sharing):
    result = simulate(SMALL, "paged", sharing=sharing, max_num_seqs=3, progress=False)
    assert len(result.finished) == len(SMALL)


def test_fig15_refuses_a_too_wide_scenario_before_running_any(monkeypatch):
    def never(*args, **kwargs):
        raise AssertionError("a scenario ran before the refusal")
    monkeypatch.setattr(experiments, "_simulate", never)
    with pytest.raises(ValueError, match=r"parallel sampling n=6: .* max_num_seqs is 4; lower "
                                         r"n to 4 or less, or give max_num_seqs=6 or more"):
        experiments.fig15_sharing_savings(SMALL, max_num_seqs=4)


# ------------------------------------------------ 2. swapping takes the link's time
@pytest.mark.parametrize("preset, block_size, blocks",
                         list(itertools.product((OPT_13B, OPT_66B, OPT_175B), (1, 16, 256),
                                                (1, 7))))
def test_swap_time_is_blocks_times_block_bytes_over_each_gpus_link(preset, block_size, blocks):
    expected = (blocks * block_size * preset.kv_bytes_per_token
                / (25e9 * preset.num_gpus))
    assert LatencyModel(preset).swap_time(blocks, block_size) == pytest.approx(expected)
    assert StepClock(preset=preset).swap_time(blocks, block_size) == 0.0


@pytest.mark.parametrize("block_size", [8, 16, 64])
def test_an_iteration_that_swaps_waits_for_the_blocks_it_moves(block_size):
    """Every iteration lasts its roofline time plus the swap of the blocks moved
    out and back in before it (one event per block moved)."""
    trace = synthetic_trace("sharegpt", rate=3, num_requests=40, seed=0)
    sim = Simulator(trace, ManagerSpec("paged", block_size), capacity_slots=1600,
                    preemption="swap")
    moved = []
    sim.events.subscribe(lambda e: moved.append(e) if e.kind in (
        EventKind.SWAP_OUT, EventKind.SWAP_IN) else None)
    swapping = total = 0
    while (record := sim.step()) is not None:
        context = sim.log.array("context_tokens")[-1]
        expected = (sim.latency.step_time(record.num_tokens, context, block_size)
                    + sim.latency.swap_time(len(moved), block_size))
        assert record.duration == pytest.approx(expected, rel=1e-12), record
        swapping += bool(moved)
        total += len(moved)
        moved.clear()
    assert swapping >= 2 and total > 2 * swapping  # the case swaps, several blocks at a time


def test_recompute_runs_are_unchanged_by_the_swap_charge():
    trace = synthetic_trace("sharegpt", rate=3, num_requests=40, seed=0)
    run = simulate(trace, "paged", capacity_slots=1600, progress=False)
    assert run.num_preemptions > 0
    log = run.steps
    durations = [LatencyModel().step_time(n, c, 16) for n, c in
                 zip(log.array("num_tokens"), log.array("context_tokens"), strict=True)]
    assert list(log.array("duration")) == pytest.approx(durations, rel=1e-12)


# ------------------------------------------------ 5. the latency models' arguments
def test_step_clock_takes_its_seconds_first():
    clock = StepClock(0.5)
    assert clock.seconds == 0.5 and clock.step_time(100, 1000, 16) == 0.5
    assert clock.preset is OPT_13B
    assert StepClock(2, "opt-66b").preset is OPT_66B
    assert clock == StepClock(seconds=0.5) != StepClock()
    assert dataclasses.replace(clock, preset=OPT_66B) == StepClock(0.5, OPT_66B)
    assert dataclasses.replace(clock, seconds=3).seconds == 3
    result = simulate(SMALL, "paged", model=StepClock(0.5), progress=False)
    assert set(result.steps.array("duration")) == {0.5}


@pytest.mark.parametrize("seconds, error, message", [
    (0, ValueError, "an iteration must last > 0 seconds, got 0.0"),
    (-1, ValueError, "an iteration must last > 0 seconds, got -1.0"),
    (float("nan"), ValueError, "seconds must be a finite number"),
    (float("inf"), ValueError, "seconds must be a finite number"),
    ("1", TypeError, "seconds must be a number, got '1'"),
    (None, TypeError, "seconds must be a number, got None"),
    (OPT_13B, TypeError, "seconds must be a number"),
])
def test_step_clock_refuses_a_duration_that_is_not_one(seconds, error, message):
    with pytest.raises(error, match=message.replace("(", r"\(").replace(")", r"\)")):
        StepClock(seconds)


@pytest.mark.parametrize("name", [*PRESETS, "OPT-66B", " opt-175b "])
def test_latency_model_takes_a_presets_name_as_the_simulator_does(name):
    assert LatencyModel(preset=name).preset is PRESETS[name.strip().lower()]
    assert LatencyModel(name) == Simulator(SMALL, model=name).latency


@pytest.mark.parametrize("preset, error, message", [
    ("opt-7b", ValueError, "preset 'opt-7b' is not a preset: give one of 'opt-13b'"),
    (0.5, TypeError, "preset must be a ModelPreset .* got 0.5"),
    (None, TypeError, "preset must be a ModelPreset .* got None"),
])
def test_latency_model_refuses_what_is_not_a_preset(preset, error, message):
    with pytest.raises(error, match=message):
        LatencyModel(preset)


@pytest.mark.parametrize("field, value, message", [
    *[(f, v, rf"{f} must be > 0, got {float(v)!r}")
      for f in ("mem_efficiency", "flop_efficiency") for v in (0, -0.5, -1)],
    *[(f, v, rf"{f} is a share of the GPU's peak, in \(0, 1\], got {float(v)!r}")
      for f in ("mem_efficiency", "flop_efficiency") for v in (1.01, 2, 80)],
    *[(f, v, rf"{f} must be >= 0, got {float(v)!r}")
      for f in ("overhead", "block_overhead_tokens") for v in (-1e-9, -1, -4)],
    *[(f, float("nan"), f"{f} must be a finite number")
      for f in ("mem_efficiency", "flop_efficiency", "overhead", "block_overhead_tokens")],
    *[(f, "0.5", f"{f} must be a number, got '0.5'")
      for f in ("mem_efficiency", "flop_efficiency", "overhead", "block_overhead_tokens")],
])
def test_latency_model_refuses_values_outside_their_range(field, value, message):
    with pytest.raises((ValueError, TypeError), match=message):
        LatencyModel(**{field: value})


@pytest.mark.parametrize("field, value", [("mem_efficiency", 1), ("flop_efficiency", 1e-3),
                                          ("overhead", 0), ("block_overhead_tokens", 0)])
def test_latency_model_takes_the_edges_of_each_range(field, value):
    assert getattr(LatencyModel(**{field: value}), field) == value


@pytest.mark.parametrize("field, other", [("flop_efficiency", "mem_efficiency"),
                                          ("mem_efficiency", "flop_efficiency")])
def test_an_infinite_efficiency_leaves_that_roof_out(field, other):
    """Lab 01 cell 10 builds memory-only and compute-only models with an infinite
    efficiency; the range check (d5ef19c) refused them and broke the lab (en and zh)."""
    one_roof = LatencyModel(overhead=0, **{field: float("inf")})
    both = LatencyModel(overhead=0)
    for tokens, context in ((1, 200), (256, 256)):
        assert 0 < one_roof.step_time(tokens, context) <= both.step_time(tokens, context)
    with pytest.raises(ValueError, match="must be a finite number"):
        LatencyModel(**{field: float("-inf")})


# ------------------------------------------------ 6. manager specs and abort reasons
@pytest.mark.parametrize("block_size, error, message", [
    (2.5, TypeError, r"block_size must be an integer, got 2\.5 \(float\)"),
    (16.0, TypeError, r"block_size must be an integer, got 16\.0 \(float\)"),
    ("16", TypeError, r"block_size must be an integer, got '16' \(str\)"),
    (True, TypeError, r"block_size must be an integer, got True \(bool\)"),
    (None, TypeError, r"block_size must be an integer, got None"),
    (0, ValueError, "block_size must be >= 1, got 0"),
    (-16, ValueError, "block_size must be >= 1, got -16"),
])
def test_manager_spec_refuses_a_block_size_that_is_not_a_whole_number_of_tokens(
        block_size, error, message):
    with pytest.raises(error, match=message):
        ManagerSpec("paged", block_size)


@pytest.mark.parametrize("text, message", [
    *[(f"paged:{n}", "must be 1 or more tokens") for n in ("-1", "-16", "0", "-0", " -3 ")],
    *[(f"paged:{n}", "must be a whole number of tokens")
      for n in ("x", "2.5", "", "1e3", "--1", "16a")],
])
def test_a_manager_texts_block_size_is_refused_saying_what_is_wrong(text, message):
    with pytest.raises(ValueError, match=f"the block size in {text!r} {message}, as in "
                                         "'paged:32'"):
        ManagerSpec.parse(text)


@pytest.mark.parametrize("block_size, options, whose, slots", [
    (15729, {}, "OPT-13B", 15728), (10**9, {}, "OPT-13B", 15728),
    (9558, {"model": "opt-66b"}, "OPT-66B", 9557),
    (33, {"capacity_slots": 32}, "the capacity", 32),
    (2048, {"capacity_slots": 100}, "the capacity", 100),
])
def test_a_block_larger_than_the_cache_gets_the_command_lines_advice(block_size, options,
                                                                       whose, slots):
    with pytest.raises(ValueError) as e:
        simulate(SMALL, f"paged:{block_size}", progress=False, **options)
    assert str(e.value) == (f"a block of {block_size} slots is more than {whose}'s {slots:,} "
                            f"KV slots; use a block size of {slots} or less (16 is vLLM's "
                            "default)")


@pytest.mark.parametrize("manager, capacity, prompt_len, output_len, reason", [
    ("max", 2047, 10, 10, "needs a 2048-slot region > capacity 2047"),
    ("pow2", 40, 10, 20, "needs a 42-slot region > capacity 40"),
    ("oracle", 40, 30, 11, "needs a 41-slot region > capacity 40"),
    ("paged", 32, 30, 20, "needs up to 4 blocks > the pool's 2"),
    ("oracle", 15728, 2000, 49, "needs 2049 tokens > max_seq_len 2048"),
])
def test_abort_reasons_name_the_limit_in_english_and_chinese(manager, capacity, prompt_len,
                                                             output_len, reason):
    trace = Trace("t", (TraceRequest(0, 0.0, prompt_len, output_len),))
    run = simulate(trace, manager, capacity_slots=capacity, progress=False)
    assert [r.finish_reason for r in run.aborted] == [f"abort: {reason}"]
    pagedkit.set_language("zh-CN")
    try:
        run = simulate(trace, manager, capacity_slots=capacity, progress=False)
    finally:
        pagedkit.set_language("en")
    (aborted,) = run.aborted
    assert "需要" in aborted.finish_reason, aborted.finish_reason


# ------------------------------------------------ 7. the experiment helpers
@pytest.mark.parametrize("name", ["Alpaca", " SHAREGPT ", "ShareGPT", "alpaca"])
def test_paper_trace_reads_a_dataset_name_as_synthetic_trace_does(name):
    key = name.strip().lower()
    trace = experiments.paper_trace(name, num_requests=5)
    assert trace == synthetic_trace(key, rate=experiments.PAPER_RATES[key], num_requests=5)
    assert experiments.default_rates(name) == experiments.default_rates(key)


@pytest.mark.parametrize("call", [
    lambda name: experiments.paper_trace(name),
    lambda name: experiments.default_rates(name),
    lambda name: experiments.fig12_latency_vs_rate(name),
])
@pytest.mark.parametrize("name", ["lmsys", "", "share gpt"])
def test_an_unknown_dataset_is_refused_naming_the_choices(call, name):
    with pytest.raises(ValueError, match=f"unknown dataset {name!r}; choose one of 'sharegpt', "
                                         "'alpaca'"):
        call(name)


@pytest.mark.parametrize("rates", [[], ()])
def test_fig12_refuses_an_empty_list_of_rates(rates):
    with pytest.raises(ValueError, match="rates is empty: give at least one request rate"):
        experiments.fig12_latency_vs_rate("alpaca", rates)


@pytest.mark.parametrize("block_sizes", [[], (), iter(())])
def test_fig18b_refuses_an_empty_list_of_block_sizes(block_sizes):
    with pytest.raises(ValueError, match=r"block_sizes is empty: give at least one block size "
                                         r"\(tokens\), or leave block_sizes out for the default "
                                         r"sweep \(1, 2, 4"):
        experiments.fig18b_block_size_sweep(block_sizes, traces=[SMALL])


@pytest.mark.parametrize("traces", [[], ()])
@pytest.mark.parametrize("figure", [
    lambda traces: experiments.fig18b_block_size_sweep((8, 16), traces=traces),
    lambda traces: experiments.fig13_batch_sizes(traces),
], ids=["fig18b", "fig13"])
def test_figures_refuse_an_empty_list_of_traces(figure, traces):
    """An empty list is not "the default traces": it is refused, not replaced."""
    with pytest.raises(ValueError, match="traces is empty: give at least one trace"):
        figure(traces)


@pytest.mark.parametrize("asked", ["sharegpt@2", "alpaca@30", "", "Alpaca@5"])
def test_best_block_sizes_refuses_a_trace_the_sweep_does_not_hold(asked):
    data = experiments.fig18b_block_size_sweep((8, 16), traces=[SMALL])
    assert experiments.best_block_sizes(data, SMALL.name)  # the trace it holds
    with pytest.raises(ValueError, match=f"Fig. 18b has no rows for trace {asked!r}; its "
                                         f"traces are {SMALL.name!r}"):
        experiments.best_block_sizes(data, asked)


# ------------------------------------------------ 10. the command line's refusals
@pytest.mark.parametrize("argv, message", [
    (["--benchmark", "--scale", "quick"], "--scale: for the paper comparison only"),
    (["--benchmark", "--markdown"], "--markdown: for the paper comparison only"),
    (["--benchmark-scheduler", "--scale", "full"], "--scale: for the paper comparison only"),
    (["--benchmark", "--benchmark-scheduler", "--scale", "quick", "--markdown"],
     "--scale, --markdown: for the paper comparison only, not with --benchmark"),
    *[([*mode, "--json", "--markdown"], "--json, --markdown: give one of them")
      for mode in ([], ["--scale", "quick"], ["--benchmark"], ["--benchmark-scheduler"],
                   ["--dataset", "alpaca", "--rate", "1"])],
])
def test_options_a_run_would_ignore_are_refused(argv, message, capsys, monkeypatch):
    def never(*args, **kwargs):
        raise AssertionError("it ran")
    for name in ("benchmark", "scheduler_benchmark", "compare", "simulate"):
        monkeypatch.setattr(f"pagedkit.sim.cli.{name}", never)
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    assert message in capsys.readouterr().err


# ------------------------------------------------ 14. KVCacheSpec's block size
@pytest.mark.parametrize("block_size, error, message", [
    (0, ValueError, "block_size must be >= 1, got 0"),
    (-4, ValueError, "block_size must be >= 1, got -4"),
    (2.5, TypeError, r"block_size must be an integer, got 2\.5"),
    (16.0, TypeError, r"block_size must be an integer, got 16\.0"),
    ("16", TypeError, "block_size must be an integer, got '16'"),
    (True, TypeError, "block_size must be an integer, got True"),
])
def test_kv_cache_spec_checks_the_block_size(block_size, error, message):
    import torch

    spec = KVCacheSpec(40, 40, 128, torch.float16)
    with pytest.raises(error, match=message):
        spec.num_blocks_for(1 << 30, block_size)
    with pytest.raises(error, match=message):
        spec.bytes_per_block(block_size)
    assert spec.num_blocks_for(12 * (1 << 30), 16) == 983
