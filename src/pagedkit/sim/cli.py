"""``python -m pagedkit simulate``: the paper's numbers beside ours, or one simulation.

Without options it runs every experiment (`pagedkit.sim.report.compare`)
and prints the comparison table; ``--json`` prints it as JSON. Naming a
trace (``--dataset`` or ``--trace``) runs just that trace through the
chosen managers and prints each run's summary.
"""

from __future__ import annotations

import argparse
import json
import sys

from .._validation import PROG, choice_name, non_negative_int, positive_float, positive_int
from ..i18n import N_, _, aligned, join_names, ngettext
from ..i18n.terminal import HelpFormatter
from ..scheduler import PREEMPTION_MODES
from .latency import PRESETS, LatencyModel
from .managers import PAPER_MANAGERS, ManagerSpec, block_past_capacity
from .report import SCALES, benchmark, compare, format_table, scheduler_benchmark
from .simulator import BATCHING_MODES, PREFILL_MODES, simulate
from .trace import DATASETS, load_trace, synthetic_trace

#: How long the comparison took on 2-core machines: the default 4-5 minutes busy
#: (issue #26) and 1 min 31 s at load 5-7 (the sixth newcomer's run); the quick one
#: 24 s at load 6-11 and 48 s at load 11-12 (/usr/bin/time), 3.1 s at load 1.3
#: (2026-12-02); the full one's traces are an hour each.
#: What --scale quick's numbers are worth: said once, under its table (before the
#: run, its line points there; newcomer 36 read the caution twice).
QUICK_ROUGH = N_("its traces are short, so its numbers are rough (a rate ratio may read 1x "
                 "where the default scale separates the managers); run the default scale to "
                 "compare with the paper")
SCALE_TIMES = {
    "quick": N_("takes 3-50 s; its numbers are rough (the note under its table says why)"),
    "default": N_("took 1.5-5 minutes on a 2-core machine (the longer on a busy one); --scale "
               "quick runs the same experiments smaller in 3-50 s (noisier numbers)"),
    "full": N_("runs the paper's hour-long traces: many times the default's 1.5-5 minutes; "
            "--scale quick takes 3-50 s"),
}


def _manager(text: str) -> ManagerSpec:
    """``--manager`` values, refused by argparse with the reason when malformed."""
    try:
        return ManagerSpec.parse(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=f"{PROG} simulate",
        description=_("Trace-driven simulation of KV-cache memory managers (no GPU)."),
        epilog=_("Without options it runs the paper comparison, which {default}.").format(
            default=_(SCALE_TIMES["default"])),
        formatter_class=HelpFormatter)
    p.add_argument("--scale", type=choice_name, choices=sorted(SCALES), default="default",
                   help=_("how much to simulate for the paper comparison: quick (3-50 s), "
                        "default (1.5-5 minutes on a 2-core machine) or full (the paper's "
                        "hour-long traces, much longer)"))
    p.add_argument("--json", action="store_true", help=_("print JSON instead of a table"))
    p.add_argument("--markdown", action="store_true", help=_("print the table as Markdown"))
    p.add_argument("--seed", type=non_negative_int, default=0,
                   help=_("seed of the synthetic traces and of sampling (default: 0)"))
    p.add_argument("--no-progress", action="store_true", help=_("hide progress bars"))
    p.add_argument("--benchmark", action="store_true",
                   help=_("time an hour of ShareGPT-like traffic at 2 req/s through each manager"))
    p.add_argument("--benchmark-scheduler", action="store_true",
                   help=_("time the same hour through the engine's own Scheduler and "
                        "KVCacheManager, without a model (what unifying them would cost)"))
    one = p.add_argument_group(_("one trace instead of the paper comparison"))
    one.add_argument("--dataset", type=choice_name, choices=sorted(DATASETS),
                     help=_("a synthetic trace shaped like this dataset"))
    one.add_argument("--trace", metavar="FILE", help=_("a JSON or CSV file of request lengths"))
    one.add_argument("--rate", type=positive_float,
                     help=_("requests/s (Poisson arrivals); needed with --dataset, and with "
                          "--trace when the file has no arrival times"))
    size = one.add_mutually_exclusive_group()
    size.add_argument("--requests", type=positive_int, metavar="N",
                      help=_("number of requests (with --trace: the file's first N)"))
    size.add_argument("--duration", type=positive_float, metavar="SECONDS",
                      help=_("sizes the trace as about --rate x SECONDS requests (--dataset "
                             "only); their Poisson arrivals may run past SECONDS"))
    one.add_argument("--manager", action="append", metavar="KIND", type=_manager,
                     help=_("max, pow2, oracle, paged or paged:BLOCK_SIZE (repeatable; "
                          "default: the paper's four)"))
    one.add_argument("--model", type=choice_name, choices=sorted(PRESETS), default="opt-13b",
                     help=_("the model and GPUs whose KV capacity and step times are simulated "
                          "(default: opt-13b)"))
    one.add_argument("--preemption", type=choice_name, choices=PREEMPTION_MODES,
                     default="recompute",
                     help=_("how the paged manager frees memory when it runs out (default: "
                          "recompute); swap moves the blocks out and back over a 25 GB/s "
                          "CPU-GPU link per GPU (lab 06's figure), charged to the iterations "
                          "that move them; only the bandwidth is counted, not the per-copy cost "
                          "that makes small blocks slower still (paper Fig. 19)"))
    one.add_argument("--prefill", type=choice_name, choices=PREFILL_MODES, default="separate",
                     help=_("separate (default, as the Simulator's: the paper's vLLM ran newly "
                          "admitted prompts in an iteration of their own, and every paper "
                          "experiment here does) or mixed (Orca's: new prompts join the "
                          "decoding batch)"))
    one.add_argument("--batching", type=choice_name, choices=BATCHING_MODES, default="iteration",
                     help=_("iteration (default: Orca's and vLLM's, requests join and leave the "
                          "batch every iteration) or static (request-level, as "
                          "FasterTransformer: a batch forms only when none runs and runs to "
                          "its last request)"))
    return p


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.json and args.markdown:
        parser.error(_("--json, --markdown: give one of them (each says how the table prints)"))
    if args.dataset or args.trace:
        return _one_trace(parser, args)
    _refuse_one_trace_options(parser, args)
    if args.benchmark or args.benchmark_scheduler:
        given = _given(parser, args, ("scale", "markdown"))
        if given:
            parser.error(_("{items}: for the paper comparison only, not with --benchmark or "
                           "--benchmark-scheduler (the benchmarks time a fixed hour of traffic "
                           "and print a plain table, or JSON with --json)")
                         .format(items=join_names(given)))
        rows = benchmark(seed=args.seed) if args.benchmark else []
        if args.benchmark_scheduler:
            rows.append(scheduler_benchmark(seed=args.seed))
        if args.json:
            print(json.dumps(rows, indent=2))
        else:
            _print_rows(rows)
        return 0
    if args.scale in SCALE_TIMES and not args.json:
        print((_("simulate: the paper comparison at --scale {scale} {how_long}")
                .format(scale=args.scale,
                        how_long=_(SCALE_TIMES[args.scale]))),
              file=sys.stderr, flush=True)
    report = compare(args.scale, seed=args.seed, progress=not (args.no_progress or args.json))
    if args.json:
        print(json.dumps(report.as_dict(), indent=2))
    else:
        print(format_table(report, markdown=args.markdown))
        if args.scale == "quick":  # the caution beside the numbers it is about
            print(_("--scale quick: {rough}").format(rough=_(QUICK_ROUGH)))
    return 0


