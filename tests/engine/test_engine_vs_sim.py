"""The engine and the simulator schedule alike: the same requests under the
same budgets give the same admissions, preemptions and finishes, step by step.

The engine runs the tiny model (`LLM("tiny")`'s), greedy with EOS ignored so
every request produces exactly its output length; the simulator runs the
same lengths with its step clock, Orca-style mixed batching (the engine's)
and no watermark. Both put the scheduler's decisions on their event bus;
the test compares those streams, one step at a time."""

import pytest

from pagedkit import LLMEngine, SamplingParams
from pagedkit.memory import EventBus, EventLog
from pagedkit.scheduler import Admit, Finish, Preempt, Step
from pagedkit.sim import ManagerSpec, Simulator, StepClock, Trace, TraceRequest

BLOCK = 4


def decisions(log: EventLog, name) -> list[list[tuple[str, str, str]]]:
    """Per step: the (what, request, how) of every admission, preemption and finish."""
    steps, current = [], []
    for e in log:
        if isinstance(e, Step):
            steps.append(sorted(current))
            current = []
        elif isinstance(e, Admit):
            current.append(("admit", name(e.request_id), ""))
        elif isinstance(e, Preempt):
            current.append(("preempt", name(e.request_id), e.mode))
        elif isinstance(e, Finish):  # the engine stops at max_tokens ("length"); a trace's
            current.append(("finish", name(e.request_id), ""))  # output ends it ("stop")
    assert not current, "events after the last step"
    return steps


def run_engine(lengths, num_blocks, max_num_seqs):
    engine = LLMEngine("tiny", block_size=BLOCK, num_blocks=num_blocks,
                       enable_prefix_caching=False, max_num_seqs=max_num_seqs,
                       max_num_batched_tokens=1024)
    log = EventLog(engine.events)
    engine.add_requests([(f"r{i}", [10 + i] * prompt, SamplingParams(max_tokens=out,
                                                                      ignore_eos=True))
                         for i, (prompt, out) in enumerate(lengths)], arrival_time=0.0)
    while engine.has_unfinished_requests():
        engine.step()
    return decisions(log, str)


def run_sim(lengths, num_blocks, max_num_seqs):
    trace = Trace("same", tuple(TraceRequest(i, 0.0, p, o) for i, (p, o) in enumerate(lengths)),
                  "tests")
    log = EventLog(bus := EventBus())
    sim = Simulator(trace, ManagerSpec("paged", BLOCK), model=StepClock(),
                    capacity_slots=num_blocks * BLOCK, max_num_seqs=max_num_seqs,
                    prefill="mixed", watermark=0, preemption="recompute", events=bus)
    sim.run(progress=False)
    return decisions(log, lambda rid: f"r{rid}")


CASES = {
    # (prompt, output) per request, blocks of 4 tokens, max_num_seqs
    "roomy": ([(5, 6), (3, 9), (8, 4)], 64, 8),
    "seat cap": ([(5, 6), (3, 9), (8, 4), (2, 2)], 64, 2),
    "preempts": ([(4, 12), (4, 12), (6, 10)], 8, 8),
    "preempts often": ([(3, 20), (5, 17), (2, 22), (7, 9)], 10, 4),
}


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_engine_and_simulator_decide_alike_step_by_step(case):
    lengths, num_blocks, max_num_seqs = CASES[case]
    engine = run_engine(lengths, num_blocks, max_num_seqs)
    sim = run_sim(lengths, num_blocks, max_num_seqs)
    assert engine == sim
    finishes = [d for step in engine for d in step if d[0] == "finish"]
    assert sorted(r for _, r, _ in finishes) == [f"r{i}" for i in range(len(lengths))]
    preempted = any(d[0] == "preempt" for step in engine for d in step)
    assert preempted == case.startswith("preempts")  # the cases bite as named
