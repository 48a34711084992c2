"""How many CPU threads one forward pass gets: measured, step by step.

torch splits an op over its intra-op threads (OpenMP: ``torch.get_num_threads()``)
and every split is a hand-off: the threads start together and wait at a
barrier for the slowest. GNU OpenMP, which torch's CPU wheels use, waits by
*spinning*. On a machine whose other cores are busy — a shared laptop, a CI
runner, Colab's two vCPUs next to the notebook server — the second thread is
often not running when an op starts, and the first spins at the barrier until
the scheduler gives it a core again: milliseconds per op. A small model's
decode step is ~30 matrix multiplies and ~100 other ops of microseconds each,
so two threads made pagedkit 13x *slower* than one on this project's loaded
2-core machine (docs/benchmarks.md, issue #14; ``OMP_WAIT_POLICY=PASSIVE``,
set before torch is imported, removes most of it, which is how the cause was
confirmed). On the same machine when it is quiet, the second thread makes the
same steps ~15% faster.

**Why measure.** No rule of thumb on the step's size gets both: the answer
depends on the machine's load, and that changes while a notebook runs. So,
like Triton's autotuner but online, the step itself is timed: steps fall into
*classes* by the power of two of their work (`step_macs`, per model), each
class keeps a recent estimate (EWMA) of seconds per step on one thread and on
all ``N = torch.get_num_threads()``, and a step runs on whichever is faster.

**How the loser is re-tried.** The slower arm's estimate goes stale (the load
changes), so it is run again — once faster arms have run ``gap`` steps
(8, then 16, ... up to 256 while re-tries keep confirming the choice; back
to 8 when a choice flips) *and* for ``(loser - winner) / SHARE`` seconds
since a loser last ran, where loser and winner are the estimates of the
class whose step comes next. The schedule is one for the process, not one
per class: the load is shared, and a run's steps fall into many young
classes, each of which re-tried on its own schedule before. A re-try is
expected to lose ``loser - winner`` seconds, so the time lost to re-tries
is at most ``SHARE`` (1/20 = 5%) of the time spent on winning arms (as far
as the estimates are right), and at most one step in ``gap + 1``: 1 in 9
at first, 1 in 257 at the cap. On a loaded machine the loser (``N``
threads) costs 12-20 steps (13-21x measured), so it is re-tried only after
240-400 steps on one thread. The dangerous direction is fast: when the
machine gets busy under the winner, its own estimate rises above the
other's and the next step already runs on the other arm.

**Where a class starts.** A class with no time of its own starts on ``N``
threads if the nearest class that has timed both arms (of the same model
if it has one, else of any) runs fastest there, or none has yet, *and* the
CPUs this process may run on were free to it since `IdleCores` last read
them (Linux's ``/proc/stat``: idle or running its own threads,
``IDLE_SHARE`` of ``N`` CPUs); else on one thread. That start is a guess:
a class that started on ``N`` times one thread right after its first
timed step, so a wrong guess (load that arrived after the last reading)
costs its warm-up and one step. A class that started on one thread
estimates ``N`` from the nearest class's ratio and runs it when that says
it is faster; a class that starts on one thread before any class has
timed both arms has no ratio to borrow and tries ``N`` blind — one step,
on a loaded machine the dearest of all:
3.3 s against 0.15 s on one thread (tiny model, 64 sequences, load 5.6),
1.0 s against 35 ms at load 1.4. Before (issue #25, docs/benchmarks.md,
"One re-try schedule"), every class after the first started on one
thread and each re-tried on its own schedule: a 64-request run of the
larger model spent 17-28 of its ~160 steps on one thread on a quiet
machine, its prompts' step among them.

**What else it costs.** The first step of a class is a warm-up, not timed (a
new shape allocates), on the arm it starts on. The chooser's own work per
step (two clock readings, its estimates, ``torch.set_num_threads`` there and
back when the count changes) measured ~20-30 microseconds of Python on the
loaded 2-core machine, under 0.3% of a 10 ms decode step. With one thread
available nothing is measured. The user's ``torch.set_num_threads`` stays the
upper bound and is restored after every step, errors included. The state is
process-wide (the load is): one `ThreadChooser`, `CHOOSER`, which
`step_threads` uses.

**Numbers and the count.** A step's thread count follows timing, so it
can differ from run to run. With the MKL build torch ships for x86, the
tiny model's logits are bitwise equal on one and two threads (MKL splits
its products by rows). A wider model's are not always: on an AVX-512 Xeon,
MKL splits the inner sum of a 128-row product 2048 -> 768 (the MLP's down
projection of a 768-wide model) over two threads, and the logits differ
in float32's last bits (1.5e-6 at most, on logits up to 2.5; the greedy
tokens were the same: ``tests/model/test_threads.py``). So on such a
model a near-tie between two tokens could go either way from run to run,
as it could between pagedkit and transformers; ``torch.set_num_threads(1)``
pins the count (nothing is measured then) and with it the bits.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch

#: Time lost to re-trying the slower arm, as a share of the time on the faster.
SHARE = 1 / 20
#: Steps of a class on the faster arm before the slower is re-tried: the first
#: gap, and its cap after doubling on every re-try that confirms the choice.
MIN_GAP, MAX_GAP = 8, 256
#: Weight of a new measurement in an arm's running estimate.
ALPHA = 0.25
#: Share of the CPUs a process's first steps would run on that must have been
#: free (idle, or running this process) for them to start on all (`IdleCores`).
IDLE_SHARE = 0.9
#: Fewest clock ticks (``/proc/stat``'s, 1/100 s) a look at the CPUs must span
#: to say anything: a shorter window is a coin toss.
MIN_TICKS = 20


def _cpu_ticks(cpus: set[int]) -> tuple[int, int] | None:
    """(idle, all) clock ticks of these CPUs since boot, from ``/proc/stat``;
    None where there is no such file (not Linux) or it reads otherwise."""
    try:
        with open("/proc/stat") as f:
            lines = [line.split() for line in f if line.startswith("cpu") and line[3].isdigit()]
        idle = total = 0
        for name, *fields in lines:
            if int(name[3:]) in cpus:
                # user nice system idle iowait irq softirq steal
                ticks = [int(v) for v in fields[:8]]
                idle, total = idle + ticks[3] + ticks[4], total + sum(ticks)
        return (idle, total) if total else None
    except (OSError, ValueError, IndexError):
        return None


class IdleCores:
    """How many of the CPUs this process may run on were free to it since the last look?

    Calling it gives the CPUs' worth of time (``/proc/stat``, the CPUs of
    ``os.sched_getaffinity``) that sat idle or ran this process's own threads,
    since its last fresh reading (or its creation). Asked again before
    ``MIN_TICKS`` have passed, it gives that last reading again (None before
    the first: a shorter window is a coin toss); None where nothing can be
    read. A measured number, not a guess: ``N`` of them free is what ``N``
    threads would get. (A CPU quota, as a container's, is not seen here;
    the arm it picks is timed at once all the same.) The window is as long
    as the time since its last fresh reading, which can be minutes: load
    that arrived a moment ago may not show, which is why a class it sends
    to ``N`` threads times one thread at once."""

    def __init__(self) -> None:
        self.cpus = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set()
        self.hz = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        self.last = self._read() if self.cpus else None
        self.reading: float | None = None  # the last number given

    def _read(self) -> tuple[int, int, float] | None:
        ticks = _cpu_ticks(self.cpus)
        return None if ticks is None else (*ticks, time.process_time())

    def __call__(self) -> float | None:
        now = self._read() if self.last is not None else None
        if now is None:
            return None
        if now[1] - self.last[1] < MIN_TICKS:
            return self.reading
        idle, total, own = (a - b for a, b in zip(now, self.last, strict=True))
        self.last = now
        self.reading = min(len(self.cpus), len(self.cpus) * (idle + own * self.hz) / total)
        return self.reading


def step_macs(config, num_tokens: int) -> int:
    """Multiply-adds of the largest matrix multiply in one layer of a forward
    over `num_tokens` tokens (the MLP's, for the models served here)."""
    config = config.get_text_config() if hasattr(config, "get_text_config") else config
    hidden = config.hidden_size
    inner = getattr(config, "intermediate_size", None) or getattr(config, "n_inner", None) \
        or 4 * hidden
    return num_tokens * hidden * max(hidden, inner)


@contextmanager
def intra_op_threads(n: int) -> Iterator[None]:
    """Run the block on `n` torch threads, then restore the previous count
    (errors included). Costs ~1 microsecond when `n` is the current count."""
    previous = torch.get_num_threads()
    if n == previous:
        yield
        return
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


@dataclass
class _Class:
    """One class of steps: their timings on each arm (1 or N threads)."""

    seconds: dict[int, float] = field(default_factory=dict)  # arm -> estimate (measured)
    steps: int = 0  # steps seen, the warm-up included
    first: int | None = None  # the arm its warm-up and first timed step run on


@dataclass
class _Retries:
    """When a slower arm is re-tried: one schedule for the process (the load is shared)."""

    since: int = 0  # steps on a faster arm since a slower one last ran ...
    since_s: float = 0.0  # ... and their seconds
    gap: int = MIN_GAP  # steps to wait before re-trying a slower arm


class ThreadChooser:
    """Picks each step's thread count from measured step times (module docstring).

    `clock` (seconds, default ``time.perf_counter``) and `idle` (CPUs free to
    this process since the last call, or None: `IdleCores`; default None,
    never asked) are injected for tests. ``counts`` tallies the steps it ran on each
    thread count (`step_threads` asks it only when there is a choice: on
    the CPU, with more than one thread).
    """

    def __init__(self, clock: Callable[[], float] = time.perf_counter,
                 idle: Callable[[], float | None] | None = None) -> None:
        self.clock = clock
        self.idle = idle
        self.counts: Counter[int] = Counter()
        self._classes: dict[tuple[Hashable, int, int], _Class] = {}
        self._retries = _Retries()

    @contextmanager
    def step(self, macs: int, key: Hashable = None) -> Iterator[int]:
        """Run the block — one forward of `macs` multiply-adds (`step_macs`)
        of the model `key` names — on the thread count this class of steps
        runs fastest on, timing it; yields the count."""
        if isinstance(macs, bool) or not isinstance(macs, int) or macs < 0:
            raise ValueError(f"macs must be a non-negative integer, got {macs!r}")
        available = torch.get_num_threads()
        if available == 1:
            self.counts[1] += 1
            yield 1
            return
        where = (key, macs.bit_length(), available)
        cls = self._classes.setdefault(where, _Class())
        threads, retry = self._choose(where, cls)
        with intra_op_threads(threads):
            start = self.clock()
            yield threads
            seconds = self.clock() - start
        self.counts[threads] += 1
        self._record(where, cls, threads, seconds, retry)

    def _estimates(self, where, cls: _Class) -> dict[int, float]:
        """Seconds per step on each arm: measured, or for an untried arm the
        tried one's times the ratio of the nearest class (same N; this model's
        first, then any model's: the load is shared) that timed both."""
        near = self._nearest(where) if len(cls.seconds) == 1 else None
        if near is None:
            return cls.seconds
        (tried, seconds), = cls.seconds.items()
        other = where[2] if tried == 1 else 1
        return {tried: seconds, other: seconds * near.seconds[other] / near.seconds[tried]}

    def _nearest(self, where) -> _Class | None:
        """The class nearest `where` in work (same N; this model's first, then
        any model's) that has timed both arms, or None."""
        both = [(m != where[0], abs(k - where[1]), k, c) for (m, k, n), c
                in self._classes.items() if n == where[2] and len(c.seconds) == 2]
        return min(both, key=lambda t: t[:3])[-1] if both else None

    def _choose(self, where, cls: _Class) -> tuple[int, bool]:
        """(threads, whether this step re-tries the slower arm)."""
        available = where[2]
        if not cls.seconds:  # the warm-up, then the first timed step
            if cls.first is None:
                cls.first = self._first_arm(where)
            return cls.first, False
        if 1 not in cls.seconds:  # started on N, a guess: one thread's time, at once
            return 1, True
        est = self._estimates(where, cls)
        if available not in est:  # the process's first class, no ratio to borrow: N blind
            return available, True
        fast, slow = (1, available) if est[1] <= est[available] else (available, 1)
        due = self._retries
        if due.since >= due.gap and due.since_s * SHARE >= est[slow] - est[fast]:
            return slow, True
        return fast, False

    def _first_arm(self, where) -> int:
        """Where a class with no time of its own starts: on all N threads if
        the nearest class that timed both runs fastest there (or none has yet)
        and as many CPUs were free to this process; else on one thread."""
        near, available = self._nearest(where), where[2]
        if self.idle is None or (near is not None and near.seconds[1] <= near.seconds[available]):
            return 1
        free = self.idle()
        return available if free is not None and free >= IDLE_SHARE * available else 1

    def _record(self, where, cls: _Class, threads: int, seconds: float, retry: bool) -> None:
        cls.steps += 1
        if cls.steps == 1:
            return  # the warm-up is not timed
        before, new_arm = self._fastest(where, cls), threads not in cls.seconds
        if new_arm or retry:
            cls.seconds[threads] = seconds  # new, or a re-try: the old figure is stale
        else:
            cls.seconds[threads] += ALPHA * (seconds - cls.seconds[threads])
        if before is None:  # a class's first timed step: no choice was made yet
            return
        due = self._retries
        if self._fastest(where, cls) != before:  # the choice flipped
            due.since, due.since_s, due.gap = 0, 0.0, MIN_GAP
        elif new_arm:  # a class's first time on its other arm, and the choice held
            due.since, due.since_s = 0, 0.0
        elif retry:  # a re-try confirmed the choice: wait longer next time
            due.since, due.since_s, due.gap = 0, 0.0, min(2 * due.gap, MAX_GAP)
        else:  # a step on the faster arm
            due.since, due.since_s = due.since + 1, due.since_s + seconds

    def _fastest(self, where, cls: _Class) -> int | None:
        est = self._estimates(where, cls)
        return min(est, key=lambda arm: (est[arm], arm)) if est else None


#: The process-wide chooser: the machine's load is shared by every model.
CHOOSER = ThreadChooser(idle=IdleCores())


@contextmanager
def step_threads(macs: int, *, key: Hashable = None,
                 device: torch.device | str = "cpu") -> Iterator[int]:
    """``with step_threads(step_macs(config, n), key=id(model)): forward`` —
    the forward runs on the measured-fastest CPU thread count (`CHOOSER`).
    With one thread there is nothing to choose, and off the CPU (the forward
    is asynchronous there) nothing to time: it only yields the count."""
    available = torch.get_num_threads()
    if available == 1 or torch.device(device).type != "cpu":
        yield available
        return
    with CHOOSER.step(macs, key) as threads:
        yield threads
