"""Newcomer 43: an id given again right after `abort_request`, before the
step that reports the abort, lost the new request's first output: that step
returned only the old request's abort output under the id, `finished=True`,
and later steps streamed the new request's tokens under an id the client had
seen finish. Such an id is now refused until that step has run, saying so,
and nothing changes; after the step it is served as if new. Every way in:
add_request and add_requests, the abort as a list or one id, n of 1 and 2,
aborted while waiting or after its first step."""

from __future__ import annotations

import pytest

from pagedkit import LLM, SamplingParams

GREEDY = SamplingParams(temperature=0, max_tokens=3, ignore_eos=True)


def _served_alone(prompt, params):
    llm = LLM("tiny", num_blocks=16, block_size=4)
    return [list(c.token_ids) for c in llm.generate([prompt], params, use_tqdm=False)[0].outputs]


@pytest.mark.parametrize("stepped", [False, True])
@pytest.mark.parametrize("n", [1, 2])
@pytest.mark.parametrize("as_list", [True, False])
@pytest.mark.parametrize("batch", [False, True])
def test_an_aborted_id_is_taken_again_only_after_its_abort_is_reported(stepped, n, as_list,
                                                                        batch):
    engine = LLM("tiny", num_blocks=16, block_size=4).llm_engine
    params = SamplingParams(n=n, temperature=0.8 if n > 1 else 0, top_k=1, max_tokens=3,
                            ignore_eos=True, seed=0)
    engine.add_request("a", "Once upon a time", params)
    if stepped:
        engine.step()
    engine.abort_request(["a"] if as_list else "a")

    def add():
        if batch:
            engine.add_requests([("a", "Hi", GREEDY)])
        else:
            engine.add_request("a", "Hi", GREEDY)

    with pytest.raises(ValueError, match=r"request id 'a' was aborted and its output \(finish "
                                         r"reason 'abort'\) comes with the next step\(\).*run "
                                         r"step\(\) first, then add it, or give another id"):
        add()
    assert not engine.has_unfinished_requests() and not engine.groups  # nothing added
    reported = list(engine.step())  # with n = 2, one output per completion ended
    assert reported and all(o.request_id == "a" for o in reported) and reported[-1].finished
    assert {c.finish_reason for o in reported for c in o.outputs} == {"abort"}
    add()  # now free
    outputs = []
    while engine.has_unfinished_requests():
        outputs += engine.step()
    assert [o.request_id for o in outputs] == ["a"] * len(outputs)
    assert [o.finished for o in outputs] == [False] * (len(outputs) - 1) + [True]
    assert [list(c.token_ids) for c in outputs[-1].outputs] == _served_alone("Hi", GREEDY)
    assert engine.memory_stats()["used_blocks"] == 0
