"""Our numbers beside the paper's, with why they differ.

`compare` runs every experiment of `pagedkit.sim.experiments` at one of
three scales and returns a `Report`: one `Comparison` per number the
paper states. The ``quick`` scale is for tests (seconds, noisy), the
``default`` one for a laptop (about a minute), ``full`` replays the
paper's hour-long traces (many minutes).

Where ours and the paper's differ, the note says which of our
simplifications is responsible: synthetic lengths instead of the real
datasets, first-fit placement for the contiguous baselines (the paper
does not say how its Orca places regions), the roofline latency model
instead of measured GPU time, and a neutral model of beam search.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ..i18n import N_, _, aligned, join_names
from . import paper as ref
from .experiments import (
    SHARING_RATE,
    SHARING_SCENARIOS,
    best_block_sizes,
    default_rates,
    fig2_memory_breakdown,
    fig12_latency_vs_rate,
    fig13_batch_sizes,
    fig15_sharing_savings,
    fig18b_block_size_sweep,
    paper_trace,
    run_managers,
    sustainable_rates,
)
from .latency import OPT_13B
from .managers import PAGED
from .metrics import SimResult
from .trace import Trace


@dataclass(frozen=True)
class Scale:
    """How much to simulate per experiment. A duration sets how many requests
    a trace has, rate x duration rounded (their Poisson arrivals end near the
    duration, not exactly at it); the sharing experiment counts its requests."""

    name: str
    sharegpt_seconds: float  # Fig. 2 and 13 (ShareGPT at 2 req/s)
    alpaca_seconds: float  # Fig. 13 (Alpaca at 30 req/s)
    latency_seconds: float  # each point of Fig. 12
    sharing_requests: int  # Fig. 15 (Alpaca at 10 req/s)
    block_sweep_seconds: float  # Fig. 18b, both traces
    rate_points: int = 11  # rates per curve of Fig. 12


#: What `compare` runs, in order: its progress bar names the step it is in.
COMPARE_STEPS = (N_("traces, Table 1, Fig. 11"), N_("Fig. 2 and 13: the four managers on ShareGPT"),
                 N_("Fig. 2 and 13: the four managers on Alpaca"),
                 N_("Fig. 12: latency vs rate on ShareGPT"),
                 N_("Fig. 12: latency vs rate on Alpaca"),
                 N_("Fig. 15: sharing"), N_("Fig. 18b: block sizes"))

SCALES = {
    "quick": Scale("quick", 60, 10, 30, 40, 5, rate_points=5),
    "default": Scale("default", 1200, 300, 300, 500, 300),
    "full": Scale("full", 3600, 3600, 3600, 2000, 3600),
}

NOTES = {
    "lengths": N_("synthetic log-normal lengths with the paper's means (Fig. 11), not the real "
               "datasets: how long requests live sets every share"),
    "max": N_("mechanism: 15,728 // 2,048 = 7 regions of 2,048 slots fit; 1,392 slots are always "
           "stranded while requests wait"),
    "placement": N_("how much memory is stranded between regions depends on where they are "
                 "placed: we use first-fit; the paper's Orca uses buddy allocation (§6.1)"),
    "policy": N_("the reservation policy's own waste, set apart from where regions are placed: "
              "the same policy on lengths like the paper's wastes the same share"),
    "paged": N_("paging wastes only the empty tail of each sequence's last block"),
    "speed": N_("batch size also depends on iteration time: our roofline model (not measured GPU "
             "time) runs steps at its own speed, and a faster step drains the queue sooner"),
    "scheduled": N_("not Fig. 13's quantity: Fig. 13 counts the running batch (§6.2: requests "
                 "processed at the same time); with prompts run apart, as in the paper's vLLM, "
                 "a prompt iteration computes only the newcomers while that batch waits"),
    "knee": N_("one latency bound (4x the best low-load latency) on our latency model; the paper's "
            "range spans three models on ShareGPT; for Alpaca it states no number, only a "
            "similar trend (less for OPT-175B, Fig. 12f)"),
    "beam": N_("beams pick their parents uniformly at random (a neutral model of which candidates "
            "win); how long real beams share their history depends on the model"),
    "parallel": N_("only the prompt's full blocks are shared (a 19-token prompt fills one block of "
                "16); each sample's output length is drawn from the trace's"),
    "blocks": N_("small blocks are slow by our assumed per-block gather cost (4 tokens); large "
                 "ones "
              "waste the tails of short sequences, which costs time only once memory limits the "
              "batch"),
    "prefix": N_("not in the paper's figures: every prompt starts with the same few-shot prefix "
              "(§6.4's 80 and 341 tokens), whose full blocks the prefix cache shares"),
    "exact": N_("derived from Table 1's sizes: 12 GiB / (2 x 40 layers x 5,120 x 2 bytes)"),
}


#: What the paper does not state (a `Comparison`'s `paper`), in English.
NOT_REPORTED = N_("not reported")


@dataclass(frozen=True, eq=False, repr=False)  # both from `as_dict`, below
class Comparison:
    """One number of the paper and ours. Its quantity is one message, `template`
    (English, marked N_) filled with `values`, kept as the two and said from
    them: in English as `quantity` (what ``--json`` prints, the same in every
    language), in the language of the moment as `label` (what `format_table`
    prints); the unit and `NOT_REPORTED` are kept as they are. Two comparisons
    are equal when they say the same, in English: `quantity`, not how it is
    made. A quantity without values is its template (``Comparison("Fig. 2",
    "token states, vLLM", 96.3, 96.3, "%")``)."""

    figure: str
    template: str  # the quantity's message, English
    ours: float | str
    paper: float | str
    unit: str = ""
    note: str = ""  # a key of NOTES
    values: tuple = ()  # ((name, value), ...) for the template's fields

    @property
    def quantity(self) -> str:
        """The quantity, in English."""
        return self.template.format(**dict(self.values))

    def label(self) -> str:
        """The quantity in the language of the moment."""
        return _(self.template).format(**dict(self.values))

    def as_dict(self) -> dict:
        """What ``--json`` prints of it: English words."""
        return {"figure": self.figure, "quantity": self.quantity, "ours": self.ours,
                "paper": self.paper, "unit": self.unit, "note": self.note}

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Comparison):
            return NotImplemented
        return self.as_dict() == other.as_dict()

    def __hash__(self) -> int:
        return hash(tuple(self.as_dict().values()))

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in self.as_dict().items())
        return f"Comparison({fields})"


def _row(figure: str, template: str, values: dict, ours: float | str, paper: float | str,
         unit: str = "", note: str = "") -> Comparison:
    """A `Comparison` whose quantity is `template` (marked N_) filled with `values`."""
    return Comparison(figure, template, ours, paper, unit, note, tuple(values.items()))


@dataclass
class Report:
    scale: str
    rows: list[Comparison] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)  # wall time per experiment
    speed: dict[str, float] = field(default_factory=dict)
    figures: dict = field(default_factory=dict, repr=False)  # FigureData, for plotting

    def as_dict(self) -> dict:
        rows = [r.as_dict() for r in self.rows]
        return {"scale": self.scale, "rows": rows,
                "notes": {k: NOTES[k] for k in dict.fromkeys(r.note for r in self.rows) if k},
                "seconds": self.seconds, "speed": self.speed}


def _timed(report: Report, name: str, run: Callable):
    start = time.perf_counter()
    out = run()
    report.seconds[name] = round(time.perf_counter() - start, 2)
    return out


def compare(scale: str | Scale = "default", seed: int = 0, progress: bool = False) -> Report:
    """Run every experiment at `scale` and set each result beside the paper's."""
    sc = scale if isinstance(scale, Scale) else SCALES[scale]
    report = Report(sc.name)
    from tqdm.auto import tqdm

    with tqdm(total=len(COMPARE_STEPS), desc=_("paper experiments"), unit=_("step"),
              disable=not progress) as bar:
        def next_step(done: bool = True) -> None:
            """Count a finished step and name the one that runs now (the slow
            ones take minutes: the bar says which it is in)."""
            if done:
                bar.update()
            if bar.n < len(COMPARE_STEPS):
                bar.set_postfix_str(_(COMPARE_STEPS[bar.n]))

        next_step(done=False)
        sharegpt = paper_trace("sharegpt", duration=sc.sharegpt_seconds, seed=seed)
        alpaca = paper_trace("alpaca", duration=sc.alpaca_seconds, seed=seed)
        _table1_and_fig11(report, sharegpt, alpaca)
        next_step()
        results = _run_fig2_and_fig13(report, sharegpt, alpaca, on_trace=next_step)
        fig2 = _fig2(report, sharegpt, results[sharegpt.name])
        fig13 = _fig13(report, sharegpt, alpaca, results)
        _fig12(report, sc, seed, on_dataset=next_step)
        fig15 = _fig15(report, sc, seed)
        next_step()
        fig18 = _fig18b(report, sc, seed)
        next_step()
    report.figures = {"fig2": fig2, "fig13": fig13, "fig15": fig15, "fig18b": fig18}
    return report


