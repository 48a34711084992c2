"""The paper's figures, reproduced as data by simulation.

Each ``figN_*`` function runs the simulator and returns a `FigureData`:
plain rows a test can check and a notebook can tabulate. Drawing is apart,
in `pagedkit.sim.plots`, so the numbers never depend on a plotting library.

Every run uses `PAPER_OPTIONS` unless told otherwise: the paper's vLLM
runs an iteration of newly admitted prompts apart from the decoding
iterations (``prefill="separate"``), and so do our runs of its baselines,
so that only the memory manager differs between them. Traces are the
synthetic ShareGPT- and Alpaca-like ones of `pagedkit.sim.trace`; pass
your own `Trace` to use real lengths.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import pairwise

from .._validation import check_int, check_number
from ..i18n import N_, _, aligned
from .latency import OPT_13B, OPT_66B, OPT_175B, PRESETS, ModelPreset
from .managers import ORCA_ORACLE, PAGED, PAPER_MANAGERS, ManagerSpec
from .metrics import SimResult
from .sharing import (
    ONE_SAMPLE,
    BeamSearch,
    ParallelSampling,
    SharedPrefix,
    Sharing,
    group_past_max_num_seqs,
    num_sequences,
    said,
    sample_output_lens,
)
from .simulator import DEFAULT_MAX_NUM_SEQS, simulate
from .trace import DATASETS, Trace, TraceRequest, dataset_name, synthetic_trace

#: Simulator options that mimic the system the paper measured (``"separate"`` is
#: also `Simulator`'s default; it is stated so that the figures never depend on it).
PAPER_OPTIONS: dict[str, object] = {"prefill": "separate"}

#: The request rates of the paper's Fig. 13 (and our default for Fig. 2 and 18b).
PAPER_RATES = {"sharegpt": 2.0, "alpaca": 30.0}

#: Our rate for Fig. 15's Alpaca trace (the paper does not give one; memory saved
#: depends on it little).
SHARING_RATE = 10.0

#: Fig. 15's scenarios, then two few-shot prefixes of the paper's §6.4 (80 and 341 tokens).
SHARING_SCENARIOS: tuple[Sharing, ...] = (
    ParallelSampling(2), ParallelSampling(4), ParallelSampling(6),
    BeamSearch(2), BeamSearch(4), BeamSearch(6),
    SharedPrefix(80), SharedPrefix(341))

BLOCK_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256)


@dataclass(frozen=True)
class FigureData:
    """A figure's numbers: one dict per bar or point, plus how they were made."""

    figure: str
    title: str
    rows: tuple[dict, ...]
    settings: dict = field(default_factory=dict)

    def column(self, key: str, **match) -> list:
        return [row[key] for row in self.select(**match)]

    def select(self, **match) -> list[dict]:
        """Rows whose fields equal every given value."""
        return [row for row in self.rows if all(row.get(k) == v for k, v in match.items())]

    def value(self, key: str, **match) -> float:
        """The `key` of the one row matching, e.g. ``value("mean_batch_size", manager="vLLM")``."""
        rows = self.select(**match)
        if len(rows) != 1:
            raise KeyError(f"{len(rows)} rows of {self.figure} match {match}; expected one")
        return rows[0][key]


def paper_trace(dataset: str, *, rate: float | None = None, num_requests: int | None = None,
                duration: float | None = None, seed: int = 0) -> Trace:
    """A synthetic trace of `dataset` at the paper's rate for it (Fig. 13) by default."""
    dataset = dataset_name(dataset)  # "Alpaca" as synthetic_trace reads it
    rate = PAPER_RATES[dataset] if rate is None else rate
    if num_requests is None and duration is None:
        num_requests = 1000
    return synthetic_trace(dataset, rate=rate, num_requests=num_requests, duration=duration,
                           seed=seed)


def run_managers(trace: Trace, managers: Iterable[ManagerSpec] = PAPER_MANAGERS,
                 **options) -> dict[str, SimResult]:
    """Simulate `trace` once per manager; keyed by the manager's label."""
    return {m.label: _simulate(trace, m, **options) for m in managers}


