"""Newcomer 37: a prompt longer than max_num_batched_tokens (chunking off)
was told "raise it", with no value. The refusal now names the values that
serve it; here each piece of advice is followed and served, and one less is
refused, for budgets and prompt lengths around the limit."""

from __future__ import annotations

import re

import pytest

from pagedkit import LLM, SamplingParams

GREEDY = SamplingParams(temperature=0, max_tokens=1)


@pytest.mark.parametrize("budget", [8, 16, 33])
def test_each_advice_serves_the_prompt(budget):
    llm = LLM("tiny", num_blocks=32, max_num_batched_tokens=budget)
    assert len(llm.generate([list(range(5, 5 + budget))], GREEDY, use_tqdm=False)) == 1
    for extra in (1, 2, 9):
        prompt = list(range(5, 5 + budget + extra))
        with pytest.raises(ValueError) as info:
            llm.generate([prompt], GREEDY, use_tqdm=False)
        message = str(info.value)
        n = len(prompt)
        assert (f"the prompt has {n} tokens but max_num_batched_tokens is {budget}; give "
                f"max_num_batched_tokens={n} or more, set enable_chunked_prefill=True (the "
                f"prompt then runs in chunks of up to {budget}), or shorten the prompt to "
                f"{budget} tokens or fewer") in message
        assert not llm.llm_engine.groups
        given = int(re.search(r"max_num_batched_tokens=(\d+)", message)[1])
        for tokens, served in ((given, True), (given - 1, False)):
            other = LLM("tiny", num_blocks=32, max_num_batched_tokens=tokens)
            if served:
                assert len(other.generate([prompt], GREEDY, use_tqdm=False)) == 1
            else:
                with pytest.raises(ValueError):
                    other.generate([prompt], GREEDY, use_tqdm=False)
        chunked = LLM("tiny", num_blocks=32, max_num_batched_tokens=budget,
                      enable_chunked_prefill=True)
        assert len(chunked.generate([prompt], GREEDY, use_tqdm=False)) == 1