def _table1_and_fig11(report: Report, sharegpt: Trace, alpaca: Trace) -> None:
    add = report.rows.append
    add(_row("Table 1", N_("OPT-13B KV cache slots"), {}, OPT_13B.kv_slots,
             ref.TABLE1_KV_SLOTS["OPT-13B"], N_("slots"), "exact"))
    for name, trace in (("sharegpt", sharegpt), ("alpaca", alpaca)):
        means = ((N_("{name}-like mean prompt length"), trace.mean_prompt_len()),
                 (N_("{name}-like mean output length"), trace.mean_output_len()))
        for i, (quantity, mean) in enumerate(means):
            add(_row("Fig. 11", quantity, {"name": name}, round(mean, 2),
                     ref.FIG11_MEANS[name][i], N_("tokens"), "lengths"))


def _run_fig2_and_fig13(report: Report, sharegpt: Trace, alpaca: Trace,
                        on_trace: Callable[[], None] = lambda: None
                        ) -> dict[str, dict[str, SimResult]]:
    """The four managers on both traces (Fig. 2 and 13 share the runs), timed;
    `on_trace` is called after each trace."""
    results = {}
    for t in (sharegpt, alpaca):
        results[t.name] = _timed(report, f"fig2+13 {t.name}", lambda t=t: run_managers(t))
        on_trace()
    runs = [r for by in results.values() for r in by.values()]
    report.speed = {"iterations": sum(r.num_steps for r in runs),
                    "seconds": round(sum(r.wall_seconds for r in runs), 2)}
    report.speed["iterations_per_second"] = round(
        report.speed["iterations"] / max(report.speed["seconds"], 1e-9))
    report.speed["sharegpt_requests"] = len(sharegpt)
    report.speed.update({f"sharegpt seconds, {label}": round(r.wall_seconds, 2)
                         for label, r in results[sharegpt.name].items()})
    return results


