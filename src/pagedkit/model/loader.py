"""Resolve the `model=` argument of `LLM` to a transformers model and tokenizer.

* ``"tiny"`` — the embedded default that ships inside pagedkit (no download);
* a Hugging Face model name or a local directory — loaded with transformers
  (a name needs the hub, e.g. on Colab, unless it is in the local cache; an
  unreachable hub is said at once, and a missing path is told from a name);
* an already-built ``transformers.PreTrainedModel`` — how the labs and tests
  serve random-weight configs of any size (tokenizer optional).
"""

from __future__ import annotations

import contextlib
import os
import socket
from pathlib import Path
from urllib.parse import urlparse

import torch

from .._validation import choice_name


def resolve_device(device: str | torch.device) -> torch.device:
    if str(device) == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(device)
    except (RuntimeError, TypeError) as err:
        raise ValueError(f"device must be 'auto', 'cpu', 'cuda', 'cuda:1', ... or a "
                         f"torch.device; got {device!r}") from err
    if device.type not in ("cpu", "cuda"):  # meta holds no values; mps, xla, ...: untested
        raise ValueError(f"device {str(device)!r}: pagedkit runs on 'cpu' and 'cuda' devices "
                         "only; use device='cpu', 'cuda', or 'auto' (a GPU where there is one)")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {str(device)!r} was asked for but CUDA is not available "
                         "here; use device='cpu', or 'auto' (a GPU where there is one)")
    if device.type == "cuda" and (device.index or 0) >= torch.cuda.device_count():
        raise ValueError(f"device {str(device)!r}: this machine has "
                         f"{torch.cuda.device_count()} CUDA device(s), numbered from 0; use "
                         "device='cuda' (the current one), or 'auto'")
    return device


#: The dtype names a model may be given as: vLLM 0.32's (``ModelConfig``'s
#: ``--dtype`` choices, lower-case as written: vLLM refuses ``"HALF"`` and
#: ``"Float32"`` before its own code would lower-case them), and pagedkit's
#: own float64 for exact references.
DTYPES: dict[str, torch.dtype] = {
    "half": torch.float16, "float16": torch.float16, "float": torch.float32,
    "float32": torch.float32, "bfloat16": torch.bfloat16, "float64": torch.float64}


def check_dtype(dtype: str | torch.dtype) -> None:
    """The one rule for a `dtype` argument, checked before a model loads:
    ``"auto"``, a name of `DTYPES`, or one of their torch dtypes."""
    if dtype == "auto" or (isinstance(dtype, str) and dtype in DTYPES) or (
            isinstance(dtype, torch.dtype) and dtype in DTYPES.values()):
        return
    served = sorted({str(d) for d in DTYPES.values()})
    meant = choice_name(dtype) if isinstance(dtype, str) else None
    hint = (f" (names are lower-case without spaces, as vLLM takes them: use {meant!r})"
            if meant == "auto" or meant in DTYPES else "")
    raise ValueError(f"dtype must be 'auto', one of {', '.join(map(repr, DTYPES))} (vLLM's "
                     f"names, and float64) or one of {', '.join(served)}; got {dtype!r}{hint}")


def resolve_dtype(dtype: str | torch.dtype, model: torch.nn.Module,
                  passed_in: bool = False) -> torch.dtype:
    """``"auto"``: the model's own dtype; a name of `DTYPES`; or one of their
    torch dtypes (`check_dtype`). A model `passed_in` as an object is served
    in its own dtype only: converting it would change the caller's model in
    place, and break any engine already serving it (newcomer 46)."""
    check_dtype(dtype)
    own = next(model.parameters()).dtype
    wanted = own if dtype == "auto" else dtype if isinstance(dtype, torch.dtype) else DTYPES[dtype]
    if passed_in and wanted != own:
        raise ValueError(f"dtype={dtype!r} is not the model object's own dtype ({own}): serving "
                         "it so would convert your model in place (and break any LLM already "
                         f"serving it); convert it yourself first (model.to({wanted})) or leave "
                         "dtype unset ('auto', the model's own)")
    return wanted


#: What to give instead of a model that cannot load (the command line says it in its own terms)
INSTEAD = "model='tiny' (the embedded default), a local directory, or a transformers model object"


def load_model(model, tokenizer=None, *, skip_tokenizer: bool = False,
               progress: bool = True):
    """Returns ``(model, tokenizer_or_None, name)``; with `skip_tokenizer`
    (vLLM's ``skip_tokenizer_init``) no tokenizer is loaded; `progress`
    (vLLM's ``use_tqdm_on_load``) shows transformers' "Loading weights"
    bar while a model's weights load (the embedded model's never: they load
    in milliseconds)."""
    with loading_bars(progress):
        return _load(model, tokenizer, skip_tokenizer)


@contextlib.contextmanager
def loading_bars(shown: bool):
    """transformers' progress bars shown (as they were) or hidden while loading,
    and restored after."""
    from transformers.utils import logging as hf_logging

    was = hf_logging.is_progress_bar_enabled()
    if not shown:
        hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was and not shown:
            hf_logging.enable_progress_bar()


