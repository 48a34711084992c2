"""Resolve the `model=` argument of `LLM` to a transformers model and tokenizer.

* ``"tiny"`` — the embedded default that ships inside pagedkit (no download);
* a Hugging Face model name or a local directory — loaded with transformers
  (a name needs the hub, e.g. on Colab);
* an already-built ``transformers.PreTrainedModel`` — how the labs and tests
  serve random-weight configs of any size (tokenizer optional).
"""

from __future__ import annotations

from pathlib import Path

import torch


def resolve_device(device: str | torch.device) -> torch.device:
    if str(device) == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {str(device)!r} was asked for but CUDA is not available here")
    return device


def resolve_dtype(dtype: str | torch.dtype, model: torch.nn.Module) -> torch.dtype:
    """``"auto"``: the model's own dtype (so a model passed in is not converted)."""
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype == "auto":
        return next(model.parameters()).dtype
    names = {"float32": torch.float32, "float16": torch.float16, "half": torch.float16,
             "bfloat16": torch.bfloat16, "float64": torch.float64}
    if dtype not in names:
        raise ValueError(f"dtype must be 'auto', a torch.dtype or one of {sorted(names)}; "
                         f"got {dtype!r}")
    return names[dtype]


def load_model(model, tokenizer=None):
    """Returns ``(model, tokenizer_or_None, name)``."""
    from transformers import PreTrainedModel

    if isinstance(model, PreTrainedModel):
        return model, tokenizer, type(model).__name__
    if not isinstance(model, (str, Path)):
        raise TypeError("model must be 'tiny', a model name or path, or a "
                        f"transformers.PreTrainedModel; got {type(model).__name__}")
    name = str(model)
    if name == "tiny":
        from ..models import load_tiny

        loaded, tok = load_tiny()
        return loaded, tokenizer or tok, "tiny"
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        loaded = AutoModelForCausalLM.from_pretrained(name)
        tok = tokenizer or AutoTokenizer.from_pretrained(name)
    except OSError as err:
        where = "local directory" if Path(name).exists() else "model name"
        raise OSError(
            f"could not load {where} {name!r}: {err}\nA model name needs the Hugging Face hub, "
            "which is not reachable from here; use model='tiny' (the embedded default), a local "
            "path, or pass a transformers model object.") from err
    return loaded, tok, name
