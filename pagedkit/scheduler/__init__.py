"""Continuous batching over paged memory: which tokens each step computes."""

from .scheduler import (
    PREEMPTION_MODES,
    ScheduledSeq,
    Scheduler,
    SchedulerConfig,
    SchedulerOutput,
)

__all__ = ["PREEMPTION_MODES", "ScheduledSeq", "Scheduler", "SchedulerConfig", "SchedulerOutput"]
