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

import difflib
import inspect
from typing import Any

from .._validation import is_value
from ..sampling_params import VLLM_ONLY_OPTIONS, shown

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

#: The values of the integer ones ("int" above): name -> (the least value,
#: whether None is taken (vLLM's "unset"), the values said in words)
INT_ARGS: dict[str, tuple[int, bool, str]] = {
    "max_logprobs": (-1, False, "an integer >= 0 (or -1: no limit)"),
    "kv_cache_memory_bytes": (1, True, "a whole number of bytes >= 1 (or None: unset, "
                                       "vLLM's default)"),
}


#: vLLM's arguments of its calls (`LLM.generate`, `chat`, `beam_search`,
#: `LLMEngine.add_request`) that change nothing in pagedkit at these values:
#: name -> (accepted values, why the others are refused). A list (one per
#: prompt, vLLM's form) is taken if every item is.
VLLM_CALL_ARGS: dict[str, tuple[tuple[Any, ...], str]] = {
    "lora_request": ((None,), "pagedkit serves no LoRA adapters"),
    "priority": ((None, 0), "pagedkit's scheduler is first come, first served; vLLM's "
                            "default scheduling_policy='fcfs' refuses a priority too"),
    "tokenization_kwargs": ((None, {}), "prompts are tokenized with the tokenizer's defaults"),
    "mm_processor_kwargs": ((None, {}), "pagedkit's models read text only"),
    "trace_headers": ((None,), "pagedkit sends no traces"),
    "tools": ((None,), "the chat template is rendered without tools"),
    "chat_template_content_format": (("auto", "string"), "a message's content is rendered as "
                                                         "one string (text parts joined)"),
}


_MODEL = ("pagedkit runs its one model on one device, in this process: it is "
          "{engine}runner.model, a torch module to call directly")
_METRICS = ("pagedkit keeps no Prometheus metrics: each RequestOutput carries its request's "
            "(out.metrics: arrival, first-token and finish times, ...) and "
            "{engine}memory_stats() the KV cache's (blocks in use, free, cached)")
_QUEUE = ("pagedkit's LLM queues nothing of its own: queue requests with "
          "{engine}add_request(...) and call {engine}step() while "
          "{engine}has_unfinished_requests()")
_SLEEP = ("pagedkit holds its weights and KV cache for the engine's lifetime: to free "
          "them, drop the LLM (del llm)")
_WEIGHTS = ("pagedkit loads the weights once: build a new LLM with the new weights "
            "(LLM takes a folder or a transformers model object)")
_PROFILE = "wrap the calls in torch.profiler.profile() instead"
_POOLING = ("pagedkit serves generative models only, not vLLM's pooling runner (embeddings, "
            "classes, scores): use generate, or vLLM with a pooling model")
_TEXT_ONLY = ("pagedkit serves text-only models, so it has no multi-modal or encoder "
              "cache; reset_prefix_cache() forgets the cached KV blocks")
_CONFIG = ("pagedkit keeps what it holds on the engine: {engine}max_model_len, dtype, "
           "device, model_name, tokenizer (get_tokenizer()), and the model's transformers "
           "config as {engine}runner.model.config")
_LORA = "pagedkit serves no LoRA adapters"
_INTERNALS = ("vLLM's own machinery; pagedkit's engine is {engine}scheduler, "
              "{engine}kv (the KV cache manager) and {engine}runner (the model), in this "
              "process")
_TRANSFER = "pagedkit moves no KV cache between engines (no disaggregated prefill)"
_OPTION_ONLY = ("pagedkit takes this option only at {default} (SamplingParams' vLLM options; "
                "docs/api.md, 'Sampling options vLLM has and pagedkit does not'), so it "
                "keeps no value of it")
_STOP_IDS = ("the engine keeps the model's end-of-sequence ids ({engine}eos_token_ids); "
             "params.stop_token_ids holds the request's own")
_CHECKED = ("a SamplingParams is checked when built, and the engine applies the model's "
            "generation config itself (LLM.get_default_sampling_params())")

