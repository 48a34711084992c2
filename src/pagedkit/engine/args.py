"""vLLM's engine arguments: which ones pagedkit takes, and `EngineArgs`.

A vLLM script passes engine arguments pagedkit has no use for on one device
(``tensor_parallel_size=1``, ``enforce_eager=True``, ...). Those are accepted
when their value changes nothing here, and refused by name otherwise, with
the reason; an argument pagedkit does not know at all is refused by name,
with the closest known name. docs/api.md ("Engine arguments") lists both
kinds. The caller's own name (`LLM`, `LLMEngine`, `EngineArgs`) leads every
message, so the error points at the line the user wrote.
"""

from __future__ import annotations

import functools
import inspect
import json
import numbers
from pathlib import Path
from typing import Any

from .._validation import did_you_mean, is_value

_ONE_DEVICE = "pagedkit runs one model on one device"
_NO_GRAPHS = "pagedkit always runs eagerly (it captures no CUDA graphs)"

#: vLLM arguments that change nothing in pagedkit at these values: name ->
#: (accepted values, None for any True/False, and why the others are refused)
ONE_DEVICE_ARGS: dict[str, tuple[tuple[Any, ...] | None, str]] = {
    "tensor_parallel_size": ((1,), _ONE_DEVICE),
    "pipeline_parallel_size": ((1,), _ONE_DEVICE),
    "data_parallel_size": ((1,), _ONE_DEVICE),
    "distributed_executor_backend": ((None, "uni"), _ONE_DEVICE),
    "disable_custom_all_reduce": (None, _ONE_DEVICE),
    "enforce_eager": (None, _NO_GRAPHS),
    "trust_remote_code": (None, "pagedkit runs a model through transformers' own classes "
                                "and never runs code shipped with a checkpoint"),
    "disable_log_stats": (None, "pagedkit always keeps each request's metrics"),
    "use_tqdm_on_load": (None, "with False, no progress bar while the weights load (with "
                               "True, vLLM's default, transformers' bar; the embedded model "
                               "loads in milliseconds, without one)"),
    "skip_tokenizer_init": (None, "with True, prompts are token ids and texts are empty"),
    "tokenizer_mode": (("auto",), "pagedkit loads tokenizers with transformers' AutoTokenizer"),
    "revision": ((None,), "pagedkit loads a model's default revision"),
    "kv_cache_dtype": (("auto",), "the KV cache has the model's dtype"),
    "quantization": ((None,), "pagedkit serves unquantized weights"),
    "cpu_offload_gb": ((0,), "pagedkit keeps the weights on the device"),
    "enable_lora": ((False,), "pagedkit serves no LoRA adapters"),
    "scheduling_policy": (("fcfs",), "pagedkit's scheduler is first come, first served"),
    "logprobs_mode": (("raw_logprobs",), "logprobs are the model's own, before any "
                                         "sampling option (vLLM's default)"),
    "max_logprobs": ("int", "the most logprobs a request may ask for (vLLM's default 20)"),
    "kv_cache_memory_bytes": ("int", "vLLM's name for kv_cache_memory"),
}

#: vLLM 0.32's other engine arguments (its ``EngineArgs`` fields that are
#: neither pagedkit's own nor above) with vLLM's defaults (None where vLLM's
#: is a config object). At its default, or None (vLLM's "unset", as its
#: ``LLM()`` signature gives several), one changes nothing here and is
#: taken; any other value is refused by name. tests/vllm checks the file
#: against vLLM's own ``EngineArgs``.
VLLM_DEFAULTS = Path(__file__).with_name("vllm_engine_args.json")


@functools.cache
def vllm_defaults() -> dict[str, Any]:
    """`VLLM_DEFAULTS`, read once: argument name -> vLLM 0.32's default."""
    return json.loads(VLLM_DEFAULTS.read_text())


