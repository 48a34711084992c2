"""Issue #26, the seventh newcomer's findings that needed engine code, each
pinned beside what vLLM 0.32 does (run on the tiny model's weights)."""

import pytest

from pagedkit import LLM, SamplingParams

HI = {"role": "user", "content": "hi"}
#: vLLM 0.32's LLM.chat([HI]) on the tiny model's weights (greedy, 4 tokens): its
#: prompt token ids and its output, run beside this change
VLLM_HI = ([0, 87, 85, 293, 28, 280, 75, 201, 67, 656, 302, 86, 991, 28], [287, 14, 289, 261])


@pytest.fixture(scope="module")
def llm():
    return LLM("tiny")


@pytest.mark.parametrize("messages", [[], ()], ids=repr)
def test_chat_of_no_conversations_is_no_outputs(llm, messages):
    """Finding 2: chat([]) raised 'messages must be a conversation ...';
    vLLM returns [], as generate([]) does in both."""
    assert llm.chat(messages, SamplingParams(max_tokens=4), use_tqdm=False) == []
    assert llm.get_num_unfinished_requests() == 0


@pytest.mark.parametrize("messages", [[[]], [[], []], [[], [HI]], [[HI], []], ([],)], ids=repr)
def test_an_empty_conversation_is_refused_as_vllm_refuses_it(llm, messages):
    """vLLM 0.32 refuses each of these with this message (a ValueError)."""
    with pytest.raises(ValueError, match="Cannot apply chat template to an empty conversation"):
        llm.chat(messages, SamplingParams(max_tokens=4), use_tqdm=False)
    assert llm.get_num_unfinished_requests() == 0


@pytest.mark.parametrize("messages", [[HI], [[HI]], ([HI],)], ids=repr)
def test_a_conversation_beside_the_empty_cases_is_vllms(llm, messages):
    [out] = llm.chat(messages, SamplingParams(max_tokens=4, temperature=0), use_tqdm=False)
    assert (list(out.prompt_token_ids), list(out.outputs[0].token_ids)) == VLLM_HI