def _fig2(report: Report, sharegpt: Trace, results: dict[str, SimResult]):
    add = report.rows.append
    fig2 = fig2_memory_breakdown(sharegpt, results=results)
    for manager, paper in ref.FIG2_BREAKDOWN.items():
        note = "max" if manager == "Orca (Max)" else "paged" if manager == "vLLM" else \
            "placement"
        add(_row("Fig. 2", N_("token states, {manager}"), {"manager": manager},
                 round(fig2.value("token_states", manager=manager), 1),
                 paper["token_states"], "%", note))
        if manager != "vLLM":
            add(_row("Fig. 2", N_("external fragmentation, {manager}"), {"manager": manager},
                     round(fig2.value("external_fragmentation", manager=manager), 1),
                     paper["external_fragmentation"], "%", note))
    for manager in ("Orca (Max)", "Orca (Pow2)"):
        ours = {k: fig2.value(k, manager=manager) for k in RESERVED_PARTS}
        add(_row("Fig. 2", N_("internal fragmentation, {percent} of reserved slots, {manager}"),
                 {"percent": "%", "manager": manager}, round(_internal_share(ours), 1),
                 round(_internal_share(ref.FIG2_BREAKDOWN[manager]), 1), "%", "policy"))
    return fig2


def _fig13(report: Report, sharegpt: Trace, alpaca: Trace,
           results: dict[str, dict[str, SimResult]]):
    add = report.rows.append
    fig13 = fig13_batch_sizes([sharegpt, alpaca], results=results)
    for trace in (sharegpt, alpaca):
        for manager, paper in ref.FIG13_BATCH[trace.name.split("@")[0]].items():
            add(_row("Fig. 13", N_("batched requests, {name}, {manager}"),
                     {"name": trace.name, "manager": manager},
                     round(fig13.value("mean_batch_size", trace=trace.name, manager=manager), 2),
                     paper, N_("requests"), {"Orca (Max)": "max", "vLLM": "speed"}.get(
                         manager, "placement")))
    for trace in (sharegpt, alpaca):
        add(_row("Fig. 13", N_("requests an iteration computes, {name}, vLLM"),
                 {"name": trace.name},
                 round(fig13.value("mean_scheduled", trace=trace.name, manager="vLLM"), 2),
                 NOT_REPORTED, N_("requests"), "scheduled"))
    return fig13


