"""An ``on_step`` that aborts requests during ``LLM.generate``.

An abort's output comes with the engine's next step (docs/api.md). When
``on_step`` aborted one of the call's own requests in the step that left
nothing else to run, no next step came and generate ended in a KeyError
(review of stop 47). Now generate runs that one more step: every prompt
comes back, an aborted one with finish reason ``"abort"`` and the tokens it
had, a prefix of what it gets served alone, and the engine is empty after.
Every step to abort at (1-5, the last past the end), for every subset of
1-3 prompts aborted; and the progress bar's total counts every output it
counts (queued requests aborted before the call included).
"""

from __future__ import annotations

import itertools
from typing import ClassVar

import pytest

from pagedkit import LLM, SamplingParams

MAX_TOKENS = 4
GREEDY = SamplingParams(temperature=0, max_tokens=MAX_TOKENS, ignore_eos=True)
PROMPTS = ["Once upon a time", "A cat", "The sun was"]


@pytest.fixture(scope="module")
def llm():
    return LLM("tiny", num_blocks=64)


@pytest.fixture(scope="module")
def alone(llm):
    return {p: list(llm.generate(p, GREEDY, use_tqdm=False)[0].outputs[0].token_ids)
            for p in PROMPTS}


CASES = [(n, aborted, at) for n in (1, 2, 3)
         for k in range(1, n + 1) for aborted in itertools.combinations(range(n), k)
         for at in range(1, MAX_TOKENS + 2)]


def aborting(engine, aborted, at, **options):
    """An on_step that aborts the call's requests at places `aborted` in its
    `at`-th step, and the list of the call's ids it fills."""
    steps = 0
    ids: list[str] = []

    def on_step(step):
        nonlocal steps
        steps += 1
        if not ids:  # the call's ids: its numbered requests in the engine at its first step
            ids.extend(sorted((i for i in engine.groups if i.isdigit()), key=int))
        if steps == at:
            for i in aborted:
                engine.abort_request([ids[i]], **options)

    return on_step, ids


@pytest.mark.parametrize(("n", "aborted", "at"), CASES)
def test_on_step_aborting_the_calls_own_requests_returns_every_prompt(llm, alone, n, aborted,
                                                                      at):
    engine = llm.llm_engine
    on_step, _ids = aborting(engine, aborted, at)
    outs = llm.generate(PROMPTS[:n], GREEDY, use_tqdm=False, on_step=on_step)
    assert [o.prompt for o in outs] == PROMPTS[:n]
    for i, out in enumerate(outs):
        tokens, reason = list(out.outputs[0].token_ids), out.outputs[0].finish_reason
        served = alone[PROMPTS[i]]
        if i in aborted and at < MAX_TOKENS:  # aborted before its last token
            assert reason == "abort" and tokens == served[:at], (i, tokens)
        else:
            assert reason == "length" and tokens == served, (i, reason, tokens)
    assert not engine.has_unfinished_requests() and not engine.groups
    assert not engine.unreported_aborts()
    assert engine.memory_stats()["used_blocks"] == 0


class Bar:
    """A progress bar (`use_tqdm` takes its maker, as vLLM's does) that records
    its total and its updates."""

    made: ClassVar[list[Bar]] = []

    def __init__(self, total, **_kwargs):
        self.total, self.n = total, 0
        Bar.made.append(self)

    def update(self, n=1):
        self.n += n

    def close(self):
        pass


@pytest.mark.parametrize("queued_aborted", [0, 1, 2])
@pytest.mark.parametrize("prompts", [0, 1, 3])
def test_the_progress_bar_total_counts_every_output_it_counts(llm, prompts, queued_aborted):
    Bar.made.clear()
    engine = llm.llm_engine
    for k in range(queued_aborted):
        engine.add_request(f"q{k}", "The dog", GREEDY)
        engine.abort_request([f"q{k}"])
    engine.add_request("kept", "She ran", GREEDY)
    llm.generate(PROMPTS[:prompts], GREEDY, use_tqdm=Bar)
    (bar,) = Bar.made
    assert bar.n == bar.total == prompts + queued_aborted + 1
    assert not engine.groups and not engine.unreported_aborts()


