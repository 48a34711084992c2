"""`python -m pagedkit demo -n N` refuses more completions per prompt than one
step computes in one line naming -n, the limit and what to give (newcomer 12,
finding 3: -n 257 ended in a traceback about max_num_seqs, an option the demo
does not have, and the demo's own --num-blocks advice led there)."""

from __future__ import annotations

import inspect
import re

import pytest

from pagedkit import demo
from pagedkit.engine.llm_engine import LLMEngine
from pagedkit.models import load_tiny_tokenizer
from pagedkit.scheduler.scheduler import SchedulerConfig

LIMIT = 256


def run(main, argv):
    try:
        return main(argv)
    except SystemExit as e:
        return e.code


def test_the_demos_limit_is_the_engines_default():
    """The demo checks against the scheduler's default, the one its engine is built with."""
    assert SchedulerConfig.max_num_seqs == LIMIT
    assert inspect.signature(LLMEngine).parameters["max_num_seqs"].default == LIMIT


@pytest.mark.parametrize("n", [LIMIT + 1, LIMIT + 2, 300, 1200, 10**6])
@pytest.mark.parametrize("blocks", [[], ["--num-blocks", "1100"], ["--num-blocks", "100000"]])
def test_more_samples_than_a_step_computes_is_a_usage_error(capsys, n, blocks):
    assert run(demo.main, ["--no-progress", "-n", str(n), "--temperature", "1", *blocks]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "usage: python -m pagedkit demo" in err
    assert (f"error: -n {n}: the n={n} completions run together as one group (sharing the "
            f"prompt's blocks), so they need {n} sequence slots in the same step, but "
            f"max_num_seqs is {LIMIT}; give -n {LIMIT} or less\n") in err
    assert err.splitlines()[-1].startswith(f"python -m pagedkit demo: error: -n {n}: ")  # one line
    assert "demo: loading" not in err  # said before the model loads


@pytest.mark.parametrize("limit, n", [(3, 4), (3, 3), (1, 2), (10, 11)])
def test_the_demo_refuses_by_the_engines_own_rule(capsys, monkeypatch, limit, n):
    """Stop 38's review: `demo -n` restated the engine's max_num_seqs rule. It asks
    the engine's (`llm_engine.group_past_max_num_seqs`) now: a rule that took
    fewer sequences would refuse the demo's -n by it. Only the checks run."""
    from pagedkit.engine import llm_engine

    rule = llm_engine.group_past_max_num_seqs
    monkeypatch.setattr(llm_engine, "group_past_max_num_seqs",
                        lambda name, kind, seqs, _most: rule(name, kind, seqs, limit))
    parser = demo._parser()
    args = parser.parse_args(["-n", str(n), "--temperature", "1"])
    if n <= limit:
        demo._check_samples(parser, args)
        return
    with pytest.raises(SystemExit):
        demo._check_samples(parser, args)
    assert f"but max_num_seqs is {limit}; give -n {LIMIT} or less" in capsys.readouterr().err


@pytest.mark.parametrize("n", [LIMIT + 1, 300])
def test_the_engine_refuses_by_the_same_sentence(n):
    """The engine's own refusal of n samples past max_num_seqs says the sentence
    the demo says, in its terms (samples, not completions)."""
    from pagedkit import SamplingParams
    from pagedkit.engine.llm_engine import group_past_max_num_seqs

    llm = _tiny()
    with pytest.raises(ValueError) as info:
        llm.generate("hello", SamplingParams(n=n, temperature=1, max_tokens=1), use_tqdm=False)
    assert group_past_max_num_seqs("n", "samples", n, LIMIT) in str(info.value)
    assert group_past_max_num_seqs("n", "samples", LIMIT, LIMIT) is None


_LLM = []


def _tiny():
    """One tiny LLM for the module (loading it takes seconds on a busy machine)."""
    from pagedkit import LLM

    if not _LLM:
        _LLM.append(LLM("tiny", num_blocks=2048))
    return _LLM[0]


@pytest.mark.parametrize("n", [1, 2, LIMIT - 1, LIMIT])
def test_the_blocks_advice_up_to_the_limit_leads_to_a_run(capsys, n):
    """Up to the limit, -n passes, and a cache too small says how many blocks
    to give; given those, every check passes (the engine's own count, as before)."""
    parser, tokenizer = demo._parser(), load_tiny_tokenizer()
    args = parser.parse_args(["-n", str(n), "--temperature", "1", "--num-blocks", "2"])
    demo._check_samples(parser, args)
    with pytest.raises(SystemExit):
        demo._check_blocks(parser, args, tokenizer, 2048)
    advice = int(re.search(r"give --num-blocks (\d+) or more", capsys.readouterr().err).group(1))
    args = parser.parse_args(["-n", str(n), "--temperature", "1", "--num-blocks", str(advice)])
    demo._check_samples(parser, args)
    demo._check_blocks(parser, args, tokenizer, 2048)


def test_the_limit_itself_runs(capsys):
    assert run(demo.main, ["--no-progress", "-n", str(LIMIT), "--temperature", "1",
                           "--max-tokens", "1", "--num-blocks", "300"]) == 0
    out = capsys.readouterr().out
    assert out.count("' -> ") == len(demo.PROMPTS) * LIMIT
    assert re.search(r"8 requests, \d+ tokens? in", out)
