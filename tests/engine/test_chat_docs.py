"""Second newcomer: `llm.chat` on the tiny model returns story fragments,
and nothing said so. docs/api.md and the chat docstring say it, quote what
the tiny model does give (checked here), and name a model for real answers."""

import re
from pathlib import Path

from pagedkit import LLM, SamplingParams

API = Path(__file__).resolve().parents[2] / "docs" / "api.md"


def test_the_docs_say_the_tiny_model_does_not_chat_and_what_to_use():
    docs = " ".join(API.read_text().split())
    chat = " ".join(LLM.chat.__doc__.split())
    for text in (docs, chat):
        assert "Qwen/Qwen2.5-0.5B-Instruct" in text
    assert "The tiny model answers no question" in chat
    quoted = re.search(r"asked \"(.*?)\" it goes on with story fragments \(`'(.*?) \.\.\.'`\)",
                       docs)
    assert quoted, "docs/api.md quotes the tiny model's chat"
    question, start = quoted.groups()
    [out] = LLM("tiny").chat([{"role": "user", "content": question}],
                             SamplingParams(temperature=0, max_tokens=40), use_tqdm=False)
    assert out.outputs[0].text.startswith(start), out.outputs[0].text  # what it gives
    assert "Paris" not in out.outputs[0].text  # and no answer
