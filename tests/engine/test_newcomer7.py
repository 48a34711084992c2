"""Issue #26, the seventh newcomer's findings that needed engine code, each
pinned beside what vLLM 0.32 does (run on the tiny model's weights)."""

import warnings

import pytest

from pagedkit import LLM, BeamSearchParams, KVCacheTooSmallWarning, LLMEngine, SamplingParams

HI = {"role": "user", "content": "hi"}
#: vLLM 0.32's LLM.chat([HI]) on the tiny model's weights (greedy, 4 tokens): its
#: prompt token ids and its output, run beside this change
VLLM_HI = ([0, 87, 85, 293, 28, 280, 75, 201, 67, 656, 302, 86, 991, 28], [287, 14, 289, 261])


@pytest.fixture(scope="module")
def llm():
    return LLM("tiny")


@pytest.mark.parametrize("messages", [[], ()], ids=repr)
def test_chat_of_no_conversations_is_no_outputs(llm, messages):
    """Finding 2: chat([]) raised 'messages must be a conversation ...';
    vLLM returns [], as generate([]) does in both."""
    assert llm.chat(messages, SamplingParams(max_tokens=4), use_tqdm=False) == []
    assert llm.get_num_unfinished_requests() == 0


@pytest.mark.parametrize("messages", [[[]], [[], []], [[], [HI]], [[HI], []], ([],)], ids=repr)
def test_an_empty_conversation_is_refused_as_vllm_refuses_it(llm, messages):
    """vLLM 0.32 refuses each of these with this message (a ValueError)."""
    with pytest.raises(ValueError, match="Cannot apply chat template to an empty conversation"):
        llm.chat(messages, SamplingParams(max_tokens=4), use_tqdm=False)
    assert llm.get_num_unfinished_requests() == 0


@pytest.mark.parametrize("messages", [[HI], [[HI]], ([HI],)], ids=repr)
def test_a_conversation_beside_the_empty_cases_is_vllms(llm, messages):
    [out] = llm.chat(messages, SamplingParams(max_tokens=4, temperature=0), use_tqdm=False)
    assert (list(out.prompt_token_ids), list(out.outputs[0].token_ids)) == VLLM_HI


# ---- finding 6: one KVCacheTooSmallWarning per call, listing the requests it cut short
STORY = "Once upon a time"  # 5 tokens: 27 more fill the 32-token cache below
CUT = SamplingParams(temperature=0, max_tokens=30)  # cut at max_model_len 32
WHOLE = SamplingParams(temperature=0, max_tokens=2)  # served whole


def generate_warned(prompts, params, **engine):
    llm = LLM("tiny", **{"num_blocks": 8, "block_size": 4, **engine})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        llm.generate(prompts, params, use_tqdm=False)
        said = [str(w.message) for w in caught if w.category is KVCacheTooSmallWarning]
        llm.generate([STORY], WHOLE, use_tqdm=False)  # a call that cuts nothing says nothing
        again = [w for w in caught if w.category is KVCacheTooSmallWarning]
    assert len(again) == len(said)
    return said


LOWERED = ("ended with finish_reason='length' after 27 generated tokens (max_tokens=30) at "
           "max_model_len=32, which the KV cache set")


#: (how many prompts, which are cut: the others are served whole, how the warning names them)
BATCHES = [
    (1, [0], "generate()"),
    (2, [0, 1], "prompts[0], prompts[1]"),
    (3, [0, 1, 2], "prompts[0] to prompts[2]"),
    (5, [0, 1, 2, 3, 4], "prompts[0] to prompts[4]"),
    (3, [0, 2], "prompts[0], prompts[2]"),
    (4, [1], "prompts[1]"),
    (6, [0, 1, 3, 4, 5], "prompts[0], prompts[1], prompts[3] to prompts[5]"),
    (100, list(range(100)), "prompts[0] to prompts[99]"),
]


@pytest.mark.parametrize("size, cut, named", BATCHES, ids=[b[2] for b in BATCHES])
def test_a_generate_call_warns_once_naming_every_prompt_cut_short(size, cut, named):
    """Finding 6: three prompts cut short by the cache gave three warnings,
    alike but for prompts[i] (a batch of 100: 100); docs/api.md said once.
    Now one per call, the prompts said alike named together in order."""
    params = [CUT if i in cut else WHOLE for i in range(size)]
    said = generate_warned([STORY] * size, params)
    assert len(said) == 1, said
    assert said[0].startswith(f"{named}: {LOWERED}"), said[0]
    assert "\n" not in said[0]