def _simulate(trace: Trace, manager: ManagerSpec, **options) -> SimResult:
    """One run with the paper's options; no per-run progress bar (figures run many)."""
    return simulate(trace, manager, **{"progress": False, **PAPER_OPTIONS, **options})


# ------------------------------------------------------------------ Fig. 2
def fig2_memory_breakdown(trace: Trace | None = None, *,
                          managers: Iterable[ManagerSpec] = PAPER_MANAGERS,
                          results: dict[str, SimResult] | None = None, **options) -> FigureData:
    """Where the KV cache goes, per manager, time-averaged (%): token states,
    reservation, internal and external fragmentation (paper Fig. 2)."""
    trace = trace or paper_trace("sharegpt")
    results = results or run_managers(trace, managers, **options)
    rows = tuple({"manager": label, **{k: 100 * v for k, v in r.breakdown().as_dict().items()}}
                 for label, r in results.items())
    return FigureData("Fig. 2", _("KV cache usage by memory manager"), rows,
                      {"trace": trace.name, "requests": len(trace), **PAPER_OPTIONS, **options})


# ----------------------------------------------------------------- Fig. 13
def _traces_or_papers(traces: Sequence[Trace] | None) -> list[Trace]:
    """`traces`, or the paper's ShareGPT and Alpaca traces when none are given."""
    if traces is None:
        return [paper_trace("sharegpt"), paper_trace("alpaca")]
    if not traces:
        raise ValueError("traces is empty: give at least one trace, or leave traces out for "
                         "the paper's ShareGPT and Alpaca traces")
    return list(traces)


def fig13_batch_sizes(traces: Sequence[Trace] | None = None, *,
                      managers: Iterable[ManagerSpec] = PAPER_MANAGERS,
                      results: dict[str, dict[str, SimResult]] | None = None,
                      **options) -> FigureData:
    """Average number of batched requests per manager and trace (paper Fig. 13):
    ``mean_batch_size`` counts the running batch, as the paper does (see
    `SimResult.mean_batch_size`); ``mean_scheduled`` the requests an iteration
    computed, fewer when prompts run in iterations of their own."""
    traces = _traces_or_papers(traces)
    managers = tuple(managers)
    if results is None:
        results = {t.name: run_managers(t, managers, **options) for t in traces}
    rows = tuple({"trace": name, "manager": label, "mean_batch_size": r.mean_batch_size(),
                  "mean_scheduled": r.mean_scheduled(), "preemptions": r.num_preemptions}
                 for name, by_manager in results.items() for label, r in by_manager.items())
    return FigureData("Fig. 13", _("Average number of batched requests"), rows,
                      {"traces": [t.name for t in traces], **PAPER_OPTIONS, **options})


# ----------------------------------------------------------------- Fig. 12
#: The highest request rate of each Fig. 12 sweep: past every manager's knee (OPT-13B).
TOP_RATES = {"sharegpt": 2.75, "alpaca": 55.0}


def default_rates(dataset: str, points: int = 11) -> tuple[float, ...]:
    """`points` evenly spaced request rates up to one past every manager's knee
    on `dataset` (OPT-13B): 0.25 .. 2.75 req/s on ShareGPT, 5 .. 55 on Alpaca."""
    check_int("points", points, minimum=1)
    top = TOP_RATES[dataset_name(dataset)]
    return tuple(round(top * i / points, 3) for i in range(1, points + 1))


