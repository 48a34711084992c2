"""Newcomer 44 (vLLM parity, enumerated): two rough edges.

1. ``abort_request(["x", "x"])`` aborted ``x`` and returned False: the second
   copy found it gone. An id named twice now counts once.
2. ``logprobs=-1`` (all of them) over ``max_logprobs`` advised
   ``max_logprobs=1024`` (the vocabulary), where ``max_logprobs=-1`` is what
   allows "all"; the message for a value past the vocabulary already said so.
"""

from __future__ import annotations

import itertools

import pytest

from pagedkit import LLM, SamplingParams

GREEDY = SamplingParams(temperature=0, max_tokens=5)


@pytest.fixture(scope="module")
def engine():
    return LLM("tiny", num_blocks=64).llm_engine


IDS = ["x", "y"]
LISTS = [list(p) for n in range(1, 4) for p in itertools.product([*IDS, "gone"], repeat=n)]


@pytest.mark.parametrize("ids", LISTS, ids=lambda ids: "-".join(ids))
def test_an_id_named_twice_is_aborted_once_and_counts_once(engine, ids):
    for rid in IDS:
        engine.add_request(rid, "Once upon a time", GREEDY)
    engine.step()
    assert engine.abort_request(ids) is ("gone" not in ids)
    named = set(ids) - {"gone"}
    assert engine.unreported_aborts() == named
    assert engine.get_num_unfinished_requests() == len(set(IDS) - named)
    reported = []
    while engine.has_unfinished_requests() or engine.unreported_aborts():
        reported += [(o.request_id, o.outputs[0].finish_reason) for o in engine.step().finished]
    assert sorted(reported) == sorted((rid, "abort" if rid in named else "length")
                                      for rid in IDS)
    assert engine.memory_stats()["used_blocks"] == 0


@pytest.mark.parametrize("name", ["logprobs", "prompt_logprobs"])
@pytest.mark.parametrize("given, advice", [(-1, "max_logprobs=-1"), (21, "max_logprobs=21"),
                                           (1024, "max_logprobs=1024")])
def test_asking_for_every_logprob_is_told_max_logprobs_minus_one(engine, name, given, advice):
    with pytest.raises(ValueError) as raised:
        engine.add_request("z", "Once upon a time", SamplingParams(max_tokens=2, **{name: given}))
    message = str(raised.value)
    assert f"{name}={given} asks for" in message and "more than max_logprobs=20" in message
    assert f"build the engine with LLM(..., {advice}), or ask for fewer" in message
    assert "z" not in engine.groups and not engine.has_unfinished_requests()
    roomy = LLM("tiny", num_blocks=8, max_logprobs=-1 if given == -1 else given).llm_engine
    roomy.add_request("z", "Once upon a time", SamplingParams(max_tokens=2, **{name: given}))
    while roomy.has_unfinished_requests():
        roomy.step()
