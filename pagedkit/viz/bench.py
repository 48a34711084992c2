"""How fast are the widgets on a big pool? ``python -m pagedkit.viz.bench``.

Drives a `KVCacheManager` of 4,096 blocks through 1,000 steps of a busy,
made-up workload (arrivals, decoding, forks with copy-on-write, shared
prefixes, swapping, finishing), records it, then times what a learner
waits for: recording a step, turning a frame into block-map data, and
updating the block map's FigureWidget when scrubbing to a step. Kernel-side
times only; the browser then redraws the SVG on its own clock.
"""

from __future__ import annotations

import argparse
import random
import resource
import statistics
import time
from typing import Any

from ..memory import KVCacheManager
from ..scheduler import Admit, Finish, Preempt, Step
from .block_grid import block_map_data
from .block_map import BlockMap
from .recorder import Recorder
from .timeline_view import Timeline


def _workload(kv: KVCacheManager, num_steps: int, rng: random.Random) -> None:
    """A rough continuous-batching loop, just busy enough to touch every event kind."""
    bus, running, swapped, next_id = kv.events, [], [], 0
    prefixes = [[rng.randrange(50_000) for _ in range(64)] for _ in range(8)]
    for step in range(num_steps):
        for seq in list(running):
            if seq not in running:
                continue  # preempted earlier in this step
            if kv.allocate_slots(seq, [rng.randrange(50_000)]) is None:
                victim = running.pop()
                if kv.can_swap_out([victim]):
                    kv.swap_out([victim])
                    swapped.append(victim)
                    bus.emit(Preempt(victim, _request(victim), "swap"))
                else:
                    kv.free(victim)
                    bus.emit(Preempt(victim, _request(victim), "recompute"))
            elif rng.random() < 0.005:
                kv.free(seq)
                running.remove(seq)
                bus.emit(Finish(seq, _request(seq), "stop"))
        if swapped and kv.can_swap_in(swapped[:1], reserve=8):
            seq = swapped.pop(0)
            kv.swap_in([seq])
            running.append(seq)
        for _ in range(rng.randrange(4)):
            prompt = rng.choice(prefixes) + [rng.randrange(50_000)
                                             for _ in range(rng.randrange(16, 400))]
            seq = next_id
            next_id += 1
            cached = kv.cached_prefix(seq, prompt)
            if not kv.can_allocate(seq, len(prompt) - len(cached) * kv.block_size, cached,
                                   reserve=2):
                break
            kv.allocate_slots(seq, prompt[len(cached) * kv.block_size:], cached)
            bus.emit(Admit(seq, _request(seq)))
            running.append(seq)
            if rng.random() < 0.2:  # a second sample sharing the prompt
                kv.fork(seq, f"{seq}.1")
                bus.emit(Admit(f"{seq}.1", _request(seq)))
                running.append(f"{seq}.1")
        bus.emit(Step(step))  # no queues kept here: the recorder counts


def _request(seq: int | str) -> str:
    """The request a sequence of this workload belongs to (``7.1`` is a sample of ``r7``)."""
    return f"r{str(seq).partition('.')[0]}"


def _ms(xs: list[float]) -> str:
    xs = sorted(xs)
    p95 = xs[min(len(xs) - 1, int(0.95 * len(xs)))]
    return (f"median {statistics.median(xs) * 1e3:7.2f} ms   p95 {p95 * 1e3:7.2f} ms   "
            f"max {xs[-1] * 1e3:7.2f} ms")


def benchmark(num_blocks: int = 4096, block_size: int = 16, num_steps: int = 1000,
              samples: int = 60, seed: int = 0) -> dict[str, Any]:
    """Run the benchmark, print what it measured, and return the raw numbers."""
    rng = random.Random(seed)
    kv = KVCacheManager(num_blocks, block_size, enable_prefix_caching=True,
                        num_swap_blocks=num_blocks // 4)
    recorder = Recorder(kv.events, num_blocks, block_size)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    _workload(kv, num_steps, rng)
    with_recorder = time.perf_counter() - start
    grown_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss) / 1024
    assert recorder[-1].memory.used == kv.stats().used_blocks

    kv_bare = KVCacheManager(num_blocks, block_size, enable_prefix_caching=True,
                             num_swap_blocks=num_blocks // 4)
    start = time.perf_counter()
    _workload(kv_bare, num_steps, random.Random(seed))
    bare = time.perf_counter() - start

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

    peak = max(f.memory.used for f in recorder)
    print(f"pagedkit.viz benchmark: {num_blocks} blocks of {block_size} tokens, "
          f"{len(recorder) - 1} steps recorded (peak {peak} blocks used, "
          f"{sum(f.preemptions for f in recorder)} preemptions, "
          f"{sum(len(f.copies) for f in recorder)} copy-on-writes)")
    print(f"  workload without recorder {bare:8.2f} s, with recorder {with_recorder:8.2f} s "
          f"(recording: {(with_recorder - bare) / num_steps * 1e3:.2f} ms per step)")
    print(f"  frame -> block-map data          {_ms(data_times)}")
    print(f"  recording's peak memory growth   {grown_mib:7.1f} MiB (workload included)")
    print(f"  block map widget, build          {build * 1e3:7.1f} ms "
          f"(first in this process: {cold * 1e3:.0f} ms, importing plotly's widget code)")
    print(f"  block map widget, scrub a step   {_ms(update_times)}")
    print(f"  timeline widget, move the cursor {_ms(cursor_times)}")
    return {"record_s": with_recorder, "bare_s": bare, "data_s": data_times,
            "build_s": build, "cold_build_s": cold, "memory_mib": grown_mib,
            "update_s": update_times, "cursor_s": cursor_times}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=4096)
    parser.add_argument("--block-size", type=int, default=16)
    parser.add_argument("--steps", type=int, default=1000)
    args = parser.parse_args()
    benchmark(args.blocks, args.block_size, args.steps)


if __name__ == "__main__":
    main()