def fig12_latency_vs_rate(dataset: str = "sharegpt", rates: Sequence[float] | None = None, *,
                          managers: Iterable[ManagerSpec] = PAPER_MANAGERS,
                          duration: float = 300.0, cutoff: float = 1.0, seed: int = 0,
                          **options) -> FigureData:
    """Mean normalized latency (s/token) against request rate (paper Fig. 12).

    Each rate replays the same seeded lengths for `duration` seconds of
    arrivals. Past a manager's capacity its queue grows without bound and
    latency shoots up: the knee. Paging moves the knee right. Once a
    manager's latency passes `cutoff` s/token (the top of the paper's
    axes), higher rates can only be worse and are not simulated for it."""
    rates = default_rates(dataset) if rates is None else sorted(rates)
    if not rates:
        raise ValueError("rates is empty: give at least one request rate (req/s), or leave "
                         "rates out for the default sweep (default_rates)")
    managers = tuple(managers)
    rows, overloaded = [], set()
    for rate in rates:
        trace = synthetic_trace(dataset, rate=rate, duration=duration, seed=seed)
        for m in managers:
            if m.label in overloaded:
                continue
            r = _simulate(trace, m, **options)
            latency = r.mean_normalized_latency()
            rows.append({"dataset": dataset, "manager": m.label, "rate": rate,
                         "normalized_latency": latency, "mean_batch_size": r.mean_batch_size(),
                         "requests": len(trace)})
            if latency > cutoff:
                overloaded.add(m.label)
    return FigureData("Fig. 12", (_("Normalized latency vs request rate ({dataset})")
                                   .format(dataset=dataset)), tuple(rows),
                      {"dataset": dataset, "duration": duration, "cutoff": cutoff,
                       **PAPER_OPTIONS, **options})


def sustainable_rates(data: FigureData, factor: float = 4.0) -> dict[str, float]:
    """The highest rate each manager serves within one latency bound:
    `factor` times the lowest normalized latency any manager reaches at the
    lowest rate ("similar latencies", §6.2). Interpolated between grid
    points; a manager that never crosses the bound gets the highest rate
    tried (a lower bound), one already past it at the lowest rate gets that."""
    lowest = min(data.column("rate"))
    bound = factor * min(data.column("normalized_latency", rate=lowest))
    out = {}
    for manager in dict.fromkeys(data.column("manager")):
        points = sorted((row["rate"], row["normalized_latency"])
                        for row in data.select(manager=manager))
        rate = points[-1][0]
        for (r0, l0), (r1, l1) in pairwise(points):
            if l1 > bound:
                rate = r0 + (r1 - r0) * (bound - l0) / (l1 - l0) if l0 <= bound else r0
                break
        if points[0][1] > bound:
            rate = points[0][0]
        out[manager] = float(rate)
    return out


# ----------------------------------------------------------------- Fig. 15
def fig15_sharing_savings(trace: Trace | None = None, *,
                          scenarios: Iterable[Sharing] = SHARING_SCENARIOS,
                          block_size: int = 16, **options) -> FigureData:
    """KV blocks saved by sharing (%): ``1 - blocks used / blocks the sequences
    would hold alone``, time-averaged (paper Fig. 15 for parallel sampling
    and beam search on Alpaca; the shared prefix goes beyond it)."""
    scenarios = tuple(scenarios)
    max_num_seqs = options.get("max_num_seqs", DEFAULT_MAX_NUM_SEQS)
    for sharing in scenarios:  # before the first run, not minutes later
        problem = group_past_max_num_seqs(sharing, max_num_seqs)
        if problem:
            raise ValueError(problem)
    trace = trace or paper_trace("alpaca", rate=SHARING_RATE, num_requests=500)
    rows = []
    for sharing in scenarios:
        r = _simulate(trace, ManagerSpec("paged", block_size), sharing=sharing, **options)
        kind, size = {ParallelSampling: ("parallel", "n"), BeamSearch: ("beam", "width"),
                      SharedPrefix: ("prefix", "length")}[type(sharing)]
        rows.append({"scenario": kind, "size": getattr(sharing, size), "label": sharing.label,
                     "display": said(sharing.label), "saving": 100 * r.sharing_saving(),
                     "mean_batch_size": r.mean_batch_size(), "aborted": len(r.aborted)})
    return FigureData("Fig. 15", _("Memory saved by sharing KV blocks"), tuple(rows),
                      {"trace": trace.name, "requests": len(trace), "block_size": block_size,
                       **PAPER_OPTIONS, **options})


