"""Trace-driven simulation: the paper's memory and batching results, no GPU.

The simulator (`Simulator`, `simulate`) schedules a request trace
iteration by iteration over the real allocators of `pagedkit.memory`,
with a roofline model of time instead of a model. On top of it,
`pagedkit.sim.experiments` reproduces the paper's figures as data, and
`pagedkit.sim.plots` draws them.
"""

from .latency import OPT_13B, OPT_66B, OPT_175B, PRESETS, LatencyModel, ModelPreset, StepClock
from .managers import (
    ORCA_MAX,
    ORCA_ORACLE,
    ORCA_POW2,
    PAGED,
    PAPER_MANAGERS,
    ManagerSpec,
    Usage,
)
from .metrics import Breakdown, RequestResult, SimResult, StepLog
from .sharing import BeamSearch, ParallelSampling, SharedPrefix
from .simulator import BATCHING_MODES, PREFILL_MODES, Simulator, StepRecord, simulate
from .trace import (
    ALPACA,
    DATASETS,
    SHAREGPT,
    DatasetShape,
    LengthShape,
    Trace,
    TraceRequest,
    load_trace,
    poisson_arrivals,
    sample_lengths,
    synthetic_trace,
)

__all__ = [
    "ALPACA",
    "BATCHING_MODES",
    "DATASETS",
    "OPT_13B",
    "OPT_66B",
    "OPT_175B",
    "ORCA_MAX",
    "ORCA_ORACLE",
    "ORCA_POW2",
    "PAGED",
    "PAPER_MANAGERS",
    "PREFILL_MODES",
    "PRESETS",
    "SHAREGPT",
    "BeamSearch",
    "Breakdown",
    "DatasetShape",
    "LatencyModel",
    "LengthShape",
    "ManagerSpec",
    "ModelPreset",
    "ParallelSampling",
    "RequestResult",
    "SharedPrefix",
    "SimResult",
    "Simulator",
    "StepClock",
    "StepLog",
    "StepRecord",
    "Trace",
    "TraceRequest",
    "Usage",
    "load_trace",
    "poisson_arrivals",
    "sample_lengths",
    "simulate",
    "synthetic_trace",
]
