"""The fifth newcomer's findings (N3, N12, N13): SamplingParams takes numpy
and other real scalars as the Python numbers they are, refuses a wrong type
with a TypeError naming it, and never lets torch's bare message through."""

import re

import numpy as np
import pytest
import torch

from pagedkit import LLM, SamplingParams
from pagedkit._validation import EMPTY_TAKEN, VLLM_PROMPT_KEYS

FLOATS = {"temperature": 0.5, "top_p": 0.9, "length_penalty": 0.5, "presence_penalty": 0.5,
          "frequency_penalty": -0.5, "repetition_penalty": 1.5, "min_p": 0.1}


@pytest.mark.parametrize("kind", [np.float32, np.float16, np.int64, np.float64])
@pytest.mark.parametrize("name", FLOATS)
def test_a_numpy_real_is_taken_as_the_python_number(name, kind):
    value = kind(FLOATS[name]) if kind is not np.int64 else kind(1)
    params = SamplingParams(**{name: value})
    stored = getattr(params, name)
    assert type(stored) in (int, float, np.float64, np.int64) and stored == float(value)


@pytest.mark.parametrize("value", ["0", "0.5", True, torch.tensor(0.5), None, [0.5]])
@pytest.mark.parametrize("name", FLOATS)
def test_a_float_option_of_another_type_is_a_type_error_naming_it(name, value):
    with pytest.raises(TypeError, match=rf"^{name} must be a number, got .*"
                                        rf"\({type(value).__name__}\)$"):
        SamplingParams(**{name: value})


@pytest.mark.parametrize("seed", [np.int64(3), np.int32(3), np.uint8(3), 3])
def test_a_numpy_seed_generates_as_the_int_seed(seed):
    params = SamplingParams(max_tokens=3, temperature=1.0, seed=seed)
    assert type(params.seed) is int
    llm = LLM("tiny", num_blocks=8, block_size=4)
    [out] = llm.generate("Once", params, use_tqdm=False)
    [same] = llm.generate("Once", SamplingParams(max_tokens=3, temperature=1.0, seed=3),
                          use_tqdm=False)
    assert out.outputs[0].token_ids == same.outputs[0].token_ids


@pytest.mark.parametrize("temperature, default", [(1.0, True), (1, True), (0.7, False)])
def test_beam_searchs_temperature_error_says_when_it_is_the_default(temperature, default):
    kwargs = {} if temperature == 1.0 and type(temperature) is float else {
        "temperature": temperature}
    with pytest.raises(ValueError, match="deterministic: use temperature=0, got") as e:
        SamplingParams(n=2, use_beam_search=True, max_tokens=3, **kwargs)
    assert ("(SamplingParams' default temperature is 1.0)" in str(e.value)) == default


@pytest.mark.parametrize("per_block", [4096, 65536, 12345, 2**22])
@pytest.mark.parametrize("room", [1, 2, 7, 59, 60, 100, 999, 1000, 326325, 10**7])
def test_swap_space_advice_is_short_and_fits(per_block, room):
    from pagedkit.engine.llm_engine import _gib_advice
    down = _gib_advice(room * per_block, per_block)
    held = int(down * 2**30) // per_block
    assert max(1, 0.99 * room) <= held <= room  # never more than fits, at most 1% fewer
    if room >= 1000:  # 326325 blocks of 64 KiB: 19.9, not 19.91729736328125
        assert down == float(f"{down:.3g}"), down
    up = _gib_advice(per_block, per_block, up=True)  # one block, "or more"
    assert int(up * 2**30) // per_block >= 1 and up == float(f"{up:.3g}")


def test_swap_space_advice_in_the_message_is_rounded():
    with pytest.raises(ValueError) as refused:
        LLM("tiny", preemption_mode="swap", swap_space=10**6)
    advice = float(str(refused.value).split("give swap_space=")[1].split()[0])
    assert advice == float(f"{advice:.3g}")


