"""newcomer20, finding 1: a "developer" message the chat template does not
name is rendered as vLLM 0.32 renders it: as a system message, all system
messages merged into one, first, joined by a blank line
(`pagedkit.engine.llm._developer_as_system`). tests/vllm/test_chat_developer.py
checks the same cases against vLLM itself."""

import copy
import json

import pytest

from pagedkit import LLM, SamplingParams
from pagedkit.models import TINY_DIR

S, U = {"role": "system", "content": "s"}, {"role": "user", "content": "u"}
D = {"role": "developer", "content": "d"}
# the tiny model's template with the role named in it (a Jinja comment): vLLM keeps developer
NAMES_DEVELOPER = (json.loads((TINY_DIR / "tokenizer_config.json").read_text())["chat_template"]
                   + "{# 'developer' #}")

# (name, conversation, chat_template, the prompt rendered)
CASES = [
    ("developer alone", [D], None, "<|bos|>system: d\nassistant:"),
    ("developer, user", [D, U], None, "<|bos|>system: d\nuser: u\nassistant:"),
    ("user, developer", [U, D], None, "<|bos|>system: d\nuser: u\nassistant:"),
    ("system, user, developer", [S, U, D], None, "<|bos|>system: s\n\nd\nuser: u\nassistant:"),
    ("two systems, no developer", [S, U, {"role": "system", "content": "t"}], None,
     "<|bos|>system: s\nuser: u\nsystem: t\nassistant:"),
    ("two systems, developer", [S, U, {"role": "system", "content": "t"}, D], None,
     "<|bos|>system: s\n\nt\n\nd\nuser: u\nassistant:"),
    ("empty contents left out", [{"role": "system", "content": ""}, U, D,
                                 {"role": "developer", "content": None}], None,
     "<|bos|>system: d\nuser: u\nassistant:"),
    ("developer text parts", [{"role": "developer", "content": [{"type": "text", "text": "a"},
                                                                {"type": "text", "text": "b"}]},
                              U, D], None, "<|bos|>system: a\nb\n\nd\nuser: u\nassistant:"),
    ("a template naming developer keeps it", [S, U, D], NAMES_DEVELOPER,
     "<|bos|>system: s\nuser: u\ndeveloper: d\nassistant:"),
]


@pytest.fixture(scope="module")
def llm():
    return LLM("tiny", dtype="float32", block_size=32, max_model_len=256, seed=0)


@pytest.mark.parametrize("name, conversation, template, expected", CASES,
                         ids=[c[0] for c in CASES])
def test_developer_messages_render_as_vllms(llm, name, conversation, template, expected):
    given = copy.deepcopy(conversation)
    [out] = llm.chat(conversation, SamplingParams(temperature=0, max_tokens=1),
                     use_tqdm=False, chat_template=template)
    assert out.prompt == expected
    assert conversation == given  # the caller's messages are left as they were
