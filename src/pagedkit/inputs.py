"""vLLM's prompt types: `TextPrompt` and `TokensPrompt`.

Like vLLM's, they are typed dicts: ``TokensPrompt(prompt_token_ids=[1, 2])``
is the plain dict ``{"prompt_token_ids": [1, 2]}``, which `LLM.generate`
takes as it takes any of vLLM's prompt forms.
"""

from __future__ import annotations

from typing import TypedDict


class TextPrompt(TypedDict):
    """A prompt as text: ``{"prompt": str}``."""

    prompt: str


class TokensPrompt(TypedDict):
    """A prompt as token ids: ``{"prompt_token_ids": [int, ...]}``."""

    prompt_token_ids: list[int]


__all__ = ["TextPrompt", "TokensPrompt"]
