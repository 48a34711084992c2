"""Newcomer 37: requests queued with ``llm_engine.add_request`` before
``LLM.generate`` were run by it and their outputs thrown away, silently.
vLLM 0.32's generate runs every request of its engine to the end and
returns all of them, sorted by id read as an integer (tests/vllm/
test_generate_with_queued.py runs the same calls there). pagedkit now does
the same: each queued request comes back with the tokens it gets served
alone, in vLLM's order (an id that is no integer, which vLLM cannot sort,
last), and the engine is empty after. Every count of queued requests (0-3,
ids of both kinds, one aborted before the call or not) against every count
of prompts (0-3)."""

from __future__ import annotations

import itertools

import pytest

from pagedkit import LLM, BeamSearchParams, SamplingParams

GREEDY = SamplingParams(temperature=0, max_tokens=5)
PROMPTS = ["Once upon a time", "A cat", "The sun was", "Tom and Sue"]
QUEUED = [("mine", "In the garden"), ("100", "The dog"), ("7", "She ran"), ("x2", "One day")]


@pytest.fixture(scope="module")
def alone():
    """Each text's greedy tokens, served alone in an engine of its own."""
    llm = LLM("tiny", num_blocks=64)
    texts = PROMPTS + [text for _, text in QUEUED]
    return {t: list(llm.generate(t, GREEDY, use_tqdm=False)[0].outputs[0].token_ids)
            for t in texts}


def _order(request_id):
    return (0, int(request_id)) if request_id.isdigit() else (1, 0)


@pytest.mark.parametrize("aborted", [False, True])
@pytest.mark.parametrize("queued", [0, 1, 2, 3, 4])
def test_queued_requests_come_back_with_the_calls_own(alone, queued, aborted):
    llm = LLM("tiny", num_blocks=64)
    engine = llm.llm_engine
    for prompts in range(4):
        given = QUEUED[:queued]
        for request_id, text in given:
            engine.add_request(request_id, text, GREEDY)
        if aborted and given:  # vLLM's generate never returns a request aborted before it
            engine.abort_request([given[0][0]])
            given = given[1:]
        outs = llm.generate(PROMPTS[:prompts], GREEDY, use_tqdm=False)
        own = [o for o in outs if o.request_id not in dict(QUEUED)]
        assert [o.prompt for o in own] == PROMPTS[:prompts]
        assert sorted(o.request_id for o in outs if o not in own) == sorted(i for i, _ in given)
        assert [o.request_id for o in outs] == sorted((o.request_id for o in outs), key=_order)
        for o in outs:
            assert list(o.outputs[0].token_ids) == alone[o.prompt], o.request_id
        assert not engine.has_unfinished_requests() and not engine.groups
        assert engine.memory_stats()["used_blocks"] == 0
        if engine.unreported_aborts():  # no step ran (no prompts): its abort is still to come,
            engine.step()  # and its id is taken again only after that (newcomer 43)


def test_chat_sets_its_own_prompts_and_returns_the_queued_ones(alone):
    llm = LLM("tiny", num_blocks=64)
    llm.llm_engine.add_request("5", "The dog", GREEDY)
    outs = llm.chat([[{"role": "user", "content": "Hi"}]] * 2, GREEDY, use_tqdm=False)
    assert [o.request_id for o in outs] == ["0", "1", "5"]
    assert [o.prompt.startswith("<|bos|>user: Hi") for o in outs] == [True, True, False]
    assert list(outs[2].outputs[0].token_ids) == alone["The dog"]


def test_beam_search_refuses_while_requests_are_queued():
    llm = LLM("tiny", num_blocks=64)
    engine = llm.llm_engine
    for count in (1, 4):
        for i in range(count):
            engine.add_request(f"q{i}", "The dog", GREEDY)
        before = engine.memory_stats()
        with pytest.raises(ValueError) as info:
            llm.beam_search([{"prompt": "hi"}], BeamSearchParams(beam_width=2, max_tokens=2))
        shown = ", ".join(repr(f"q{i}") for i in range(min(count, 3))) + ", ..." * (count > 3)
        assert str(info.value).startswith(
            f"LLM.beam_search(): the engine holds {count} request{'s' * (count > 1)} queued with "
            f"add_request ({shown}); ")
        assert engine.memory_stats() == before and len(engine.groups) == count
        engine.abort_request([f"q{i}" for i in range(count)])
        engine.step()  # reports the aborts: their ids are free again after it
    assert llm.beam_search([{"prompt": "hi"}], BeamSearchParams(beam_width=2, max_tokens=2))


@pytest.mark.parametrize("fail_at", [1, 2, 3, 6])
def test_an_interrupted_call_names_the_queued_outputs_it_lost(fail_at):
    """A generate that raises aborts its own requests (as before); a queued
    request that finished during it is named in a note, not lost in silence;
    one still running stays queued, and later steps finish it."""
    llm = LLM("tiny", num_blocks=64)
    engine = llm.llm_engine
    engine.add_request("short", "The dog", SamplingParams(temperature=0, max_tokens=1))
    engine.add_request("long", "She ran", SamplingParams(temperature=0, max_tokens=12))
    steps = itertools.count(1)

    def on_step(step):
        if next(steps) == fail_at:
            raise RuntimeError("stop")

    with pytest.raises(RuntimeError) as info:
        llm.generate(PROMPTS[:2], GREEDY, use_tqdm=False, on_step=on_step)
    notes = "\n".join(getattr(info.value, "__notes__", []))
    assert ("generate() did not finish" in notes) == (fail_at < 5)  # its own: 5 tokens
    assert notes.endswith("their outputs are lost with the error: 'short'")  # one token: step 1
    assert set(engine.groups) <= {"long"}
    while engine.has_unfinished_requests():
        engine.step()
    assert engine.memory_stats()["used_blocks"] == 0


@pytest.mark.parametrize("interrupted", [False, True])
def test_an_aborted_ids_pending_output_is_never_taken_for_the_calls_own(alone, interrupted):
    """The review's case: a request aborted under the id generate would number
    next ("0") still has its abort output pending. generate skips that id, as
    it skips a queued one, so the stale output is not taken for its own
    prompt's, and an interrupted call aborts its own request (none left
    running to come back with the next call)."""
    llm = LLM("tiny", num_blocks=64)
    engine = llm.llm_engine
    engine.add_request("0", "The dog", GREEDY)
    engine.abort_request(["0"])
    assert engine.unreported_aborts() == {"0"}

    def stop(step):
        raise KeyboardInterrupt

    if interrupted:
        with pytest.raises(KeyboardInterrupt) as info:
            llm.generate([PROMPTS[0]], GREEDY, use_tqdm=False, on_step=stop)
        assert "its 1 unfinished request was aborted" in "\n".join(info.value.__notes__)
        assert not engine.groups and not engine.has_unfinished_requests()
        outs = llm.generate([PROMPTS[1]], GREEDY, use_tqdm=False)
        assert [o.prompt for o in outs] == [PROMPTS[1]]
    else:
        outs = llm.generate([PROMPTS[0]], GREEDY, use_tqdm=False)
        assert [o.request_id for o in outs] == ["1"] and outs[0].prompt == PROMPTS[0]
        assert list(outs[0].outputs[0].token_ids) == alone[PROMPTS[0]]
    assert engine.memory_stats()["used_blocks"] == 0
