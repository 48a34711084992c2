"""What the engine hands back, shaped like vLLM's outputs."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..sampling_params import VllmNames
from ..sequence import RequestMetrics
from ..vllm_names import vllm_only_attribute


@dataclass
class Logprob:
    """One token's log-probability at one position (vLLM's ``Logprob``):
    `rank` 1 is the most likely token (ties share the lower rank's place:
    the rank counts the tokens at least as likely), `decoded_token` the
    token's own text."""

    logprob: float
    rank: int | None = None
    decoded_token: str | None = None


#: Per position, token id -> Logprob: the position's chosen token and its top-k.
PositionLogprobs = dict[int, Logprob]


@dataclass
class CompletionOutput(metaclass=VllmNames):
    """One of a request's n completions.

    `logprobs` (with ``SamplingParams(logprobs=k)``) holds one dict per
    generated token; `stop_reason` is what stopped it: the stop string, the
    stop token id from ``stop_token_ids``, or None (end of sequence, length)."""

    index: int
    token_ids: list[int]
    text: str
    cumulative_logprob: float | None
    finish_reason: str | None
    logprobs: list[PositionLogprobs] | None = None
    stop_reason: int | str | None = None

    def finished(self) -> bool:
        return self.finish_reason is not None

    def __getattr__(self, name: str) -> Any:
        """Only for a name it has not: vLLM's say so (`VLLM_ONLY_ATTRIBUTES`)."""
        raise vllm_only_attribute("CompletionOutput", self, name)

    def __repr__(self) -> str:
        """vLLM 0.32's repr: its fields in its order, those pagedkit has."""
        return (f"CompletionOutput(index={self.index}, text={self.text!r}, "
                f"token_ids={self.token_ids}, cumulative_logprob={self.cumulative_logprob}, "
                f"logprobs={self.logprobs}, finish_reason={self.finish_reason}, "
                f"stop_reason={self.stop_reason})")


@dataclass
class RequestOutput(metaclass=VllmNames):
    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput]
    finished: bool
    metrics: RequestMetrics
    num_cached_tokens: int = 0  # prompt tokens served by the prefix cache
    num_preemptions: int = 0
    prompt_logprobs: list[PositionLogprobs | None] | None = None

    def __repr__(self) -> str:
        """vLLM 0.32's repr: its fields in its order, those pagedkit has; then
        pagedkit's own num_preemptions."""
        return (f"RequestOutput(request_id={self.request_id}, prompt={self.prompt!r}, "
                f"prompt_token_ids={self.prompt_token_ids}, "
                f"prompt_logprobs={self.prompt_logprobs}, outputs={self.outputs}, "
                f"finished={self.finished}, metrics={self.metrics}, "
                f"num_cached_tokens={self.num_cached_tokens}, "
                f"num_preemptions={self.num_preemptions})")

    def __getattr__(self, name: str) -> Any:
        """Only for a name it has not: vLLM's say so (`VLLM_ONLY_ATTRIBUTES`)."""
        raise vllm_only_attribute("RequestOutput", self, name)


@dataclass(slots=True)
class ScheduledInfo:
    """One sequence's part in a step."""

    request_id: str
    seq_id: int
    num_tokens: int
    is_prefill: bool


class StepOutput(list):
    """What one `LLMEngine.step()` did.

    It is a list, as vLLM's ``step()`` result is: a `RequestOutput` for every
    request that got tokens this step (partial ones for unfinished requests,
    so ``for out in engine.step()`` streams) and for every request that
    ended, built by the step from that step's tokens; ``engine.step() +
    engine.step()``, ``== []`` and ``isinstance(..., list)`` work as with
    vLLM. ``step(outputs=False)`` builds none (the list is empty): what
    `LLM.generate`, which reads only `finished`, asks for. The fields are
    pagedkit's own view of the step (the widgets and labs read them)."""

    def __init__(self, outputs: Iterable[RequestOutput], *, step: int,
                 scheduled: list[ScheduledInfo], new_tokens: dict[int, int],
                 preempted: list[tuple[str, str]], finished: list[RequestOutput],
                 memory: dict[str, float], duration_s: float) -> None:
        super().__init__(outputs)
        self.step = step
        self.scheduled = scheduled
        self.new_tokens = new_tokens  # seq_id -> sampled token
        self.preempted = preempted  # (request_id, mode)
        self.finished = finished
        self.memory = memory
        self.duration_s = duration_s

    @property
    def outputs(self) -> list[RequestOutput]:
        """The step's RequestOutputs, as a plain list (what vLLM's ``step()`` returns)."""
        return list(self)

    @property
    def num_batched_tokens(self) -> int:
        return sum(s.num_tokens for s in self.scheduled)

    def __repr__(self) -> str:
        prefill = sum(s.is_prefill for s in self.scheduled)
        return (f"StepOutput(step={self.step}, seqs={len(self.scheduled)} "
                f"({prefill} prefill), tokens={self.num_batched_tokens}, "
                f"new_tokens={len(self.new_tokens)}, preempted={len(self.preempted)}, "
                f"finished={len(self.finished)})")