#: The values of the integer ones ("int" above): name -> (the least value,
#: whether None is taken (vLLM's "unset"), the values said in words)
INT_ARGS: dict[str, tuple[int, bool, str]] = {
    "max_logprobs": (-1, False, "an integer >= 0 (or -1: no limit)"),
    "kv_cache_memory_bytes": (1, True, "a whole number of bytes >= 1 (or None: unset, "
                                       "vLLM's default)"),
}


#: vLLM's arguments of its calls (`LLM.generate`, `chat`, `beam_search`,
#: `LLMEngine.add_request`) that change nothing in pagedkit at these values:
#: name -> (accepted values, or "int" for any integer, and why the others are
#: refused). A list (one per prompt, vLLM's form) is taken if every item is.
VLLM_CALL_ARGS: dict[str, tuple[tuple[Any, ...] | str, str]] = {
    "lora_request": ((None,), "pagedkit serves no LoRA adapters"),
    "priority": ("int", "an integer (not a bool) or None: pagedkit's scheduler is first come, "
                        "first served and ignores it, as vLLM's default scheduling_policy='fcfs' "
                        "does"),
    "tokenization_kwargs": ((None, {}), "prompts are tokenized with the tokenizer's defaults"),
    "mm_processor_kwargs": ((None, {}), "pagedkit's models read text only"),
    "trace_headers": ((None,), "pagedkit sends no traces"),
    "tools": ((None,), "the chat template is rendered without tools"),
    "chat_template_content_format": (("auto", "string"), "a message's content is rendered as "
                                                         "one string (text parts joined)"),
}



def check_call_args(caller: str, args: dict[str, Any], takes: tuple[str, ...],
                    prompts: int | None = None) -> None:
    """Take the vLLM arguments `args` given to `caller` (of those it `takes`,
    each a `VLLM_CALL_ARGS` name) at values that change nothing; refuse
    another value by name (it is vLLM's, not pagedkit's), and a name
    `caller` does not take as Python would, with the closest it does. A
    list, one value per prompt, must have one for each of the call's
    `prompts` (vLLM 0.32 refuses another length too)."""
    for name, value in args.items():
        if name not in takes:
            raise TypeError(f"{caller} got an unexpected keyword argument {name!r}"
                            f"{did_you_mean(name, takes)}")
        accepted, why = VLLM_CALL_ARGS[name]
        items = value if isinstance(value, (list, tuple)) and name != "tools" else [value]
        if accepted == "int":
            if not all(v is None or (isinstance(v, numbers.Integral) and not isinstance(v, bool))
                       for v in items):
                raise TypeError(f"{caller}: {name}={value!r} is refused: {name} must be {why}")
        elif not all(any(is_value(v, a) for a in accepted) for v in items):
            shown = " or ".join(map(repr, accepted))
            raise TypeError(f"{caller}: {name}={value!r} is vLLM's, not pagedkit's ({why}); "
                            f"pagedkit takes {name}={shown} only (docs/api.md, 'vLLM's call "
                            "arguments')")
        if items is value and prompts is not None and len(value) != prompts:
            raise ValueError(f"{caller}: {name} is a list of {len(value)}, for "
                             f"{prompts} prompt{'s' * (prompts != 1)}: give one value per "
                             f"prompt, or one value (not a list) for all")


def check_engine_args(caller: str, args: dict[str, Any]) -> dict[str, Any]:
    """`args` (the vLLM arguments given to `caller`) if each is one pagedkit
    accepts at its value; else a TypeError (unknown name) or ValueError
    (a value that would change something pagedkit does not do)."""
    for name, value in args.items():
        if name in ONE_DEVICE_ARGS:
            _check_one_device_arg(caller, name, value)
        elif name in vllm_defaults():
            default = vllm_defaults()[name]
            if not (value is None or is_value(value, default) or _same_number(value, default)):
                shown = "None" if default is None else f"{default!r} (vLLM's default) or None"
                raise ValueError(f"{caller}: {name}={value!r} is vLLM's engine argument, not "
                                 f"pagedkit's; it is taken only as {name}={shown}, which "
                                 "changes nothing here: drop it (docs/api.md, 'Engine "
                                 "arguments')")
        else:
            raise TypeError(f"{caller} got an engine argument pagedkit does not know: {name!r}"
                            f"{_closest(name)}; docs/api.md ('Engine arguments') lists pagedkit's "
                            "and the vLLM ones it accepts")
    return dict(args)


