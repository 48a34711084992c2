"""How much does watching cost? What recording a simulation for the widgets adds per step.

``python -m pagedkit bench widgets [--blocks 4096] [--steps 1000] [--rounds 2] [--json PATH]``

The workload is the real scheduler: a paged `pagedkit.sim.Simulator` over a
ShareGPT-like trace, 4,096 blocks of 16 tokens under steady overload, run
for 1,000 iterations twice over — once with parallel sampling (``n=2``:
forks, copy-on-write) and once with a shared system prompt (prefix-cache
hits and evictions), both preempting by swapping — so every event kind
occurs. Each is timed bare (nobody listens: no event is even built) and
with a `Recorder` attached, interleaved over ``--rounds`` rounds, in CPU
time of this process (the fastest of each counts: on a shared machine the
load only ever adds); recording's cost per step is the difference, and the
part spent cutting frames (reading the memory) is timed on its own.

Then what a learner waits for on the recording: a frame turned into
block-map data, the block map's FigureWidget built and scrubbed to a step,
the timeline's cursor moved. Kernel-side times only; the browser then
redraws the SVG on its own clock.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import resource
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from .._validation import PROG, positive_int, writable_file
from ..i18n.terminal import HelpFormatter
from ..sim import ParallelSampling, SharedPrefix, Simulator, synthetic_trace
from ..viz.block_grid import block_map_data
from ..viz.block_map import BlockMap
from ..viz.recorder import Recorder
from ..viz.timeline_view import Timeline
from . import add_no_progress

#: The two halves of the workload: (name, sharing)
WORKLOADS = (("parallel sampling n=2", ParallelSampling(2)),
             ("shared prefix of 64", SharedPrefix(64)))


def simulator(num_blocks: int, block_size: int, sharing: Any, seed: int = 0) -> Simulator:
    """A paged simulator kept over its pool: arrivals outpace what the pool can serve, so
    it preempts (by swapping to a CPU pool of a quarter of its size) from early on."""
    trace = synthetic_trace("sharegpt", rate=50, num_requests=20 * num_blocks // 16 + 100,
                            seed=seed)
    return Simulator(trace, f"paged:{block_size}", capacity_slots=num_blocks * block_size,
                     preemption="swap", swap_slots=num_blocks // 4 * block_size,
                     sharing=sharing, prefill="mixed", seed=seed)


#: The clock: this process's CPU time, so other work on a shared machine (waiting for a core)
#: does not count; cache and memory contention still do.
clock = time.process_time


def run(sim: Simulator, num_steps: int) -> float:
    """CPU seconds for `num_steps` iterations (fewer if the trace ends)."""
    start = clock()
    for _ in range(num_steps):
        if sim.step() is None:
            break
    return clock() - start


def time_recording(num_blocks: int, block_size: int, num_steps: int, sharing: Any,
                   rounds: int, attach: Callable[[Simulator], Any] = Recorder.attach
                   ) -> dict[str, Any]:
    """Bare and recorded runs of one workload, interleaved; the fastest of each."""
    bare, recorded, cutting = [], [], []
    recorder = None
    for _ in range(rounds):
        bare.append(run(simulator(num_blocks, block_size, sharing), num_steps))
        sim = simulator(num_blocks, block_size, sharing)
        recorder = attach(sim)
        spent = [0.0]
        cut = recorder.cut

        def timed_cut(step=None, cut=cut, spent=spent):
            t = clock()
            frame = cut(step)
            spent[0] += clock() - t
            return frame

        recorder.cut = timed_cut  # the Step handler calls self.cut
        recorded.append(run(sim, num_steps))
        cutting.append(spent[0])
        stats = sim.memory_manager.stats()
        last = recorder[-1]
        assert (last.memory.used, last.memory.tokens) == (stats.used_blocks,
                                                          stats.tokens_stored)
    steps = len(recorder) - 1
    return {"steps": steps, "bare_s": min(bare), "recorded_s": min(recorded),
            "cutting_s": min(cutting), "bare_all_s": bare, "recorded_all_s": recorded,
            "per_step_ms": (min(recorded) - min(bare)) / steps * 1e3,
            "cutting_per_step_ms": min(cutting) / steps * 1e3,
            "preemptions": sum(f.preemptions for f in recorder),
            "copies": sum(len(f.copies) for f in recorder),
            "peak_used": max(f.peak_used for f in recorder),  # not the steps' ends
            "event_counts": _totals(recorder), "recorder": recorder}


def _totals(recorder) -> dict[str, int]:
    totals: dict[str, int] = {}
    for frame in recorder:
        for kind, n in frame.event_counts.items():
            totals[kind] = totals.get(kind, 0) + n
    return totals


def _ms(xs: list[float]) -> str:
    xs = sorted(xs)
    p95 = xs[min(len(xs) - 1, int(0.95 * len(xs)))]
    return (f"median {statistics.median(xs) * 1e3:7.2f} ms   p95 {p95 * 1e3:7.2f} ms   "
            f"max {xs[-1] * 1e3:7.2f} ms")


def time_views(recorder, samples: int, seed: int) -> dict[str, Any]:
    """Frame -> block-map data, the block map widget built and scrubbed, the timeline cursor."""
    rng = random.Random(seed)
    picks = [rng.randrange(len(recorder)) for _ in range(samples)]
    data_times = []
    for i in picks:
        t = time.perf_counter()
        block_map_data(recorder[i], recorder.first_seen)
        data_times.append(time.perf_counter() - t)
    view = BlockMap(recorder)
    t = time.perf_counter()
    view.widget  # noqa: B018  (builds the FigureWidget; the first one imports plotly's)
    cold = time.perf_counter() - t
    t = time.perf_counter()
    BlockMap(recorder).widget  # noqa: B018
    build = time.perf_counter() - t
    update_times = []
    for i in picks:
        view.index = i if i != view.index else (i + 1) % len(recorder)
        update_times.append(view.last_update_s)
    timeline = Timeline(recorder)
    timeline.widget  # noqa: B018
    cursor_times = []
    for i in picks:
        timeline.index = i if i != timeline.index else (i + 1) % len(recorder)
        cursor_times.append(timeline.last_update_s)
    return {"data_s": data_times, "build_s": build, "cold_build_s": cold,
            "update_s": update_times, "cursor_s": cursor_times}


def benchmark(num_blocks: int = 4096, block_size: int = 16, num_steps: int = 1000,
              rounds: int = 2, samples: int = 60, seed: int = 0,
              attach: Callable[[Simulator], Any] = Recorder.attach) -> dict[str, Any]:
    """Run the benchmark, print what it measured, and return the numbers."""
    print(f"pagedkit widgets benchmark: a paged Simulator, {num_blocks} blocks of {block_size} "
          f"tokens, {num_steps} steps per workload, best of {rounds} rounds (CPU time)")
    report: dict[str, Any] = {"num_blocks": num_blocks, "block_size": block_size,
                              "num_steps": num_steps, "rounds": rounds,
                              "python": platform.python_version(), "workloads": {}}
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    recorder = None
    for name, sharing in WORKLOADS:
        r = time_recording(num_blocks, block_size, num_steps, sharing, rounds, attach)
        recorder = r.pop("recorder")
        report["workloads"][name] = r
        kinds = ", ".join(f"{k} {n}" for k, n in sorted(r["event_counts"].items()))
        print(f"  {name}: {r['steps']} steps, peak {r['peak_used']} blocks used, "
              f"{r['preemptions']} preemptions, {r['copies']} copy-on-writes\n"
              f"    events: {kinds}\n"
              f"    bare {r['bare_s']:6.2f} s, recorded {r['recorded_s']:6.2f} s -> "
              f"recording {r['per_step_ms']:.2f} ms per step "
              f"(cutting frames {r['cutting_per_step_ms']:.2f} ms of it)")
    report["memory_mib"] = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss) / 1024
    per_step = [w["per_step_ms"] for w in report["workloads"].values()]
    report["per_step_ms"] = statistics.mean(per_step)
    print(f"  recording, per step (mean of the two)  {report['per_step_ms']:.2f} ms")
    print(f"  peak memory growth (workloads and recordings) {report['memory_mib']:.1f} MiB")
    views = time_views(recorder, samples, seed)
    report["views"] = views
    print(f"  frame -> block-map data          {_ms(views['data_s'])}")
    print(f"  block map widget, build          {views['build_s'] * 1e3:7.1f} ms "
          f"(first in this process: {views['cold_build_s'] * 1e3:.0f} ms, importing plotly's "
          "widget code)")
    print(f"  block map widget, scrub a step   {_ms(views['update_s'])}")
    print(f"  timeline widget, move the cursor {_ms(views['cursor_s'])}")
    return report


#: What the default run took (newcomer finding 6), measured on 2 cores shared with
#: other work: 208 s at load 6-11 (the newcomer's run), 441 s at load 8.5-13.4 (ours)
DURATION = ("the default run takes 3.5 to 7.5 minutes on 2 busy cores (208 s at load 6-11, "
            "441 s at load 8-13); --steps 300 --rounds 1 is a quick look")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog=f"{PROG} bench widgets",
                                description=__doc__.split("\n\n")[0],
                                epilog=f"Time: {DURATION}.",
                                formatter_class=HelpFormatter)
    p.add_argument("--blocks", type=positive_int, default=4096, help="GPU blocks (default 4096)")
    p.add_argument("--block-size", type=positive_int, default=16,
                   help="tokens per block (default 16)")
    p.add_argument("--steps", type=positive_int, default=1000, help="iterations per workload")
    p.add_argument("--rounds", type=positive_int, default=2,
                   help="bare/recorded rounds, interleaved; the fastest counts (default 2)")
    p.add_argument("--json", metavar="PATH", type=writable_file,
                   help="write the numbers here as JSON")
    add_no_progress(p)
    args = p.parse_args(argv)
    if all(getattr(args, k) == p.get_default(k) for k in ("blocks", "steps", "rounds")):
        print(f"bench widgets: {DURATION}", file=sys.stderr, flush=True)
    report = benchmark(args.blocks, args.block_size, args.steps, args.rounds)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
        print(f"wrote {args.json}")
    return 0