@pytest.mark.parametrize("name", ["logprobs", "prompt_logprobs"])
@pytest.mark.parametrize("asked", [1025, 10**6])
def test_logprobs_past_the_vocabulary_name_both_limits_and_each_advice_serves(name, asked):
    llm = LLM("tiny", num_blocks=8, block_size=4)
    with pytest.raises(ValueError) as refused:
        llm.generate("Once", SamplingParams(max_tokens=1, **{name: asked}), use_tqdm=False)
    message = str(refused.value)
    assert ("use at most 20 (max_logprobs=20, an engine argument), or build the engine with "
            "LLM(..., max_logprobs=-1) to ask for up to 1024 or -1 (all of them)") in message
    assert llm.generate("Once", SamplingParams(max_tokens=1, **{name: 20}), use_tqdm=False)
    roomy = LLM("tiny", num_blocks=8, block_size=4, max_logprobs=-1)
    for value in (1024, -1):
        assert roomy.generate("Once", SamplingParams(max_tokens=1, **{name: value}),
                              use_tqdm=False)


@pytest.mark.parametrize("asked", [2049, 4096, 100000])
def test_max_model_len_past_the_models_limit_names_it_as_the_models(asked):
    with pytest.raises(ValueError, match=rf"^max_model_len={asked} is longer than the model's "
                       r"limit of 2048 positions \(max_position_embeddings in its config\); "
                       r"give max_model_len=2048 or less, or leave it unset$"):
        LLM("tiny", max_model_len=asked)
    assert LLM("tiny", max_model_len=2048, num_blocks=128).llm_engine.max_model_len == 2048


@pytest.mark.parametrize("num_blocks, n, advice", [
    (4, 2, "lower n to 1, or give the engine num_blocks=5"),
    (5, 3, "lower n to 2 or less, or give the engine num_blocks=6"),
    (6, 9, "lower n to 3 or less, or give the engine num_blocks=12")])
def test_n_past_the_cache_is_lowered_to_a_value_n_can_take(num_blocks, n, advice):
    llm = LLM("tiny", num_blocks=num_blocks, block_size=4)
    with pytest.raises(ValueError, match=re.escape(advice)):
        llm.generate({"prompt_token_ids": [5] * 12}, SamplingParams(n=n, max_tokens=2),
                     use_tqdm=False)


@pytest.mark.parametrize("key, value", [
    ("multi_modal_data", {"image": 1}), ("multi_modal_uuids", {"image": ["a"]}),
    ("mm_processor_kwargs", {"size": 1}), ("prompt_embeds", [[0.0]]),
    ("token_type_ids", [0, 0]), ("prompt_embeds", []), ("token_type_ids", [])])
@pytest.mark.parametrize("base", [{"prompt": "Once"}, {"prompt_token_ids": [0, 611]}])
def test_vllms_prompt_keys_are_named_as_vllms(key, value, base):
    llm = LLM("tiny", num_blocks=8, block_size=4)
    with pytest.raises(TypeError, match=rf"the key '{key}' is vLLM's, not pagedkit's \("):
        llm.generate({**base, key: value}, SamplingParams(max_tokens=2), use_tqdm=False)
    assert not llm.llm_engine.has_unfinished_requests()


@pytest.mark.parametrize("key, nothing", [
    *[(key, None) for key in sorted(VLLM_PROMPT_KEYS)],
    *[(key, empty) for key in EMPTY_TAKEN for empty in ({}, [], ())]])
@pytest.mark.parametrize("base", [{"prompt": "Once"}, {"prompt_token_ids": [0, 611]}])
def test_vllms_prompt_keys_holding_nothing_change_nothing(key, nothing, base):
    """Newcomer 49: vLLM serves a text prompt with ``multi_modal_data={}``; so does
    pagedkit (an empty ``prompt_embeds`` is still refused: vLLM reads the key itself)."""
    llm = LLM("tiny", num_blocks=8, block_size=4)
    [out] = llm.generate({**base, key: nothing}, SamplingParams(max_tokens=2, temperature=0),
                         use_tqdm=False)
    [same] = llm.generate(base, SamplingParams(max_tokens=2, temperature=0), use_tqdm=False)
    assert out.outputs[0].token_ids == same.outputs[0].token_ids


@pytest.mark.parametrize("kwargs", [
    {"block_size": 10**6}, {"block_size": 65537}, {"block_size": 5000, "kv_cache_memory": 10**7},
    {"block_size": 16, "kv_cache_memory": 100}, {"block_size": 2, "kv_cache_memory": 8191}])
