"""Argument checks shared by the whole package: one clear message per mistake."""

from __future__ import annotations

import argparse
import collections.abc
import difflib
import enum
import math
import numbers
import os
import re
import sys
import warnings
from typing import Any, NamedTuple

from .i18n import _, join_names

#: What `check_prompt` accepts, as said in its errors (vLLM's prompt forms).
PROMPT_FORMS = ("a string, a list of token ids (ints), {'prompt': str} or "
                "{'prompt_token_ids': [int, ...]} (with its text as 'prompt' if you like; "
                "either dict may carry a 'cache_salt': str)")


class PromptInput(NamedTuple):
    """A prompt as `check_prompt` gives it: its text, its token ids, or both
    (vLLM's ``TokensPrompt`` may carry the text its ids came from: the ids
    are served, the text is the output's ``prompt``), and its cache salt
    (None: none)."""

    text: str | None
    token_ids: list[int] | None
    cache_salt: str | None = None


#: the commands that take ``--no-progress`` (each benchmark and each ``vllm`` command
#: too), so it is taken before the command's name as well: ``python -m pagedkit
#: --no-progress demo`` is ``python -m pagedkit demo --no-progress`` (tests/test_cli.py
#: holds this list to the commands' own parsers)
NO_PROGRESS = ("demo", "bench", "simulate", "vllm")


def no_progress_refusal(command: str) -> str:
    """What a command without progress output says to ``--no-progress``, given
    before its name or after it (`lab`, which passes other options on to JupyterLab)."""
    return (_("--no-progress: {command} shows no progress to leave out; run {prog} {command} "
              "without it (--no-progress is for {commands})")
            .format(command=command, prog=PROG, commands=join_names(NO_PROGRESS)))


_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def _inside_pagedkit(frame: Any) -> bool:
    """A frame of pagedkit's code: by its file, or by its module for generated code
    (a dataclass's ``__init__`` runs from ``<string>``)."""
    module = frame.f_globals.get("__name__", "")
    return (module == "pagedkit" or module.startswith("pagedkit.")
            or os.path.abspath(frame.f_code.co_filename).startswith(_PACKAGE_DIR))


def did_you_mean(name: str, names: collections.abc.Iterable[str]) -> str:
    """``" (did you mean 'temperature'?)"``: the one of `names` spelled closest
    to a `name` that is not one of them, for a refusal to end with ('' when
    none is close). The one wording of every "unexpected argument" message."""
    match = difflib.get_close_matches(name, list(names), n=1)
    return f" (did you mean {match[0]!r}?)" if match else ""


def warn_at_caller(message: str, category: type[Warning] = UserWarning) -> None:
    """`warnings.warn`, located at the user's line: the first frame outside pagedkit.

    Python prints a warning's file and line, and ``filterwarnings(module=...)`` matches
    them; the line that means something to a user is their own call of `LLM.generate`,
    `beam_search` or `LLMEngine.step`, however deep inside pagedkit the warning arose.
    """
    frame, level = sys._getframe(1), 2  # stacklevel=2 is warn_at_caller's caller
    while frame is not None and _inside_pagedkit(frame):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, category, stacklevel=level if frame is not None else 2)


def check_int(name: str, value: object, *, minimum: int | None = None,
              maximum: int | None = None, whole_floats: bool = False) -> int:
    """Return `value` as an int, or raise naming `name`, the value and the bound it broke.
    With `whole_floats`, a float that is a whole number (``5.0``) is taken as that int;
    another float (``5.5``) is refused with the two ints around it."""
    if whole_floats and isinstance(value, numbers.Real) and not isinstance(
            value, (bool, numbers.Integral)):
        number = float(value)
        if not number.is_integer():
            around = (f": give {math.floor(number)} or {math.ceil(number)}"
                      if math.isfinite(number) else "")
            raise ValueError(f"{name} must be a whole number, got {value!r}{around}")
        value = int(number)
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer, got {value!r} ({type(value).__name__})")
    value = int(value)
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{name} must be <= {maximum}, got {value}")
    return value