def _fig12(report: Report, sc: Scale, seed: int,
           on_dataset: Callable[[], None] = lambda: None) -> None:
    for dataset in ("sharegpt", "alpaca"):
        rates = default_rates(dataset, sc.rate_points)
        data = _timed(report, f"fig12 {dataset}", lambda d=dataset, r=rates:
                      fig12_latency_vs_rate(d, r, duration=sc.latency_seconds, seed=seed))
        knees = sustainable_rates(data)
        for base, (low, high) in ref.FIG12_RATE_GAIN.items():
            report.rows.append(_row(
                "Fig. 12", N_("rate vLLM sustains / {base}, {dataset}"),
                {"base": base, "dataset": dataset},
                round(knees["vLLM"] / knees[base], 2),
                f"{low}-{high}" if dataset == ref.FIG12_RATE_GAIN_DATASET else NOT_REPORTED,
                "x", "knee"))
        on_dataset()


def _fig15(report: Report, sc: Scale, seed: int):
    add = report.rows.append
    sharing_trace = paper_trace("alpaca", rate=SHARING_RATE, num_requests=sc.sharing_requests,
                                seed=seed)
    fig15 = _timed(report, "fig15", lambda: fig15_sharing_savings(
        sharing_trace, scenarios=SHARING_SCENARIOS))
    saved = {"parallel": N_("memory saved, parallel {size}"),
             "beam": N_("memory saved, beam {size}")}
    for kind, by_size in ref.FIG15_SAVING.items():
        for size, paper in by_size.items():
            add(_row("Fig. 15", saved[kind], {"size": size},
                     round(fig15.value("saving", scenario=kind, size=size), 2), paper, "%",
                     kind))
    for row in fig15.select(scenario="prefix"):
        add(_row("§6.4", N_("memory saved, shared prefix {size} tokens"), {"size": row["size"]},
                 round(row["saving"], 2), NOT_REPORTED, "%", "prefix"))
    return fig15


def _fig18b(report: Report, sc: Scale, seed: int):
    traces = [paper_trace(dataset, duration=sc.block_sweep_seconds, seed=seed)
              for dataset in ("sharegpt", "alpaca")]
    fig18 = _timed(report, "fig18b", lambda: fig18b_block_size_sweep(traces=traces))
    for trace in traces:
        best = best_block_sizes(fig18, trace.name)
        low, high = ref.FIG18B_BEST_BLOCK_SIZES[trace.name.split("@")[0]]
        report.rows.append(_row(
            "Fig. 18b", N_("block sizes within {share} of the best, {name}"),
            {"share": "5%", "name": trace.name},
            " ".join(map(str, best)), f"{low}-{high}", N_("tokens"), "blocks"))
    return fig18


#: What a contiguous region's slots hold: Fig. 2 without external fragmentation.
RESERVED_PARTS = ("token_states", "reservation", "internal_fragmentation")


def _internal_share(parts: dict) -> float:
    """Internal fragmentation as a % of the slots the regions reserve."""
    return 100 * parts["internal_fragmentation"] / sum(parts[k] for k in RESERVED_PARTS)


def benchmark(duration: float = 3600.0, rate: float | None = None,
              seed: int = 0) -> list[dict]:
    """Time each of the paper's managers on an hour of ShareGPT-like traffic
    (about 7,200 requests at the paper's 2 req/s): wall and CPU seconds, iterations."""
    from .experiments import _simulate
    from .managers import PAPER_MANAGERS

    trace = paper_trace("sharegpt", rate=rate, duration=duration, seed=seed)
    out = []
    for manager in PAPER_MANAGERS:
        wall, cpu = time.perf_counter(), time.process_time()
        r = _simulate(trace, manager)
        out.append({"manager": manager.label, "requests": len(trace), "iterations": r.num_steps,
                    "wall_seconds": round(time.perf_counter() - wall, 2),
                    "cpu_seconds": round(time.process_time() - cpu, 2),
                    "simulated_seconds": round(r.makespan, 1)})
    return out


