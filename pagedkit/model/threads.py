"""How many CPU threads one forward pass gets: only as many as its work pays for.

torch splits an op over its intra-op threads (OpenMP: ``torch.get_num_threads()``)
and every split is a hand-off: the threads start together and wait at a
barrier for the slowest. GNU OpenMP, which torch's CPU wheels use, waits by
*spinning*. On a machine whose other cores are busy — a shared laptop, a CI
runner, Colab's two vCPUs next to the notebook server — the second thread is
often not running when an op starts, and the first spins at the barrier until
the scheduler gives it a core again: milliseconds per op. A small model's
decode step is ~30 matrix multiplies and ~100 other ops of microseconds each,
so two threads made pagedkit 13x *slower* than one on this project's loaded
2-core machine (docs/benchmarks.md, issue #14); ``OMP_WAIT_POLICY=PASSIVE``
(set before torch is imported) removes most of that, which is how the cause
was confirmed.

So on CPU a step runs on ``min(torch.get_num_threads(), work // MACS_PER_THREAD)``
threads (at least one), where the work is the multiply-adds of the step's
largest per-layer matrix multiply: a thread is added only when its share of
each op is large next to a lost hand-off. A learner's ``torch.set_num_threads``
stays the upper bound, and is restored after every step.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch

#: Multiply-adds one thread must get of a step's largest matrix multiply
#: before a second thread is worth its hand-off. 256M is ~10-25 ms of one
#: core's work; measured on a loaded 2-core machine (load 6), a hand-off
#: cost ~30 ms per op with GNU OpenMP's spinning, and even 1G multiply-adds
#: ran 1.3x slower on two threads than on one. The bench models' decode steps
#: (12-45M) and the tiny model's prefills (<= 256M) run on one thread.
MACS_PER_THREAD = 256 * 2**20


def step_macs(config, num_tokens: int) -> int:
    """Multiply-adds of the largest matrix multiply in one layer of a forward
    over `num_tokens` tokens (the MLP's, for the models served here)."""
    config = config.get_text_config() if hasattr(config, "get_text_config") else config
    hidden = config.hidden_size
    inner = getattr(config, "intermediate_size", None) or getattr(config, "n_inner", None) \
        or 4 * hidden
    return num_tokens * hidden * max(hidden, inner)


def threads_for(macs: int, available: int | None = None) -> int:
    """Threads a forward of `macs` (see `step_macs`) gets out of `available`
    (default ``torch.get_num_threads()``)."""
    available = torch.get_num_threads() if available is None else available
    return max(1, min(available, macs // MACS_PER_THREAD))


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