def check_token_ids(name: str, ids: object) -> list[int]:
    """Return `ids` as a list of token ids, or raise naming the first bad one.

    The one rule for token ids, the one `LLMEngine` checks a prompt's ids by
    before its vocabulary's range: a list, tuple or range of ints (numpy's
    ints count; a bool, a float, None or a str does not). A one-shot iterator
    is refused too: read once to be checked, it would be empty when the
    tokens are stored. The paged memory takes any int: there an id is only
    content to compare, and the simulator and lab 07 use negative ones as ids
    no tokenizer gives."""
    if not isinstance(ids, (list, tuple, range)):
        raise TypeError(f"{name} must be a list of token ids (ints), got {_short(ids)} "
                        f"({type(ids).__name__}){_as_token_ids(ids)}")
    if type(ids) is list and all(type(t) is int for t in ids):  # the common case, at once
        return list(ids)
    for i, t in enumerate(ids):
        if isinstance(t, bool) or not isinstance(t, numbers.Integral):
            raise TypeError(f"{name}[{i}] is {t!r} ({type(t).__name__}); token ids are ints, "
                            "as a tokenizer gives them")
    return [int(t) for t in ids]


def check_bool(name: str, value: object) -> bool:
    """Return `value` if it is True or False. A string such as ``'no'`` is
    truthy, so taking ``bool(value)`` would silently mean the opposite."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, got {value!r} ({type(value).__name__})")
    return value


def check_number(name: str, value: object, *, minimum: float | None = None,
                 positive: bool = False) -> float:
    """Return `value` as a finite float (>= `minimum`, or > 0 if `positive`), else raise."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number, got {value!r} ({type(value).__name__})")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    if positive and not value > 0:
        raise ValueError(f"{name} must be > 0, got {value!r}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value!r}")
    return value


def is_value(value: object, accepted: object) -> bool:
    """`value` is `accepted`, not merely equal (True == 1 == 1.0): the value
    a vLLM option may take in pagedkit (`engine.args`, `sampling_params`); a
    member of one of vLLM's enums counts as its value."""
    if isinstance(value, enum.Enum):
        value = value.value
    if isinstance(accepted, enum.Enum):
        accepted = accepted.value
    if isinstance(accepted, int) and not isinstance(accepted, bool):
        return isinstance(value, int) and not isinstance(value, bool) and value == accepted
    return type(value) is type(accepted) and value == accepted


def check_choice(name: str, value: object, choices: tuple[str, ...]) -> str:
    """Return `value` if it is one of `choices`, else raise listing them."""
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, choices))}; got {value!r}")
    return value  # type: ignore[return-value]


def choice_name(value: object) -> object:
    """A name given for one of pagedkit's own choices, read the one way all of them
    are: case and surrounding spaces aside (``"Max"``, ``"OPT-13B"``, ``"Static"``,
    ``"PagedKit"``: the simulator's managers, presets, datasets and modes, ``vllm
    compare``'s systems). Anything but a string is returned as it is, for its check
    to refuse."""
    return value.strip().lower() if isinstance(value, str) else value


def check_name(name: str, value: object, choices: tuple[str, ...]) -> str:
    """`value` read as `choice_name` reads it, if that is one of `choices` (all
    lower case); else raise listing them, naming `value` as it was given."""
    read = choice_name(value)
    return read if read in choices else check_choice(name, value, choices)


def check_prompt(prompt: Any, name: str = "prompt") -> PromptInput:
    """A prompt's text or token ids (and cache salt), from any of vLLM's forms.

    Anything else is refused by name: iterating a dict, a tensor or a number
    would otherwise serve something the caller never wrote (``{1: 2, 3: 4}``
    read as the tokens ``[1, 3]``). A `PromptInput` (checked already) is
    returned as it is."""
    if isinstance(prompt, PromptInput):
        return prompt
    if isinstance(prompt, str):
        return PromptInput(prompt, None)
    if isinstance(prompt, dict):
        return _prompt_dict(prompt, name)
    if isinstance(prompt, (list, tuple, range)):
        return PromptInput(None, _token_ids(prompt, name))
    hint = " (a tensor or array: pass .tolist())" if hasattr(prompt, "tolist") else ""
    raise TypeError(f"{name} {_short(prompt)} ({type(prompt).__name__}) is not a prompt{hint}; "
                    f"a prompt is {PROMPT_FORMS}")


