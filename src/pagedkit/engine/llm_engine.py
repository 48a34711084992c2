"""The engine: requests in, one scheduled forward pass per `step()`, outputs out.

`LLMEngine` wires the layers together (paper §4, Figure 4): the scheduler
decides what each step computes over the `KVCacheManager`'s blocks, the
`ModelRunner` computes it on the model with attention routed through the
paged cache, and the engine turns the logits into tokens — forking a request
into n samples or beams that share its blocks — and finished requests into
`RequestOutput`s.

Drive it a step at a time to watch it work::

    engine = LLMEngine("tiny", num_blocks=64)
    engine.add_request("r0", "Once upon a time", SamplingParams(max_tokens=8))
    while engine.has_unfinished_requests():
        print(engine.step())

`step()` is also vLLM's: iterating it gives a `RequestOutput` for every
request that got a token (partial until it finishes), so vLLM's loop
``for out in engine.step(): ...`` streams here too.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import os
import re
import time
from collections.abc import Iterable, Mapping
from collections.abc import Sequence as SequenceLike
from typing import Any

import torch

from .._validation import (
    PromptInput,
    check_bool,
    check_choice,
    check_int,
    check_number,
    check_prompt,
    check_token_ids,
    plural,
    warn_at_caller,
)
from ..memory import HASH_FUNCTIONS, KVCacheManager, blocks_to_serve
from ..model.accel import prepack_linears, prepack_mode
from ..model.compiled import compile_forward, compile_mode
from ..model.kv_cache import KVCacheSpec
from ..model.loader import check_dtype, load_model, resolve_device, resolve_dtype
from ..model.runner import ModelRunner
from ..model.support import LONGROPE_LIMIT, check_supported, position_limit
from ..sampling_params import BeamSearchParams, SamplingParams, VllmNames
from ..scheduler import Scheduler, SchedulerConfig, SchedulerOutput
from ..sequence import FinishReason, Sequence, SequenceGroup
from ..vllm_names import vllm_only_attribute
from .args import check_call_args, check_engine_args
from .beam_search import best_beams
from .outputs import CompletionOutput, PositionLogprobs, RequestOutput, ScheduledInfo, StepOutput
from .sampling import StopRule, output_text, record_prompt_logprobs, sample_step

#: KV cache size on CPU when neither num_blocks nor kv_cache_memory is given.
DEFAULT_CPU_KV_CACHE_BYTES = 256 * 2**20
#: max_model_len of a model whose config states no limit (vLLM's default too).
DEFAULT_MAX_MODEL_LEN = 2048


class KVCacheTooSmallWarning(UserWarning):
    """A request's sequences outgrew the whole KV cache part-way through and
    ended early with ``finish_reason="length"``. Its n samples (or beams)
    are scheduled as one group that shares the prompt's blocks, so all of
    them must fit the cache at once; vLLM runs each sample as a request of
    its own and would serve every token. The warning names the request, how
    far each sequence got, the blocks the group needs and what to change
    (docs/api.md, "Compared with vLLM"). Also raised for a request that a
    max_model_len lowered to the cache's size ends short of its
    max_tokens. `LLM.generate` (and ``chat``, ``beam_search``) raises one
    per call, listing every request it cut short; `LLMEngine.step` one per
    request."""


#: token slots per KV block when none is given, or None (vLLM's default: docs/api.md)
DEFAULT_BLOCK_SIZE = 16
#: what a message says of the defaults: vLLM 0.32's CPU build, given no block_size, picks 128
VLLM_BLOCK_SIZES = "pagedkit's default; vLLM's CPU build picks 128"


def group_past_max_num_seqs(name: str, kind: str, seqs: int, max_num_seqs: int) -> str | None:
    """What is wrong when a request's `seqs` samples or beams (`name` its option,
    n or beam_width; `kind` theirs) are more than one step holds: they run together
    as one group, in the same step, so they need `seqs` of its `max_num_seqs`
    sequence slots; None when they fit. The rule of `LLMEngine._check_sequences_fit`,
    and of the demo's -n before its model loads."""
    if seqs <= max_num_seqs:
        return None
    return (f"the {name}={seqs} {kind} run together as one group (sharing the prompt's "
            f"blocks), so they need {seqs} sequence slots in the same step, but max_num_seqs "
            f"is {max_num_seqs}")


