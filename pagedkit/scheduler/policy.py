"""The scheduling rules, each written once (paper §4.5).

The engine's `Scheduler` and the simulator (`pagedkit.sim.Simulator`) move
different objects — sequences with token ids and a token budget, or a
trace's requests with a latency model — but decide the same things the same
way, by calling these functions:

* **whom to preempt**: while the oldest unserved running group does not
  fit, the *newest* running group not yet served loses its memory — the
  group itself when it is the newest (`serve_oldest_first`);
* **where a preempted group goes**: back to its place by arrival, in the
  waiting or the swapped queue (`insert_by_arrival`), so "newest" and
  "oldest" stay true;
* **how a victim gives its memory back**: swapped to CPU memory when asked
  for and its blocks fit there, else recomputed later (`preemption_mode`);
* **admission**, and bringing swapped groups back: first come, first
  served; the head that cannot come in now holds back everyone behind it
  (`admit_fcfs`, over the waiting queue or the swapped one).

How many blocks a group needs is the paging core's, for both: one rule,
`pagedkit.memory.kv_cache_manager.blocks_to_append` (copy-on-write of a
shared last block), behind `KVCacheManager.blocks_needed_for` (the
scheduler's plans, the simulator's appends) and `blocks_to_admit` (the
simulator's admissions).
"""

from __future__ import annotations

import bisect
import enum
from collections import deque
from collections.abc import Callable, MutableSequence
from typing import TypeVar

G = TypeVar("G")


def insert_by_arrival(queue: MutableSequence[G], group: G,
                      arrival: Callable[[G], tuple[float, int]]) -> None:
    """Put `group` at its place in `queue`, which is kept in arrival order.
    `arrival(group)` is ``(arrival time, order of arrival)``: requests that
    arrive at the same moment (a batch, a trace's step) keep the order they
    were queued in."""
    queue.insert(bisect.bisect_right(queue, arrival(group), key=arrival), group)


def serve_oldest_first(running: list[G], try_serve: Callable[[G], bool | None],
                       preempt: Callable[[G], None],
                       alone: Callable[[G], None]) -> list[G]:
    """Give every running group room for its next tokens, oldest first.

    `try_serve(group)` gives it room and returns True, returns False (nothing
    changed) when memory is short, or None when it sits this step out for
    another reason (no token budget left; it keeps its memory). While a group
    does not fit, the newest group not yet served is preempted; when none is
    left but older groups hold memory, the group itself steps aside; when it
    is alone with the whole memory and still does not fit, `alone(group)`
    ends it. Returns the groups still running, in order."""
    queue = deque(running)
    kept: list[G] = []
    while queue:
        group = queue.popleft()
        while try_serve(group) is False:
            if queue:
                preempt(queue.pop())  # the newest running group
            elif kept:
                preempt(group)  # older groups hold the memory: step aside
                break
            else:
                alone(group)
                break
        else:  # served, or sitting this step out: still running
            kept.append(group)
    return kept


def preemption_mode(requested: str, swap_fits: Callable[[], bool]) -> str:
    """``"swap"`` if swapping was asked for and `swap_fits()` (the group's
    blocks fit the CPU pool), else ``"recompute"``: with no CPU room a victim
    is recomputed later rather than failing (§4.5)."""
    return "swap" if requested == "swap" and swap_fits() else "recompute"


class Verdict(enum.Enum):
    """What admission says about the head of the waiting queue."""

    ADMITTED = "admitted"  # it is running now
    WAIT = "wait"  # not now: it, and everyone behind it, waits for the next step
    NEVER = "never"  # it can never be admitted: it leaves the queue (to be ended)


def admit_fcfs(waiting: deque[G], try_admit: Callable[[G], Verdict],
               never: Callable[[G], None]) -> list[G]:
    """First come, first served: admit the head of `waiting` while
    `try_admit` can; the first that must wait holds back the rest (no
    request overtakes an older one). A head that can never be admitted
    leaves the queue and is handed to `never`. Returns the admitted groups.
    Swapped-out groups come back the same way, from the swapped queue."""
    admitted: list[G] = []
    while waiting:
        verdict = try_admit(waiting[0])
        if verdict is Verdict.WAIT:
            break
        group = waiting.popleft()
        if verdict is Verdict.NEVER:
            never(group)
        else:
            admitted.append(group)
    return admitted
