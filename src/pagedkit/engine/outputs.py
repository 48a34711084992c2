"""What the engine hands back, shaped like vLLM's outputs."""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Sequence as SequenceABC
from dataclasses import dataclass, field
from typing import Any

from ..sequence import RequestMetrics


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
class CompletionOutput:
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

    def __repr__(self) -> str:
        shown = self.text if self.text else self.token_ids
        return (f"CompletionOutput(index={self.index}, {shown!r}, "
                f"finish_reason={self.finish_reason!r})")


@dataclass
class RequestOutput:
    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput]
    finished: bool
    metrics: RequestMetrics
    num_cached_tokens: int = 0  # prompt tokens served by the prefix cache
    num_preemptions: int = 0
    prompt_logprobs: list[PositionLogprobs | None] | None = None


@dataclass(slots=True)
class ScheduledInfo:
    """One sequence's part in a step."""

    request_id: str
    seq_id: int
    num_tokens: int
    is_prefill: bool


@dataclass(eq=False)
class StepOutput(SequenceABC):
    """What one `LLMEngine.step()` did.

    As a sequence it is vLLM's ``step()`` result: a `RequestOutput` for every
    request that got tokens this step (partial ones for unfinished requests,
    so ``for out in engine.step()`` streams) and for every request that
    ended. Those outputs are built when first read, so a caller who only
    wants `finished` (as `LLM.generate`) pays nothing for them. The fields
    are pagedkit's own view of the step (the widgets and labs read them)."""

    step: int
    scheduled: list[ScheduledInfo] = field(default_factory=list)
    new_tokens: dict[int, int] = field(default_factory=dict)  # seq_id -> sampled token
    preempted: list[tuple[str, str]] = field(default_factory=list)  # (request_id, mode)
    finished: list[RequestOutput] = field(default_factory=list)
    memory: dict[str, float] = field(default_factory=dict)
    duration_s: float = 0.0
    #: builds the step's RequestOutputs on first read (set by the engine)
    build_outputs: Callable[[], list[RequestOutput]] | None = field(default=None, repr=False)
    _outputs: list[RequestOutput] | None = field(default=None, repr=False)

    @property
    def outputs(self) -> list[RequestOutput]:
        """The step's RequestOutputs, as a list (what vLLM's ``step()`` returns)."""
        if self._outputs is None:
            self._outputs = self.build_outputs() if self.build_outputs else list(self.finished)
            self.build_outputs = None  # drop what the builder holds on to
        return self._outputs

    def __getitem__(self, index: Any) -> Any:
        return self.outputs[index]

    def __len__(self) -> int:
        return len(self.outputs)

    @property
    def num_batched_tokens(self) -> int:
        return sum(s.num_tokens for s in self.scheduled)

    def __repr__(self) -> str:
        prefill = sum(s.is_prefill for s in self.scheduled)
        return (f"StepOutput(step={self.step}, seqs={len(self.scheduled)} "
                f"({prefill} prefill), tokens={self.num_batched_tokens}, "
                f"new_tokens={len(self.new_tokens)}, preempted={len(self.preempted)}, "
                f"finished={len(self.finished)})")
