"""The sixth fresh newcomer's findings that needed engine code, each pinned."""

import pytest

from pagedkit import LLM, SamplingParams

GREEDY = SamplingParams(max_tokens=3, temperature=0)


@pytest.mark.parametrize("queued", [["0"], ["1"], ["0", "1", "2"], ["2", "5"]])
def test_generate_picks_ids_past_those_queued_with_add_request(queued):
    """N6: generate numbers its requests "0", "1", ...; a request queued with
    add_request under one of those ids made it fail with 'give another id'
    (generate takes no ids). Now it skips them and serves its prompts like a
    fresh LLM; the queued requests run with it and come back under their
    ids, as vLLM's generate returns them (newcomer 37)."""
    prompts = ["Hi", "There", "Once upon"]
    expected = [o.outputs[0].token_ids for o in LLM("tiny").generate(prompts, GREEDY,
                                                                      use_tqdm=False)]
    llm = LLM("tiny")
    for rid in queued:
        llm.llm_engine.add_request(rid, "Once", SamplingParams(max_tokens=30, temperature=0))
    outs = llm.generate(prompts, GREEDY, use_tqdm=False)
    own = [o for o in outs if o.request_id not in queued]
    assert [o.outputs[0].token_ids for o in own] == expected
    assert sorted(o.request_id for o in outs if o not in own) == sorted(queued)
    assert not llm.llm_engine.groups
