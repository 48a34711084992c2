"""Newcomer 45's findings (issue #26), each as it was met."""

import pytest

from pagedkit import LLM, EngineArgs, SamplingParams
from pagedkit.engine import LLMEngine


@pytest.mark.parametrize("seed", [-1, -2, -2**31, -2**32, -2**64])
@pytest.mark.parametrize("where", ["LLM", "EngineArgs"])
def test_a_negative_engine_seed_says_the_range_and_what_minus_one_means(seed, where):
    """LLM(seed=-1) said only "seed must be >= 0": a user carrying
    SamplingParams' -1 ("no seed") over met no range and no way out."""
    build = {"LLM": lambda: LLM("tiny", num_blocks=4, seed=seed),
             "EngineArgs": lambda: LLMEngine.from_engine_args(
                 EngineArgs(model="tiny", num_blocks=4, seed=seed))}[where]
    with pytest.raises(ValueError) as info:
        build()
    message = str(info.value)
    assert message.startswith(f"seed must be 0 to 2**32-1 (4294967295), got {seed}: ")
    assert "-1 means no seed only in SamplingParams" in message
    assert "leave seed unset (0)" in message


def test_minus_one_still_means_no_seed_in_a_request():
    llm = LLM("tiny", num_blocks=8)
    params = SamplingParams(temperature=1.0, max_tokens=3, seed=-1)
    output = llm.generate("Once upon a time", params, use_tqdm=False)[0]
    assert len(output.outputs[0].token_ids) == 3
