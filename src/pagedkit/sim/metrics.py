"""What a simulation measured: one row per iteration, one record per request.

Averages over a run are *time* averages: each iteration's snapshot is
weighted by how long it took, so a long prompt step counts for more than a
quick decode step. Shares of memory (paper Fig. 2) are taken over the
slots that hold something or are wasted (token states + reservation +
internal + external fragmentation); free memory that a waiting request
could still use is not waste and is left out, as in the paper.
"""

from __future__ import annotations

from array import array
from collections.abc import Hashable
from dataclasses import dataclass, field

import numpy as np

from .managers import Usage

#: ``num_running`` counts the requests in the running batch (admitted and holding KV
#: memory, including any that finish in the iteration); ``num_scheduled`` (and
#: ``num_scheduled_seqs``) those whose tokens the iteration computed. They differ only
#: when newly admitted prompts run in an iteration of their own (``prefill="separate"``):
#: the running requests then wait, holding their memory.
COLUMNS = ("time", "duration", "num_running", "num_scheduled", "num_scheduled_seqs",
           "num_waiting", "num_tokens", "context_tokens", *Usage._fields)


class StepLog:
    """Per-iteration rows, stored flat in one compact array (an hour of
    simulation is hundreds of thousands of iterations); `array(name)` gives
    a column."""

    def __init__(self) -> None:
        self._data = array("d")

    def __len__(self) -> int:
        return len(self._data) // len(COLUMNS)

    def __eq__(self, other: object) -> bool:
        """Two runs logged the very same iterations (every column, bit for bit)."""
        if not isinstance(other, StepLog):
            return NotImplemented
        return self._data == other._data

    __hash__ = None  # mutable: it grows while a simulation runs

    def add(self, time: float, duration: float, num_running: int, num_scheduled: int,
            num_scheduled_seqs: int, num_waiting: int, num_tokens: int, context_tokens: int,
            usage: Usage) -> None:
        self._data.extend((time, duration, num_running, num_scheduled, num_scheduled_seqs,
                           num_waiting, num_tokens, context_tokens, *usage))

    def array(self, name: str) -> np.ndarray:
        if name not in COLUMNS:
            raise KeyError(f"no column {name!r}; the columns are {', '.join(COLUMNS)}")
        rows = np.frombuffer(self._data, dtype=np.float64).reshape(-1, len(COLUMNS))
        return rows[:, COLUMNS.index(name)]

    def time_average(self, name: str) -> float:
        w = self.array("duration")
        return float(np.dot(self.array(name), w) / w.sum()) if len(self) else 0.0


@dataclass(frozen=True)
class RequestResult:
    """How one request went. `finish_reason` is ``"stop"`` when it produced its
    whole output, or says why it was aborted."""

    request_id: Hashable  # the trace's: a number or a name
    arrival: float
    prompt_len: int
    output_len: int
    first_token_time: float | None
    finish_time: float
    num_preemptions: int
    finish_reason: str

    @property
    def latency(self) -> float:
        return self.finish_time - self.arrival

    @property
    def normalized_latency(self) -> float:
        """End-to-end latency per output token, the paper's metric (§6.1)."""
        return self.latency / self.output_len


@dataclass(frozen=True)
class Breakdown:
    """Time-averaged shares of the used-or-wasted KV slots (paper Fig. 2)."""

    token_states: float
    reservation: float
    internal_fragmentation: float
    external_fragmentation: float

    def as_dict(self) -> dict[str, float]:
        return {"token_states": self.token_states, "reservation": self.reservation,
                "internal_fragmentation": self.internal_fragmentation,
                "external_fragmentation": self.external_fragmentation}


@dataclass
class SimResult:
    """Everything one simulation produced, with the paper's summary metrics."""

    manager: str
    trace: str
    capacity_slots: int
    requests: list[RequestResult]
    steps: StepLog
    wall_seconds: float = 0.0
    num_preemptions: int = 0
    extra: dict[str, object] = field(default_factory=dict)

    @property
    def num_steps(self) -> int:
        return len(self.steps)

    @property
    def finished(self) -> list[RequestResult]:
        return [r for r in self.requests if r.finish_reason == "stop"]

    @property
    def aborted(self) -> list[RequestResult]:
        return [r for r in self.requests if r.finish_reason != "stop"]

    @property
    def makespan(self) -> float:
        """Seconds from time 0 to the last request's end."""
        return max((r.finish_time for r in self.requests), default=0.0)

    def mean_batch_size(self) -> float:
        """Fig. 13's "average number of batched requests": requests in the running
        batch (admitted and holding KV memory), time-averaged.

        That is what §6.2 reads off Fig. 13 ("vLLM processes 2.2x more requests
        at the same time"), and it is why Orca (Max) sits at exactly 7.00 on
        both traces: 7 regions of 2,048 slots fit, whatever the iteration
        computes. With ``prefill="separate"`` a prompt iteration computes only
        the newcomers while the others wait in the batch; `mean_scheduled`
        counts what the iterations computed."""
        return self.steps.time_average("num_running")

    def mean_scheduled(self, sequences: bool = False) -> float:
        """Requests (or with `sequences`, sequences) whose tokens an iteration
        computed, time-averaged: the batch the model actually ran."""
        return self.steps.time_average("num_scheduled_seqs" if sequences else "num_scheduled")

    def breakdown(self) -> Breakdown:
        parts = [self.steps.time_average(name) for name in
                 ("token_states", "reservation", "internal_fragmentation",
                  "external_fragmentation")]
        total = sum(parts) or 1.0
        return Breakdown(*(p / total for p in parts))

    def mean_normalized_latency(self) -> float:
        """Mean over finished requests of latency / output length (s/token)."""
        done = self.finished
        return float(np.mean([r.normalized_latency for r in done])) if done else float("nan")

    def _rounded_latency(self) -> float | None:
        """The summary's latency: None (JSON null, "-" in a table) when no
        request finished, where a mean would be nan (invalid JSON)."""
        return round(self.mean_normalized_latency(), 5) if self.finished else None

    def throughput(self) -> float:
        """Finished requests per second of simulated time."""
        return len(self.finished) / self.makespan if self.makespan else 0.0

    def sharing_saving(self) -> float:
        """Share of KV blocks sharing saved: ``1 - used / held-alone`` (paper Fig. 15)."""
        alone = self.steps.time_average("blocks_alone")
        return 1.0 - self.steps.time_average("used_blocks") / alone if alone else 0.0

    def summary(self) -> dict[str, float | int | str | None]:
        b = self.breakdown()
        return {"manager": self.manager, "trace": self.trace, "requests": len(self.requests),
                "aborted": len(self.aborted), "steps": self.num_steps,
                "preemptions": self.num_preemptions,
                "mean_batch_size": round(self.mean_batch_size(), 3),
                "mean_scheduled": round(self.mean_scheduled(), 3),
                "token_state_share": round(b.token_states, 4),
                "normalized_latency_s_per_token": self._rounded_latency(),
                "makespan_s": round(self.makespan, 2),
                "wall_seconds": round(self.wall_seconds, 3)}
