"""pagedkit: a teaching lab for PagedAttention and paged KV-cache serving.

``import pagedkit`` is cheap: the engine (which needs torch and transformers)
loads on first use of `LLM`, `LLMEngine` or `SamplingParams`, so the pure
bookkeeping in `pagedkit.memory` and the simulator work without them.
"""

from __future__ import annotations

import importlib
from types import ModuleType

__version__ = "0.1.0"

_LAZY = {
    "LLM": "pagedkit.engine",
    "LLMEngine": "pagedkit.engine",
    "SamplingParams": "pagedkit.engine",
    "EngineArgs": "pagedkit.engine",
    "BeamSearchParams": "pagedkit.engine",
    "RequestOutput": "pagedkit.engine",
    "CompletionOutput": "pagedkit.engine",
    "KVCacheTooSmallWarning": "pagedkit.engine",
    "TextPrompt": "pagedkit.inputs",
    "TokensPrompt": "pagedkit.inputs",
    "PromptType": "pagedkit.inputs",
}

from .i18n import get_language, set_language  # noqa: E402  (no torch: cheap)

__all__ = [*_LAZY, "__version__", "get_language", "set_language"]


def __dir__() -> list[str]:
    """The public API (lazy names included) and the submodules loaded so far."""
    loaded = (n for n, v in globals().items()
              if isinstance(v, ModuleType) and v.__name__ == f"{__name__}.{n}")
    return sorted({*__all__, *loaded})


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'pagedkit' has no attribute {name!r}")
