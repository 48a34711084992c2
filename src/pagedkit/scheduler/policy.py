"""The scheduling rules, each written once (paper §4.5).

The engine's `Scheduler` and the simulator (`pagedkit.sim.Simulator`) move
different objects — sequences with token ids and a token budget, or a
trace's requests with a latency model — but decide the same things the same
way, by asking these functions. Each is a pure decision: it looks at a few
facts and answers; the caller does what the answer says, in its own loop.

* **does it fit**: one answer for every question of room (`Fit`): yes, not
  within this step's tokens and seats, not within the free blocks;
* **who gives way** when a running group does not fit (`make_room`): the
  *newest* running group not yet served loses its memory; when none is left
  but older groups hold memory, the group itself steps aside; alone with the
  whole memory, it can never fit;
* **where a preempted group goes**: back to its place by arrival, in the
  waiting or the swapped queue (`insert_by_arrival`), so "newest" and
  "oldest" stay true;
* **how a victim gives its memory back**: swapped to CPU memory when asked
  for and its blocks fit there, else recomputed later (`preemption_mode`);
* **admission**, and bringing swapped groups back: first come, first
  served; the head that cannot come in now holds back everyone behind it,
  and a head short of memory while nobody else holds any can never come in
  (`admit_head`);
* **when new requests may come in at all**: not while a group sits swapped
  out or someone was preempted this step (`may_admit_waiting`).

How many blocks a group needs is the paging core's, for both: one rule,
`pagedkit.memory.kv_cache_manager.blocks_to_append` (copy-on-write of a
shared last block), behind `KVCacheManager.blocks_needed_for` (running and
swapped groups) and `blocks_to_admit` (admissions).
"""

from __future__ import annotations

import bisect
import enum
from collections.abc import Callable, MutableSequence
from typing import TypeVar

G = TypeVar("G")


class Fit(enum.Enum):
    """Does a group's next step fit? The one answer to every question of room."""

    YES = "yes"
    NO_BUDGET = "no budget"  # this step's tokens or sequence seats are spent: next step
    NO_MEMORY = "no memory"  # too few free blocks now


class Room(enum.Enum):
    """What to do when a running group does not fit the free blocks (`make_room`)."""

    PREEMPT_NEWEST = "preempt the newest running group not yet served"
    STEP_ASIDE = "preempt the group itself"  # older groups hold the memory
    NEVER = "end the group"  # alone with the whole memory, it still does not fit


class Admission(enum.Enum):
    """What happens to the head of the waiting (or swapped) queue (`admit_head`)."""

    ADMIT = "admit"  # it runs from this step on
    WAIT = "wait"  # not now: it, and everyone behind it, waits for the next step
    NEVER = "never"  # it can never come in: it leaves the queue (to be ended)


def make_room(newer_unserved: bool, older_served: bool) -> Room:
    """A running group does not fit. `newer_unserved`: a newer running group
    has not been served this step (it can be preempted); `older_served`: an
    older group was served and holds memory."""
    if newer_unserved:
        return Room.PREEMPT_NEWEST
    return Room.STEP_ASIDE if older_served else Room.NEVER


def admit_head(fit: Fit, memory_held: bool) -> Admission:
    """First come, first served: the head comes in if it fits, else waits —
    unless it is short of memory while no one else holds any (`memory_held`
    false): then it can never fit."""
    if fit is Fit.YES:
        return Admission.ADMIT
    if fit is Fit.NO_MEMORY and not memory_held:
        return Admission.NEVER
    return Admission.WAIT


def may_admit_waiting(preempted: bool, swapped: bool) -> bool:
    """New requests come in only when memory is not short: nobody was
    preempted this step and nobody waits in swap (paper §4.5)."""
    return not preempted and not swapped


def preemption_mode(requested: str, swap_fits: bool) -> str:
    """``"swap"`` if swapping was asked for and the group's blocks fit the
    CPU pool (`swap_fits`), else ``"recompute"``: with no CPU room a victim is
    recomputed later rather than failing (§4.5)."""
    return "swap" if requested == "swap" and swap_fits else "recompute"


def insert_by_arrival(queue: MutableSequence[G], group: G,
                      arrival: Callable[[G], tuple[float, int]]) -> None:
    """Put `group` at its place in `queue`, which is kept in arrival order.
    `arrival(group)` is ``(arrival time, order of arrival)``: requests that
    arrive at the same moment (a batch, a trace's step) keep the order they
    were queued in."""
    queue.insert(bisect.bisect_right(queue, arrival(group), key=arrival), group)