def test_a_block_larger_than_the_budget_names_block_size_the_budget_and_each_advice_serves(
        kwargs):
    per_token = 4096  # the tiny model's K and V bytes a token (float32)
    block_size = kwargs["block_size"]
    memory = kwargs.get("kv_cache_memory")
    with pytest.raises(ValueError) as refused:
        LLM("tiny", **kwargs)
    message = str(refused.value)
    if block_size > 2048:  # longer than any sequence: that is the cause named (issue #26 N1)
        assert message.startswith(f"block_size={block_size} is longer than any sequence: "
                                  "max_model_len is 2048")
        assert message.endswith("give block_size=16 (pagedkit's default; vLLM's CPU build "
                                "picks 128) or another up to 2048")
        return
    budget = (f"kv_cache_memory={memory} bytes" if memory else
              "the default KV cache budget of 256 MiB (268435456 bytes; kv_cache_memory unset")
    assert message.startswith(f"block_size={block_size} makes a KV block of "
                              f"{block_size * per_token} bytes, more than {budget}")
    assert "None" not in message
    largest = re.search(r"give block_size=(\d+) or less", message)
    assert bool(largest) == ((memory or 2**28) >= per_token)
    if largest:  # the largest block_size that fits, and one more does not
        assert int(largest[1]) == (memory or 2**28) // per_token
        if memory:  # (the default 256 MiB is the same arithmetic, not allocated here)
            LLM("tiny", **{**kwargs, "block_size": int(largest[1])})
    one = int(re.search(r"kv_cache_memory=(\d+) or more \(one block\)", message)[1])
    if one <= 2**25:  # a 4 GB block is the advice's arithmetic, not a test's allocation
        llm = LLM("tiny", **{**kwargs, "kv_cache_memory": one})
        assert llm.llm_engine.kv.allocator.num_blocks == 1


@pytest.mark.parametrize("count, said", [
    (1, "its 1 unfinished request was aborted and its KV blocks freed"),
    (2, "its 2 unfinished requests were aborted and their KV blocks freed")])
def test_a_failed_generate_counts_its_aborted_requests_in_good_english(count, said):
    def fail(step):
        raise RuntimeError("injected")

    llm = LLM("tiny", num_blocks=16, block_size=4)
    with pytest.raises(RuntimeError, match="injected") as info:
        llm.generate(["Once"] * count, SamplingParams(max_tokens=5), use_tqdm=False,
                     on_step=fail)
    assert any(said in note for note in info.value.__notes__), info.value.__notes__


@pytest.mark.parametrize("value, error", [(-2, ValueError), (-100, ValueError),
                                          ("20", TypeError), (2.0, TypeError), (True, TypeError)])
def test_max_logprobs_out_of_range_is_a_value_error_a_wrong_type_a_type_error(value, error):
    with pytest.raises(error, match=r"max_logprobs must be an integer >= 0 \(or -1: no limit\), "
                                    rf"got {re.escape(repr(value))}"):
        LLM("tiny", num_blocks=4, max_logprobs=value)


@pytest.mark.parametrize("rid, error", [(None, TypeError), ("", ValueError), (True, TypeError),
                                        (1.5, TypeError), (b"x", TypeError), (["a"], TypeError)])
def test_a_request_id_that_hides_a_bug_is_refused_and_nothing_is_queued(rid, error):
    llm = LLM("tiny", num_blocks=8, block_size=4)
    engine = llm.llm_engine
    with pytest.raises(error, match=r"request_id must be a (non-empty )?string, got "):
        engine.add_request(rid, "Once", SamplingParams(max_tokens=2))
    assert not engine.has_unfinished_requests()


@pytest.mark.parametrize("rid", [5, np.int64(7)])
def test_an_int_request_id_is_refused_as_vllm_032_refuses_it(rid):
    """Once taken as its digits; vLLM 0.32 refuses any id but a str
    (newcomer42 finding 4, tests/engine/test_vllm_parity42.py), so pagedkit does too."""
    engine = LLM("tiny", num_blocks=8, block_size=4).llm_engine
    with pytest.raises(TypeError, match=re.escape(f"request_id must be a string, got {rid!r} (")):
        engine.add_request(rid, "Once", SamplingParams(max_tokens=2))
    assert not engine.has_unfinished_requests()
    engine.add_request(str(rid), "Once", SamplingParams(max_tokens=2))
    done = []
    while engine.has_unfinished_requests():
        done += engine.step().finished
    assert [o.request_id for o in done] == [str(rid)]
