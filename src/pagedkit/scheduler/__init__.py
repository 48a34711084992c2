"""Continuous batching over paged memory: which tokens each step computes."""

from .events import FINISH_REASONS, Admit, Finish, Preempt, SchedulerEventKind, Step
from .policy import Fit
from .scheduler import (
    PREEMPTION_MODES,
    Sampled,
    ScheduledSeq,
    Scheduler,
    SchedulerConfig,
    SchedulerOutput,
)

__all__ = [
    "FINISH_REASONS",
    "PREEMPTION_MODES",
    "Admit",
    "Finish",
    "Fit",
    "Preempt",
    "Sampled",
    "ScheduledSeq",
    "Scheduler",
    "SchedulerConfig",
    "SchedulerEventKind",
    "SchedulerOutput",
    "Step",
]