def savings_table(data: FigureData,
                  paper: Mapping[str, Mapping[int, float] | tuple[float, float]]) -> str:
    """`fig15_sharing_savings`'s rows as a table in the language of the moment: each
    scenario, the memory it saved and the paper's number from `paper`, which gives
    for a kind of sharing either a number for each size (``paper.FIG15_SAVING``:
    ``{"parallel": {2: 6.09, ...}}``) or one range for all its sizes
    (``{"parallel": (16.2, 30.5)}``); ``-`` where it gives none."""
    def the_papers(row: dict) -> str:
        given = paper.get(row["scenario"])
        if isinstance(given, tuple):
            low, high = given
            return f"{low}-{high}%"
        return f"{given[row['size']]:.1f}%" if given and row["size"] in given else "-"

    header = [_("{trace}, {n} requests").format(trace=data.settings["trace"],
                                                n=data.settings["requests"]),
              _("saved (simulated)"), _("paper")]
    return aligned([header, *([said(row["label"]), f"{row['saving']:.1f}%", the_papers(row)]
                              for row in data.rows)], right=(1, 2))


# ---------------------------------------------------------------- Fig. 18b
def fig18b_block_size_sweep(block_sizes: Sequence[int] = BLOCK_SIZES,
                            traces: Sequence[Trace] | None = None, **options) -> FigureData:
    """Normalized latency of paged memory against block size (paper Fig. 18b).

    Small blocks read the KV cache slowly (see `LatencyModel`); large ones
    waste the tail of every sequence's last block, which hurts the short
    Alpaca sequences most: fewer requests fit, and the queue grows."""
    block_sizes = tuple(block_sizes)
    if not block_sizes:
        raise ValueError(f"block_sizes is empty: give at least one block size (tokens), or leave "
                         f"block_sizes out for the default sweep {BLOCK_SIZES}")
    traces = _traces_or_papers(traces)
    rows = []
    for trace in traces:
        for size in block_sizes:
            r = _simulate(trace, ManagerSpec("paged", size), **options)
            rows.append({"trace": trace.name, "block_size": size,
                         "normalized_latency": r.mean_normalized_latency(),
                         "mean_batch_size": r.mean_batch_size(),
                         "token_states": 100 * r.breakdown().token_states,
                         "preemptions": r.num_preemptions})
    return FigureData("Fig. 18b", _("Normalized latency vs block size"), tuple(rows),
                      {"traces": [t.name for t in traces], **PAPER_OPTIONS, **options})


def best_block_sizes(data: FigureData, trace: str, tolerance: float = 0.05) -> list[int]:
    """Block sizes within `tolerance` of the lowest latency on `trace`."""
    rows = data.select(trace=trace)
    if not rows:
        traces = ", ".join(map(repr, dict.fromkeys(data.column("trace"))))
        raise ValueError(f"{data.figure} has no rows for trace {trace!r}; its traces are "
                         f"{traces or 'none'}")
    best = min(row["normalized_latency"] for row in rows)
    return [row["block_size"] for row in rows
            if row["normalized_latency"] <= best * (1 + tolerance)]


# ------------------------------------------------ the results' shape (§6.2, §6.3)
#: How many times over a saturated trace refills the paged batch by default:
#: enough that the steady state, not the first fill, sets the measured capacity.
TURNOVERS = 6


def saturated_trace(dataset: str, num_requests: int, *, seed: int = 0) -> Trace:
    """`dataset`'s seeded lengths with every request arriving at time 0: a queue
    that stays full until the end, so a run measures how fast a server can go
    (`capacity`), not how fast requests happen to come."""
    lengths = synthetic_trace(dataset, rate=1.0, num_requests=num_requests, seed=seed)
    requests = tuple(TraceRequest(r.request_id, 0.0, r.prompt_len, r.output_len)
                     for r in lengths)
    return Trace(f"{dataset} saturated", requests, lengths.source)


