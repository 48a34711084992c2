"""vLLM's prompt types: `TextPrompt`, `TokensPrompt` and `PromptType`.

Like vLLM's, they are typed dicts: ``TokensPrompt(prompt_token_ids=[1, 2])``
is the plain dict ``{"prompt_token_ids": [1, 2]}``, which `LLM.generate`
takes as it takes any of vLLM's prompt forms. Either may carry a
``cache_salt`` (requests share cached prefix blocks only within one salt),
and a `TokensPrompt` its ``prompt``: the text its ids came from, reported as
the output's ``prompt`` (the ids are what is served).
"""

from __future__ import annotations

from typing import TypedDict


class _PromptOptions(TypedDict, total=False):
    """What either prompt may carry (vLLM's ``_PromptOptions``, the text-only part)."""

    cache_salt: str


class TextPrompt(_PromptOptions):
    """A prompt as text: ``{"prompt": str}``."""

    prompt: str


class _TokensOptions(_PromptOptions, total=False):
    prompt: str  # the text the ids came from, if known


class TokensPrompt(_TokensOptions):
    """A prompt as token ids: ``{"prompt_token_ids": [int, ...]}``."""

    prompt_token_ids: list[int]


#: One prompt in any form `LLM.generate` takes (vLLM's ``PromptType``, text-only part):
#: text, or either typed dict.
PromptType = str | TextPrompt | TokensPrompt

__all__ = ["PromptType", "TextPrompt", "TokensPrompt"]
