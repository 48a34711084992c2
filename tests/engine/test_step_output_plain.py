"""`LLMEngine.step()`'s `StepOutput` is a plain list of the step's
RequestOutputs, built in the step (issue #26): copied, deep-copied and
pickled it keeps them and its fields, every list operation reads them,
and a step read after later steps still shows that step (its tokens, its
text, its metrics). `LLM.generate`, which reads only `finished`, asks for
none (``step(outputs=False)``).

Before, the list was filled on its first read through ~30 wrapped list
methods: ``dataclasses.replace``, and ``copy.copy`` of a read step, gave an
empty list, and a pickled step did not load."""

from __future__ import annotations

import copy
import dataclasses
import pickle
import re
import warnings

import pytest

from pagedkit import LLM, SamplingParams
from pagedkit.engine import llm_engine
from pagedkit.engine.outputs import StepOutput

PROMPT = "Tom and Lily"


@pytest.fixture(scope="module")
def engine():
    return LLM("tiny", block_size=16, num_blocks=64).llm_engine


def _n1(engine, tag):  # two requests, one with logprobs and a stop string
    engine.add_request(f"{tag}a", PROMPT, SamplingParams(temperature=0, max_tokens=3,
                                                         ignore_eos=True))
    engine.add_request(f"{tag}b", "Once upon", SamplingParams(
        temperature=0, max_tokens=4, logprobs=2, stop=["zzz"], ignore_eos=True))


def _n2(engine, tag):
    engine.add_request(f"{tag}a", PROMPT, SamplingParams(n=2, temperature=0.8, seed=1,
                                                         max_tokens=3, ignore_eos=True))


def _beams(engine, tag):
    engine.add_request(f"{tag}a", PROMPT, SamplingParams(
        use_beam_search=True, beam_width=2, n=2, temperature=0, max_tokens=3,
        ignore_eos=True))


def _n2_aborted(engine, tag):  # ends without sampling: one output per completion
    _n2(engine, tag)
    return 1  # abort after this many steps


SCENARIOS = {"n1": _n1, "n2": _n2, "beams": _beams, "n2_aborted": _n2_aborted}


def view(output):
    """What an output says, but its clock readings (two runs differ in them)."""
    m = output.metrics
    return (output.request_id.lstrip("RU"), output.finished, output.num_cached_tokens,
            output.num_preemptions, m.num_generation_tokens, m.finish_time is None,
            [(c.index, list(c.token_ids), c.text, c.finish_reason, c.stop_reason,
              c.cumulative_logprob, c.logprobs) for c in output.outputs])


def views(outputs):
    return [view(o) for o in outputs]


_RUNS: dict[tuple[str, bool], tuple[list[StepOutput], list, list]] = {}


def run(engine, scenario, read):
    """The steps of `scenario` (a cold prefix cache each time), read as each
    step returns (`read`) or only after the run; with the views of each
    step's outputs and `finished` as they were read when it returned (the
    run that reads at once: what every run must show)."""
    key = (scenario, read)
    if key not in _RUNS:
        assert engine.reset_prefix_cache()
        tag = "R" if read else "U"
        abort_after = SCENARIOS[scenario](engine, tag)
        steps, at_once, finished_at_once = [], [], []

        def take(step):
            steps.append(step)
            if read:
                at_once.append(views(step))
                finished_at_once.append(views(step.finished))

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            while engine.has_unfinished_requests():
                take(engine.step())
                if len(steps) == abort_after:
                    assert engine.abort_request(f"{tag}a")
                    take(engine.step())  # the abort's outputs come with the next step
        _RUNS[key] = steps, at_once, finished_at_once
    return _RUNS[key]


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_the_runs_cover_finished_and_unfinished_outputs(engine, scenario):
    steps, _, _ = run(engine, scenario, True)
    finished = [o.finished for step in steps for o in step]
    assert True in finished and False in finished
    if scenario != "n1":  # n > 1 samples and beams stream every completion
        assert any({c.index for o in step for c in o.outputs} == {0, 1} for step in steps)


@pytest.mark.parametrize("read", [True, False], ids=["read", "unread"])
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_a_step_shows_its_own_moment_after_later_steps(engine, scenario, read):
    """Read at the end of the run, each step still shows the tokens, text,
    finish reasons and metrics it had when it returned."""
    _, expected, expected_finished = run(engine, scenario, True)
    steps, _, _ = run(engine, scenario, read)
    assert [views(s) for s in steps] == expected
    assert [views(s.finished) for s in steps] == expected_finished


def _fields(step):
    return (step.step, step.scheduled, step.new_tokens, step.preempted, step.finished,
            step.memory, step.duration_s, repr(step))


def _same(other, step, *, shared):
    assert type(other) is StepOutput and other == step and list(other) == list(step)
    assert views(other) == views(step) and _fields(other) == _fields(step)
    assert other.outputs == step.outputs and views(other.finished) == views(step.finished)
    if step:
        assert (other[0] is step[0]) is shared
    other.append("x")  # a list of its own
    assert len(other) == len(step) + 1 and "x" not in step


