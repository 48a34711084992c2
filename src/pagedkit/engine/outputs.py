"""What the engine hands back, shaped like vLLM's outputs."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..sequence import RequestMetrics


@dataclass
class CompletionOutput:
    """One of a request's n completions."""

    index: int
    token_ids: list[int]
    text: str | None
    cumulative_logprob: float | None
    finish_reason: str | None

    def __repr__(self) -> str:
        shown = self.text if self.text is not None else self.token_ids
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


@dataclass(slots=True)
class ScheduledInfo:
    """One sequence's part in a step."""

    request_id: str
    seq_id: int
    num_tokens: int
    is_prefill: bool


@dataclass
class StepOutput:
    """What one `LLMEngine.step()` did."""

    step: int
    scheduled: list[ScheduledInfo] = field(default_factory=list)
    new_tokens: dict[int, int] = field(default_factory=dict)  # seq_id -> sampled token
    preempted: list[tuple[str, str]] = field(default_factory=list)  # (request_id, mode)
    finished: list[RequestOutput] = field(default_factory=list)
    memory: dict[str, float] = field(default_factory=dict)
    duration_s: float = 0.0

    @property
    def num_batched_tokens(self) -> int:
        return sum(s.num_tokens for s in self.scheduled)

    def __repr__(self) -> str:
        prefill = sum(s.is_prefill for s in self.scheduled)
        return (f"StepOutput(step={self.step}, seqs={len(self.scheduled)} "
                f"({prefill} prefill), tokens={self.num_batched_tokens}, "
                f"new_tokens={len(self.new_tokens)}, preempted={len(self.preempted)}, "
                f"finished={len(self.finished)})")
