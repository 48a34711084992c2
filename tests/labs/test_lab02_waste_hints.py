"""Newcomer 37: a waste_breakdown right but for external fragmentation (every
free slot counted) was told how the other three parts add up. A dict of the
four keys with one part wrong is now told that part's rule, for each part
and each way of getting it wrong tried here; two parts wrong keep the case's
own hint (its sum)."""

from __future__ import annotations

import itertools

import pytest

import pagedkit
from pagedkit.exercises import lab02

from .test_exercises import SOLUTIONS, load

SOLUTION = load(SOLUTIONS / "lab02_contiguous_waste.py").waste_breakdown
WAYS = {"one more": lambda d, *a: d + 1, "zero or one": lambda d, *a: 1 if d == 0 else 0,
        "all free": lambda d, regions, capacity, _n: capacity - sum(r.size for r in regions)}


def _with(parts, way):
    def waste_breakdown(reservations, capacity, next_size):
        got = SOLUTION(reservations, capacity, next_size)
        for part in parts:
            got[part] = WAYS[way](got[part], reservations, capacity, next_size)
        return got
    return waste_breakdown


@pytest.mark.parametrize("language", ["en", "zh-CN"])
@pytest.mark.parametrize("way", list(WAYS))
@pytest.mark.parametrize("part", lab02.PARTS)
def test_one_part_wrong_is_told_its_rule(part, way, language):
    pagedkit.set_language(language)
    try:
        result = lab02.check_waste_breakdown(_with([part], way))
        if result.passed:  # (this way agrees with the right count on every case)
            return
        rule = pagedkit.i18n._(lab02.PART_RULES[part])
        assert result.message.endswith(rule) and part in result.message.split(rule)[0][-120:]
    finally:
        pagedkit.set_language("en")


@pytest.mark.parametrize("parts", list(itertools.combinations(lab02.PARTS, 2)))
def test_two_parts_wrong_keep_the_cases_hint(parts):
    result = lab02.check_waste_breakdown(_with(parts, "one more"))
    assert not result.passed
    assert not any(rule in result.message for rule in lab02.PART_RULES.values())
    assert "Hint: " in result.message