@pytest.mark.parametrize("abort_first", [False, True])
def test_a_request_on_step_adds_under_a_calls_own_id_never_replaces_its_output(llm, alone,
                                                                                abort_first):
    """Review of stop 48: once one of the call's own ids had ended (or been
    aborted and reported), an on_step could add a request under it, and its
    output replaced the call's own. The first output of a call's id is its own;
    a later one comes back as a queued request's would."""
    engine = llm.llm_engine
    longer = SamplingParams(temperature=0, max_tokens=3 * MAX_TOKENS, ignore_eos=True)
    steps = 0
    ids: list[str] = []
    added = []

    def on_step(step):
        nonlocal steps
        steps += 1
        if not ids:
            ids.extend(sorted(engine.groups, key=int))
        if abort_first and steps == 1:
            engine.abort_request([ids[0]])
        if not added and ids[0] not in engine.groups and not engine.unreported_aborts():
            engine.add_request(ids[0], "Another prompt entirely", GREEDY)
            added.append(steps)

    outs = llm.generate(PROMPTS[:2], [GREEDY, longer], use_tqdm=False, on_step=on_step)
    assert added  # the id was taken again while the call ran
    own = [o for o in outs if o.prompt in PROMPTS[:2]]
    assert [o.prompt for o in own] == PROMPTS[:2]
    first = own[0].outputs[0]
    if abort_first:
        assert first.finish_reason == "abort" and list(first.token_ids) == alone[PROMPTS[0]][:1]
    else:
        assert first.finish_reason == "length" and list(first.token_ids) == alone[PROMPTS[0]]
    assert [o.prompt for o in outs if o not in own] == ["Another prompt entirely"]
    assert not engine.groups and not engine.unreported_aborts()


REPORT_FALSE_CASES = [(n, aborted, at) for n in (1, 2, 3)
                      for k in range(1, n + 1) for aborted in itertools.combinations(range(n), k)
                      for at in range(1, MAX_TOKENS)]


@pytest.mark.parametrize(("n", "aborted", "at"), REPORT_FALSE_CASES)
def test_on_step_aborting_its_own_without_a_report_is_said_by_name(llm, alone, n, aborted, at):
    """``abort_request(..., report=False)`` (generate's own clean-up) ends a
    request without an output. From an ``on_step`` that aborts one of the
    call's own requests so, generate ended in a KeyError (review of stop 48);
    it now raises a RuntimeError naming the first such request and the call
    that keeps its output, and leaves the engine empty and serving."""
    engine = llm.llm_engine
    on_step, ids = aborting(engine, aborted, at, report=False)
    with pytest.raises(RuntimeError) as raised:
        llm.generate(PROMPTS[:n], GREEDY, use_tqdm=False, on_step=on_step)
    first = ids[aborted[0]]
    assert str(raised.value).startswith(f"generate(): request {first!r} of this call ended "
                                        "without its output reaching generate")
    assert f"abort_request([{first!r}])" in str(raised.value)
    assert not engine.has_unfinished_requests() and not engine.groups
    assert not engine.unreported_aborts()
    assert engine.memory_stats()["used_blocks"] == 0
    out = llm.generate(PROMPTS[0], GREEDY, use_tqdm=False)[0]
    assert list(out.outputs[0].token_ids) == alone[PROMPTS[0]]


def test_an_on_step_that_steps_the_engine_itself_is_said(llm):
    """The review's first case: an on_step that runs ``engine.step()`` takes
    outputs generate waits for; the error names that cause too."""
    engine = llm.llm_engine
    with pytest.raises(RuntimeError) as raised:
        llm.generate(PROMPTS[:2], GREEDY, use_tqdm=False, on_step=lambda step: engine.step())
    assert "or that runs the engine's step() itself" in str(raised.value)
    assert not engine.has_unfinished_requests() and not engine.unreported_aborts()
    assert engine.memory_stats()["used_blocks"] == 0


def test_the_missing_output_error_notes_the_queued_outputs_it_drops(llm):
    """The review's second case: a request queued before the call finished
    during it; the error takes its output away, and says so in a note, as
    every other error out of generate does."""
    engine = llm.llm_engine
    engine.add_request("queued", PROMPTS[1], GREEDY)
    on_step, _ids = aborting(engine, (0,), 2, report=False)
    with pytest.raises(RuntimeError) as raised:
        llm.generate(PROMPTS[:2], GREEDY, use_tqdm=False, on_step=on_step)
    assert getattr(raised.value, "__notes__", None) == [
        "pagedkit: requests queued before generate() finished during it, and their outputs "
        "are lost with the error: 'queued'"]
    assert not engine.has_unfinished_requests() and engine.memory_stats()["used_blocks"] == 0
