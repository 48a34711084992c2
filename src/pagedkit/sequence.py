"""Sequences and sequence groups: the units the scheduler moves around.

A request becomes one `SequenceGroup`. It starts as a single sequence (the
prompt is computed once); after the prompt, parallel sampling or beam search
forks it into several sequences that share the prompt's KV blocks (paper
§4.4). The scheduler always moves a group as a whole: a group runs, waits or
is swapped out together, because its sequences share memory (§4.5).
"""

from __future__ import annotations

import enum
import time
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

from .sampling_params import SamplingParams


class SequenceStatus(enum.Enum):
    WAITING = "waiting"  # never started, or preempted by recomputation
    RUNNING = "running"
    SWAPPED = "swapped"  # preempted; its blocks wait in CPU memory
    FINISHED = "finished"


class FinishReason(str, enum.Enum):
    STOP = "stop"  # an end-of-sequence or stop token
    LENGTH = "length"  # max_tokens, the model's max length, or a sequence that cannot fit the cache
    ABORT = "abort"  # abort_request

    def __str__(self) -> str:
        return self.value


class Sequence:
    """One token stream: the prompt, then what was generated after it."""

    def __init__(self, prompt_token_ids: list[int], *, seq_id: Hashable) -> None:
        # ids come from whoever owns the sequences (one counter per engine), never a global
        self.seq_id = seq_id
        self.token_ids = list(prompt_token_ids)
        self.prompt_len = len(prompt_token_ids)
        self.num_computed_tokens = 0  # tokens whose K/V are in the cache
        self.status = SequenceStatus.WAITING
        self.finish_reason: FinishReason | None = None
        self.cumulative_logprob = 0.0
        # vLLM's options, touched only by requests that use them:
        self.stop_reason: int | str | None = None  # the stop string or stop token id
        self.logprobs: list | None = None  # per generated token: {token id: Logprob}
        self.text: str | None = None  # the output text as cut at a stop string
        self.decoded: str = ""  # the output text so far (requests with stop strings)

    def __repr__(self) -> str:
        return (f"Sequence(id={self.seq_id}, tokens={len(self.token_ids)}, "
                f"computed={self.num_computed_tokens}, {self.status.value})")

    @property
    def output_token_ids(self) -> list[int]:
        return self.token_ids[self.prompt_len:]

    @property
    def num_output_tokens(self) -> int:
        """Tokens generated so far (`output_token_ids` without the copy)."""
        return len(self.token_ids) - self.prompt_len

    @property
    def is_finished(self) -> bool:
        return self.status is SequenceStatus.FINISHED

    def fork(self, seq_id: Hashable) -> Sequence:
        """A copy with a new id: same tokens, same progress (its blocks are shared separately)."""
        child = Sequence(self.token_ids[:self.prompt_len], seq_id=seq_id)
        child.token_ids = list(self.token_ids)
        child.num_computed_tokens = self.num_computed_tokens
        child.status = self.status
        child.cumulative_logprob = self.cumulative_logprob
        child.decoded = self.decoded
        if self.logprobs is not None:
            child.logprobs = list(self.logprobs)
        return child


@dataclass
class RequestMetrics:
    """Wall-clock times (``time.monotonic()``) of one request's life.

    vLLM's names for the same times (its ``RequestStateStats``) are
    properties: `queued_ts` (pagedkit queues a request when it arrives),
    `scheduled_ts`, `first_token_ts`, `last_token_ts`, `first_token_latency`;
    `num_generation_tokens` and `num_preemptions` are set with each output."""

    arrival_time: float
    first_scheduled_time: float | None = None
    first_token_time: float | None = None
    finish_time: float | None = None
    last_token_time: float | None = None
    num_generation_tokens: int = 0
    num_preemptions: int = 0

    @property
    def queued_ts(self) -> float:
        return self.arrival_time

    @property
    def scheduled_ts(self) -> float | None:
        return self.first_scheduled_time

    @property
    def first_token_ts(self) -> float | None:
        return self.first_token_time

    @property
    def last_token_ts(self) -> float | None:
        return self.last_token_time

    @property
    def first_token_latency(self) -> float | None:
        return self.time_to_first_token

    @property
    def time_to_first_token(self) -> float | None:
        if self.first_token_time is None:
            return None
        return self.first_token_time - self.arrival_time

    @property
    def latency(self) -> float | None:
        return None if self.finish_time is None else self.finish_time - self.arrival_time


@dataclass
class SequenceGroup:
    """The sequences of one request, scheduled together."""

    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    params: SamplingParams
    seqs: list[Sequence]
    metrics: RequestMetrics = field(default_factory=lambda: RequestMetrics(time.monotonic()))
    finished_beams: list[Sequence] = field(default_factory=list)  # beam search hypotheses
    num_cached_tokens: int = 0  # prompt tokens served by the prefix cache
    num_preemptions: int = 0
    arrival_order: int = 0  # breaks ties of arrival_time: the id of its first sequence
    #: with prompt_logprobs: None for the first prompt token, then one dict per token
    prompt_logprobs: list | None = None
    #: the random generator its samples are drawn from: its own if seeded, else
    #: its engine's (a torch.Generator; None where nothing samples, as in the simulator)
    generator: Any = field(default=None, repr=False, compare=False)
    #: vLLM's ``cache_salt``: names its first block with the tokens (`salt_keys`), so
    #: only requests with the same salt share its cached prefix blocks (None: unsalted)
    cache_salt: str | None = None

    @classmethod
    def new(cls, request_id: str, prompt: str | None, prompt_token_ids: list[int],
            params: SamplingParams, arrival_time: float | None = None, *,
            seq_id: int, cache_salt: str | None = None) -> SequenceGroup:
        now = time.monotonic() if arrival_time is None else arrival_time
        first = Sequence(prompt_token_ids, seq_id=seq_id)
        return cls(request_id, prompt, list(prompt_token_ids), params, [first],
                   RequestMetrics(now), arrival_order=first.seq_id,
                   prompt_logprobs=None if params.prompt_logprobs is None else [None],
                   cache_salt=cache_salt)

    def unfinished_seqs(self) -> list[Sequence]:
        return [s for s in self.seqs if s.status is not SequenceStatus.FINISHED]

    @property
    def is_finished(self) -> bool:
        return all(s.status is SequenceStatus.FINISHED for s in self.seqs)

    def set_status(self, status: SequenceStatus) -> None:
        for seq in self.unfinished_seqs():
            seq.status = status