def scheduler_benchmark(duration: float = 3600.0, seed: int = 0) -> dict:
    """What running the engine's own `Scheduler` would cost the simulator: the
    real `Scheduler` and `KVCacheManager` over `benchmark`'s trace, with no
    model (each sampling sequence gets a placeholder token, `Scheduler.update`
    closes the step) and this module's latency model advancing the clock;
    mixed prefill, a 4,096-token budget, no watermark. Measured, not
    simulated: see docs/simulator.md, "One scheduler for the engine and the
    simulator?"."""
    from ..memory import KVCacheManager
    from ..sampling_params import SamplingParams
    from ..scheduler import Sampled, Scheduler, SchedulerConfig
    from ..sequence import FinishReason, SequenceGroup
    from .latency import LatencyModel

    trace = paper_trace("sharegpt", duration=duration, seed=seed)
    latency, block_size = LatencyModel(), PAGED.block_size
    sched = Scheduler(SchedulerConfig(max_num_seqs=256, max_num_batched_tokens=4096),
                      KVCacheManager(OPT_13B.kv_slots // block_size, block_size))
    requests = trace.requests
    wall, cpu = time.perf_counter(), time.process_time()
    now, arrived, steps, finished = 0.0, 0, 0, 0
    while arrived < len(requests) or sched.has_unfinished():
        if not sched.has_unfinished():
            now = max(now, requests[arrived].arrival)  # idle: skip ahead
        while arrived < len(requests) and requests[arrived].arrival <= now:
            r = requests[arrived]
            sched.add(SequenceGroup.new(str(r.request_id), None, [1] * r.prompt_len,
                                        SamplingParams(max_tokens=r.output_len,
                                                       ignore_eos=True),
                                        arrival_time=r.arrival, seq_id=r.request_id))
            arrived += 1
        out = sched.schedule()
        stops, context = [], 0
        for s in out.scheduled:
            context += s.start + s.num_tokens
            if s.computes_last_token:  # the step reaches its last token: one more is sampled
                s.seq.token_ids.append(1)
                if len(s.seq.output_token_ids) >= s.group.params.max_tokens:
                    stops.append((s.group, s.seq, FinishReason.LENGTH))
        finished += len(sched.update(out, Sampled(stops=stops)))
        now += latency.step_time(out.num_batched_tokens, context, block_size)
        steps += 1
    return {"manager": "engine Scheduler (vLLM memory)", "requests": len(requests),
            "iterations": steps, "wall_seconds": round(time.perf_counter() - wall, 2),
            "cpu_seconds": round(time.process_time() - cpu, 2),
            "simulated_seconds": round(now, 1), "finished": finished,
            "preemptions": sched.num_preemptions}


def format_table(report: Report, markdown: bool = False) -> str:
    """The comparison as a text (or Markdown) table with numbered notes."""
    keys = list(dict.fromkeys(r.note for r in report.rows if r.note))
    header = (_("figure"), _("quantity"), _("ours"), _("paper"), _("unit"), _("note"))
    body = [(r.figure, r.label(), _fmt(r.ours), _fmt(r.paper), _(r.unit) if r.unit else "",
             str(keys.index(r.note) + 1) if r.note else "") for r in report.rows]
    if markdown:
        lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        lines += ["| " + " | ".join(row) + " |" for row in body]
    else:
        lines = aligned([header, *body], rule=True).split("\n")
    lines.append("")
    lines += [f"{i}. " + _(NOTES[k]) for i, k in enumerate(keys, 1)]
    speed = report.speed
    lines.append("")
    lines.append(_("scale {scale}: {iterations:,} iterations simulated in {seconds} s "
                   "({per_second:,}/s) for Fig. 2 and 13; wall time per experiment: ")
                 .format(scale=report.scale, iterations=speed["iterations"],
                         seconds=speed["seconds"], per_second=speed["iterations_per_second"])
                 + join_names(f"{k} {v} s" for k, v in report.seconds.items()))
    return "\n".join(lines)


def _fmt(value: float | str) -> str:
    if value == NOT_REPORTED:
        return _(NOT_REPORTED)
    if isinstance(value, float):
        return f"{value:,.2f}".rstrip("0").rstrip(".") if value != int(value) else f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


__all__ = ["NOTES", "SCALES", "Comparison", "Report", "Scale", "benchmark", "compare",
           "format_table", "scheduler_benchmark"]