def _check_one_device_arg(caller: str, name: str, value: Any) -> None:
    """One `ONE_DEVICE_ARGS` argument: taken at a value that changes nothing."""
    accepted, why = ONE_DEVICE_ARGS[name]
    if accepted == "int":
        least, unset, values = INT_ARGS[name]
        if value is None and unset:
            return
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{caller}: {name} must be {values}, got {value!r} "
                            f"({type(value).__name__})")
        if value < least:  # the right type, a value out of range
            raise ValueError(f"{caller}: {name} must be {values}, got {value!r}")
    elif accepted is None:
        if not isinstance(value, bool):
            raise TypeError(f"{caller}: {name} must be True or False, got {value!r}")
    elif not any(is_value(value, a) for a in accepted):
        shown = " or ".join(map(repr, accepted))
        raise ValueError(f"{caller}: {name}={value!r} is not supported ({why}); pagedkit "
                         f"takes {name}={shown} only (docs/api.md, 'Engine arguments')")


def _same_number(value: Any, default: Any) -> bool:
    """An int given for a float default of the same value (``watermark=0``)."""
    return (isinstance(default, float) and isinstance(value, numbers.Real)
            and not isinstance(value, bool) and value == default)


def _closest(name: str) -> str:
    return did_you_mean(name, [*engine_parameters(), *ONE_DEVICE_ARGS])


def engine_parameters() -> dict[str, Any]:
    """`LLMEngine`'s own arguments and their defaults."""
    from .llm_engine import LLMEngine

    return {name: p.default for name, p in inspect.signature(LLMEngine.__init__).parameters.items()
            if p.kind is p.POSITIONAL_OR_KEYWORD or p.kind is p.KEYWORD_ONLY
            if name != "self"}


def split_engine_args(caller: str, args: dict[str, Any]) -> None:
    """Check the vLLM arguments among `args` (those that are not
    `LLMEngine`'s own) in `caller`'s name, before the engine is built."""
    own = engine_parameters()
    check_engine_args(caller, {k: v for k, v in args.items() if k not in own})


class EngineArgs:
    """vLLM's ``EngineArgs``: every engine argument in one object, for
    ``LLMEngine.from_engine_args(EngineArgs(model=..., block_size=...))``;
    read back as attributes. Built, it checks the names (an unknown one, a
    vLLM value that would change something), as `LLM` does; the values are
    checked when the engine is built from it, by the engine's own rules."""

    def __init__(self, model: Any = "tiny", tokenizer: Any = None, **engine_args: Any) -> None:
        split_engine_args("EngineArgs", engine_args)
        self.__dict__.update(engine_parameters())
        self.__dict__.update(model=model, tokenizer=tokenizer, **engine_args)

    def as_kwargs(self) -> dict[str, Any]:
        return dict(self.__dict__)

    def __repr__(self) -> str:
        given = ", ".join(f"{k}={v!r}" for k, v in self.__dict__.items()
                          if k not in ("model", "tokenizer"))
        return f"EngineArgs(model={self.model!r}, {given})"


def engine_args_kwargs(caller: str, engine_args: Any) -> dict[str, Any]:
    """The arguments an `EngineArgs` holds, for ``caller.from_engine_args``
    (`LLM`'s and `LLMEngine`'s, as in vLLM); anything else is refused."""
    if not isinstance(engine_args, EngineArgs):
        raise TypeError(f"{caller}.from_engine_args takes an EngineArgs "
                        f"(pagedkit.EngineArgs(model=..., block_size=...)), "
                        f"got {type(engine_args).__name__}")
    return engine_args.as_kwargs()