def unshared_trace(trace: Trace, sharing: Sharing, *, seed: int = 0,
                   max_seq_len: int = 2048) -> tuple[Trace, tuple[int, ...]]:
    """What a server that cannot share KV memory serves for `trace` under `sharing`
    (the Orca baselines of §6.3): every sequence of a request as a request of its
    own, with the same arrival and prompt (a shared prefix joins every prompt).

    The sequences are those the simulator runs for the shared request: beams and
    a shared prefix's requests keep the trace's output length; parallel samples
    draw theirs exactly as `Simulator` does with the same `seed` (its generator
    draws only these lengths under parallel sampling). Returns the trace and, for
    each of its requests, the id of the request it came from."""
    if not isinstance(sharing, (ParallelSampling, BeamSearch, SharedPrefix)):
        raise TypeError(f"sharing must be ParallelSampling, BeamSearch or SharedPrefix, got "
                        f"{sharing!r}")
    check_int("max_seq_len", max_seq_len, minimum=1)
    rng = random.Random(seed)
    pool = [r.output_len for r in trace.requests] or [1]
    prefix = sharing.length if isinstance(sharing, SharedPrefix) else 0
    requests, owner = [], []
    for r in trace.requests:
        prompt_len = prefix + r.prompt_len
        if isinstance(sharing, ParallelSampling):
            room = max(1, max_seq_len - prompt_len)
            lens = sample_output_lens(r.output_len, sharing.n, pool, room, rng)
        else:
            lens = [r.output_len] * num_sequences(sharing)
        for length in lens:
            requests.append(TraceRequest(len(requests), r.arrival, prompt_len, length))
            owner.append(r.request_id)
    return Trace(f"{trace.name}, {sharing.label} unshared", tuple(requests),
                 trace.source), tuple(owner)


def saturated_rate(result: SimResult, tokens_per_request: float) -> float:
    """Requests per second a saturated run serves: the tokens its iterations
    produced while requests were still waiting (the server full all along),
    per second of those iterations, over the tokens one request needs. The
    drain at the end, when the batch empties, is left out."""
    check_number("tokens_per_request", tokens_per_request, positive=True)
    waiting = result.steps.array("num_waiting") > 0
    seconds = float(result.steps.array("duration")[waiting].sum())
    if not seconds:
        raise ValueError(_("{manager} on {trace}: no request ever waited (the running batch "
                           "peaked at {peak} of {n} requests), so the run never saturated the "
                           "server; simulate more requests than it holds at once (`capacity` "
                           "says how many)")
                         .format(manager=result.manager, trace=result.trace,
                                 peak=int(result.steps.array("num_running").max(initial=0)),
                                 n=len(result.requests)))
    tokens = float(result.steps.array("num_scheduled_seqs")[waiting].sum())
    return tokens / seconds / tokens_per_request


def _ever_waited(result: SimResult) -> bool:
    """Whether a request waited in some iteration: a saturated run's condition."""
    return bool((result.steps.array("num_waiting") > 0).any())


def _repeated(trace: Trace, num_requests: int) -> Trace:
    """`trace`'s requests over and over (the first `num_requests`), all at time 0."""
    requests = tuple(TraceRequest(i, 0.0, r.prompt_len, r.output_len) for i, r in
                     zip(range(num_requests), itertools.cycle(trace.requests)))
    return Trace(trace.name, requests, trace.source)


#: How many times over `_requests_that_saturate` repeats a trace at most.
MOST_REPEATS = 16


def _requests_that_saturate(trace: Trace, waits: Callable[[Trace], bool]
                            ) -> tuple[int, int] | None:
    """For a `trace` too short to saturate a manager: the fewest of its requests,
    repeated at time 0 (`_repeated`), found to keep one waiting, and the most
    found not to, both simulated (`waits` runs one): once, twice ...
    `MOST_REPEATS` times over first, then halving the gap. Once over is
    simulated too: `trace` itself may spread its requests out, and the same
    requests all at time 0 may well wait. None when even `MOST_REPEATS` times
    over never wait."""
    n = len(trace)
    low = 0
    for times in range(1, MOST_REPEATS + 1):
        if waits(_repeated(trace, times * n)):
            high = times * n
            break
        low = times * n
    else:
        return None
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (low, mid) if waits(_repeated(trace, mid)) else (mid, high)
    return high, low


