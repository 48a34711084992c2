"""Newcomer 37, beside vLLM 0.32: requests queued with
``llm_engine.add_request`` before ``LLM.generate`` run with it and come
back with its own outputs, in the order of their ids read as integers, with
the same greedy tokens, on both systems (tests/engine/
test_generate_with_queued.py holds pagedkit to the rest of the rule)."""

import pytest

from pagedkit.vllm import api_check

pytestmark = pytest.mark.vllm

QUEUED = [("100", "The dog"), ("7", "She ran")]


def served(system):
    api, llm = api_check.open_system(system)
    params = api.SamplingParams(temperature=0, max_tokens=6)
    results = []
    for queued in (QUEUED[:1], QUEUED):
        for request_id, text in queued:
            llm.llm_engine.add_request(request_id, text, params)
        outs = llm.generate(["Once upon a time", "A cat"], params, use_tqdm=False)
        results.append([(o.prompt, list(o.outputs[0].token_ids), o.outputs[0].finish_reason)
                        for o in outs])
        assert not llm.llm_engine.has_unfinished_requests()
    return results


def test_queued_requests_come_back_as_vllm_returns_them():
    ours, theirs = served("pagedkit"), served("vllm")
    assert ours == theirs
    assert [prompt for prompt, *_ in theirs[1]] == ["Once upon a time", "A cat", "She ran",
                                                   "The dog"]