def _given(parser: argparse.ArgumentParser, args: argparse.Namespace,
           names: tuple[str, ...]) -> list[str]:
    """Which of the options `names` were given (differ from their defaults), as
    typed. The refusal rule of `main`: an option the run asked for does not
    read is refused, naming it, rather than silently ignored."""
    return [f"--{name.replace('_', '-')}" for name in names
            if getattr(args, name) != parser.get_default(name)]


def _refuse_one_trace_options(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """The comparison and the benchmarks run fixed settings: an option of the
    one-trace mode given without --dataset/--trace would be silently ignored."""
    given = _given(parser, args, ("rate", "requests", "duration", "manager", "model",
                                  "preemption", "prefill", "batching"))
    if given:
        parser.error(_("{items}: for one trace's run only; give --dataset or --trace too "
                       "(the paper comparison and the benchmarks use fixed settings)")
                       .format(items=', '.join(given)))


def _refuse_comparison_options(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """The converse: an option of the paper comparison or the benchmarks given
    with --dataset/--trace would be silently ignored by the one-trace run."""
    given = _given(parser, args, ("scale", "markdown", "benchmark", "benchmark_scheduler"))
    if given:
        parser.error(_("{items}: for the paper comparison (--scale, --markdown) or the "
                       "benchmarks (--benchmark, --benchmark-scheduler) only, not with "
                       "--dataset or --trace (one trace runs as asked: size it with --requests "
                       "or --duration)").format(items=', '.join(given)))


def _one_trace(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    if args.dataset and args.trace:
        parser.error(_("give --dataset or --trace, not both"))
    _refuse_comparison_options(parser, args)
    if args.trace:
        if args.duration is not None:
            parser.error(_("--duration draws a synthetic trace (--dataset); with --trace, "
                         "--requests N takes the file's first N requests"))
        try:
            trace = load_trace(args.trace, rate=args.rate, seed=args.seed, rate_option="--rate")
        except (OSError, ValueError) as e:
            parser.error(_("argument %(argument_name)s: %(message)s") % {  # argparse's words
                "argument_name": "--trace", "message": e})
        if args.requests is not None:
            if args.requests > len(trace):
                parser.error(_("--requests {requests}: {trace} holds only {n} requests; give "
                               "--requests {n} or fewer, or leave it out (the whole file)")
                               .format(requests=args.requests, trace=args.trace, n=len(trace)))
            trace = trace.head(args.requests)
    else:
        if args.rate is None:
            parser.error(_("--dataset needs --rate (requests/s)"))
        if args.requests is None and args.duration is None:
            args.requests = 1000
        try:
            trace = synthetic_trace(args.dataset, rate=args.rate, num_requests=args.requests,
                                    duration=args.duration, seed=args.seed)
        except ValueError as e:  # too many requests: said before anything is allocated
            parser.error(_("argument %(argument_name)s: %(message)s") % {  # argparse's words
                "argument_name": f"--dataset {args.dataset}",
                "message": str(e).replace("num_requests=", "--requests ")})
    managers = args.manager or PAPER_MANAGERS
    _refuse_manager_mismatch(parser, args, managers)
    slots = PRESETS[args.model].kv_slots
    for spec in managers:  # before any run: a usage error, as the other --manager ones
        problem = spec.paged and block_past_capacity(spec.block_size, slots, args.model)
        if problem:
            parser.error(_("argument %(argument_name)s: %(message)s") % {  # argparse's words
                "argument_name": "--manager", "message": f"paged:{spec.block_size}: {problem}"})
    model = LatencyModel(PRESETS[args.model])
    runs = [simulate(trace, m, model=model, preemption=args.preemption,
                     prefill=args.prefill, batching=args.batching, seed=args.seed,
                     progress=not (args.no_progress or args.json)) for m in managers]
    summaries = [run.summary() for run in runs]
    if args.json:  # each row with its aborted requests' reasons, as the table's note says
        print(json.dumps([{**summary, "aborted_requests": [
            {"request_id": r.request_id, "prompt_len": r.prompt_len, "output_len": r.output_len,
             "reason": r.finish_reason.removeprefix("abort: ")} for r in run.aborted]}
            for run, summary in zip(runs, summaries, strict=True)], indent=2))
    else:
        _print_rows(summaries)
        _print_aborted(runs, summaries)
    return 0


def _refuse_manager_mismatch(parser: argparse.ArgumentParser, args: argparse.Namespace,
                             managers: list[ManagerSpec]) -> None:
    """A manager given twice would print the same row twice, and --preemption
    swap with no paged manager would change nothing (newcomer 38): both are
    refused, naming what to give instead."""
    for i, spec in enumerate(managers):
        if spec in managers[:i]:
            name = f"paged:{spec.block_size}" if spec.paged else spec.kind
            parser.error(_("argument %(argument_name)s: %(message)s") % {  # argparse's words
                "argument_name": "--manager",
                "message": _("{name} is given twice; each manager runs once, so give it once")
                .format(name=name)})
    if args.preemption != parser.get_default("preemption") and not any(m.paged for m in managers):
        parser.error(_("--preemption {mode}: only the paged manager preempts (max, pow2 and "
                       "oracle reserve a request's memory up front and never preempt); add "
                       "--manager paged, or leave --preemption out").format(mode=args.preemption))


def _print_aborted(runs: list, summaries: list[dict], shown: int = 3) -> None:
    """Under the table, why requests were aborted (a row's nan latency says nothing).
    The reason is the run's record (`RequestResult.finish_reason`), written in
    the language of the moment when the request was aborted."""
    for run, summary in zip(runs, summaries, strict=True):
        aborted = run.aborted
        if not aborted:
            continue
        print(ngettext("{manager}: {n} request aborted:", "{manager}: {n} requests aborted:",
                       len(aborted)).format(manager=summary["manager"], n=len(aborted)))
        for r in aborted[:shown]:
            print("  " + _("request {id} (prompt_len {prompt_len}, output_len {output_len}): "
                           "{reason}").format(id=r.request_id, prompt_len=r.prompt_len,
                                              output_len=r.output_len,
                                              reason=r.finish_reason.removeprefix("abort: ")))
        if len(aborted) > shown:
            print("  " + _("... and {n} more").format(n=len(aborted) - shown))


#: The headers of the one-trace table and of the benchmarks' table: their rows'
#: keys, which ``--json`` prints as they are (English in every language, as the
#: data of a script), said here in the language of the moment.
HEADERS = {
    "manager": N_("manager"), "trace": N_("trace"), "requests": N_("requests"),
    "aborted": N_("aborted"), "steps": N_("steps"), "preemptions": N_("preemptions"),
    "mean_batch_size": N_("mean_batch_size"), "mean_scheduled": N_("mean_scheduled"),
    "token_state_share": N_("token_state_share"),
    "normalized_latency_s_per_token": N_("normalized_latency_s_per_token"),
    "makespan_s": N_("makespan_s"), "wall_seconds": N_("wall_seconds"),
    "iterations": N_("iterations"), "cpu_seconds": N_("cpu_seconds"),
    "simulated_seconds": N_("simulated_seconds"), "finished": N_("finished"),
}


def _print_rows(rows: list[dict]) -> None:
    keys = list(rows[0])
    table = [[_(HEADERS[k]) for k in keys],
             *(["-" if row[k] is None else str(row[k]) for k in keys] for row in rows)]
    print(aligned(table))


if __name__ == "__main__":
    sys.exit(main())