def capacity(trace: Trace, manager: ManagerSpec | str, *, sharing: Sharing | None = None,
             seed: int = 0, **options) -> dict:
    """How many requests per second `manager` serves when its queue never empties
    (`trace` from `saturated_trace`): the request rate where Fig. 12's latency
    curve turns up, since past it requests arrive faster than they end.

    With `sharing`, paged memory runs the shared sequences (§4.4); a contiguous
    manager cannot share (§6.3), so it runs `unshared_trace`. Returns
    ``requests_per_s`` (`saturated_rate`), ``tokens_per_s`` (generated by all
    sequences), ``mean_batch_size`` (Fig. 13's running batch, in requests of
    `trace`), ``preemptions`` and ``aborted``."""
    spec = ManagerSpec.parse(manager) if isinstance(manager, str) else manager
    r, per_request = _saturated_run(trace, spec, sharing, seed, options)
    if r.aborted:
        raise ValueError(f"{spec.label} aborted {len(r.aborted)} requests of {trace.name}: "
                         f"{r.aborted[0].finish_reason}; a capacity needs every request served")
    if not _ever_waited(r):
        raise ValueError(_never_saturated(trace, spec, lambda t: _ever_waited(
            _saturated_run(t, spec, sharing, seed, options)[0])))
    tokens = float(r.steps.array("num_scheduled_seqs").sum())  # every sequence's every token
    rate = saturated_rate(r, tokens / len(trace))
    return {"requests_per_s": rate, "tokens_per_s": rate * tokens / len(trace),
            "mean_batch_size": r.mean_batch_size() / per_request,
            "preemptions": r.num_preemptions, "aborted": len(r.aborted)}


def _saturated_run(trace: Trace, spec: ManagerSpec, sharing: Sharing | None, seed: int,
                   options: dict) -> tuple[SimResult, int]:
    """`capacity`'s run, and how many sequences it ran per request of `trace`: with
    `sharing`, paged memory shares; a contiguous manager runs `unshared_trace`."""
    if sharing is None or spec.paged:
        return _simulate(trace, spec, sharing=sharing, seed=seed, **options), 1
    model = options.get("model")
    preset = getattr(model, "preset", model) or OPT_13B
    served, _owner = unshared_trace(trace, sharing, seed=seed, max_seq_len=preset.max_seq_len)
    return _simulate(served, spec, seed=seed, **options), num_sequences(sharing)


def _never_saturated(trace: Trace, spec: ManagerSpec, waits: Callable[[Trace], bool]) -> str:
    """Why a run measured no capacity, with a count of requests that does
    (`_requests_that_saturate`, simulated)."""
    n = len(trace)
    if len({r.arrival for r in trace.requests}) == 1:  # none waited, so all ran at once
        said = _("{manager} on {trace}: no request ever waited: all {n} requests ran at once, "
                 "so the run never saturated the server and measures no rate")
    else:
        said = _("{manager} on {trace}: no request ever waited: each of its {n} requests "
                 "started on arriving, so the run never saturated the server and measures no "
                 "rate")
    said = said.format(manager=spec.label, trace=trace.name, n=n)
    found = _requests_that_saturate(trace, waits)
    if found is None:
        return said + _("; even these requests {times} times over ({count} at time 0) never "
                        "waited: give the manager less memory (capacity_slots=) or longer "
                        "requests").format(times=MOST_REPEATS, count=MOST_REPEATS * n)
    works, fails = found
    return said + _("; give it more requests than it holds at once: {works} keep one waiting, "
                    "{fails} did not (simulated: these {n} requests repeated, all at time 0); "
                    "{turnovers} times that, saturated_trace(dataset, {enough}), lets the steady "
                    "state, not the first fill, set the rate").format(
                        works=works, fails=fails, n=n, turnovers=TURNOVERS,
                        enough=TURNOVERS * works)


