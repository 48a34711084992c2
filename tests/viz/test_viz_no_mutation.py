"""Watching never changes what is watched: the same run, with and without the
widgets attached, allocates the same blocks and generates the same tokens."""

import pytest
from viz_helpers import tiny_llama

from pagedkit.bench.widgets import simulator
from pagedkit.memory import EventLog
from pagedkit.sim import ParallelSampling, SharedPrefix
from pagedkit.viz import BlockMap, Dashboard, Recorder


def run_simulation(sharing, attach: bool):
    """The widgets benchmark's workload, small: a paged Simulator preempting by swap."""
    sim = simulator(256, 8, sharing, seed=3)
    if attach:
        view = Dashboard(sim)
        view.block_map.widget  # noqa: B018  (a displayed widget redraws on every step)
    stats, records = [], []
    log = EventLog(sim.events)
    sim.events.subscribe(lambda e: stats.append(sim.memory_manager.stats())
                         if e.kind.value == "step" else None)
    for _ in range(120):
        records.append(sim.step())
    return stats, records, list(log)  # memory, steps and events compare by value


@pytest.mark.parametrize("sharing", [ParallelSampling(2), SharedPrefix(24)], ids=str)
def test_memory_is_identical_with_and_without_a_recorder(sharing):
    plain = run_simulation(sharing, attach=False)
    watched = run_simulation(sharing, attach=True)
    assert watched == plain
    assert any(r.preempted for r in plain[1])  # the pool was short: swapping happened


@pytest.fixture(scope="module", name="tiny_llama")
def tiny_llama_fixture():
    return tiny_llama()


def generate(model, watch: bool):
    from pagedkit import LLM, SamplingParams

    llm = LLM(model, num_blocks=12, block_size=4, preemption_mode="swap")
    engine = llm.llm_engine
    view = BlockMap(llm) if watch else None
    if view is not None:
        view.widget  # noqa: B018
    stats = []

    def on_step(step_output):
        stats.append(engine.kv.stats())
        if view is not None:
            view.player.on_step(step_output)

    prompts = [[1, 2, 3, 4, 5, 6, 7], [8, 9, 10, 11, 12], [13, 14, 15, 16, 17, 18]]
    params = SamplingParams(max_tokens=10, n=2, temperature=0.8, seed=7)
    if view is None:
        outs = llm.generate(prompts, params, use_tqdm=False, on_step=on_step)
    else:
        with view.live():
            outs = llm.generate(prompts, params, use_tqdm=False, on_step=on_step)
    tokens = [[c.token_ids for c in o.outputs] for o in outs]
    return tokens, stats, view


def test_the_engine_generates_the_same_with_the_widgets_attached(tiny_llama):
    plain_tokens, plain_stats, _ = generate(tiny_llama, watch=False)
    tokens, stats, view = generate(tiny_llama, watch=True)
    assert tokens == plain_tokens and stats == plain_stats
    frames = view.recorder.frames[1:]
    assert len(frames) == len(stats)
    for frame, s in zip(frames, stats, strict=True):  # the picture agrees at every step
        m = frame.memory
        assert (m.used, m.cached, m.tokens, m.swapped) == (
            s.used_blocks, s.cached_blocks, s.tokens_stored, s.swapped_blocks)
    assert sum(f.preemptions for f in frames) > 0  # the pool was tight enough to preempt
    assert any(f.memory.swapped for f in frames)
    assert any(f.copies for f in frames)  # the second sample copied a shared block
    assert view.index == len(view.recorder) - 1  # live mode ended on the newest step


def test_attach_finds_the_engine_of_an_llm(tiny_llama):
    from pagedkit import LLM

    llm = LLM(tiny_llama, num_blocks=9, block_size=4)
    rec = Recorder.attach(llm)
    assert rec.num_blocks == 9 and rec.block_size == 4 and rec.listening
    assert Recorder.attach(llm.llm_engine).num_blocks == 9
