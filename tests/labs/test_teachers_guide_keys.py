"""Every formula in the teacher's guide's answer keys, run against its
exercise's check, in both editions (each has its own copy of the code spans):
a teacher who grades by the key grades as the check does (newcomer 15,
finding 7: lab 01's key gave -3 for `cached_kv_reads(3, 0)`, the check 0).

A key's formula is the longest code span of its bullet; the bullets without
one to run (prose answers) are listed, so a new key with a formula cannot be
left out unnoticed."""

import math
import re
from pathlib import Path

import pytest
import torch

from pagedkit.exercises import lab01, lab03, lab04, lab06, lab09

ROOT = Path(__file__).resolve().parents[2]
GUIDES = {"en": ("docs/teachers_guide.md", "## Answer keys"),
          "zh-CN": ("docs/zh-CN/teachers_guide.md", "## “先预测”问题的参考答案")}
EXERCISE = {"exercise 1": 1, "exercise 2": 2, "exercise 3": 3, "exercise 4": 4,
            "练习 1": 1, "练习 2": 2, "练习 3": 3, "练习 4": 4}


def keys(edition):
    """``{(lab, exercise number or the question): [code spans]}`` of the section."""
    path, heading = GUIDES[edition]
    text = (ROOT / path).read_text(encoding="utf-8")
    section = text.split(heading, 1)[1].split("\n## ", 1)[0]
    found = {}
    for item in re.split(r"\n- ", section)[1:]:
        head = re.match(r"\*\*(?:Lab|实验) (\w+)[,，] *(.+?)\*\*", item)
        assert head, item[:60]
        lab, which = head[1], head[2].rstrip(".。")
        spans = [" ".join(span.split()) for span in re.findall(r"`([^`]+)`", item)]
        found[(lab, EXERCISE.get(which, "question"))] = spans
    return found


def formula(spans):
    return max(spans, key=len)


def run(expression, **names):
    return eval(expression, {"__builtins__": {"max": max, "min": min}}, names)


def key_lab01_1(spans):
    def cached_kv_reads(prompt_len, new_tokens):
        return run(formula(spans), prompt_len=prompt_len, new_tokens=new_tokens)
    return lab01.check_cached_kv_reads(cached_kv_reads)


def key_lab03_1(spans):
    def token_at(table, B, num_tokens, slot):
        if slot // B not in table:  # the key's first way to None
            return None
        position = run(formula(spans), table=table, B=B, slot=slot)
        return position if position < num_tokens else None  # its second
    return lab03.check_token_at(token_at)


def key_lab04b_1(spans):
    # side a's weight, in the form the key calls stable (the first, exp(lse_a) / (...),
    # overflows for the check's scores near 1000); side b's is it with a and b swapped
    weight = formula([span for span in spans if "logaddexp(lse_a, lse_b)" in span])

    def merge_states(out_a, lse_a, out_b, lse_b):
        lse = torch.logaddexp(lse_a, lse_b)
        if lse == -math.inf:  # "two empty sides give zeros and -inf"
            return torch.zeros_like(out_a), lse
        ops = {"exp": torch.exp, "logaddexp": torch.logaddexp}
        a = run(weight, lse_a=lse_a, lse_b=lse_b, **ops)
        b = run(weight, lse_a=lse_b, lse_b=lse_a, **ops)
        return a * out_a + b * out_b, lse
    return lab04.check_merge_states(merge_states)


def key_lab06_1(spans):
    def tokens_to_recompute(num_tokens, block_size, cached_blocks):
        return run(formula(spans), num_tokens=num_tokens, block_size=block_size,
                   cached_blocks=cached_blocks)
    return lab06.check_tokens_to_recompute(tokens_to_recompute)


def key_lab09_2(spans):
    tokens, cost = "1 + a + a^2 + ... + a^k", "1 + k * draft_cost"
    assert tokens in spans and cost in spans, spans  # the series, written out below

    def best_num_drafts(acceptance_rate, draft_cost, max_drafts):
        rates = [sum(acceptance_rate ** i for i in range(k + 1))
                 / run(cost, k=k, draft_cost=draft_cost) for k in range(max_drafts + 1)]
        return rates.index(max(rates))  # the smallest k on a tie
    return lab09.check_best_num_drafts(best_num_drafts)


RUN = {("01", 1): key_lab01_1, ("03", 1): key_lab03_1, ("04b", 1): key_lab04b_1,
       ("06", 1): key_lab06_1, ("09", 2): key_lab09_2}
PROSE = {("01", 2), ("01", "question"), ("03", "question"), ("04", 4), ("07", 3)}


@pytest.mark.parametrize("edition", GUIDES)
def test_every_key_is_run_or_prose(edition):
    assert set(keys(edition)) == set(RUN) | PROSE


@pytest.mark.parametrize("edition", GUIDES)
@pytest.mark.parametrize("key", RUN, ids=lambda key: f"lab{key[0]}.{key[1]}")
def test_the_key_passes_its_check(edition, key):
    result = RUN[key](keys(edition)[key])
    assert result.passed, repr(result)
