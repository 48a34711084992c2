"""vLLM 0.32's public names that pagedkit's `LLM`, `LLMEngine`, `RequestOutput`,
`CompletionOutput` and `SamplingParams` do not have, and the AttributeError each
class's ``__getattr__`` raises for one: what pagedkit offers instead, and
docs/api.md's section on them. Here, beside `SamplingParams`, so that every
layer that has one of those classes can reach it."""

from __future__ import annotations

from .sampling_params import VLLM_ONLY_OPTIONS, shown

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
        **{name: _OPTION_ONLY.format(default=" or ".join(map(shown, accepted)))
           for name, (accepted, _why) in VLLM_ONLY_OPTIONS.items()},
        "bad_words_token_ids": "vLLM's bad_words as token ids; pagedkit bans no words",
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
    """The AttributeError for `name` missing from `obj` (one of the five classes
    `VLLM_ONLY_ATTRIBUTES` lists, named by `kind`): for one of vLLM's (`VLLM_ONLY_ATTRIBUTES`), what
    pagedkit offers instead; for any other name, Python's own message. A
    property that raised AttributeError inside reaches here too (Python then
    asks ``__getattr__``): its own error is the answer, not "no attribute"."""
    if hasattr(type(obj), name):
        try:
            object.__getattribute__(obj, name)
        except AttributeError as inside:
            return inside
    return missing(kind, obj, name, f"{type(obj).__name__!r} object")


def missing(kind: str, obj: object, name: str, what: str) -> AttributeError:
    """The AttributeError for `name` missing from `obj` (`what` names it)."""
    why = VLLM_ONLY_ATTRIBUTES[kind].get(name)
    if why is None:
        return AttributeError(f"{what} has no attribute {name!r}", name=name, obj=obj)
    return AttributeError(f"pagedkit's {kind} has no {name} (vLLM 0.32's); "
                          f"{why.format(engine=_ENGINE.get(kind, ''))} (docs/api.md, "
                          "\"vLLM's names pagedkit lacks\")", name=name, obj=obj)