def _load(model, tokenizer, skip_tokenizer=False):
    from transformers import PreTrainedModel

    tokenizer = None if skip_tokenizer else load_tokenizer(tokenizer)
    if isinstance(model, PreTrainedModel):
        return model, tokenizer, type(model).__name__
    if not isinstance(model, (str, Path)):
        raise TypeError("model must be 'tiny', a model name or path, or a "
                        f"transformers.PreTrainedModel; got {model!r} ({type(model).__name__})")
    name = str(model)
    if not name.strip():  # "" would be read as the current directory
        raise ValueError(f"model is empty ({model!r}); use {INSTEAD}, or a Hugging Face "
                         "model name")
    if name == "tiny":
        from ..models import load_tiny

        loaded, tok = load_tiny()
        return loaded, None if skip_tokenizer else tokenizer or tok, "tiny"
    if skip_tokenizer:
        tokenizer = False  # none wanted: `_from_pretrained` loads none
    path = Path(name).expanduser()
    if path.exists():
        if not path.is_dir():  # torch.load would read it as weights and fail in its terms
            raise ValueError(f"model path {name!r} is a file; give the folder that holds "
                             f"config.json and the weights (a model folder, not a file), or "
                             f"use {INSTEAD}")
        if tokenizer is None:  # before the weights load: said at once
            _check_holds_tokenizer(path, f"local directory {name!r}", "model")
        _check_decoder_only(path, name)
        return (*_from_pretrained(str(path), tokenizer, f"local directory {name!r}"), name)
    if _looks_like_path(name):
        raise FileNotFoundError(
            f"model path {name!r} does not exist (a Hugging Face model name is 'name' or "
            f"'org/name'); use {INSTEAD}")
    try:  # a name already in the local Hugging Face cache needs no network
        return (*_from_pretrained(name, tokenizer, "", local_files_only=True), name)
    except OSError:
        pass
    where = _hub_unreachable()
    if where:  # fail now: transformers would spend ~30 s retrying before saying so
        raise OSError(
            f"could not load model name {name!r}: it is not in the local Hugging Face cache and "
            f"{where}; use {INSTEAD}")
    return (*_from_pretrained(name, tokenizer, f"model name {name!r}"), name)


def _check_decoder_only(folder: Path, name: str) -> None:
    """Before any weight loads: the folder holds a config.json, and not an
    encoder-decoder's (transformers would refuse T5 with its list of ~150 causal-LM
    configs, and build BART's or Whisper's decoder alone, dropping the encoder), nor
    such a family's decoder saved alone (BartForCausalLM: `support.refuse_decoder_alone`)."""
    from transformers import AutoConfig

    from .support import refuse_decoder_alone

    if not (folder / "config.json").is_file():
        holds = _listing(sorted(p.name for p in folder.iterdir()))
        raise FileNotFoundError(
            f"no config.json in {name!r} (it holds {holds}): "
            f"a model folder holds the model's config.json and weights, as save_pretrained "
            f"writes them; use {INSTEAD}")
    try:
        config = AutoConfig.from_pretrained(str(folder))
    except (OSError, ValueError):
        return  # transformers' own message, wrapped by `_from_pretrained`
    arch = (getattr(config, "architectures", None) or [config.model_type])[0]
    if getattr(config, "is_encoder_decoder", False):
        raise NotImplementedError(
            f"pagedkit cannot serve {arch} from {name!r}: {arch} is an encoder-decoder model; "
            "pagedkit serves decoder-only models (docs/architectures.md); serve it with "
            "transformers' generate (or vLLM)")
    refuse_decoder_alone(f"{arch} from {name!r}", config)


def load_tokenizer(tokenizer):
    """The `tokenizer=` argument as a tokenizer object: None stays None (the
    model's own is loaded with it); a name or path (vLLM's form: ``"tiny"``,
    a local directory, a Hugging Face name) is loaded like a model's; a
    tokenizer object is kept."""
    if tokenizer is None:
        return None
    if isinstance(tokenizer, (str, Path)):
        return _tokenizer_named(str(tokenizer))
    if not callable(tokenizer) or not hasattr(tokenizer, "decode"):
        raise TypeError(f"tokenizer must be a tokenizer object (e.g. transformers' "
                        f"AutoTokenizer.from_pretrained(...)), a name or path, or None (the "
                        f"model's own); got {tokenizer!r} ({type(tokenizer).__name__}); use "
                        f"{TOKENIZER_INSTEAD}")
    return tokenizer


#: What to give as tokenizer= instead of one that cannot load
TOKENIZER_INSTEAD = ("tokenizer='tiny', a local directory with a tokenizer, a Hugging Face "
                     "name, a tokenizer object, or None (the model's own)")


