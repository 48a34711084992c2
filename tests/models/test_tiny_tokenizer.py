"""The tiny tokenizer is byte-level: any text encodes and decodes back exactly."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pagedkit.models import load_tiny_tokenizer

TOKENIZER = load_tiny_tokenizer()
SPECIALS = TOKENIZER.all_special_tokens


def round_trip(text: str) -> str:
    ids = TOKENIZER(text)["input_ids"]
    assert ids[0] == TOKENIZER.bos_token_id
    return TOKENIZER.decode(ids, skip_special_tokens=True)


@pytest.mark.parametrize("text", [
    "Once upon a time, there was a little rabbit named Pip.",
    "Grüße aus Köln — naïve café, 日本語, Ελληνικά, emoji 🐇🌈, tabs\tand\nnewlines",
    "  leading and trailing spaces  ", "def f(x):\n    return x ** 2  # code", "",
])
def test_round_trip_of_chosen_text(text):
    assert round_trip(text) == text


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_round_trip_of_arbitrary_unicode(text):
    if any(s in text for s in SPECIALS):
        return
    assert round_trip(text) == text


def test_story_words_are_single_tokens():
    """Merges learned from the corpus make common words short, so a story costs
    about one token per word."""
    text = "Once upon a time, there was a little rabbit named Pip. He loved to play outside."
    assert len(TOKENIZER(text)["input_ids"]) <= len(text.split()) + 5
