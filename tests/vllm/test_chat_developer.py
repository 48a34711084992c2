"""newcomer20, finding 1, beside vLLM 0.32: for each conversation of
tests/engine/test_chat_developer.py (developer messages with a template that
does not name the role, and one that does), `LLM.chat` renders the prompt
vLLM renders, to the same token ids, and greedy decoding gives the same tokens."""

import pytest

from pagedkit.vllm import api_check
from tests.engine.test_chat_developer import CASES

pytestmark = pytest.mark.vllm


def chats(system):
    api, llm = api_check.open_system(system)
    params = api.SamplingParams(temperature=0, max_tokens=3)
    results = {}
    for name, conversation, template, _ in CASES:
        [out] = llm.chat(conversation, params, use_tqdm=False, chat_template=template)
        results[name] = [out.prompt, list(out.prompt_token_ids), list(out.outputs[0].token_ids)]
    return results


def test_chat_with_developer_messages_is_vllms():
    ours, theirs = chats("pagedkit"), chats("vllm")
    for name, *_, expected in CASES:
        assert ours[name] == theirs[name], name
        assert theirs[name][0] == expected, name  # the prompts the pagedkit test expects
