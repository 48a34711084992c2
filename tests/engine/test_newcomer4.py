"""The fourth newcomer's findings (a vLLM user's first hour): each a value
the user gave, served as vLLM serves it or refused naming it."""

from __future__ import annotations

import pytest

from pagedkit import LLM, SamplingParams
from pagedkit.models import TINY_DIR

GREEDY = SamplingParams(temperature=0, max_tokens=4)
PROMPT = "Once upon a time"


@pytest.fixture(scope="module")
def reference():
    return LLM("tiny", num_blocks=16).generate(PROMPT, GREEDY, use_tqdm=False)[0]


@pytest.fixture(scope="module")
def saved_tiny(tmp_path_factory):
    """The tiny model saved as a local directory (vLLM's LLM(model=path, tokenizer=path))."""
    path = tmp_path_factory.mktemp("saved_tiny")
    llm = LLM("tiny", num_blocks=4)
    llm.llm_engine.runner.model.save_pretrained(path)
    llm.get_tokenizer().save_pretrained(path)
    return path


# F13: tokenizer= as a name or path (vLLM's form) is loaded, as vLLM loads it
@pytest.mark.parametrize("model, tokenizer", [
    ("tiny", "tiny"), ("tiny", "saved"), ("saved", "tiny"), ("saved", "saved"),
    ("tiny", "tiny_dir"), ("saved", None), ("tiny", "saved_path")])
def test_tokenizer_by_name_or_path(reference, saved_tiny, model, tokenizer):
    names = {"tiny": "tiny", "saved": str(saved_tiny), "tiny_dir": str(TINY_DIR),
             "saved_path": saved_tiny, None: None}
    llm = LLM(names[model], tokenizer=names[tokenizer], num_blocks=16)
    out = llm.generate(PROMPT, GREEDY, use_tqdm=False)[0]
    assert out.prompt_token_ids == reference.prompt_token_ids
    assert out.outputs[0].token_ids == reference.outputs[0].token_ids
    assert out.outputs[0].text == reference.outputs[0].text


@pytest.mark.parametrize("tokenizer, error, named", [
    (123, TypeError, "got 123 (int)"), (b"tiny", TypeError, "b'tiny'"),
    ("", ValueError, "tokenizer is empty"), ("  ", ValueError, "tokenizer is empty"),
    ("./no/such/dir", FileNotFoundError, "'./no/such/dir' does not exist"),
    ("/no/such/tokenizer", FileNotFoundError, "'/no/such/tokenizer' does not exist"),
    (object(), TypeError, "(object)")])
def test_a_tokenizer_that_is_not_one_is_refused_at_construction(tokenizer, error, named):
    with pytest.raises(error, match="tokenizer") as info:
        LLM("tiny", tokenizer=tokenizer, num_blocks=4)
    assert named in str(info.value)
    assert "tiny" in str(info.value)  # what to give instead


def test_a_directory_without_a_tokenizer_is_refused_naming_it(tmp_path):
    with pytest.raises(OSError, match=f"local directory {str(tmp_path)!r}"):
        LLM("tiny", tokenizer=str(tmp_path), num_blocks=4)


# F4: an empty model name is not the current directory
@pytest.mark.parametrize("model", ["", " ", "\t"])
def test_an_empty_model_is_refused(model):
    with pytest.raises(ValueError, match=r"model is empty .*model='tiny'"):
        LLM(model)
