"""newcomer42's findings beside vLLM 0.32, live: the same calls on both
systems (tests/engine/test_vllm_parity42.py holds vLLM's results as data
and runs pagedkit's side everywhere)."""

import pytest

from pagedkit.vllm import api_check
from pagedkit.vllm_names import VLLM_ONLY_ATTRIBUTES
from tests.engine.test_vllm_parity42 import TEXT_PART_CASES, VLLM_NAMES

pytestmark = pytest.mark.vllm


def run(system):
    api, llm = api_check.open_system(system)
    params = api.SamplingParams(temperature=0, max_tokens=2)
    results = {}
    for name, content, role, _ in TEXT_PART_CASES:
        [out] = llm.chat([{"role": role, "content": content}], params, use_tqdm=False)
        results[name] = out.prompt
    beams = api_check.beam_params(api)
    for width in (1, 2):
        [out] = llm.beam_search(["Once upon"], beams(beam_width=width, max_tokens=0))
        results[f"beams {width}"] = [(list(b.tokens), b.text, b.finish_reason)
                                     for b in out.sequences]
    for name, call in [("beam_search([])", lambda: llm.beam_search([], beams(2, 2))),
                       ("generate(BeamSearchParams)",
                        lambda: llm.generate(["a"], beams(2, 2), use_tqdm=False)),
                       ("add_request(5)", lambda: llm.llm_engine.add_request(
                           5, "a", params)),
                       ("add_request(None params)", lambda: llm.llm_engine.add_request(
                           "p", "a", None))]:
        try:
            call()
            results[name] = "taken"
        except (TypeError, ValueError) as error:
            results[name] = type(error).__name__
    engine = llm.llm_engine
    engine.add_request("r", "Once upon", api.SamplingParams(n=2, max_tokens=2, temperature=0.8,
                                                         seed=1))
    shapes = []
    while engine.has_unfinished_requests():
        step = engine.step()
        shapes.append((type(step) is list or isinstance(step, list),
                       [(o.request_id, [c.index for c in o.outputs], o.finished) for o in step]))
    results["steps"] = shapes
    idle = engine.step()
    results["idle"] = (idle == [], isinstance(idle, list))
    return results, llm


def test_newcomer42_calls_behave_alike():
    ours, _ = run("pagedkit")
    theirs, vllm_llm = run("vllm")
    assert ours == theirs
    for name, _, _, expected in TEXT_PART_CASES:
        assert theirs[name] == expected, name  # what the pagedkit test expects
    # the public names of vLLM's objects, as the pagedkit test records them
    [out] = vllm_llm.generate(["Once"], use_tqdm=False)
    import vllm

    objects = {"LLM": vllm_llm, "LLMEngine": vllm_llm.llm_engine, "RequestOutput": out,
               "CompletionOutput": out.outputs[0], "SamplingParams": vllm.SamplingParams()}
    for kind, obj in objects.items():
        names = sorted(n for n in dir(obj) if not n.startswith("_"))
        assert names == VLLM_NAMES[kind], kind
        assert set(VLLM_ONLY_ATTRIBUTES[kind]) <= set(names), kind