def _prompt_dict(prompt: dict, name: str) -> PromptInput:
    """vLLM's ``TextPrompt`` (``prompt``) or ``TokensPrompt`` (``prompt_token_ids``,
    and ``prompt``, its text, if given), each with an optional ``cache_salt``."""
    prompt = _without_vllms_keys(prompt, name)
    salt = check_cache_salt(prompt.pop("cache_salt", None), f"{name}['cache_salt']")
    text = prompt.get("prompt")
    if set(prompt) == {"prompt", "prompt_token_ids"} and text is None:
        del prompt["prompt"]  # token ids with no text, as vLLM takes them
    if set(prompt) in ({"prompt"}, {"prompt", "prompt_token_ids"}) and not isinstance(text, str):
        raise TypeError(f"{name}['prompt'] must be a string (the prompt's text), got "
                        f"{_short(text)} ({type(text).__name__})")
    if set(prompt) == {"prompt"}:
        return PromptInput(text, None, salt)
    if set(prompt) in ({"prompt_token_ids"}, {"prompt", "prompt_token_ids"}):
        return PromptInput(text, _token_ids(prompt["prompt_token_ids"],
                                            f"{name}['prompt_token_ids']"), salt)
    raise TypeError(f"{name} {_short(prompt)} is a dict with keys {sorted(map(str, prompt))}; "
                    f"a prompt is {PROMPT_FORMS}")


def check_cache_salt(salt: object, name: str = "cache_salt") -> str | None:
    """A prompt's ``cache_salt`` (vLLM's): a string, or None for none. An
    empty string salts nothing, as in vLLM (its salt is keyed only if
    non-empty): it is None here."""
    if salt is None:
        return None
    if not isinstance(salt, str):
        raise TypeError(f"{name} must be a string, got {_short(salt)} ({type(salt).__name__}); "
                        "requests with equal salts share cached prefixes, others never do")
    return salt or None


#: Keys of vLLM's prompt dicts pagedkit does not serve, and why (None is taken: it
#: changes nothing; so is an empty value of the multi-modal ones, `EMPTY_TAKEN`).
VLLM_PROMPT_KEYS = {
    "multi_modal_data": "pagedkit serves text-only models",
    "multi_modal_uuids": "pagedkit serves text-only models",
    "mm_processor_kwargs": "pagedkit serves text-only models",
    "prompt_embeds": "pagedkit takes text or token ids, not embeddings",
    "token_type_ids": "for pooling models; pagedkit generates",
}


#: Prompt keys whose empty value (``{}``, ``[]``) vLLM serves as a text prompt.
EMPTY_TAKEN = ("multi_modal_data", "multi_modal_uuids", "mm_processor_kwargs")


def _without_vllms_keys(prompt: dict, name: str) -> dict:
    """`prompt` without vLLM's keys that hold nothing (None; ``{}`` or ``[]`` for
    `EMPTY_TAKEN`); any other value of one is refused by name, as vLLM's
    arguments are (`engine.args.check_call_args`)."""
    for key, why in VLLM_PROMPT_KEYS.items():
        value = prompt.get(key)
        empty = key in EMPTY_TAKEN and isinstance(value, (dict, list, tuple)) and not value
        if value is not None and not empty:
            raise TypeError(f"{name}: the key {key!r} is vLLM's, not pagedkit's ({why}); "
                            f"give the prompt without it, as {PROMPT_FORMS}")
    return {k: v for k, v in prompt.items() if k not in VLLM_PROMPT_KEYS}


def _as_token_ids(ids: object) -> str:
    """What to give in place of `ids`, not a list of token ids (`check_token_ids`),
    as "; advice", true for its kind, or "" where there is none to give. Bytes
    are refused: their values are a byte-level tokenizer's input, not its ids."""
    if isinstance(ids, str):
        return "; a string is text: tokenize it first (tokenizer.encode(text))"
    if isinstance(ids, (bytes, bytearray)):
        return ("; bytes are not token ids: decode them to text and tokenize it "
                "(tokenizer.encode(text))")
    if isinstance(ids, numbers.Integral) and not isinstance(ids, bool):
        return f"; one token is a list of one: [{ids}]"
    if hasattr(ids, "tolist"):  # a 0-d one's tolist() is an int
        return ("; a 0-d tensor or array holds one token: give [ids.item()]"
                if getattr(ids, "ndim", None) == 0 else "; a tensor or array: give ids.tolist()")
    if isinstance(ids, collections.abc.Iterator):
        return "; an iterator: give list(...) of it (read once, it would be empty when stored)"
    return ""


