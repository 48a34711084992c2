"""Newcomer 32's findings on the vLLM-shaped API (issue #26)."""

import warnings

import pytest

from pagedkit import LLMEngine, SamplingParams

PARAMS = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)


def engine_with(*request_ids, n=1):
    engine = LLMEngine("tiny", block_size=4, num_blocks=64)
    for rid in request_ids:
        engine.add_request(rid, "Once upon a time", SamplingParams(
            temperature=0 if n == 1 else 1.0, top_k=1, n=n, max_tokens=8, ignore_eos=True))
    engine.step()
    return engine


@pytest.mark.parametrize("n", [1, 2])
def test_a_string_id_of_several_characters_aborts_and_warns_that_vllm_would_not(n):
    """vLLM 0.32's abort_request(request_ids: list[str]) reads "story" as the
    ids 's', 't', ... and aborts nothing (run there: the request ran on to
    "length"). pagedkit aborts it and says so, naming the line to write."""
    engine = engine_with("story", "mouse", n=n)
    with pytest.warns(UserWarning) as caught:
        assert engine.abort_request("story")
    message = str(caught[0].message)
    assert "abort_request(['story'])" in message and "aborts nothing" in message
    assert caught[0].filename == __file__  # the user's line, not pagedkit's
    finished = {out.request_id: out for out in engine.step().finished}
    assert [c.finish_reason for c in finished["story"].outputs] == ["abort"] * n
    assert engine.get_num_unfinished_requests() == n  # "mouse"'s samples, as vLLM counts


@pytest.mark.parametrize("ids", [["story"], ("story",), "s"])
def test_a_list_or_a_one_character_id_aborts_without_a_warning(ids):
    """A list is vLLM's form; one character is one id on both systems."""
    engine = engine_with("story" if ids != "s" else "s")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert engine.abort_request(ids)
    assert not engine.has_unfinished_requests()


def test_an_unknown_id_in_a_list_is_false_and_changes_nothing():
    engine = engine_with("story")
    before = engine.memory_stats()
    assert engine.abort_request(["nope"]) is False
    assert engine.memory_stats() == before and engine.has_unfinished_requests()


def test_prompt_type_is_vllms_name_for_one_prompt():
    from pagedkit import PromptType, TextPrompt, TokensPrompt
    from pagedkit.inputs import PromptType as at_vllms_path

    assert PromptType is at_vllms_path
    assert set(PromptType.__args__) == {str, TextPrompt, TokensPrompt}


@pytest.mark.parametrize("cls, kwargs, closest", [
    ("SamplingParams", {"temprature": 0.5}, "temperature"),
    ("SamplingParams", {"max_token": 3}, "max_tokens"),
    ("SamplingParams", {"stop_token_id": [2]}, "stop_token_ids"),
    ("SamplingParams", {"logprob": 1}, "logprobs"),
    ("SamplingParams", {"presense_penalty": 0.0}, "presence_penalty"),
    ("BeamSearchParams", {"beam_width": 2, "max_tokens": 3, "lenght_penalty": 1.0},
     "length_penalty"),
])
def test_a_misspelt_option_is_refused_with_the_closest_name(cls, kwargs, closest):
    """Newcomer 32: SamplingParams(temprature=...) was Python's bare TypeError,
    where LLM and EngineArgs name the closest argument."""
    import pagedkit

    typo = next(k for k in kwargs if k not in ("beam_width", "max_tokens"))
    with pytest.raises(TypeError) as info:
        getattr(pagedkit, cls)(**kwargs)
    assert str(info.value) == (f"{cls} got an unexpected keyword argument {typo!r} "
                               f"(did you mean {closest!r}?)")


def test_an_option_like_none_is_refused_without_a_guess():
    with pytest.raises(TypeError, match=r"^SamplingParams got an unexpected keyword argument "
                                        r"'zzzqqq'$"):
        SamplingParams(zzzqqq=1)
