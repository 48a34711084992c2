"""Newcomer 43: a `generate` refused (a prompt too long) used up a request id,
so every later call's ids were one higher than vLLM's. A refused call now
changes nothing, its ids included: the next call numbers on as if it never
was. Every refusal `add_requests` makes for a prompt (too long, empty,
out of the vocabulary), at every place in a call of 1-3 prompts."""

from __future__ import annotations

import pytest

from pagedkit import LLM, SamplingParams

GREEDY = SamplingParams(temperature=0, max_tokens=2)
BAD = {"too long": "Once upon a time " * 80, "empty ids": {"prompt_token_ids": []},
       "out of the vocabulary": [5, 99999]}


@pytest.mark.parametrize("bad", BAD)
@pytest.mark.parametrize(("size", "at"), [(1, 0), (2, 0), (2, 1), (3, 1), (3, 2)])
def test_a_refused_call_takes_no_request_id(bad, size, at):
    llm = LLM("tiny", num_blocks=32, max_model_len=256)
    first = llm.generate(["A cat"], GREEDY, use_tqdm=False)
    prompts = ["The sun"] * size
    prompts[at] = BAD[bad]
    with pytest.raises((ValueError, TypeError)):
        llm.generate(prompts, GREEDY, use_tqdm=False)
    assert not llm.llm_engine.groups
    after = llm.generate(["A dog", "A bird"], GREEDY, use_tqdm=False)
    assert [o.request_id for o in first + after] == ["0", "1", "2"]