@dataclass(frozen=True)
class Scenario:
    """One setting of the paper's evaluation: a trace shape, a model on its GPUs
    (Table 1) and a decoding algorithm."""

    dataset: str
    model: ModelPreset = OPT_13B
    sharing: Sharing | None = None

    @property
    def decoding(self) -> str:
        """The decoding algorithm's label: the sharing's, or `ONE_SAMPLE`."""
        return self.sharing.label if self.sharing else ONE_SAMPLE

    @property
    def label(self) -> str:
        return f"{self.dataset}, {self.model.name}, {self.decoding}"

    @property
    def display(self) -> str:
        """`label` in the language of the moment, to print: the dataset and the
        model are names, the decoding is said (`label` stays English: a key)."""
        return _said_setting(self.dataset, self.model.name, self.decoding)

    def num_requests(self, turnovers: int = TURNOVERS,
                     max_num_seqs: int = DEFAULT_MAX_NUM_SEQS) -> int:
        """Requests for a saturated run: `turnovers` times the requests whose
        sequences fit the preset's KV slots at the dataset's mean length (at
        most `max_num_seqs` sequences), at least 50."""
        shape = DATASETS[self.dataset]
        seqs = num_sequences(self.sharing)
        fit = min(max_num_seqs / seqs,
                  self.model.kv_slots / ((shape.prompt.mean + shape.output.mean) * seqs))
        return max(50, round(turnovers * fit))


def _said_setting(dataset: str, model: str, decoding: str) -> str:
    return _("{dataset}, {model}, {decoding}").format(dataset=dataset, model=model,
                                                       decoding=said(decoding))


#: Where the gain changes, after the abstract and §6.2-6.3: longer requests
#: (ShareGPT against Alpaca), models on other GPUs (Table 1), parallel
#: sampling and beam search (Fig. 14 runs them on Alpaca and OPT-13B).
SHAPE_SCENARIOS: tuple[Scenario, ...] = (
    Scenario("sharegpt"), Scenario("alpaca"), Scenario("sharegpt", OPT_66B),
    Scenario("alpaca", OPT_175B),
    Scenario("alpaca", sharing=ParallelSampling(4)), Scenario("alpaca", sharing=BeamSearch(4)))


def results_shape(scenarios: Iterable[Scenario] = SHAPE_SCENARIOS, *,
                  managers: Iterable[ManagerSpec] = (ORCA_ORACLE, PAGED),
                  turnovers: int = TURNOVERS, seed: int = 0, **options) -> FigureData:
    """`capacity` of each manager in each scenario, on one saturated trace per
    scenario (`Scenario.num_requests`). One row per scenario and manager."""
    check_int("turnovers", turnovers, minimum=1)
    managers, rows = tuple(managers), []
    for sc in scenarios:
        trace = saturated_trace(sc.dataset, sc.num_requests(turnovers), seed=seed)
        for m in managers:
            c = capacity(trace, m, sharing=sc.sharing, seed=seed, model=sc.model, **options)
            rows.append({"scenario": sc.label, "display": sc.display, "dataset": sc.dataset,
                         "model": sc.model.name, "gpus": sc.model.num_gpus,
                         "decoding": sc.decoding,
                         "manager": m.label, "requests": len(trace), **c})
    return FigureData("§6.2-6.3", _("Requests per second each manager serves, saturated"),
                      tuple(rows), {"managers": [m.label for m in managers],
                                    "turnovers": turnovers, **PAPER_OPTIONS, **options})


#: `shape_table`'s headers, two lines each (the first, a group's, may be empty).
SHAPE_HEADERS = (N_("\nsetting"), N_("KV\nslots"), N_("arithmetic-\nbound above"),
                 N_("\nrequests"), N_("{manager}\nrequests/s"), N_("\ngain"),
                 N_("{manager}\nbatch"))