#: vLLM 0.32's public attributes of `LLM`, `LLMEngine`, `RequestOutput`,
#: `CompletionOutput` and `SamplingParams` that pagedkit's have not: class ->
#: name -> what pagedkit offers instead (``{engine}`` is how that class
#: reaches the engine). Reading one raises an AttributeError that says so
#: (`vllm_only_attribute`, each class's ``__getattr__``); any other missing
#: name gets Python's own message. tests/vllm checks the lists against vLLM's.
VLLM_ONLY_ATTRIBUTES: dict[str, dict[str, str]] = {
    "LLM": {
        "model_config": _CONFIG,
        "embed": _POOLING, "encode": _POOLING, "classify": _POOLING, "score": _POOLING,
        "get_metrics": _METRICS,
        "apply_model": _MODEL, "collective_rpc": _MODEL,
        "get_world_size": "pagedkit runs on one device: the world size is always 1",
        "enqueue": _QUEUE, "enqueue_chat": _QUEUE, "wait_for_completion": _QUEUE,
        "sleep": _SLEEP, "wake_up": _SLEEP, "release_kv_cache_memory": _SLEEP,
        "start_profile": _PROFILE, "stop_profile": _PROFILE,
        "reset_mm_cache": _TEXT_ONLY,
        **dict.fromkeys(("update_weights", "start_weight_update", "finish_weight_update",
                         "start_draft_weight_update", "get_weight_version",
                         "update_weight_version", "init_weight_transfer_engine",
                         "shutdown_weight_transfer_engine"), _WEIGHTS),
    },
    "LLMEngine": {
        "model_config": _CONFIG,
        "get_metrics": _METRICS, "do_log_stats": _METRICS, "do_log_stats_with_interval": _METRICS,
        "apply_model": _MODEL, "collective_rpc": _MODEL,
        "get_supported_tasks": "pagedkit's one task is generation",
        "has_unfinished_requests_dp": "pagedkit has no data parallelism: "
                                      "{engine}has_unfinished_requests() says it all",
        "sleep": _SLEEP, "wake_up": _SLEEP, "is_sleeping": _SLEEP,
        "release_kv_cache_memory": _SLEEP,
        "start_profile": _PROFILE, "stop_profile": _PROFILE,
        "reset_mm_cache": _TEXT_ONLY, "reset_encoder_cache": _TEXT_ONLY,
        "get_weight_version": _WEIGHTS, "set_weight_version": _WEIGHTS,
        "add_lora": _LORA, "list_loras": _LORA, "pin_lora": _LORA, "remove_lora": _LORA,
        # set on vLLM's engine objects, not its class (recorded from vLLM 0.32's dir())
        "vllm_config": _CONFIG, "observability_config": _CONFIG, "log_stats": _METRICS,
        "logger_manager": _METRICS,
        **dict.fromkeys(("engine_core", "model_executor", "input_processor",
                         "output_processor", "renderer", "dp_group", "external_launcher_dp",
                         "should_execute_dummy_batch"), _INTERNALS),
    },
    "RequestOutput": {
        "encoder_prompt": "pagedkit serves decoder-only models: a request has one prompt",
        "encoder_prompt_token_ids": "pagedkit serves decoder-only models: a request has one "
                                    "prompt",
        "lora_request": _LORA,
        "kv_transfer_params": _TRANSFER, "ec_transfer_params": _TRANSFER,
        "num_cache_creation_tokens": "pagedkit counts the prompt tokens the prefix cache "
                                     "served (num_cached_tokens), not those it wrote",
        "prompt_token_id_logprobs": "prompt_logprobs reports each position's top tokens only",
        "add": "vLLM merges a streamed (DELTA) output into another; pagedkit's outputs are "
               "cumulative: each carries the whole completion so far",
    },
    "CompletionOutput": {
        "lora_request": _LORA,
        "routed_experts": "pagedkit serves no mixture-of-experts routing records",
        "sampling_mask": "pagedkit records no sampling masks",
        "spec_decode_metrics": "pagedkit has no speculative decoding",
        "weight_versions": _WEIGHTS,
    },
    "SamplingParams": {
        **{name: _OPTION_ONLY.format(default=shown(accepted[0]))
           for name, (accepted, _why) in VLLM_ONLY_OPTIONS.items()},
        "bad_words_token_ids": _OPTION_ONLY.format(default="[]"),
        "all_stop_token_ids": _STOP_IDS, "eos_token_id": _STOP_IDS,
        "num_logprobs": "read params.logprobs",
        "sampling_type": "params.greedy says whether it is greedy (temperature=0)",
        "from_optional": "build SamplingParams(...) with the options you set",
        "for_sampler_warmup": "pagedkit has no sampler warm-up",
        "update_from_generation_config": _CHECKED, "update_from_tokenizer": _CHECKED,
        "verify": _CHECKED,
    },
}
#: vLLM 0.32's LLM's attributes set on its objects, not its class (its dir(), recorded)
VLLM_ONLY_ATTRIBUTES["LLM"].update({
    "chat_template": "the chat template is the tokenizer's (get_tokenizer().chat_template), "
                     "or the one given to chat(..., chat_template=...)",
    "chat_template_config": "give chat(..., chat_template=..., chat_template_kwargs=...)",
    "default_sampling_params": "call get_default_sampling_params()",
    "request_counter": "pagedkit's LLM numbers its requests itself ('0', '1', ...)",
    "supported_tasks": "pagedkit's one task is generation",
    **dict.fromkeys(("engine_class", "input_processor", "renderer", "runner_type",
                     "pooling_task", "pooling_io_processors"), _INTERNALS),
})
_ENGINE = {"LLM": "llm.llm_engine.", "LLMEngine": "engine.", "SamplingParams": "engine."}