class LLMEngine(metaclass=VllmNames):
    """A paged LLM serving engine, one step at a time (vLLM's ``LLMEngine``)."""

    def __init__(self, model: Any = "tiny", tokenizer: Any = None, *,
                 block_size: int | None = DEFAULT_BLOCK_SIZE, num_blocks: int | None = None,
                 kv_cache_memory: int | None = None,
                 enable_prefix_caching: bool = True, preemption_mode: str = "recompute",
                 swap_space: float | None = None, max_num_seqs: int = SchedulerConfig.max_num_seqs,
                 max_num_batched_tokens: int | None = None, enable_chunked_prefill: bool = False,
                 max_model_len: int | None = None, device: str | torch.device = "auto",
                 dtype: str | torch.dtype = "auto", gpu_memory_utilization: float = 0.9,
                 seed: int = 0, prefix_caching_hash_algo: str = "sha256",
                 **vllm_args: Any) -> None:
        vllm_args = check_engine_args("LLMEngine", vllm_args)  # vLLM's one-device ones
        memory_name = "kv_cache_memory"  # the byte budget's name as given, for messages
        if vllm_args.get("kv_cache_memory_bytes") is not None:  # None: unset, as in vLLM
            if kv_cache_memory is not None:
                raise ValueError("give kv_cache_memory or kv_cache_memory_bytes, not both")
            kv_cache_memory = vllm_args["kv_cache_memory_bytes"]
            memory_name = "kv_cache_memory_bytes"
        #: the most logprobs a request may ask for (vLLM's max_logprobs; -1: the vocabulary)
        self.max_logprobs = vllm_args.get("max_logprobs", 20)
        if block_size is None:  # vLLM's default, where its platform picks one: pagedkit's
            block_size = DEFAULT_BLOCK_SIZE
        check_int("block_size", block_size, minimum=1)
        check_bool("enable_prefix_caching", enable_prefix_caching)
        check_bool("enable_chunked_prefill", enable_chunked_prefill)
        check_number("gpu_memory_utilization", gpu_memory_utilization)
        if swap_space is not None:
            check_number("swap_space", swap_space)
            if preemption_mode != "swap":
                raise ValueError(f"swap_space={swap_space!r} only applies with "
                                 "preemption_mode='swap' (vLLM 0.32 has neither: it preempts "
                                 "by recomputation); leave swap_space unset (docs/api.md)")
        _check_seed(seed)
        check_choice("prefix_caching_hash_algo", prefix_caching_hash_algo, tuple(HASH_FUNCTIONS))
        # read once, so a bad PAGEDKIT_* switch is refused before the model changes
        prepack, compiled = prepack_mode(), compile_mode()
        self.device = resolve_device(device)
        check_dtype(dtype)  # before the weights load
        passed_in = isinstance(model, torch.nn.Module)  # the caller's own object
        # skip_tokenizer_init (vLLM's): prompts are token ids, and no tokenizer is loaded
        model, self.tokenizer, self.model_name = load_model(
            model, tokenizer, skip_tokenizer=bool(vllm_args.get("skip_tokenizer_init")),
            progress=vllm_args.get("use_tqdm_on_load", True))
        self.dtype = resolve_dtype(dtype, model, passed_in)
        config = model.config
        self.max_model_len, self._limit_why = _max_model_len(config, max_model_len)
        if not 0 < gpu_memory_utilization <= 1:
            raise ValueError(f"gpu_memory_utilization must be in (0, 1], got "
                             f"{gpu_memory_utilization!r}")
        if max_num_batched_tokens is None:
            max_num_batched_tokens = 512 if enable_chunked_prefill else self.max_model_len
        self.scheduler_config = SchedulerConfig(max_num_seqs, max_num_batched_tokens,
                                                enable_chunked_prefill, preemption_mode)
        self.runner = ModelRunner(model, device=self.device, dtype=self.dtype,
                                  block_size=block_size)
        # served exactly like transformers, or refused here, before any KV memory is reserved
        windows = check_supported(self.runner.model, block_size=block_size,
                                  max_model_len=self.max_model_len)
        #: The window after which blocks go back to the pool while a request runs:
        #: only when every layer slides (the widest window then bounds them all);
        #: a model with any full-attention layer (Gemma 2/3) keeps every block.
        self.release_window = (max(windows) if windows and None not in windows else None)
        spec = KVCacheSpec.from_config(config, self.dtype)
        asked = (f"num_blocks={num_blocks}" if num_blocks is not None else
                 f"{memory_name}={kv_cache_memory}" if kv_cache_memory is not None else None)
        num_blocks = self._num_blocks(spec, block_size, num_blocks, kv_cache_memory,
                                      gpu_memory_utilization, self.max_model_len, memory_name)
        num_swap_blocks = (_num_swap_blocks(spec.bytes_per_block(block_size), num_blocks,
                                            swap_space) if preemption_mode == "swap" else 0)
        # refused here, before torch is asked for it (its error names no argument)
        check_cache_memory(spec.bytes_per_block(block_size), block_size, num_blocks,
                           num_swap_blocks, self.device, asked=asked, swap_space=swap_space,
                           max_model_len=self.max_model_len, memory_name=memory_name)
        #: the model's (or the asked) max_model_len before the cache caps it: a
        #: prompt past it must be shortened, one past the cache needs more blocks
        self._context_len = self.max_model_len
        if self.release_window is None:  # a sliding window bounds a sequence's blocks
            self.max_model_len = _fit_to_cache(self.max_model_len, max_model_len,
                                               num_blocks, block_size)
        self.runner.allocate_cache(num_blocks, num_swap_blocks)
        self.kv = KVCacheManager(num_blocks, block_size,
                                 enable_prefix_caching=enable_prefix_caching,
                                 num_swap_blocks=num_swap_blocks,
                                 hash_fn=HASH_FUNCTIONS[prefix_caching_hash_algo])
        self.events = self.kv.events
        self.scheduler = Scheduler(self.scheduler_config, self.kv,
                                   release_window=self.release_window)
        self._seq_ids = itertools.count()  # per engine, so ids do not depend on other engines
        self._aborted: list[tuple[SequenceGroup, RequestOutput]] = []  # reported by the next step
        self._names: dict[str, str] = {}  # how warnings call each request in flight
        #: inside `one_warning`: the requests cut short so far, (name, what is said)
        self._cut_notes: list[tuple[str, str]] | None = None
        self._peak_used_blocks = 0  # the most blocks in use at once, for memory_stats
        self._generator = torch.Generator(self.device).manual_seed(seed)
        self._prompt_logprob_groups = 0  # requests in flight that want prompt logprobs
        self.eos_token_ids = _eos_token_ids(model)
        #: the sampling options the model's generation config sets (vLLM's defaults)
        self.generation_defaults = _generation_defaults(model)
        self.stop_rule = StopRule(self.eos_token_ids, self.max_model_len, self.tokenizer)
        # Last, once every check has passed (a refused engine leaves the model as
        # given): faster CPU matmuls, outside the textbook path (model/accel.py;
        # PAGEDKIT_PREPACK=off leaves every nn.Linear as transformers built it).
        prepack_linears(self.runner.model, self.device, prepack)
        # PAGEDKIT_COMPILE=on: the step calls the model under torch.compile (model/compiled.py)
        compile_forward(self.runner, self.device, compiled)

    @classmethod
    def from_engine_args(cls, engine_args: Any, usage_context: Any = None,
                         stat_loggers: Any = None, enable_multiprocessing: bool = False
                         ) -> LLMEngine:
        """vLLM's way to build an engine: from an `EngineArgs`. vLLM's other
        arguments are taken where they change nothing: any `usage_context`
        (it labels vLLM's usage statistics, which pagedkit does not collect),
        no `stat_loggers` (None or an empty list), no `enable_multiprocessing`."""
        from .args import engine_args_kwargs

        if stat_loggers not in (None, []) or enable_multiprocessing is not False:
            raise ValueError("LLMEngine.from_engine_args: pagedkit runs in this process and "
                             "keeps no stat loggers (each RequestOutput carries its metrics); "
                             f"got stat_loggers={stat_loggers!r}, enable_multiprocessing="
                             f"{enable_multiprocessing!r}: leave both out (docs/api.md, "
                             "'Engine arguments')")
        return cls(**engine_args_kwargs("LLMEngine", engine_args))

    @classmethod
    def from_vllm_config(cls, *args: Any, **kwargs: Any) -> LLMEngine:
        """vLLM builds an engine from its ``VllmConfig`` too; pagedkit has none."""
        raise TypeError("LLMEngine.from_vllm_config: pagedkit has no VllmConfig (vLLM's); "
                        "build the engine with LLMEngine(model, ...) or "
                        "LLMEngine.from_engine_args(EngineArgs(model=..., ...)) (docs/api.md)")

    def _num_blocks(self, spec: KVCacheSpec, block_size: int, num_blocks: int | None,
                    memory: int | None, utilization: float, max_model_len: int,
                    memory_name: str = "kv_cache_memory") -> int:
        """KV cache size: given in blocks, as a byte budget (`memory`, given
        as `memory_name`), or (on CUDA) what the GPU has left after a
        profiling forward pass at full step size."""
        if num_blocks is not None:
            if memory is not None:
                raise ValueError(f"give num_blocks or {memory_name}, not both")
            return check_int("num_blocks", num_blocks, minimum=1)
        budget = (f"{memory_name}={memory} bytes" if memory is not None else
                  f"the default KV cache budget of {DEFAULT_CPU_KV_CACHE_BYTES // 2**20} MiB "
                  f"({DEFAULT_CPU_KV_CACHE_BYTES} bytes; kv_cache_memory unset, off CUDA)")
        if memory is None and self.device.type == "cuda":
            peak = self.runner.profile(self.scheduler_config.max_num_batched_tokens)
            total = torch.cuda.get_device_properties(self.device).total_memory
            memory = int(total * utilization) - peak
            if memory <= 0:
                raise ValueError(f"no GPU memory left for a KV cache: the model peaks at "
                                 f"{peak / 2**30:.2f} GiB of {total / 2**30:.2f} GiB x "
                                 f"gpu_memory_utilization {utilization}; raise "
                                 "gpu_memory_utilization (at most 1), lower "
                                 "max_num_batched_tokens (the profiled step), or use a smaller "
                                 "model or dtype")
            budget = (f"the {memory} bytes of GPU memory left after the model "
                      f"(gpu_memory_utilization={utilization})")
        memory = DEFAULT_CPU_KV_CACHE_BYTES if memory is None else memory
        blocks = spec.num_blocks_for(memory, block_size)
        if blocks < 1:
            per_block = spec.bytes_per_block(block_size)
            if block_size > max_model_len:  # the real cause: no sequence uses such a block
                raise ValueError(block_past_sequences(
                    block_size, max_model_len, f"one such block ({per_block} bytes) is more "
                                               f"than {budget}"))
            largest = memory // spec.bytes_per_block(1)
            smaller = f"block_size={largest} or less ({VLLM_BLOCK_SIZES}), or " * (largest > 0)
            raise ValueError(f"block_size={block_size} makes a KV block of {per_block} bytes, "
                             f"more than {budget}: the cache would hold no block; give "
                             f"{smaller}{memory_name}={per_block} or more (one block), or "
                             "num_blocks")
        return blocks

    # ----------------------------------------------------------------- requests
    def add_request(self, request_id: str, prompt: str | SequenceLike[int],
                    params: SamplingParams, arrival_time: float | None = None,
                    **vllm_args: Any) -> str:
        """Queue a request; every check happens before anything changes.
        Returns its id (as `abort_request` and the outputs name it; vLLM
        returns its own internal id, the given one with a suffix).
        As in vLLM 0.32, `request_id` is a string and `params` a
        `SamplingParams` (None is refused: give ``SamplingParams()``).
        vLLM's other arguments (``lora_request``, ``priority``, ...) are
        taken where they change nothing (`VLLM_CALL_ARGS`)."""
        check_call_args("LLMEngine.add_request()", vllm_args, (
            "lora_request", "priority", "tokenization_kwargs", "trace_headers"))
        if not isinstance(params, SamplingParams):
            raise TypeError(f"add_request(): params must be a SamplingParams, got {params!r} "
                            f"({type(params).__name__}); vLLM 0.32 refuses it too. Give "
                            "SamplingParams() for the defaults"
                            + "; beam search over prompts is LLM.beam_search"
                            * isinstance(params, BeamSearchParams))
        self.add_requests([(request_id, prompt, params)], arrival_time=arrival_time)
        return str(request_id)

    def add_requests(self, requests: SequenceLike[tuple[str, Any, SamplingParams | None]], *,
                     arrival_time: float | None = None,
                     names: SequenceLike[str] | None = None) -> None:
        """Queue ``(request_id, prompt, params)`` triples, all or none: every one
        is checked (and tokenized, once) before any is queued. `names` says how
        an error calls each request (`LLM.generate`: its place in the caller's
        list, ``prompts[3]``; the ids are its own counter's, which the caller
        never saw); by default ``request '<id>'``."""
        _check_arrival(arrival_time)
        requests = list(requests)
        odd = next((r for r in requests if not isinstance(r, (tuple, list)) or len(r) != 3), None)
        if odd is not None:
            raise TypeError(f"add_requests takes (request_id, prompt, params) triples, got {odd!r}")
        names = names or [f"request {str(rid)!r}" for rid, *_ in requests]
        checked = [(str(rid), *self.check_request(rid, prompt, params, who))
                   for (rid, prompt, params), who in zip(requests, names, strict=True)]
        ids = [rid for rid, *_ in checked]
        if len(set(ids)) != len(ids):
            raise ValueError(f"request ids repeat within one call: {ids}; give each request "
                             "an id of its own")
        for (request_id, text, token_ids, params, salt), who in zip(checked, names, strict=True):
            group = SequenceGroup.new(request_id, text, token_ids, params, arrival_time,
                                      seq_id=self.next_seq_id(), cache_salt=salt)
            self._prompt_logprob_groups += params.prompt_logprobs is not None
            self._names[request_id] = who
            group.generator = (self._generator if params.seed is None else
                               torch.Generator(self.device).manual_seed(params.seed))
            self.scheduler.add(group)

    def get_tokenizer(self) -> Any:
        """The tokenizer (None without one), as vLLM's ``get_tokenizer()``."""
        return self.tokenizer

    def __getattr__(self, name: str) -> Any:
        """Only for a name the engine has not: vLLM's ``model_config``,
        ``get_metrics``, ... say what pagedkit offers instead
        (`pagedkit.vllm_names.VLLM_ONLY_ATTRIBUTES`)."""
        raise vllm_only_attribute("LLMEngine", self, name)

    def next_seq_id(self) -> int:
        return next(self._seq_ids)

    def check_request(self, request_id: str, prompt: str | SequenceLike[int],
                      params: SamplingParams | None = None, who: str | None = None
                      ) -> tuple[str | None, list[int], SamplingParams, str | None]:
        """Everything `add_request` checks, without queueing: returns the prompt's
        text (if any), its token ids, the sampling params and its cache salt
        (None: none). `who` starts the error messages (by default
        ``request '<id>'``)."""
        # vLLM 0.32's request_id is a str, and it refuses any other type (an int too);
        # '' would hide a bug in the caller's script
        if not isinstance(request_id, str):
            raise TypeError(f"request_id must be a string, got {request_id!r} "
                            f"({type(request_id).__name__}); vLLM 0.32 refuses any other type "
                            f"too: give a string, e.g. str({request_id!r})")
        if not request_id:
            raise ValueError("request_id must be a non-empty string, got ''")
        if request_id in self.scheduler.requests:
            raise ValueError(f"request id {request_id!r} is already in the engine (outputs and "
                             "abort_request name a request by its id, so each needs one of its "
                             f"own); give another id, or abort_request([{request_id!r}]) and "
                             "step() first")
        if request_id in self.unreported_aborts():  # newcomer 43: its output took the step's
            raise ValueError(f"request id {request_id!r} was aborted and its output (finish "
                             "reason 'abort') comes with the next step(), which would report "
                             "it beside this request's under one id; run step() first, then "
                             "add it, or give another id")
        return self.check_prompt(prompt, params, who or f"request {request_id!r}")

    def check_prompt(self, prompt: str | SequenceLike[int], params: SamplingParams | None = None,
                     who: str = "the prompt"
                     ) -> tuple[str | None, list[int], SamplingParams, str | None]:
        """`check_request` without a request id (`LLM.beam_search`'s prompts):
        the prompt fits the engine, the params fit the model. `who` starts
        the error messages."""
        params = SamplingParams() if params is None else params
        if not isinstance(params, SamplingParams):
            raise TypeError(f"params must be SamplingParams, got {type(params).__name__}")
        # the request's own copy, checked again (vLLM clones too): a list of the
        # caller's changed later (params.stop.append) reaches no request in flight
        params = params.clone()
        prompt = check_prompt(prompt)
        text, token_ids = self._tokenize(prompt)
        self._check_prompt_length(who, len(token_ids))
        self._check_params(who, params)
        self._check_sequences_fit(who, len(token_ids), params)
        return text, token_ids, params, prompt.cache_salt

    def _check_prompt_length(self, who: str, n: int) -> None:
        if n == 0:
            raise ValueError(f"{who}: the prompt is empty; give at least one token (a "
                             "non-empty string, or a list of token ids)")
        limit, why = self._context_len, self._limit_why
        block_size, num_blocks = self.kv.block_size, self.kv.allocator.num_blocks
        capacity = num_blocks * block_size
        if n >= limit and self.max_model_len < limit:  # newcomer 36: the 2,047 it advised
            #                                            the cache then refused
            raise ValueError(f"{who}: the prompt has {n} tokens, so the request needs "
                             f"{n + 1} positions ({n} of the prompt + 1 generated), but "
                             f"max_model_len is {self.max_model_len} here: left unset, it was "
                             f"lowered from the model's {limit} to the {capacity} the KV cache "
                             f"holds (num_blocks={num_blocks} x block_size={block_size}); "
                             f"shorten the prompt to {plural(capacity - 1, 'token')} or fewer "
                             f"(up to {limit - 1} with num_blocks={-(-limit // block_size)} or "
                             "more)")
        if n >= limit:
            longrope = why == LONGROPE_LIMIT  # a limit below the config's positions: say why
            instead = ("give a larger max_model_len" if why == "asked" else
                       "serve it with transformers' generate, one sequence at a time"
                       if longrope else "use a model with a longer context")
            raise ValueError(f"{who}: the prompt has {n} tokens, so the request needs "
                             f"{n + 1} positions ({n} of the prompt + 1 generated), but "
                             f"max_model_len is {limit}{f' ({why})' if longrope else ''}; "
                             f"shorten the prompt to "
                             f"{plural(limit - 1, 'token')} or fewer, or {instead}")
        if n + 1 > capacity:
            lowered = (f"; max_model_len, left unset, was lowered from the model's {limit} to "
                       f"the {capacity} the cache holds" if self.max_model_len < limit else "")
            raise ValueError(f"{who}: the prompt has {plural(n, 'token')}, so the request needs "
                             f"{n + 1} slots ({n} of the prompt + 1 generated), but the whole "
                             f"KV cache holds {capacity} (num_blocks={num_blocks} x block_size="
                             f"{block_size}){lowered}; give the engine num_blocks="
                             f"{n // block_size + 1} or more, or shorten the prompt to "
                             f"{plural(capacity - 1, 'token')} or fewer")
        budget = self.scheduler_config.max_num_batched_tokens
        if n > budget and not self.scheduler_config.enable_chunked_prefill:
            raise ValueError(f"{who}: the prompt has {n} tokens but "
                             f"max_num_batched_tokens is {budget}; give max_num_batched_tokens="
                             f"{n} or more, set enable_chunked_prefill=True (the prompt then "
                             f"runs in chunks of up to {budget}), or shorten the prompt to "
                             f"{plural(budget, 'token')} or fewer")

    def _check_sequences_fit(self, who: str, prompt_len: int, params: SamplingParams) -> None:
        """n samples (or beams) run together as one group, so each limit on
        the sequences of one step bounds them: max_num_seqs, and the KV
        cache. They share the prompt's full blocks; to write its first
        generated token each needs a block of its own (a fresh one after a
        full last block, or a copy of a shared, partly filled one: one of the
        writers keeps it, so the total is the same). A request whose
        sequences cannot all get past their first token in the whole cache is
        refused here: the scheduler could only end them after one token. A
        sliding window has let go of the prompt's blocks it left behind by then
        (`KVCacheManager.release_outside_window`, after the prompt's step).
        The advice is the smallest of the limits, so that it passes them all."""
        seqs, cap = params.num_sequences, self.scheduler_config.max_num_seqs
        full = prompt_len // self.kv.block_size
        if self.release_window is not None:
            full -= max(0, prompt_len - self.release_window + 1) // self.kv.block_size
        have = self.kv.allocator.num_blocks
        # the cache's limit holds once a sequence writes a second token
        in_cache = have - full if params.max_tokens != 1 else cap
        most = min(cap, in_cache)  # the most sequences every limit takes
        if seqs <= most:
            return
        name, kind = ("beam_width", "beams") if params.use_beam_search else ("n", "samples")
        crowded = group_past_max_num_seqs(name, kind, seqs, cap)
        blocks = f"num_blocks={full + seqs} or more"
        advice = (f"lower {name} to {most}{' or less' * (most > 1)}, or " if most >= 1 else "")
        advice += (f"build the engine with max_num_seqs={seqs} or more"
                   + f" and {blocks}" * (seqs > in_cache) if crowded else
                   f"give the engine {blocks}")
        if crowded:
            vllm = ("LLM.beam_search, vLLM's way, runs each beam as a request of its own"
                    if params.use_beam_search else
                    "vLLM runs each sample as a request of its own, a few at a time")
            cache = (f"; nor does the KV cache hold them: they need {full + seqs} blocks "
                     f"({plural(full, 'full one')} of the prompt, shared, "
                     f"and one each), and it has "
                     f"{have}" if seqs > in_cache else "")
            raise ValueError(f"{who}: {crowded} ({vllm}){cache}; {advice}")
        raise ValueError(
            f"{who}: {name}={seqs} sequences share {plural(full, 'full block')} of the prompt "
            f"and each "
            f"needs a block of its own for its next token: {full + seqs} blocks, but the "
            f"whole KV cache has {have}; {advice}")

    def _check_params(self, who: str, params: SamplingParams) -> None:
        vocab = self.runner.vocab_size
        if params.stop and self.tokenizer is None:
            raise ValueError(f"{who}: stop strings are matched in the output "
                             "text, and this engine has no tokenizer: use stop_token_ids")
        for name in ("logprobs", "prompt_logprobs"):
            asked = getattr(params, name)
            asked = vocab if asked == -1 else asked
            if asked is not None and asked > vocab:
                limit = self.max_logprobs
                advice = (f"use at most {vocab}, or -1 for all of them"
                          if limit == -1 or limit >= vocab else
                          f"use at most {limit} (max_logprobs={limit}, an engine argument), or "
                          f"build the engine with LLM(..., max_logprobs=-1) to ask for up to "
                          f"{vocab} or -1 (all of them)")
                raise ValueError(f"{who}: {name}={asked} asks for more logprobs than the "
                                 f"vocabulary has tokens ({vocab}); {advice}")
            if asked is not None and self.max_logprobs != -1 and asked > self.max_logprobs:
                given = getattr(params, name)  # -1, all of them: max_logprobs=-1 allows it
                raise ValueError(f"{who}: {name}={given} asks "
                                 f"for {plural(asked, 'logprob')}, more than max_logprobs="
                                 f"{self.max_logprobs} (an engine argument, vLLM's default 20): "
                                 f"build the engine with LLM(..., max_logprobs="
                                 f"{-1 if given == -1 else asked}), or ask for fewer")
        bad = [t for t in params.stop_token_ids if t >= vocab]
        if bad:
            raise ValueError(f"{who}: stop token id {bad[0]} is outside the "
                             f"vocabulary [0, {vocab}); give stop_token_ids below {vocab} "
                             "(this model's token ids)")

    def _tokenize(self, prompt: PromptInput) -> tuple[str | None, list[int]]:
        """A checked prompt's text (None if it came as ids alone) and token ids:
        given ids are served as they are (their text, if given, is only the
        output's `prompt`, as in vLLM); a text alone is tokenized."""
        if prompt.token_ids is None:
            if self.tokenizer is None:
                raise ValueError("this engine has no tokenizer: pass prompts as lists of token "
                                 "ids, or give LLM a tokenizer")
            # verbose=False: an over-long prompt gets pagedkit's own error (naming
            # max_model_len) instead of transformers' warning about indexing errors first
            return prompt.text, list(self.tokenizer(prompt.text, verbose=False)["input_ids"])
        vocab = self.runner.vocab_size
        ids = check_token_ids("prompt", prompt.token_ids)
        bad = [t for t in ids if not 0 <= t < vocab]
        if bad:
            raise ValueError(f"prompt token id {bad[0]} is outside the vocabulary [0, {vocab}); "
                             f"give ids below {vocab}, from this model's tokenizer "
                             "(llm.get_tokenizer()), or the prompt as text")
        return prompt.text, ids

    @property
    def groups(self) -> Mapping[str, SequenceGroup]:
        """The requests in flight, by id (the scheduler's `requests`, read-only)."""
        return self.scheduler.requests

    def abort_request(self, request_id: str | SequenceLike[str], *,
                      report: bool = True) -> bool:
        """Stop a request wherever it is and free its memory; its output
        (finish reason ``"abort"``) comes with the next step, unless
        `report` is false (`LLM.generate` ending its own requests after a
        fault). False if it was not in the engine. A list of ids (vLLM's
        form, any iterable of strings) aborts each: True if every one was in
        the engine (an id named twice counts once); an id that is not a
        string is refused (vLLM aborts no request by it), nothing aborted,
        as is a single id that is not a string (vLLM raises a TypeError for
        it too). One id of
        several characters is taken too, with a warning: vLLM's
        ``abort_request(request_ids: list[str])`` reads it as ids of one
        character each, so the same line would abort nothing there."""
        if isinstance(request_id, str):
            if len(request_id) > 1:
                warn_at_caller(f"abort_request({request_id!r}): vLLM's abort_request takes a "
                               "list of ids and reads a string as ids of one character each, "
                               f"so there this aborts nothing; write abort_request("
                               f"[{request_id!r}]) to run on both (docs/api.md)")
            return self._abort(request_id, report)
        if not isinstance(request_id, Iterable):
            raise TypeError(f"abort_request takes a list of request ids (strings), got "
                            f"{request_id!r} ({type(request_id).__name__}); vLLM 0.32 raises a "
                            "TypeError for it too: write abort_request([...]) with the ids "
                            "add_request returned")
        ids = list(request_id)
        for wrong in ids:  # every id checked before any is aborted
            if isinstance(wrong, str):
                continue
            raise TypeError(f"abort_request({ids!r}): request ids are strings (add_request "
                            f"refuses any other type), got {wrong!r} "
                            f"({type(wrong).__name__}); vLLM 0.32 aborts no request by it: write "
                            f"abort_request([{str(wrong)!r}]) for the request added as "
                            f"{str(wrong)!r}; nothing aborted")
        # an id named twice is aborted once: the second would find it gone (newcomer 44)
        return all([self._abort(r, report) for r in dict.fromkeys(ids)])

    def unreported_aborts(self) -> set[str]:
        """The ids of aborted requests whose output comes with the next step:
        not in `groups` any more, and not free for a new request until then."""
        return {output.request_id for _group, output in self._aborted}

    def _abort(self, request_id: str, report: bool) -> bool:
        group = self.scheduler.abort(str(request_id))
        if group is None:
            return False
        output = self._retire(group)
        if report:
            self._aborted.append((group, output))
        return True

    def reset_prefix_cache(self, reset_running_requests: bool = False) -> bool:
        """Forget every cached block, e.g. to measure a cold cache, as vLLM
        does: only while no request holds KV blocks (their blocks would stay
        named, so the cache would not be cold). Returns whether it reset;
        False, with nothing changed, while requests run."""
        if check_bool("reset_running_requests", reset_running_requests):
            raise NotImplementedError(
                "reset_running_requests=True (vLLM preempts the running requests first) is not "
                "supported: finish or abort the running requests, then reset_prefix_cache()")
        return self.kv.reset_prefix_cache()

    def get_num_unfinished_requests(self) -> int:
        """How many requests are waiting, running or swapped, counted as vLLM
        counts them: a request of n > 1 samples is n requests (vLLM runs each
        sample as a request of its own) until each of them ends."""
        return sum(1 if g.params.n == 1 or g.params.use_beam_search
                   else g.params.n - sum(s.finish_reason is not None for s in g.seqs)
                   for g in self.scheduler.requests.values())

    def has_unfinished_requests(self) -> bool:
        """Anything still to run? As `get_num_unfinished_requests` counts, and
        vLLM's: an aborted request is finished at once (its output still
        comes with the next step, if one is run: docs/api.md)."""
        return self.scheduler.has_unfinished()

    # --------------------------------------------------------------------- step
    def step(self, *, outputs: bool = True) -> StepOutput:
        """Schedule, run one forward pass, sample, and report what happened:
        the step's RequestOutputs, built now from this step's tokens (what
        vLLM's ``step()`` returns), unless `outputs` is False (`LLM.generate`,
        which reads only the step's `finished`)."""
        start = time.perf_counter()
        if outputs is not True and outputs is not False:  # 'no' is truthy: refuse it
            raise TypeError(f"outputs must be True or False, got {outputs!r} "
                            f"({type(outputs).__name__})")
        plan = self.scheduler.schedule()
        self._peak_used_blocks = max(self._peak_used_blocks, self.kv.allocator.num_used_blocks)
        logits = (self._execute_for_prompt_logprobs(plan) if self._prompt_logprob_groups
                  else self.runner.execute(plan, self.kv))
        rows = _sampling_rows(plan)
        sampled = sample_step(rows, logits, self.stop_rule, self.next_seq_id) if rows else None
        finished = self.scheduler.update(plan, sampled)
        aborted, self._aborted = self._aborted, []
        for group in plan.ended:  # never silently short: say why, and what to change
            self._warn_cut(group, self._outgrew_message(group))
        for group in finished:
            if group not in plan.ended and self._ended_by_lowered_len(group):
                self._warn_cut(group, self._lowered_len_message(group))
        done = [output for _, output in aborted] + [self._retire(group) for group in finished]
        new_tokens = sampled.new_tokens if sampled else {}
        # n > 1 samples that ended without sampling, by the reason they ended with
        ended = [(g, "abort") for g, _ in aborted] + [(g, "length") for g in plan.ended]
        outs = self._step_outputs(rows, new_tokens, done, ended) if outputs else []
        return StepOutput(
            outs, step=plan.step,
            scheduled=[ScheduledInfo(s.group.request_id, s.seq.seq_id, s.num_tokens,
                                     s.num_tokens > 1 or s.start < s.seq.prompt_len)
                       for s in plan.scheduled],  # prefill: anything but one generated token
            new_tokens=new_tokens, preempted=[(g.request_id, mode) for g, mode in plan.preempted],
            finished=done, memory=self.memory_stats(), duration_s=time.perf_counter() - start)

    def _step_outputs(self, rows: list, new_tokens: dict[int, int],
                      finished: list[RequestOutput],
                      ended: list[tuple[SequenceGroup, str]]) -> list[RequestOutput]:
        """vLLM's ``step()`` result: per request that sampled (`rows`), its
        output now (partial or final); then those that ended without
        sampling (aborted, or outgrown the cache). With n > 1 samples every
        output holds one completion, as vLLM streams them: one per
        completion that got a token, or that the group's end ended (`ended`:
        such requests, with the reason they ended with)."""
        final = {o.request_id: o for o in finished}
        outs = []
        for group, _ in rows:
            done = final.pop(group.request_id, None)
            if group.params.use_beam_search:
                outs.append(done or self.output(group))
                continue
            seqs = [s for s in group.seqs if s.seq_id in new_tokens]
            if group.params.n == 1:
                outs.append(done or self._output_of(group, seqs, finished=False))
            else:
                last = len(seqs) - 1  # vLLM: finished with the last completion to end
                outs += [self._output_of(group, [s], finished=done is not None and j == last)
                         for j, s in enumerate(seqs)]
        alone = {g.request_id: reason for g, reason in ended
                 if g.params.n > 1 and not g.params.use_beam_search}
        for output in final.values():
            reason = alone.get(output.request_id)
            outs += [output] if reason is None else _per_completion(output, reason)
        return outs

    def _execute_for_prompt_logprobs(self, plan: SchedulerOutput) -> torch.Tensor | None:
        """`runner.execute` keeping every token's logits: the prompt tokens'
        go to their requests' prompt logprobs, the sampling rows on as usual."""
        logits = self.runner.execute(plan, self.kv, all_logits=True)
        if logits is None:
            return None
        rows, end = [], 0
        for s in plan.scheduled:
            start, end = end, end + s.num_tokens
            if s.group.prompt_logprobs is not None:
                record_prompt_logprobs(s.group, logits[start:end], s.start)
            if s.computes_last_token:
                rows.append(end - 1)
        return logits[rows]

    def _retire(self, group: SequenceGroup) -> RequestOutput:
        group.metrics.finish_time = time.monotonic()
        self._names.pop(group.request_id, None)
        self._prompt_logprob_groups -= group.params.prompt_logprobs is not None
        return self.output(group)

    def output(self, group: SequenceGroup) -> RequestOutput:
        """The request's completions so far (final once it is finished). A
        request of n samples that ended before they forked (aborted before
        its first token, or mid chunked prefill) ends n completions, as vLLM
        made n requests of it when it was added."""
        seqs = best_beams(group) if group.params.use_beam_search else group.seqs
        if group.is_finished and len(seqs) < group.params.n and not group.params.use_beam_search:
            seqs = seqs * group.params.n  # the one unforked sequence, for each sample
        return self._output_of(group, seqs, finished=group.is_finished)

    def longest_prompt(self) -> int:
        """The most tokens a prompt may have (`check_prompt`): room for one
        generated token within max_model_len and the whole KV cache, and
        within max_num_batched_tokens unless prefills are chunked."""
        capacity = self.kv.allocator.num_blocks * self.kv.block_size
        longest = min(self._context_len, capacity) - 1
        if not self.scheduler_config.enable_chunked_prefill:
            longest = min(longest, self.scheduler_config.max_num_batched_tokens)
        return longest

    def warn_beams_cut(self, who: str, prompt_len: int, reached: int,
                       params: Any) -> None:
        """`LLM.beam_search`'s beams of one prompt ended after `reached` of
        `params.max_tokens` tokens, at the longest prompt the engine takes
        (`longest_prompt`): a warning naming what set that limit, unless it
        was max_model_len (the model's or the one asked for), which ends
        them as it ends any sequence. A KV cache set smaller than the model's
        context warns with `KVCacheTooSmallWarning`; max_num_batched_tokens
        without chunked prefill with a plain `UserWarning`."""
        block_size, num_blocks = self.kv.block_size, self.kv.allocator.num_blocks
        capacity = num_blocks * block_size
        config = self.scheduler_config
        budget = None if config.enable_chunked_prefill else config.max_num_batched_tokens
        if min(self._context_len, capacity) - 1 <= (budget or capacity):
            if capacity >= self._context_len:
                return  # max_model_len ended them, as generate ends a sequence there
            lowered = (f"; max_model_len, left unset, was lowered from the model's "
                       f"{self._context_len} to it"
                       if self.max_model_len < self._context_len else "")
            limit = (f"the whole KV cache holds {plural(capacity, 'token')} "
                     f"(num_blocks={num_blocks} x "
                     f"block_size={block_size}){lowered}")
        else:
            limit = (f"max_num_batched_tokens={budget} without chunked prefill takes prompts "
                     f"of {plural(budget, 'token')} at most")
        # served whole, the last beam prompt has end - 1 tokens: every limit in its way
        end = min(prompt_len + params.max_tokens, self._context_len)
        category = KVCacheTooSmallWarning if capacity < end else UserWarning
        self._warn_cut(who, self._cut_short(
            f"the beams (beam_width={params.beam_width}, max_tokens={params.max_tokens}) "
            f"ended with finish_reason='length' after {plural(reached, 'generated token')}"
            f": each step sends every beam (the prompt's {plural(prompt_len, 'token')} and "
            f"those generated so far) to the "
            f"engine as a prompt, and {limit}",
            num_blocks=-(-end // block_size) if capacity < end else None,
            batched_tokens=end - 1 if budget is not None and budget < end - 1 else None,
            lower={"max_tokens": reached}, docs="Generating: `LLM`"), category)

    def _warn_cut(self, who: SequenceGroup | str, text: str,
                  category: type[Warning] = KVCacheTooSmallWarning) -> None:
        """Say that a request was cut short: ``"<name>: <text>"``, the
        request named as the caller wrote it (its group's name, or `who`).
        A `KVCacheTooSmallWarning` raised inside `one_warning` is kept for
        that call's one warning; otherwise each request warns by itself
        (`step` once per request it cut short)."""
        if isinstance(who, SequenceGroup):
            who = self._names.get(who.request_id, f"request {who.request_id!r}")
        if self._cut_notes is not None and category is KVCacheTooSmallWarning:
            self._cut_notes.append((who, text))
        else:
            warn_at_caller(f"{who}: {text}", category)

    def one_warning(self, names: list[str]) -> OneWarning:
        """Within (a ``with`` block): every request cut short by the KV cache
        is said in one `KVCacheTooSmallWarning` at the end (`LLM.generate`
        and `LLM.beam_search`: one per call), requests said alike named
        together in `names`' order (`cut_short_text`). Nested, the outer one
        says it."""
        return OneWarning(self, names)

    def _cut_short(self, what: str, *, num_blocks: int | None = None,
                   batched_tokens: int | None = None, lower: dict[str, int],
                   docs: str = "Compared with vLLM") -> str:
        """What a warning says of a request cut short (`_warn_cut` names
        it): `what` happened, then every fix that serves it whole: an engine
        of `num_blocks` blocks and, where given, chunked prefill (or
        `batched_tokens` per step); or each option in `lower` lowered to its value."""
        build = []
        if num_blocks is not None:
            build.append(f"num_blocks={num_blocks} or more (or a kv_cache_memory that holds "
                         "them)")
        if batched_tokens is not None:
            build.append(f"enable_chunked_prefill=True (or max_num_batched_tokens="
                         f"{batched_tokens} or more)")
        fixes = [f"build the engine with {' and '.join(build)}"] if build else []
        fixes += [f"lower {name} to {value}" for name, value in lower.items()]
        return f"{what}. To be served whole: {', or '.join(fixes)} (docs/api.md, '{docs}')."

    def blocks_to_serve(self, prompt_len: int, params: SamplingParams,
                        num_sequences: int | None = None) -> int:
        """KV blocks that serve a request whole when it runs alone: the
        prompt's full blocks, shared, plus each sequence's own blocks for the
        rest of its prompt and all but its last generated token (whose K/V
        is never computed), to max_tokens or the max_model_len a cache that
        large would have (the model's, or the one asked for). Exact for n
        samples that all run to the end; an upper bound for beams (they
        also share what they generated before forking)."""
        limit = self._context_len
        end = limit if params.max_tokens is None else min(prompt_len + params.max_tokens, limit)
        return blocks_to_serve(prompt_len, end, num_sequences or params.num_sequences,
                               self.kv.block_size)

    def _outgrew_message(self, group: SequenceGroup) -> str:
        """What `KVCacheTooSmallWarning` says of a group that outgrew the cache."""
        params, prompt_len = group.params, len(group.prompt_token_ids)
        name, kind = ("beam_width", "beams") if params.use_beam_search else ("n", "samples")
        count = params.num_sequences
        have, block_size = self.kv.allocator.num_blocks, self.kv.block_size
        need = self.blocks_to_serve(prompt_len, params)
        full = prompt_len // block_size
        own = (need - full) // count
        # sequences the cache serves to the end (none if one alone passes max_model_len)
        alone = params.max_tokens is not None and (prompt_len + params.max_tokens
                                                    <= self.max_model_len)
        fewer = (have - full) // own if alone else 0
        # the longest each of the `count` sequences can run in the cache
        longest = min(full * block_size + ((have - full) // count) * block_size + 1,
                      self.max_model_len) - prompt_len
        vllm = ("LLM.beam_search (vLLM's way) runs each beam as a request of its own and "
                "would serve every token" if params.use_beam_search else
                "vLLM runs each sample as a request of its own and would serve every token")
        lower = {name: fewer} if fewer >= 1 else {}
        if longest >= 1:
            lower["max_tokens"] = longest
        return self._cut_short(
            f"the {name}={count} {kind} outgrew the whole KV cache and ended early with "
            f"{_ended_by_length(group)}. They run as one group sharing the prompt's "
            f"{plural(full, 'full block')}, each with blocks of its own: serving them all "
            f"needs {plural(need, 'block')} of {plural(block_size, 'token')} ({full} + "
            f"{count} x {own}), and the cache has num_blocks={have}. {vllm}",
            num_blocks=need, lower=lower)

    def _ended_by_lowered_len(self, group: SequenceGroup) -> bool:
        """Whether a sequence of the finished `group` ended at a max_model_len
        the cache lowered (left unset) short of its max_tokens."""
        limit, max_tokens = self.max_model_len, group.params.max_tokens
        return limit < self._context_len and any(
            s.finish_reason == "length" and len(s.token_ids) >= limit
            and (max_tokens is None or s.num_output_tokens < max_tokens) for s in group.seqs)

    def _lowered_len_message(self, group: SequenceGroup) -> str:
        """What `KVCacheTooSmallWarning` says of a request ended by that max_model_len."""
        params, prompt_len = group.params, len(group.prompt_token_ids)
        have, block_size = self.kv.allocator.num_blocks, self.kv.block_size
        end = self._context_len if params.max_tokens is None else min(
            prompt_len + params.max_tokens, self._context_len)
        need = blocks_to_serve(prompt_len, end, params.num_sequences, block_size,
                               cache_sets_max_model_len=True)
        return self._cut_short(
            f"ended with {_ended_by_length(group)} at max_model_len={self.max_model_len}, "
            "which the KV cache set: max_model_len was left unset, and the cache holds "
            f"{plural(have * block_size, 'token')} "
            f"(num_blocks={have} x block_size={block_size}), fewer than the model's "
            f"{self._context_len}", num_blocks=need,
            lower={"max_tokens": self.max_model_len - prompt_len})

    def _output_of(self, group: SequenceGroup, seqs: list[Sequence], *,
                   finished: bool) -> RequestOutput:
        """A RequestOutput of `seqs` as they are now, with the request's
        metrics as they are now (a copy, with vLLM's counts filled in): a
        step's output stays what it was when read later."""
        metrics = dataclasses.replace(
            group.metrics, num_preemptions=group.num_preemptions,
            num_generation_tokens=sum(s.num_output_tokens for s in group.seqs))
        completions = [self._completion(group, i, seq) for i, seq in enumerate(seqs)]
        if group.params.n > 1 and len(seqs) == 1 and not group.params.use_beam_search:
            completions[0].index = group.seqs.index(seqs[0])  # its place among the n
        prompt_logprobs = group.prompt_logprobs
        if prompt_logprobs is not None:
            prompt_logprobs = [None, *self._decoded(prompt_logprobs[1:], group.params)]
        return RequestOutput(group.request_id, group.prompt, group.prompt_token_ids, completions,
                             finished, metrics, group.num_cached_tokens,
                             metrics.num_preemptions, prompt_logprobs)

    def _completion(self, group: SequenceGroup, index: int, seq: Sequence) -> CompletionOutput:
        params, reason = group.params, seq.finish_reason
        ids = seq.token_ids[seq.prompt_len:]
        logprobs = None if seq.logprobs is None else self._decoded(seq.logprobs[:len(ids)], params)
        if params.use_beam_search:
            cumulative = seq.cumulative_logprob
        elif logprobs is not None:  # vLLM: the sum of the reported (raw) logprobs
            cumulative = sum(p[t].logprob for p, t in zip(logprobs, ids, strict=True))
        else:
            cumulative = None
        return CompletionOutput(index, ids, self._text(seq, params, ids, reason), cumulative,
                                None if reason is None else str(reason), logprobs,
                                seq.stop_reason if reason is not None else None)

    def _text(self, seq: Sequence, params: SamplingParams, ids: list[int],
              reason: FinishReason | None) -> str:
        """The completion's text, by vLLM's rules: empty without detokenizing;
        cut at a stop string; without the stop token that ended it (unless
        ``include_stop_str_in_output``); held back to before a character
        its tokens have not completed yet (`output_text`); while unfinished,
        short of the last
        ``len(longest stop string) - 1`` characters, which may yet turn out
        to start a stop string."""
        if self.tokenizer is None or not params.detokenize:
            return ""
        if reason is not None and seq.text is not None:
            return seq.text
        if reason is FinishReason.STOP and ids and not params.include_stop_str_in_output:
            ids = ids[:-1]
        text = output_text(self.tokenizer, ids, params)
        held = (max(map(len, params.stop)) - 1
                if reason is None and params.stop and not params.include_stop_str_in_output else 0)
        return text[:-held] if held else text

    def _decoded(self, positions: list[PositionLogprobs],
                 params: SamplingParams) -> list[PositionLogprobs]:
        """Logprobs with each token's own text (`decode_token`, with the
        chosen tokens of up to 4 positions before as context), filled once;
        none without detokenizing."""
        if self.tokenizer is not None and params.detokenize:
            for i, position in enumerate(positions):
                context = [next(iter(p)) for p in positions[max(0, i - 4):i]]
                for token, entry in position.items():
                    if entry.decoded_token is None:
                        entry.decoded_token = decode_token(self.tokenizer, token, context)
        return positions

    # ------------------------------------------------------------------ looking
    def memory_stats(self) -> dict[str, float]:
        """Blocks and token slots (the paper's KV usage), plus the queues.

        ``kv_usage`` describes the blocks in use now (1.0 when none are);
        ``peak_used_blocks`` is the most in use at once since the engine was
        built, the figure to read after a run."""
        stats = dataclasses.asdict(self.kv.stats())
        stats.update(num_running=len(self.scheduler.running),
                     num_waiting=len(self.scheduler.waiting),
                     num_swapped=len(self.scheduler.swapped),
                     num_preemptions=self.scheduler.num_preemptions,
                     peak_used_blocks=self._peak_used_blocks)
        return stats

    def __repr__(self) -> str:
        s = self.kv.stats()
        lowered = (f" (lowered from the model's {self._context_len} to what the cache holds)"
                   if self.max_model_len < self._context_len else
                   " (the longrope limit: original_max_position_embeddings)"
                   if self._limit_why == LONGROPE_LIMIT else "")
        return (f"LLMEngine(model={self.model_name!r}, {plural(s.total_blocks, 'block')} x "
                f"{plural(s.block_size, 'token')}, max_model_len={self.max_model_len}{lowered}, "
                f"device="
                f"{self.device.type}, dtype={str(self.dtype).removeprefix('torch.')}"
                f", {plural(len(self.groups), 'request')} in flight)")


def _sampling_rows(plan: SchedulerOutput) -> list[tuple[SequenceGroup, list[tuple[Sequence, int]]]]:
    """The groups that sample this step, in scheduled order, each with its
    sequences in the group's order and their rows of the step's logits (one
    row per sequence that computed its last token, in scheduled order)."""
    rows: dict[int, int] = {}
    groups: dict[int, SequenceGroup] = {}
    for s in plan.scheduled:
        if s.computes_last_token:
            rows[s.seq.seq_id] = len(rows)
            groups.setdefault(id(s.group), s.group)
    return [(group, [(seq, rows[seq.seq_id]) for seq in group.unfinished_seqs()
                     if seq.seq_id in rows]) for group in groups.values()]


def _ended_by_length(group: SequenceGroup) -> str:
    """How a request cut short ended, for its warning: ``finish_reason='length'
    after 3, 5 generated tokens (max_tokens=8)``, a count per sequence."""
    reached = ", ".join(str(s.num_output_tokens) for s in group.seqs)
    tokens = "token" if reached == "1" else "tokens"
    max_tokens = group.params.max_tokens
    return f"finish_reason='length' after {reached} generated {tokens} (max_tokens={max_tokens})"


def _per_completion(output: RequestOutput, reason: str) -> list[RequestOutput]:
    """The end of n > 1 samples that ended without sampling (aborted, or
    outgrown the cache), one output per completion it ended, finished with
    the last: those with its finish `reason`. A completion that ended before
    has another (a stop, or the end of sequence): none ends by length before
    the others, as the n take their tokens in the same steps."""
    ended = [c for c in output.outputs if c.finish_reason == reason]
    return [dataclasses.replace(output, outputs=[c], finished=c is ended[-1]) for c in ended]


#: The largest engine seed: vLLM 0.32's LLM(seed=...) refuses 2**32 and up (a
#: request's SamplingParams(seed=...) goes to 2**64-1 on both; newcomer 44).
MAX_ENGINE_SEED = 2**32 - 1


def _check_seed(seed: Any) -> None:
    """The engine's seed: an integer, 0 to 2**32-1, as vLLM 0.32's (not None)."""
    if seed is None:  # older vLLM's "a random seed"
        raise TypeError("seed must be an integer (0 to 2**32-1), got None: vLLM 0.32 refuses "
                        "None too (its seed is an integer, default 0; older vLLM took None "
                        "as a random seed); leave seed unset (0), or give a random one "
                        "yourself, e.g. seed=random.randrange(2**32)")
    check_int("seed", seed)
    if not 0 <= seed <= MAX_ENGINE_SEED:  # SamplingParams' -1 ("no seed") has no twin here
        advice = ("the engine always has a seed (vLLM 0.32's LLM refuses negative ones too; -1 "
                  "means no seed only in SamplingParams); leave seed unset (0) or give an "
                  "integer in that range" if seed < 0 else
                  "vLLM 0.32's LLM refuses larger seeds too; give seed % 2**32 (a request's "
                  "SamplingParams(seed=...) takes up to 2**64-1 on both)")
        raise ValueError(f"seed must be 0 to 2**32-1 ({MAX_ENGINE_SEED}), got {seed}: {advice}")


def _check_arrival(arrival_time: float | None) -> None:
    """A request's arrival time, on the engine's clock (``time.monotonic()``):
    not later than now. vLLM's ``time.time()`` is named as such."""
    if arrival_time is None:
        return
    check_number("arrival_time", arrival_time)
    now = time.monotonic()
    if arrival_time > now:
        raise ValueError(
            f"arrival_time={arrival_time!r} is later than now on pagedkit's clock "
            f"(time.monotonic() = {now:.1f}): pagedkit times requests with time.monotonic(), "
            "not vLLM's time.time(); give time.monotonic(), or leave arrival_time unset (now)")

def _max_model_len(config: Any, requested: int | None) -> tuple[int, str]:
    """The longest sequence served, and what sets it: the model's position limit
    and its reason (`position_limit`: a longrope model's is its
    original_max_position_embeddings) unless the user asks for less ("asked");
    a config without one, as with ALiBi, gets vLLM's default. None or -1 (vLLM's
    "as long as fits") leave it to `_fit_to_cache`."""
    positions, why = position_limit(config)
    if requested is None or (type(requested) is int and requested == -1):
        if positions is None:
            return DEFAULT_MAX_MODEL_LEN, "vLLM's default: the config states no limit"
        return positions, why
    if check_int("max_model_len", requested) < 2:
        raise ValueError(f"max_model_len must be >= 2 (a prompt token and a generated one), or "
                         f"-1 (the longest the model and the cache take), got {requested}")
    if positions is not None and requested > positions:
        beyond = ("; for longer contexts use transformers' generate, one sequence at a time "
                  "(or vLLM, which uses the long factor for every sequence)"
                  if why == LONGROPE_LIMIT else "")
        raise ValueError(f"max_model_len={requested} is longer than the model's limit of "
                         f"{positions} positions ({why}); give max_model_len={positions} or "
                         f"less, or leave it unset{beyond}")
    return requested, "asked"


def _fit_to_cache(max_model_len: int, requested: int | None, num_blocks: int,
                  block_size: int) -> int:
    """A max_model_len the KV cache can hold. Like vLLM, an engine whose cache
    cannot hold one sequence of the max_model_len asked for is refused, naming
    the longest that fits. Left unset (or -1), it is the model's limit or, if
    the cache holds less, the longest the cache holds (vLLM's -1; vLLM's unset
    default would refuse instead), so small teaching caches work."""
    capacity = num_blocks * block_size
    if max_model_len <= capacity:
        return max_model_len
    if requested is None or requested == -1:
        return capacity
    raise ValueError(
        f"max_model_len={requested} needs {-(-requested // block_size)} KV blocks of "
        f"{plural(block_size, 'token')} for one sequence, but the cache has {num_blocks}: "
        f"the largest "
        f"max_model_len that fits is {capacity}. Give a smaller max_model_len (or leave it "
        "unset: the longest that fits), or more num_blocks / kv_cache_memory")


class OneWarning:
    """`LLMEngine.one_warning`'s ``with`` block (a class, not a generator,
    so that the warning points at the caller's line)."""

    def __init__(self, engine: LLMEngine, names: list[str]) -> None:
        self.engine, self.names, self.outer = engine, names, False

    def __enter__(self) -> None:
        self.outer = self.engine._cut_notes is None
        if self.outer:
            self.engine._cut_notes = []

    def __exit__(self, *exc: object) -> None:
        if self.outer:
            notes, self.engine._cut_notes = self.engine._cut_notes, None
            if notes:
                warn_at_caller(cut_short_text(notes, self.names), KVCacheTooSmallWarning)


def cut_short_text(notes: list[tuple[str, str]], names: list[str]) -> str:
    """One warning for every request of a call cut short: `notes` are
    ``(name, what is said)``; requests said alike share one line, named in
    the order of `names` (how the call names its requests), a run of three
    or more ``prompts[i]`` as ``prompts[a] to prompts[b]``."""
    place = {name: i for i, name in enumerate(names)}
    alike: dict[str, list[str]] = {}
    for name, text in sorted(notes, key=lambda note: place.get(note[0], len(place))):
        alike.setdefault(text, []).append(name)
    lines = [f"{_name_runs(group)}: {text}" for text, group in alike.items()]
    if len(lines) == 1:
        return lines[0]
    return (f"{len(notes)} requests of this call were cut short by the KV cache:\n"
            + "\n".join(lines))


def _name_runs(names: list[str]) -> str:
    """``prompts[0], prompts[1]``, or ``prompts[0] to prompts[9]`` for a run
    of three or more consecutive places; other names as they are."""
    runs: list[list] = []  # [first, last] places, or [name]
    for name in names:
        at = re.fullmatch(r"prompts\[(\d+)\]", name)
        if at and runs and len(runs[-1]) == 2 and runs[-1][1] == int(at[1]) - 1:
            runs[-1][1] = int(at[1])
        else:
            runs.append([int(at[1])] * 2 if at else [name])
    said = []
    for run in runs:
        if len(run) == 1:
            said.append(run[0])
        elif run[1] - run[0] >= 2:
            said.append(f"prompts[{run[0]}] to prompts[{run[1]}]")
        else:
            said += [f"prompts[{i}]" for i in range(run[0], run[1] + 1)]
    return ", ".join(said)


def memory_available(device: torch.device) -> tuple[int, str] | None:
    """Bytes a new KV cache can take on `device` and what that figure is: on
    CUDA the GPU's free memory; elsewhere (CPU, and Apple's unified memory)
    the machine's available memory (Linux's MemAvailable), else its whole
    memory. None where neither can be read."""
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        return free, f"free on the GPU ({torch.cuda.get_device_name(device)})"
    try:
        with open("/proc/meminfo") as f:
            fields = dict(line.split(":", 1) for line in f if ":" in line)
        return int(fields["MemAvailable"].split()[0]) * 1024, "available on this machine"
    except (OSError, KeyError, ValueError):
        pass
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"), "this machine's memory"
    except (AttributeError, ValueError, OSError):
        return None


def block_past_sequences(block_size: int, max_model_len: int, cost: str) -> str:
    """Why a block longer than max_model_len is refused when it does not fit
    (`cost`): no sequence fills more than max_model_len of its slots, so the
    memory it asks for is mostly slots no token can reach; fewer blocks (the
    memory errors' usual advice) would not help."""
    usual = (f"block_size={DEFAULT_BLOCK_SIZE} ({VLLM_BLOCK_SIZES}) or another up to "
             f"{max_model_len}" if max_model_len >= DEFAULT_BLOCK_SIZE
             else f"block_size={max_model_len} or less")
    return (f"block_size={block_size} is longer than any sequence: max_model_len is "
            f"{max_model_len}, so no sequence fills more than {max_model_len} of a block's "
            f"{block_size} slots, and {cost}; give {usual}")


def check_cache_memory(bytes_per_block: int, block_size: int, num_blocks: int,
                       num_swap_blocks: int, device: torch.device, *, asked: str | None,
                       swap_space: float | None = None,
                       max_model_len: int | None = None,
                       memory_name: str = "kv_cache_memory") -> None:
    """Refuse a KV cache (or swap space) larger than the memory it would live
    in, naming the bytes, the memory and what fits, before any is allocated:
    torch's own error names no argument, and on Linux a lazily zeroed
    allocation may even succeed, to fail later. The swap space is CPU
    memory; on a CPU the cache is too, so both must fit there together."""
    gib = 2**30
    cache, swap = bytes_per_block * num_blocks, bytes_per_block * num_swap_blocks
    in_ram = device.type != "cuda"  # the cache shares the machine's memory with the swap space
    # (where, bytes already placed there, what is checked: the cache or the swap space)
    checks = [(device, 0, "cache")] + ([(torch.device("cpu"), cache * in_ram, "swap")]
                                       if swap else [])
    for where, before, part in checks:
        memory = memory_available(where)
        needed = cache if part == "cache" else swap
        if memory is None or before + needed <= memory[0]:
            continue
        have, what = memory
        room = max(0, have - before) // bytes_per_block  # blocks that fit
        if part == "cache" and max_model_len is not None and block_size > max_model_len:
            raise ValueError(block_past_sequences(
                block_size, max_model_len, f"{plural(num_blocks, 'such block')} "
                                           f"need{'s' * (num_blocks == 1)} {cache} bytes "
                                           f"({cache / gib:.2f} GiB), but {have} bytes "
                                           f"({have / gib:.2f} GiB) are {what}"))
        if part == "cache":
            wants = (f"a KV cache of {plural(num_blocks, 'block')} x {plural(block_size, 'token')} "
                     f"({bytes_per_block} bytes a block) needs {cache} bytes "
                     f"({cache / gib:.2f} GiB)")
            todo = (f"give num_blocks={room} or fewer (or {memory_name}="
                    f"{room * bytes_per_block} or less), or leave num_blocks and "
                    f"{memory_name} unset (on a GPU: the memory left after the model; "
                    "elsewhere 256 MiB)")
        else:
            given = (f"swap_space={swap_space} (GiB)" if swap_space is not None
                     else "swap_space unset (as many blocks as the cache)")
            wants = (f"{asked + ': ' if asked else ''}preemption_mode='swap' with {given} "
                     f"needs {plural(num_swap_blocks, 'CPU block')} of {bytes_per_block} "
                     f"bytes, {swap} "
                     f"bytes ({swap / gib:.2f} GiB)"
                     + (f", besides the KV cache's {cache} bytes in the same memory" * in_ram))
            smaller = "a smaller KV cache (num_blocks / kv_cache_memory)"
            if room:
                advice = _gib_advice(room * bytes_per_block, bytes_per_block)
                todo = (f"give swap_space={advice} or less "
                        f"({plural(int(advice * gib) // bytes_per_block, 'block')})")
                todo += f", or {smaller}" if in_ram else ""
            else:
                todo = f"give {smaller}"
            asked = None
        raise ValueError(f"{asked + ': ' if asked else ''}{wants}, but {have} bytes "
                         f"({have / gib:.2f} GiB) are {what}; {todo}. Nothing was allocated.")


def _gib_advice(nbytes: int, bytes_per_block: int, up: bool = False) -> float:
    """`nbytes` in GiB as advice a user types: 3 significant digits, more where
    needed to keep 99% of the blocks `nbytes` holds (at least one), rounded down
    so that it holds no more of them (or up, never fewer)."""
    gib = nbytes / 2**30
    for digits in range(3, 18):
        scale = 10 ** (digits - 1 - math.floor(math.log10(gib)))
        value = (math.ceil(gib * scale) if up else math.floor(gib * scale)) / scale
        if int(value * 2**30) // bytes_per_block >= max(1, 0.99 * (nbytes // bytes_per_block)):
            return value
    return gib


def _num_swap_blocks(bytes_per_block: int, num_blocks: int, swap_space: float | None) -> int:
    """CPU blocks to swap into (swap mode): `swap_space` GiB, or as many as the GPU cache."""
    if swap_space is None:
        return num_blocks
    if not swap_space > 0:
        raise ValueError(f"preemption_mode='swap' needs swap_space > 0 (GiB), got "
                         f"{swap_space!r}")
    num_swap_blocks = int(swap_space * 2**30) // bytes_per_block
    if num_swap_blocks < 1:
        raise ValueError(f"swap_space of {swap_space} GiB holds no block of "
                         f"{bytes_per_block} bytes; give swap_space="
                         f"{_gib_advice(bytes_per_block, bytes_per_block, up=True)} "
                         "(GiB) or more, or leave it unset (as many blocks as the cache)")
    return num_swap_blocks


#: generation-config fields vLLM takes as a model's default sampling parameters
GENERATION_DEFAULTS = {"repetition_penalty": "repetition_penalty",
                       "presence_penalty": "presence_penalty",
                       "frequency_penalty": "frequency_penalty", "temperature": "temperature",
                       "top_k": "top_k", "top_p": "top_p", "min_p": "min_p",
                       "max_new_tokens": "max_tokens"}


def _generation_defaults(model: Any) -> dict[str, Any]:
    """What the model's generation config sets of `GENERATION_DEFAULTS`
    (the fields that differ from transformers' own defaults), under
    SamplingParams' names: vLLM's `LLM` samples with these when given no
    sampling parameters."""
    config = getattr(model, "generation_config", None)
    if config is None:
        return {}
    diff = config.to_diff_dict()
    return {ours: diff[theirs] for theirs, ours in GENERATION_DEFAULTS.items()
            if diff.get(theirs) is not None}


def _eos_token_ids(model: Any) -> set[int]:
    """The model's end-of-sequence ids: its generation config's, else its config's."""
    eos = model.generation_config.eos_token_id if model.generation_config else None
    eos = model.config.eos_token_id if eos is None else eos
    return set(eos if isinstance(eos, list) else [] if eos is None else [eos])


def decode_token(tokenizer: Any, token: int, context: list[int]) -> str:
    """A token's text on its own (special tokens included), as vLLM shows
    it in logprobs. A byte-level token that ends inside a multi-byte
    character decodes to U+FFFD alone; then, as vLLM does, the tokens
    before it (up to 4) are tried as context: the first that completes the
    character gives the text this token adds — counting the text of the
    context's own unfinished byte tokens, which showed nothing — and if
    none does, the token shows as ``""``."""
    text = tokenizer.decode([token])
    if not text.endswith("\ufffd"):
        return text
    for size in range(1, min(len(context), 4) + 1):
        before = context[-size:]
        whole = tokenizer.decode([*before, token])
        if whole.endswith("\ufffd"):
            continue
        clean = len(before)  # the context's tokens up to its trailing partial bytes
        while clean and tokenizer.decode([before[clean - 1]]).endswith("\ufffd"):
            clean -= 1
        prefix = tokenizer.decode(before[:clean]) if clean else ""
        same = 0
        while same < min(len(prefix), len(whole)) and prefix[same] == whole[same]:
            same += 1
        return whole[same:]
    return ""