def _token_ids(ids: Any, name: str) -> list[int]:
    if not isinstance(ids, (list, tuple, range)):
        raise TypeError(f"{name} must be a list of token ids (ints), got {_short(ids)} "
                        f"({type(ids).__name__}){_as_token_ids(ids)}")
    for i, t in enumerate(ids):
        if isinstance(t, bool) or not isinstance(t, numbers.Integral):
            raise TypeError(f"{name}[{i}] is {t!r} ({type(t).__name__}); token ids are ints, "
                            f"and a prompt is {PROMPT_FORMS}")
    return [int(t) for t in ids]


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


# ------------------------------------------------------------ command lines
#: How every command line names itself (usage lines, help, hints): as the README runs it.
PROG = "python -m pagedkit"


# argparse `type=` functions: a bad value becomes a usage error (exit 2) that
# names the option and the limit, never a traceback deep inside a run.
def _whole_number(text: str, minimum: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(_("expected a whole number >= {minimum}, got {text!r}")
                                         .format(minimum=minimum, text=text)) from None
    if value < minimum:
        raise argparse.ArgumentTypeError(_("must be >= {minimum}, got {value}")
                                         .format(minimum=minimum, value=value))
    return value


def num_blocks_option(message: str, num_blocks: int) -> str | None:
    """The engine's refusal of a KV cache of `num_blocks` larger than the
    memory it would live in, said in a command line's terms: --num-blocks,
    the one size the commands take (the advice on kv_cache_memory, an API
    argument, is left out). None for any other message."""
    if not message.startswith(f"num_blocks={num_blocks}: a KV cache of "):
        return None
    message = re.sub(r" \(or kv_cache_memory=\d+ or less\), or leave num_blocks and "
                     r"kv_cache_memory unset \([^)]*\)", "", message)
    return message.replace(f"num_blocks={num_blocks}: ",
                           f"--num-blocks {num_blocks} is too large: ", 1).replace(
        "give num_blocks=", "give --num-blocks ")


def positive_int(text: str) -> int:
    """An argparse type: a whole number >= 1."""
    return _whole_number(text, 1)


def non_negative_int(text: str) -> int:
    """An argparse type: a whole number >= 0 (a seed)."""
    return _whole_number(text, 0)


def writable_file(text: str) -> str:
    """An argparse type: a file that can be written (its folder exists and
    takes new files; it is not a folder itself), checked before a long run
    that would end by writing it — by opening it for appending (a file made
    for the check is removed again): `os.access` says yes to root for a
    read-only folder, /proc or /sys, where the write would still fail."""
    path = os.path.abspath(text)
    folder = os.path.dirname(path)
    if os.path.isdir(path):
        raise argparse.ArgumentTypeError(f"{text!r} is a folder; give a file name in it")
    if os.path.exists(folder) and not os.path.isdir(folder):
        raise argparse.ArgumentTypeError(f"cannot write {text!r}: {folder} is a file, not a "
                                         "folder (choose a path in a folder)")
    if not os.path.isdir(folder):
        raise argparse.ArgumentTypeError(f"cannot write {text!r}: the folder {folder} does not "
                                         "exist (create it first, or choose another path)")
    existed = os.path.exists(path)
    try:
        with open(path, "a"):  # appending changes nothing in a file that is there
            pass
    except OSError as err:
        raise argparse.ArgumentTypeError(
            f"cannot write {text!r}: {err.strerror or err}; choose a path in a folder you can "
            f"write, e.g. ./{os.path.basename(path)}") from None
    if not existed:
        os.remove(path)
    return text


def positive_float(text: str) -> float:
    """An argparse type: a finite number > 0."""
    try:
        return check_number("value", float(text), positive=True)
    except ValueError:
        raise argparse.ArgumentTypeError(_("expected a finite number > 0, got {text!r}")
                                         .format(text=text)) from None


def non_negative_float(text: str) -> float:
    """An argparse type: a finite number >= 0."""
    try:
        return check_number("value", float(text), minimum=0)
    except ValueError:
        raise argparse.ArgumentTypeError(_("expected a finite number >= 0, got {text!r}")
                                         .format(text=text)) from None


# ------------------------------------------------------------------- words
def plural(count: int, noun: str, nouns: str | None = None) -> str:
    """``"1 slot"``, ``"2 slots"``, ``"0 slots"``: a count and its noun, agreeing
    (`nouns` for an irregular plural, ``plural(1, "copy", "copies")``).

    >>> plural(1, "block"), plural(3, "block"), plural(2, "copy", "copies")
    ('1 block', '3 blocks', '2 copies')
    """
    return f"{count} {noun if count == 1 else nouns or noun + 's'}"