def _pickle(step):
    _same(pickle.loads(pickle.dumps(step)), step, shared=False)


def _copy(step):
    _same(copy.copy(step), step, shared=True)
    assert type(step.copy()) is list and step.copy() == list(step)


def _deepcopy(step):
    _same(copy.deepcopy(step), step, shared=False)


def _replace(step):  # a list with fields, not a dataclass: replace() says so
    assert not dataclasses.is_dataclass(step)
    with pytest.raises(TypeError, match="dataclass"):
        dataclasses.replace(step, step=99)


def _add(step):
    items = list(step)
    for both in (step + step, step + [], [] + step, step + items, items + step):  # noqa: RUF005
        assert type(both) is list
    assert step + step == items + items and [] + step == items == step + []  # noqa: RUF005
    assert step * 2 == items * 2 == 2 * step and type(step * 2) is list


def _eq(step):
    items = list(step)
    assert step == items and items == step and not step != items  # noqa: SIM202
    assert (step == []) is (not items) and ([] == step) is (not items)  # noqa: SIM300
    assert step == copy.copy(step) and step != [*items, None]


def _len(step):
    assert len(step) == len(step.outputs) == len(list(iter(step))) > 0
    assert bool(step)


def _iterate(step):
    assert [o.request_id for o in step] == [o.request_id for o in step.outputs]
    assert list(reversed(step)) == list(step)[::-1]
    assert all(o in step for o in step) and None not in step
    assert [step.index(o) for o in step] == list(range(len(step)))
    assert [step.count(o) for o in step] == [1] * len(step)


def _index(step):
    assert step[0] is step.outputs[0] and step[-1] is step.outputs[-1]
    assert step[len(step) - 1] is step[-1]
    with pytest.raises(IndexError):
        step[len(step)]


def _slice(step):
    items = list(step)
    for cut in (slice(None), slice(1), slice(-1, None), slice(None, None, -1)):
        part = step[cut]
        assert type(part) is list and part == items[cut]


def _isinstance(step):
    assert isinstance(step, list) and isinstance(step, StepOutput)
    assert type(list(step)) is list


OPS = {f.__name__.lstrip("_"): f for f in (_pickle, _copy, _deepcopy, _replace, _add, _eq,
                                            _len, _iterate, _index, _slice, _isinstance)}


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("read", [True, False], ids=["read", "unread"])
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_step_output_is_a_plain_list(engine, scenario, read, op):
    """Every step of the run (finished and unfinished outputs; the abort's
    step too), touched first by `op` (unread) or after it was read."""
    steps, _, _ = run(engine, scenario, read)
    _, expected, _ = run(engine, scenario, True)
    for step, want in zip(steps, expected, strict=True):
        OPS[op](step)
        assert views(step) == want  # the operation changed nothing


def test_no_list_method_is_wrapped():
    """StepOutput overrides none of list's methods: reading it is list's own code."""
    overridden = {name for name in vars(StepOutput) if name in vars(list)} - {"__doc__"}
    assert overridden == {"__init__", "__repr__"}


def test_a_step_without_outputs(engine):
    """``step(outputs=False)``: an empty list, the fields as ever; what
    `LLM.generate` asks for (it reads `finished` only)."""
    engine.add_request("quiet", PROMPT, SamplingParams(temperature=0, max_tokens=2))
    first = engine.step(outputs=False)
    assert first == [] and type(first) is StepOutput and first.new_tokens and first.scheduled
    last = engine.step(outputs=False)
    assert last == [] and [o.request_id for o in last.finished] == ["quiet"]
    assert last.finished[0].outputs[0].token_ids == [first.new_tokens[next(iter(
        first.new_tokens))], *last.new_tokens.values()]


@pytest.mark.parametrize("bad", ["no", 1, 0, None, [True]])
def test_step_refuses_outputs_not_a_bool(engine, bad):
    engine.add_request("bad", PROMPT, SamplingParams(temperature=0, max_tokens=1))
    before, waiting = engine.scheduler.num_steps, len(engine.scheduler.waiting)
    with pytest.raises(TypeError, match=re.escape(f"outputs must be True or False, got {bad!r}")):
        engine.step(outputs=bad)
    assert (engine.scheduler.num_steps, len(engine.scheduler.waiting)) == (before, waiting)
    assert [o.request_id for o in engine.step()] == ["bad"]


def test_generate_builds_no_step_outputs(monkeypatch):
    """`LLM.generate` reads `finished` only: its steps build no RequestOutputs."""
    llm = LLM("tiny", block_size=16, num_blocks=64)
    asked, seen = [], []
    step = llm_engine.LLMEngine.step

    def spy(self, **kw):
        asked.append(kw)
        return step(self, **kw)

    monkeypatch.setattr(llm_engine.LLMEngine, "step", spy)
    [out] = llm.generate(PROMPT, SamplingParams(temperature=0, max_tokens=3),
                         use_tqdm=False, on_step=seen.append)
    assert asked and all(kw == {"outputs": False} for kw in asked)
    assert all(s == [] for s in seen) and seen[-1].finished == [out]
    assert len(out.outputs[0].token_ids) == 3
