"""The embedded default model, "tiny": a small Llama and its tokenizer, inside the package.

Why it exists: the labs must run where no model hub is reachable (a laptop offline, CI),
so `LLM(model="tiny")` needs a real transformers model that ships with pagedkit. It is a
4-layer Llama with grouped-query attention (4 query heads, 2 KV heads, head_dim 64),
trained for a few CPU minutes on procedurally generated children's stories
(`corpus.py`, `train_tiny.py`; docs/tiny_model.md has the numbers). Where a hub is
reachable, real models load by name instead.

Importing this module is cheap: torch and transformers load when a loader is called.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch
    from transformers import LlamaForCausalLM, PreTrainedTokenizerBase

TINY_DIR: Path = Path(__file__).resolve().parent / "tiny"

__all__ = ["TINY_DIR", "load_tiny", "load_tiny_tokenizer"]


def _check_present() -> None:
    if not (TINY_DIR / "config.json").is_file():
        raise FileNotFoundError(
            f"the tiny model is missing from {TINY_DIR}; rebuild it with "
            f"`python -m pagedkit.models.train_tiny --out {TINY_DIR}`")


def load_tiny_tokenizer() -> PreTrainedTokenizerBase:
    """The tiny model's byte-level BPE tokenizer (prepends BOS when encoding)."""
    from transformers import AutoTokenizer

    _check_present()
    return AutoTokenizer.from_pretrained(TINY_DIR, local_files_only=True)


def load_tiny(
    dtype: torch.dtype | None = None, device: str | torch.device = "cpu"
) -> tuple[LlamaForCausalLM, PreTrainedTokenizerBase]:
    """Load the tiny model in eval mode, cast to `dtype` (float32 by default), on `device`.

    The weights are stored in float16 to keep the package small; asking for float32
    upcasts them exactly, so every dtype sees the same trained values.
    """
    import torch
    from transformers import LlamaForCausalLM

    from ..model.loader import loading_bars

    _check_present()
    dtype = torch.float32 if dtype is None else dtype
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"dtype must be a floating-point torch.dtype, got {dtype!r}")
    # 38 tensors load in milliseconds: a progress bar would only clutter
    # notebook outputs (and nbval compares them).
    with loading_bars(False):
        model = LlamaForCausalLM.from_pretrained(TINY_DIR, dtype=dtype, local_files_only=True)
    return model.to(device).eval(), load_tiny_tokenizer()
