"""Lab 02 exercises: contiguous reservations and where their memory goes.

The baselines are the paper's Orca (Max / Pow2 / Oracle), §6.1; the kinds of
waste are defined in §3 (Fig. 3) and measured in Fig. 2 (§1).

* `reservation_size` — what the max / pow2 / oracle policies reserve.
* `first_fit` — place a region in an address space that has holes.
* `waste_breakdown` — split a contiguous cache into token states,
  reservation, internal and external fragmentation.

Expected answers come from `pagedkit.memory.ContiguousAllocator` itself
where it has one, so the exercises and the package cannot disagree.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from dataclasses import replace

from ..i18n import N_, _, join_clauses, join_names
from ..memory import ContiguousAllocator, Reservation
from . import Case, CheckResult, check_function, fresh, in_stub_order, same_items

__all__ = ["CHECKS", "check_first_fit", "check_reservation_size", "check_waste_breakdown"]

PARTS = ("token_states", "reservation", "internal_fragmentation", "external_fragmentation")


@in_stub_order
def check_reservation_size(fn: Callable[[str, int, int, int], int]) -> CheckResult:
    """`reservation_size(policy, prompt_len, output_len, max_len)`: slots reserved,
    under policy ``"max"``, ``"pow2"`` or ``"oracle"``, for a request whose prompt
    holds `prompt_len` tokens and which will generate `output_len` more (paper
    §6.1). ``max`` and ``pow2`` never reserve more than `max_len`."""
    pow2 = (_("pow2 knows the prompt and rounds only the output up to a power of two: "
            "prompt 10 + output 25 -> 10 + 32"))
    hints = {
        ("max", 10, 10, 2048): _("max reserves the longest a request might grow: max_len"),
        ("oracle", 10, 25, 2048): _("the oracle knows the output's length: prompt + output"),
        ("pow2", 10, 25, 2048): pow2,
        ("pow2", 100, 33, 2048): pow2,
        ("pow2", 7, 32, 2048): _("32 is already a power of two: no rounding needed"),
        ("pow2", 3, 1, 2048): _("1 = 2**0 is a power of two"),
        ("pow2", 5, 0, 2048): _("no output to come: reserve the prompt alone"),
        ("pow2", 161, 338, 2048): _("the prompt is not rounded: 161 + 512, not 512"),
        ("pow2", 500, 1025, 2048): _("500 + 2048 is over max_len: no policy reserves more "
                                   "than max_len"),
        ("pow2", 30, 40, 100): _("30 + 64 = 94 fits under max_len 100"),
        ("pow2", 40, 40, 100): _("40 + 64 = 104: cap it at max_len"),
        ("max", 1, 0, 100): _("max reserves max_len even for a 1-token request"),
        ("oracle", 60, 40, 100): _("the oracle reserves exactly prompt + output"),
    }
    cases = [Case(args, ContiguousAllocator(args[3], args[0], args[3])
                  .reservation_size(args[1], args[2]), hint) for args, hint in hints.items()]
    return check_function("reservation_size", fn, cases)


@in_stub_order
def check_first_fit(fn: Callable[[list[tuple[int, int]], int, int], int | None]) -> CheckResult:
    """`first_fit(regions, capacity, size)`: the lowest address where `size` free
    slots in a row start, given the live `regions` as ``(start, size)`` pairs in
    any order inside ``[0, capacity)``; ``None`` when no hole is big enough."""
    cases = [
        Case(([], 100, 10), 0, _("an empty address space: the region starts at 0")),
        Case(([(0, 10)], 100, 10), 10, _("the first free slot is right after the region [0, 10)")),
        Case(([(10, 10)], 100, 10), 0, _("the hole [0, 10) before the first region fits exactly")),
        Case(([(0, 10), (30, 10)], 100, 20), 10,
             _("the hole [10, 30) is exactly 20 slots: a hole fits when its size >= size")),
        Case(([(30, 10), (0, 10)], 100, 25), 40,
             _("regions come in any order: sort them by start. [10, 30) is too small, so the "
             "first hole that fits starts at 40")),
        Case(([(0, 90)], 100, 10), 90, _("the hole at the end, [90, 100), counts too")),
        Case(([(0, 50), (60, 40)], 100, 20), None,
             _("10 slots are free but in no run of 20: return None (external fragmentation)")),
        Case(([(0, 45), (55, 45)], 100, 10), 45, _("the hole [45, 55) fits 10 exactly")),
        Case(([], 100, 101), None, _("a region larger than the whole address space never fits")),
        Case(([(70, 10), (20, 10), (50, 10)], 100, 20), 0,
             _("the first fit is the lowest address: [0, 20) fits before any region")),
        Case(([(20, 10), (35, 10)], 100, 5), 0,
             _("first fit takes the lowest hole that fits, [0, 20), not the tightest one ([30, 35) "
             "fits 5 exactly: that would be best fit)")),
    ]
    return check_function("first_fit", fn, cases)


def _scenario(capacity: int, policy: str, max_len: int, script: list[tuple],
              next_size: int, hint: str, *, backwards: bool = False) -> Case:
    """Play `script` on a real `ContiguousAllocator`; its stats are the answer.
    `backwards`: the regions listed last first (the list has no order to rely on)."""
    mem = ContiguousAllocator(capacity, policy, max_len)
    for op, request, *args in script:
        if op == "allocate":
            if mem.allocate(request, *args) is None:
                raise AssertionError(f"scenario bug: {request!r} did not fit")
        elif op == "append":
            mem.append(request, *args)
        else:
            mem.free(request)
    s = mem.stats()
    expected = {"token_states": s.token_states, "reservation": s.reservation,
                "internal_fragmentation": s.internal_fragmentation,
                "external_fragmentation": s.external_fragmentation(next_size)}
    regions = [replace(r) for r in mem.regions()]  # copies: an answer may not change the next
    return Case((regions[::-1] if backwards else regions, capacity, next_size), expected, hint)


def _scenarios() -> list[Case]:
    four = [("allocate", "A", 12, 8), ("allocate", "B", 6, 4), ("allocate", "C", 5, 3),
            ("allocate", "D", 4, 2), ("free", "B")]
    return [
        _scenario(100, "max", 32, [("allocate", "A", 5, 10)], 32,
                  _("one request under 'max': 5 prompt tokens stored (token states), 10 output "
                  "tokens still to come (reservation = need - used), 32 - 15 = 17 slots it "
                  "will never use (internal fragmentation = size - need)")),
        _scenario(100, "max", 32, [("allocate", "A", 5, 10), ("append", "A", 7)], 32,
                  _("after 7 decoding steps, 12 slots hold tokens and 3 are still reserved")),
        _scenario(64, "oracle", 64, [("allocate", "A", 10, 6), ("allocate", "B", 4, 4),
                                     ("append", "A", 3)], 40,
                  _("oracle reservations are exact: no internal fragmentation. Sum each part "
                  "over all regions")),
        _scenario(64, "pow2", 64, four, 32,
                  _("B's region was freed, leaving a hole of 10 ([20, 30)) between A and C, and "
                  "19 slots are free after D ([45, 64)): 29 free in all, but the next request "
                  "needs 32 and fits in neither run, so every free slot is external "
                  "fragmentation")),
        _scenario(64, "pow2", 64, four, 16,
                  _("the same memory, but the next request needs 16: it does not fit in B's "
                  "hole of 10, but it fits in the 19 free slots after D, so no free slot is "
                  "lost (external fragmentation 0: the largest run decides)")),
        _scenario(64, "pow2", 64, four, 32,
                  _("the same memory, its regions listed last first (D, C, A): the list is in "
                    "no order; the largest free run is still the 19 slots after D, and 32 fit "
                    "in none"), backwards=True),  # newcomer 42
        _scenario(64, "pow2", 64, [], 8, _("no regions at all: nothing used, nothing wasted")),
        _scenario(100, "oracle", 100,
                  [("allocate", "A", 6, 4), ("allocate", "B", 5, 5), ("allocate", "C", 8, 2),
                   ("allocate", "D", 9, 1), ("free", "B")], 70,
                  _("70 slots are free (holes of 10 and 60) but the next request needs 70: "
                  "the largest hole decides, not the total")),
    ]


@in_stub_order
def check_waste_breakdown(fn: Callable[[list[Reservation], int, int], dict]) -> CheckResult:
    """`waste_breakdown(reservations, capacity, next_size)` -> a dict with the slots
    of each part: ``token_states``, ``reservation``, ``internal_fragmentation`` and
    ``external_fragmentation`` (for a waiting request of `next_size` slots)."""
    return check_function("waste_breakdown", fn, _scenarios(),  # a dict of counts: same_items
                          diagnose=_waste_mistake)


#: What each part counts, told where it is the one part wrong (newcomer 37 counted
#: every free slot as external fragmentation and was told how the other three add up).
PART_RULES = {
    "token_states": N_("token states are the slots that hold tokens: each region's prompt and "
                       "the tokens generated so far"),
    "reservation": N_("reservation is the slots kept for tokens still to come: need - used, "
                      "for each region"),
    "internal_fragmentation": N_("internal fragmentation is the slots a region will never use: "
                                 "size - need"),
    "external_fragmentation": N_("external fragmentation is every free slot when the waiting "
                                 "request (next_size) fits in no free run, and 0 when it fits in "
                                 "one: the largest free run decides, not the total"),
}


def _waste_mistake(fn: Callable, case: Case, got: object) -> str:
    """The keys to return (`_not_the_four_keys`); the regions' order, where
    the answer is right once they are handed sorted by start (newcomer 42); or,
    for a dict of the four with one part wrong, that part's rule; '' where
    several parts are wrong (the case's own hint then tells its sum)."""
    keys = _not_the_four_keys(fn, case, got)
    if keys:
        return keys
    regions, capacity, next_size = fresh(case.args)
    in_order = sorted(regions, key=lambda r: r.start)
    if in_order != regions:
        with contextlib.suppress(Exception):
            if same_items(fn(in_order, capacity, next_size), case.expected):
                return (_("your function is right on these regions sorted by start, and they "
                          "come in another order here ({order}): the list is in no order, so "
                          "sort it by start before measuring the free runs between regions")
                        .format(order=join_names([r.request for r in regions])))
    wrong = [part for part in PARTS if not same_items(got[part], case.expected[part])]
    if len(wrong) != 1:
        return ""
    part = wrong[0]
    return (_("only {part} is wrong here ({got!r}, expected {want!r}): {rule}")
            .format(part=part, got=got[part], want=case.expected[part], rule=_(PART_RULES[part])))


def _not_the_four_keys(_fn: Callable, _case: Case, got: object) -> str:
    """The hint for an answer that is not a dict of exactly the four `PARTS`
    (a tuple of the counts, a key missing or one more): the keys to return,
    not a case's arithmetic (newcomer 29, finding 13); "" for a dict of the
    four keys."""
    keys = join_names(repr(part) for part in PARTS)
    if not isinstance(got, Mapping):
        return (_("return a dict, not a {kind}, with exactly these 4 keys: {keys}")
                .format(kind=type(got).__name__, keys=keys))
    missing = [repr(part) for part in PARTS if part not in got]
    extra = [repr(key) for key in got if key not in PARTS]
    if not missing and not extra:
        return ""
    found = [_("missing {keys}").format(keys=join_names(missing))] if missing else []
    found += [_("extra {keys}").format(keys=join_names(extra))] if extra else []
    return (_("return a dict with exactly these 4 keys: {keys} ({found})")
            .format(keys=keys, found=join_clauses(found)))


CHECKS = {
    "reservation_size": check_reservation_size,
    "first_fit": check_first_fit,
    "waste_breakdown": check_waste_breakdown,
}