def _tokenizer_named(name: str):
    from transformers import AutoTokenizer

    instead = TOKENIZER_INSTEAD
    if not name.strip():
        raise ValueError(f"tokenizer is empty ({name!r}); use {instead}")
    if name == "tiny":
        from ..models import load_tiny_tokenizer

        return load_tiny_tokenizer()
    path = Path(name).expanduser()
    if not path.exists() and _looks_like_path(name):
        raise FileNotFoundError(f"tokenizer path {name!r} does not exist (a Hugging Face name "
                                f"is 'name' or 'org/name'); use {instead}")
    if path.is_dir():
        _check_holds_tokenizer(path, f"local directory {name!r}", "tokenizer")
    try:  # a local directory, or a name already in the local Hugging Face cache
        return _checked(AutoTokenizer.from_pretrained(str(path) if path.exists() else name,
                                                      local_files_only=True),
                        f"tokenizer {name!r}", "tokenizer")
    except (OSError, ValueError) as err:
        if path.exists():
            raise OSError(f"could not load a tokenizer from local directory {name!r}: {err}\n"
                          f"Use {instead}.") from err
    where = _hub_unreachable()
    if where:
        raise OSError(f"could not load tokenizer name {name!r}: it is not in the local Hugging "
                      f"Face cache and {where}; use {instead}")
    try:
        return _checked(AutoTokenizer.from_pretrained(name), f"tokenizer name {name!r}",
                        "tokenizer")
    except OSError as err:
        raise OSError(f"could not load tokenizer name {name!r}: {err}\nUse {instead}.") from err


def _from_pretrained(name: str, tokenizer, what: str, **kwargs):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        loaded = AutoModelForCausalLM.from_pretrained(name, **kwargs)
        tok = (None if tokenizer is False else
               tokenizer or _checked(AutoTokenizer.from_pretrained(name, **kwargs),
                                     what or f"model name {name!r}", "model"))
    except OSError as err:
        if not what:
            raise
        raise OSError(f"could not load {what}: {err}\nUse {INSTEAD}.") from err
    return loaded, tok


#: What to do with a model that comes without a tokenizer (the demo says it in its own terms)
NO_TOKENIZER_INSTEAD = ("copy the model's tokenizer files into it, pass tokenizer= (a folder or "
                        "Hugging Face name that holds this model's tokenizer), or pass "
                        "skip_tokenizer_init=True and give prompts as token ids (vLLM's way; "
                        "outputs then carry token ids and no text)")

#: Files one of which holds a tokenizer transformers can load (a ``*.tiktoken`` file too)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "vocab.txt",
                   "spiece.model", "sentencepiece.bpe.model")


def _no_tokenizer(what: str, found: str, given_as: str) -> OSError:
    """A model (or tokenizer=) without a tokenizer, refused with what to do:
    transformers would build an empty one (GPT-2, Qwen2: every text is no
    tokens) or fail in sentencepiece's terms (Llama, Mistral)."""
    instead = NO_TOKENIZER_INSTEAD if given_as == "model" else f"use {TOKENIZER_INSTEAD}"
    return OSError(f"{what} has no tokenizer: {found}; {instead}")


def _check_holds_tokenizer(folder: Path, what: str, given_as: str) -> None:
    """Refuse a folder with none of `TOKENIZER_FILES`, naming them and what it holds."""
    if any((folder / f).is_file() for f in TOKENIZER_FILES) or any(folder.glob("*.tiktoken")):
        return
    holds = _listing(sorted(p.name for p in folder.iterdir()))
    raise _no_tokenizer(what, f"none of {', '.join(TOKENIZER_FILES)} or a *.tiktoken file "
                              f"(it holds {holds})", given_as)


#: How many of a folder's names a refusal lists (a folder like /tmp holds thousands)
LISTED_NAMES = 8


def _listing(names: list[str]) -> str:
    """The first `LISTED_NAMES` names and how many more: enough to see what the
    folder is, short enough that the message's point (what is missing, what to
    do) is not buried."""
    if not names:
        return "nothing"
    shown = ", ".join(names[:LISTED_NAMES])
    more = len(names) - LISTED_NAMES
    return f"{shown} and {more} more" if more > 0 else shown


def _checked(tokenizer, what: str, given_as: str):
    """A loaded tokenizer, unless it is an empty one (a vocabulary of at most one token:
    what transformers builds where it finds no tokenizer files)."""
    if len(tokenizer) <= 1:
        raise _no_tokenizer(what, f"transformers built an empty {type(tokenizer).__name__} "
                                  f"({len(tokenizer)} token) from it", given_as)
    return tokenizer


def _looks_like_path(name: str) -> bool:
    """Hub names are ``name`` or ``org/name``; anything else shaped like a path is one."""
    return (name.startswith((".", "/", "~")) or "\\" in name or name.count("/") > 1
            or name.endswith("/"))


def _hub_unreachable() -> str | None:
    """Why the Hugging Face hub cannot be reached, found in well under a second, or None."""
    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE or os.environ.get("HF_HUB_OFFLINE", "").lower() in (
            "1", "true", "yes", "on"):
        return "HF_HUB_OFFLINE is set"
    host = urlparse(constants.ENDPOINT).hostname or "huggingface.co"
    try:
        socket.create_connection((host, 443), timeout=3).close()
    except OSError as err:
        return f"the hub ({host}) is not reachable from here ({err})"
    return None
