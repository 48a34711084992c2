"""A per-prompt list of a vLLM call argument (``priority``, ``lora_request``)
must hold one value per prompt, as vLLM 0.32 requires ("The lengths of
prompts (2) and priority (1) must be the same", run there for generate and
chat). Newcomer 36 found a list of the wrong length accepted. Every prompt
count from 0 to 3 against every list length from 0 to 4: refused, naming
both, with nothing queued, exactly when the lengths differ."""

from __future__ import annotations

import pytest

from pagedkit import LLM, SamplingParams

GREEDY = SamplingParams(temperature=0, max_tokens=1)
CHAT = [{"role": "user", "content": "Hi"}]


@pytest.fixture(scope="module")
def llm():
    return LLM("tiny", num_blocks=32)


@pytest.mark.parametrize("call", ["generate", "chat"])
@pytest.mark.parametrize("name, item", [("priority", 3), ("lora_request", None)])
@pytest.mark.parametrize("prompts", [0, 1, 2, 3])
def test_a_list_needs_one_value_per_prompt(llm, call, name, item, prompts):
    engine = llm.llm_engine
    for length in range(5):
        given = {name: [item] * length}
        run = {"generate": lambda given=given: llm.generate(
                   ["Once upon a time"] * prompts, GREEDY, use_tqdm=False, **given),
               "chat": lambda given=given: llm.chat(
                   [CHAT] * prompts, GREEDY, use_tqdm=False, **given)}[call]
        before = engine.memory_stats()
        if length == prompts:
            assert len(run()) == prompts
            continue
        with pytest.raises(ValueError) as info:
            run()
        caller = f"LLM.{call}()"
        plural = "s" * (prompts != 1)
        assert str(info.value) == (
            f"{caller}: {name} is a list of {length}, for {prompts} prompt{plural}: give one "
            "value per prompt, or one value (not a list) for all")
        assert engine.memory_stats() == before and not engine.groups


@pytest.mark.parametrize("value", [3, None])
def test_one_value_is_for_every_prompt(llm, value):
    assert len(llm.generate(["a", "b", "c"], GREEDY, use_tqdm=False, priority=value)) == 3
