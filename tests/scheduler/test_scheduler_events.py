"""The scheduler's events are typed records defined by the scheduler layer:
one field per meaning, carried on the memory's bus beside its events."""

import dataclasses

import pytest

from pagedkit import LLMEngine, SamplingParams
from pagedkit.memory import Event, EventKind, EventLog
from pagedkit.scheduler import FINISH_REASONS, Admit, Finish, Preempt, SchedulerEventKind, Step


def test_memory_defines_only_memory_kinds():
    assert {k.value for k in EventKind}.isdisjoint(k.value for k in SchedulerEventKind)
    assert "detail" not in {f.name for f in dataclasses.fields(Event)}


@pytest.mark.parametrize("event", [Admit(1, "r"), Preempt(1, "r", "swap"),
                                   Finish(1, "r", "stop"), Step(3, 1, 2, 0)])
def test_every_scheduler_event_has_a_kind_and_no_free_text_field(event):
    assert event.kind is SchedulerEventKind[type(event).__name__.upper()]
    assert "detail" not in {f.name for f in dataclasses.fields(event)}
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(event, dataclasses.fields(event)[0].name, 2)  # records, not state


def test_engine_events_carry_typed_fields():
    engine = LLMEngine("tiny", num_blocks=3, block_size=4, max_num_batched_tokens=64,
                       preemption_mode="recompute")
    log = EventLog(engine.events)
    for i in range(2):
        engine.add_request(f"r{i}", [1 + i] * 4, SamplingParams(max_tokens=4, ignore_eos=True))
    while engine.has_unfinished_requests():
        engine.step()
    scheduler_events = [e for e in log if isinstance(e.kind, SchedulerEventKind)]
    admits = [e for e in scheduler_events if isinstance(e, Admit)]
    assert {e.request_id for e in admits} == {"r0", "r1"}
    preempts = [e for e in scheduler_events if isinstance(e, Preempt)]
    assert preempts and {e.mode for e in preempts} == {"recompute"}
    finishes = [e for e in scheduler_events if isinstance(e, Finish)]
    assert {e.request_id for e in finishes} == {"r0", "r1"}
    assert {e.reason for e in finishes} <= set(FINISH_REASONS)
    steps = [e for e in scheduler_events if isinstance(e, Step)]
    assert (steps[-1].running, steps[-1].waiting, steps[-1].swapped) == (0, 0, 0)
    frees = [e for e in log if e.kind is EventKind.FREE]
    assert all(isinstance(e.cached, bool) for e in frees)
