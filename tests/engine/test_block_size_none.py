"""newcomer20, finding 5: ``block_size=None`` is vLLM's default (its platform
picks a size), so a vLLM script may spell it out; pagedkit takes it as its
own default, 16, on every way an engine is built. Other values are checked
as before."""

import pytest

from pagedkit import LLM, EngineArgs, LLMEngine
from pagedkit.engine.llm_engine import DEFAULT_BLOCK_SIZE

BUILDS = {
    "LLM": lambda **kw: LLM("tiny", num_blocks=8, **kw).llm_engine,
    "LLMEngine": lambda **kw: LLMEngine("tiny", num_blocks=8, **kw),
    "EngineArgs": lambda **kw: LLMEngine.from_engine_args(
        EngineArgs(model="tiny", num_blocks=8, **kw)),
}


@pytest.mark.parametrize("build", BUILDS.values(), ids=BUILDS.keys())
def test_none_is_the_default_block_size(build):
    assert DEFAULT_BLOCK_SIZE == 16
    assert build(block_size=None).kv.block_size == build().kv.block_size == DEFAULT_BLOCK_SIZE


@pytest.mark.parametrize("value", [0, "16", 16.0, True])
def test_other_values_are_still_checked(value):
    with pytest.raises((TypeError, ValueError), match="block_size"):
        LLMEngine("tiny", num_blocks=8, block_size=value)