def vllm_only_attribute(kind: str, obj: object, name: str) -> AttributeError:
    """The AttributeError for `name` missing from `obj` (an `LLM` or
    `LLMEngine`, as `kind`): for one of vLLM's (`VLLM_ONLY_ATTRIBUTES`), what
    pagedkit offers instead; for any other name, Python's own message."""
    why = VLLM_ONLY_ATTRIBUTES[kind].get(name)
    if why is None:
        return AttributeError(f"{type(obj).__name__!r} object has no attribute {name!r}",
                              name=name, obj=obj)
    return AttributeError(f"pagedkit's {kind} has no {name} (vLLM 0.32's); "
                          f"{why.format(engine=_ENGINE.get(kind, ''))} (docs/api.md, "
                          "\"vLLM's names pagedkit lacks\")", name=name, obj=obj)


def check_call_args(caller: str, args: dict[str, Any], takes: tuple[str, ...]) -> None:
    """Take the vLLM arguments `args` given to `caller` (of those it `takes`,
    each a `VLLM_CALL_ARGS` name) at values that change nothing; refuse
    another value by name (it is vLLM's, not pagedkit's), and a name
    `caller` does not take as Python would, with the closest it does."""
    for name, value in args.items():
        if name not in takes:
            match = difflib.get_close_matches(name, takes, n=1)
            hint = f" (did you mean {match[0]!r}?)" if match else ""
            raise TypeError(f"{caller} got an unexpected keyword argument {name!r}{hint}")
        accepted, why = VLLM_CALL_ARGS[name]
        items = value if isinstance(value, (list, tuple)) and name != "tools" else [value]
        if not all(any(is_value(v, a) for a in accepted) for v in items):
            shown = " or ".join(map(repr, accepted))
            raise TypeError(f"{caller}: {name}={value!r} is vLLM's, not pagedkit's ({why}); "
                            f"pagedkit takes {name}={shown} only (docs/api.md, 'vLLM's call "
                            "arguments')")


def check_engine_args(caller: str, args: dict[str, Any]) -> dict[str, Any]:
    """`args` (the vLLM arguments given to `caller`) if each is one pagedkit
    accepts at its value; else a TypeError (unknown name) or ValueError
    (a value that would change something pagedkit does not do)."""
    for name, value in args.items():
        if name not in ONE_DEVICE_ARGS:
            raise TypeError(f"{caller} got an engine argument pagedkit does not know: {name!r}"
                            f"{_closest(name)}; docs/api.md ('Engine arguments') lists pagedkit's "
                            "and the vLLM ones it accepts")
        accepted, why = ONE_DEVICE_ARGS[name]
        if accepted == "int":
            least, unset, values = INT_ARGS[name]
            if value is None and unset:
                continue
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
    return dict(args)


def _closest(name: str) -> str:
    match = difflib.get_close_matches(name, [*engine_parameters(), *ONE_DEVICE_ARGS], n=1)
    return f" (did you mean {match[0]!r}?)" if match else ""


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
