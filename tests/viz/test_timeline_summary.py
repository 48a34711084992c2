"""The timeline's summary counts preemptions and the requests they hit, each
as what it is (newcomer19 #2: 4 requests preempted 8 times were "8 requests
preempted so far"). Every frame of a run that preempts the same requests again
and again, in every language, against the engine's own step outputs."""

import re
from collections import Counter

import pytest

from pagedkit import LLM, SamplingParams
from pagedkit.i18n import LANGUAGES, speaking
from pagedkit.viz import Dashboard

PROMPTS = ["Once upon a time", "There once was a shy mouse named Sam.", "One cold evening,",
           "Lily had a red ball.", "The wind blew hard."]
SAID = {"en": (re.compile(r", (\d+) preemptions? so far$"),
               re.compile(r", (\d+) preemptions? \((\d+) requests?\) so far$")),
        "zh-CN": (re.compile(r"迄今 (\d+) 次抢占$"),
                  re.compile(r"迄今 (\d+) 次抢占（涉及 (\d+) 个请求）$"))}


@pytest.fixture(scope="module")
def run():
    llm = LLM("tiny", num_blocks=14, block_size=4, enable_prefix_caching=False)
    dash = Dashboard(llm)
    seen = [Counter()]           # preemptions per request after each step (frame 0: none)

    def on_step(out):
        dash.on_step(out)
        seen.append(seen[-1] + Counter(rid for rid, _mode in out.preempted))
    llm.generate(PROMPTS, SamplingParams(max_tokens=30, temperature=0, ignore_eos=True),
                 use_tqdm=False, on_step=on_step)
    assert len(dash.recorder) == len(seen)
    assert max(seen[-1].values()) > 1, "no request was preempted twice: the case is not made"
    return dash, seen


@pytest.mark.parametrize("language", LANGUAGES)
def test_every_frame_says_preemptions_and_requests_truthfully(run, language):
    dash, seen = run
    none, some = SAID[language]
    with speaking(language):
        for i, counts in enumerate(seen):
            text = dash.timeline.summary(i)
            if not counts:
                assert none.search(text) and none.search(text)[1] == "0", text
                continue
            said = some.search(text)
            assert said, text
            assert (int(said[1]), int(said[2])) == (counts.total(), len(counts)), text
