"""`LLM`: the front door, shaped like vLLM's, so what a learner writes here
carries over to vLLM itself."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from collections.abc import Sequence as SequenceLike
from typing import Any

from tqdm.auto import tqdm

from ..sampling_params import SamplingParams
from .llm_engine import LLMEngine
from .outputs import RequestOutput, StepOutput

Prompt = str | SequenceLike[int]


class LLM:
    """Generate text with a paged engine.

    >>> llm = LLM("tiny", num_blocks=64)                                   # doctest: +SKIP
    >>> llm.generate(["Once upon a time"], SamplingParams(max_tokens=8))  # doctest: +SKIP

    All keyword arguments go to `LLMEngine` (``block_size``, ``num_blocks``,
    ``kv_cache_memory``, ``enable_prefix_caching``, ``preemption_mode``,
    ``swap_space``, ``max_num_seqs``, ``max_num_batched_tokens``,
    ``enable_chunked_prefill``, ``max_model_len``, ``device``, ``dtype``,
    ``gpu_memory_utilization``, ``seed``; see docs/api.md).
    The engine is `llm.llm_engine`, as in vLLM.
    """

    def __init__(self, model: Any = "tiny", tokenizer: Any = None, **engine_args: Any) -> None:
        self.llm_engine = LLMEngine(model, tokenizer, **engine_args)
        self._ids = itertools.count()

    def get_tokenizer(self):
        return self.llm_engine.tokenizer

    def generate(self, prompts: Prompt | SequenceLike[Prompt],
                 sampling_params: SamplingParams | SequenceLike[SamplingParams] | None = None,
                 use_tqdm: bool = True,
                 on_step: Callable[[StepOutput], Any] | None = None) -> list[RequestOutput]:
        """Run prompts to completion; outputs come back in input order.

        `sampling_params` is one for all prompts or a list with one per
        prompt. `on_step(step_output)` is called after every engine step (the
        widgets' live mode uses it)."""
        if isinstance(prompts, str) or (prompts and isinstance(prompts[0], int)):
            prompts = [prompts]
        prompts = list(prompts)
        if sampling_params is None or isinstance(sampling_params, SamplingParams):
            params = [sampling_params or SamplingParams()] * len(prompts)
        else:
            params = list(sampling_params)
            if len(params) != len(prompts):
                raise ValueError(f"got {len(params)} sampling params for {len(prompts)} prompts: "
                                 "give one for all, or one per prompt")
        engine = self.llm_engine
        ids = [f"{next(self._ids)}" for _ in prompts]
        engine.add_requests(list(zip(ids, prompts, params, strict=True)))  # all or none
        wanted = set(ids)
        done: dict[str, RequestOutput] = {}
        with tqdm(total=len(prompts), desc="generate", disable=not use_tqdm) as bar:
            while len(done) < len(ids) and engine.has_unfinished_requests():
                step = engine.step()
                for output in step.finished:
                    if output.request_id in wanted:
                        done[output.request_id] = output
                        bar.update(1)
                if on_step is not None:
                    on_step(step)
        return [done[i] for i in ids]