def test_requests_said_differently_share_the_one_warning_a_line_each():
    """A shorter prompt reaches more tokens: its own line, under a header."""
    said = generate_warned([STORY, "Tom", STORY], CUT)
    assert len(said) == 1, said
    lines = said[0].split("\n")
    assert lines[0] == "3 requests of this call were cut short by the KV cache:"
    assert lines[1].startswith(f"prompts[0], prompts[2]: {LOWERED}")
    assert lines[2].startswith("prompts[1]: ended with finish_reason='length' after ")
    assert len(lines) == 3


def test_samples_outgrowing_the_cache_and_a_lowered_length_share_the_one_warning():
    said = generate_warned([STORY, STORY],
                           [SamplingParams(n=3, temperature=1.0, seed=0, max_tokens=30), CUT])
    assert len(said) == 1, said
    lines = said[0].split("\n")
    assert lines[0] == "2 requests of this call were cut short by the KV cache:"
    assert lines[1].startswith("prompts[0]: the n=3 samples outgrew the whole KV cache")
    assert lines[2].startswith(f"prompts[1]: {LOWERED}")


def test_a_beam_search_call_warns_once():
    llm = LLM("tiny", num_blocks=8, block_size=4)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        llm.beam_search([STORY] * 3, BeamSearchParams(beam_width=1, max_tokens=30))
    said = [str(w.message) for w in caught if w.category is KVCacheTooSmallWarning]
    assert len(said) == 1 and said[0].startswith("prompts[0] to prompts[2]: the beams "), said


def test_the_engines_step_still_warns_once_per_request():
    """LLMEngine.step has no call to gather them in: one per request, as
    docs/api.md says."""
    engine = LLMEngine("tiny", num_blocks=8, block_size=4)
    for request_id in "ab":
        engine.add_request(request_id, STORY, CUT)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        while engine.has_unfinished_requests():
            engine.step()
    said = sorted(str(w.message) for w in caught if w.category is KVCacheTooSmallWarning)
    assert [m.split(": ", 1)[0] for m in said] == ["request 'a'", "request 'b'"]


# ---- finding 1: seeded sampling is reproducible within pagedkit, not vLLM's tokens
STORIES = ["Once upon a time", "The little robot looked at the sky and", "Tom"]
SEEDED = SamplingParams(temperature=0.8, seed=42, max_tokens=12)
#: "Once upon a time" with SEEDED, on the tiny model's weights (block_size=32, float32,
#: max_model_len=512): pagedkit's tokens, and vLLM 0.32's CPU build's (the seventh
#: newcomer's run, /work/nc7-scratch/cmp.py)
PAGEDKIT_SEEDED = [14, 431, 297, 261, 957, 955, 428, 532, 16, 331, 314, 312]
VLLM_SEEDED = [14, 431, 297, 261, 358, 941, 428, 515, 16, 331, 314, 312]


def test_seeded_tokens_are_pagedkits_own_in_any_batch_and_not_vllms():
    llm = LLM("tiny", block_size=32, dtype="float32", max_model_len=512, num_blocks=256)
    batched = llm.generate(STORIES, SEEDED, use_tqdm=False)[0].outputs[0].token_ids
    alone = llm.generate(STORIES[0], SEEDED, use_tqdm=False)[0].outputs[0].token_ids
    assert list(batched) == list(alone) == PAGEDKIT_SEEDED
    assert PAGEDKIT_SEEDED != VLLM_SEEDED


def test_the_docs_say_seeded_sampling_is_not_vllms():
    """Finding 1: docs/api.md's "Compared with vLLM" did not say so, and its
    table's one sampled case (top_k=1) is deterministic."""
    from pathlib import Path

    docs = (Path(__file__).parents[2] / "docs" / "api.md").read_text(encoding="utf-8")
    differences = docs.split("Where pagedkit differs on purpose, or has not caught up:")[1]
    bullet = differences.split("\n* ")[1]
    assert bullet.startswith("Seeded sampling (`SamplingParams(seed=...)`, `temperature > 0`) is\n"
                             "  reproducible within pagedkit, not vLLM's tokens.")
    assert "clever fox named\n  Zoe" in bullet and "little bee named Lily" in bullet