def shape_table(data: FigureData, bound_above: Callable[[ModelPreset], float],
                baseline: str = ORCA_ORACLE.label, paged: str = PAGED.label) -> str:
    """`results_shape`'s rows as a table in the language of the moment, one line a
    scenario: the preset's KV slots, `bound_above(preset)` (the tokens a step
    computes past which its arithmetic outlasts reading the weights), the trace's
    requests, the requests per second `baseline` and `paged` serve, the gain
    (paged / baseline), and each one's mean batch."""
    setting, slots, bound, requests, rate, gain, batch = (_(h) for h in SHAPE_HEADERS)
    header = [setting, slots, bound, requests, rate.format(manager=baseline),
              rate.format(manager=paged), gain, batch.format(manager=baseline),
              batch.format(manager=paged)]
    body = []
    for row in data.rows:
        if row["manager"] != paged:
            continue
        base_rate, base_batch = (data.value(key, scenario=row["scenario"], manager=baseline)
                                 for key in ("requests_per_s", "mean_batch_size"))
        preset = PRESETS[row["model"].lower()]
        body.append([_said_setting(row["dataset"], row["model"], row["decoding"]),
                     f"{preset.kv_slots:,}", f"{bound_above(preset):.0f}",
                     f"{row['requests']:,}", f"{base_rate:.2f}", f"{row['requests_per_s']:.2f}",
                     f"{row['requests_per_s'] / base_rate:.2f}x",
                     f"{base_batch:.1f}", f"{row['mean_batch_size']:.1f}"])
    lines = zip(*(cell.split("\n") for cell in header), strict=True)
    return aligned([*lines, *body], right=range(1, len(header)))


# -------------------------------------------- batching x memory (§2.3, §3, §6)
def batching_and_memory(trace: Trace, contiguous: ManagerSpec | str = "max",
                        paged: ManagerSpec | str = PAGED, **options) -> FigureData:
    """The 2x2 experiment: request-level (``"static"``) or iteration-level
    batching (Orca's, §2.3) times contiguous reservations or paged memory (§3,
    §4), each `capacity` on the same saturated `trace`. One row per cell, with
    ``batching``, ``memory`` (``"contiguous"`` or ``"paged"``), the manager's
    label, ``requests_per_s``, ``tokens_per_s`` and ``mean_batch_size``."""
    rows = []
    for memory, manager in (("contiguous", contiguous), ("paged", paged)):
        spec = ManagerSpec.parse(manager) if isinstance(manager, str) else manager
        if spec.paged != (memory == "paged"):
            want = "paged" if memory == "paged" else "contiguous (max, pow2 or oracle)"
            raise ValueError(f"the {memory} manager must be {want}; got {spec.label}")
        for batching in ("static", "iteration"):
            c = capacity(trace, spec, batching=batching, **options)
            rows.append({"batching": batching, "memory": memory, "manager": spec.label, **c})
    return FigureData("2x2", _("Batching x memory: requests per second, saturated"), tuple(rows),
                      {"trace": trace.name, "requests": len(trace), **PAPER_OPTIONS, **options})


# ------------------------------------------------------------------- money
def cost_per_million_tokens(requests_per_s: float, tokens_per_request: float, *,
                            dollars_per_gpu_hour: float, num_gpus: int = 1) -> float:
    """Dollars per million tokens served at `requests_per_s`: the GPUs' price
    per second over the tokens they serve per second. The price is yours to
    assume; the throughput is what changes between memory managers."""
    for name, value in (("requests_per_s", requests_per_s),
                        ("tokens_per_request", tokens_per_request),
                        ("dollars_per_gpu_hour", dollars_per_gpu_hour)):
        check_number(name, value, positive=True)
    check_int("num_gpus", num_gpus, minimum=1)
    return dollars_per_gpu_hour * num_gpus / 3600 / (requests_per_s * tokens_per_request) * 1e6


__all__ = [
    "BLOCK_SIZES",
    "PAPER_OPTIONS",
    "PAPER_RATES",
    "SHAPE_HEADERS",
    "SHAPE_SCENARIOS",
    "SHARING_RATE",
    "SHARING_SCENARIOS",
    "TOP_RATES",
    "TURNOVERS",
    "FigureData",
    "Scenario",
    "batching_and_memory",
    "best_block_sizes",
    "capacity",
    "cost_per_million_tokens",
    "default_rates",
    "fig2_memory_breakdown",
    "fig12_latency_vs_rate",
    "fig13_batch_sizes",
    "fig15_sharing_savings",
    "fig18b_block_size_sweep",
    "paper_trace",
    "results_shape",
    "run_managers",
    "saturated_rate",
    "saturated_trace",
    "savings_table",
    "shape_table",
    "sustainable_rates",
    "unshared_trace",
]
