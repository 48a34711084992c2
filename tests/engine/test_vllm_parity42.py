"""newcomer42's findings (a vLLM user on pagedkit's offline API), each beside
vLLM 0.32's own behaviour. vLLM's results here are data, recorded by running
vLLM 0.32's CPU build on the tiny model (src/pagedkit/models/tiny) with

    VLLM_ENABLE_V1_MULTIPROCESSING=0 VLLM_CPU_KVCACHE_SPACE=1 /work/venv-vllm/bin/python
    >>> llm = vllm.LLM(model=TINY, dtype="float32", block_size=32, max_model_len=512,
    ...                kv_cache_memory_bytes=64 * 2**20, seed=0, enforce_eager=True)

and the calls named at each test; tests/vllm/test_parity42.py runs the same
calls on both systems live. The refusals pagedkit shares with vLLM are rows of
tests/test_bad_input.py's table.
"""

from __future__ import annotations

import pytest

from pagedkit import LLM, BeamSearchParams, SamplingParams
from pagedkit.engine import llm_engine
from pagedkit.engine.llm import TEXT_PARTS
from pagedkit.engine.outputs import StepOutput
from pagedkit.vllm_names import VLLM_ONLY_ATTRIBUTES


@pytest.fixture(scope="module")
def llm():
    return LLM("tiny", block_size=32, num_blocks=64)


def prompt_of(llm, content, role="user", n=1):
    params = SamplingParams(temperature=0 if n == 1 else 1.0, n=n, max_tokens=2, seed=0)
    [out] = llm.chat([{"role": role, "content": content}], params, use_tqdm=False)
    assert len(out.outputs) == n
    return out.prompt


# ------------------------------------------ finding 1: chat content parts
#: vLLM 0.32's llm.chat([{"role": "user", "content": content}]) prompts (its
#: "string" content format, which it detects for the tiny model's template)
TEXT_PART_CASES = [  # (id, content, role, vLLM's prompt)
    *[(f"{kind} part", [{"type": kind, key: "A"}, {"type": "text", "text": "B"}], "user",
       "<|bos|>user: A\nB\nassistant:") for kind, key in TEXT_PARTS.items()],
    ("bare strings", ["A", "B"], "user", "<|bos|>user: A\nB\nassistant:"),
    ("a string and an input_text part", ["A", {"type": "input_text", "text": "B"}], "user",
     "<|bos|>user: A\nB\nassistant:"),
    ("an empty string part is dropped", ["A", "", "B"], "user",
     "<|bos|>user: A\nB\nassistant:"),
    ("an empty text part is dropped", [{"type": "text", "text": ""}, "B"], "user",
     "<|bos|>user: B\nassistant:"),
    ("no parts", [], "user", "<|bos|>user: \nassistant:"),
    ("a tuple of parts", ("A", "B"), "user", "<|bos|>user: A\nB\nassistant:"),
    ("an assistant's refusal", [{"type": "refusal", "refusal": "no"}], "assistant",
     "<|bos|>assistant: no\nassistant:"),
    ("a tool's input_text", [{"type": "input_text", "text": "X"}], "tool",
     "<|bos|>tool: X\nassistant:"),
    ("a system message of strings", ["S1", "S2"], "system",
     "<|bos|>system: S1\nS2\nassistant:"),
]


@pytest.mark.parametrize("n", [1, 2])
@pytest.mark.parametrize("content, role, expected", [pytest.param(*c[1:], id=c[0])
                                                     for c in TEXT_PART_CASES])
def test_chat_renders_vllms_text_parts_as_vllm_does(llm, content, role, expected, n):
    assert prompt_of(llm, content, role, n) == expected


def test_the_text_part_types_are_vllms():
    # vllm/renderers/chat_utils.py: TEXT_PART_TYPES, and MM_PARSER_MAP's keys for each
    assert TEXT_PARTS == {"text": "text", "input_text": "text", "output_text": "text",
                          "refusal": "refusal", "thinking": "thinking"}


# --------------------------------------------- finding 2: step() is a list
def steps(engine):
    out = []
    while engine.has_unfinished_requests():
        out.append(engine.step())
    return out


@pytest.mark.parametrize("n", [1, 2])
def test_step_is_a_list_as_vllms(llm, n):
    """vLLM 0.32: ``type(engine.step())`` is list, an idle step is ``[]``,
    and with n=2 each step holds one output per completion: ('r', [0]),
    ('r', [1]), the last finished."""
    engine = llm.llm_engine
    engine.add_request("r", "Once upon", SamplingParams(n=n, max_tokens=2, temperature=0.8,
                                                        seed=1))
    first, second = steps(engine)
    assert isinstance(first, list) and isinstance(first, StepOutput)
    shape = [[(o.request_id, [c.index for c in o.outputs], o.finished) for o in s]
             for s in (first, second)]
    if n == 1:
        assert shape == [[("r", [0], False)], [("r", [0], True)]]
    else:  # vLLM's recorded shape
        assert shape == [[("r", [0], False), ("r", [1], False)],
                         [("r", [0], False), ("r", [1], True)]]
    both = first + second
    assert type(both) is list and both == [*first, *second] and len(both) == 2 * n
    assert [] + first == list(first) and first + [] == list(first)  # noqa: RUF005
    assert first == list(first) and list(first) == first and first != []
    idle = engine.step()
    assert idle == [] and [] == idle and not idle and isinstance(idle, list)  # noqa: SIM300
    assert first.outputs == list(first) and len(first) == n and first[0] is first.outputs[0]
    assert repr(idle).startswith("StepOutput(step=")  # pagedkit's own view, as before


def test_a_step_holds_its_outputs_when_it_returns(llm):
    """Built by the step (tests/engine/test_step_output_plain.py has the rest)."""
    engine = llm.llm_engine
    engine.add_request("once", "Once upon", SamplingParams(max_tokens=1))
    step = engine.step()
    assert [o.request_id for o in list.__iter__(step)] == ["once"] and len(step) == 1
    copied = step.copy()
    step.append(5)
    assert copied == list(step)[:1] and len(step) == 2


# ------------------------------------------ finding 3: vLLM's names pagedkit lacks
#: public names on vLLM 0.32's objects (sorted(dir(obj)), no leading "_")
VLLM_NAMES = {
    "LLM": ["apply_model", "beam_search", "chat", "chat_template", "chat_template_config",
            "classify", "collective_rpc", "default_sampling_params", "embed", "encode",
            "engine_class", "enqueue", "enqueue_chat", "finish_weight_update",
            "from_engine_args", "generate", "get_default_sampling_params", "get_metrics",
            "get_tokenizer", "get_weight_version", "get_world_size",
            "init_weight_transfer_engine", "input_processor", "llm_engine", "model_config",
            "pooling_io_processors", "pooling_task", "release_kv_cache_memory", "renderer",
            "request_counter", "reset_mm_cache", "reset_prefix_cache", "runner_type", "score",
            "shutdown_weight_transfer_engine", "sleep", "start_draft_weight_update",
            "start_profile", "start_weight_update", "stop_profile", "supported_tasks",
            "update_weight_version", "update_weights", "wait_for_completion", "wake_up"],
    "LLMEngine": ["abort_request", "add_lora", "add_request", "apply_model", "collective_rpc",
                  "do_log_stats", "do_log_stats_with_interval", "dp_group", "engine_core",
                  "external_launcher_dp", "from_engine_args", "from_vllm_config",
                  "get_metrics", "get_num_unfinished_requests", "get_supported_tasks",
                  "get_tokenizer", "get_weight_version", "has_unfinished_requests",
                  "has_unfinished_requests_dp", "input_processor", "is_sleeping",
                  "list_loras", "log_stats", "logger_manager", "model_config",
                  "model_executor", "observability_config", "output_processor", "pin_lora",
                  "release_kv_cache_memory", "remove_lora", "renderer", "reset_encoder_cache",
                  "reset_mm_cache", "reset_prefix_cache", "set_weight_version",
                  "should_execute_dummy_batch", "sleep", "start_profile", "step",
                  "stop_profile", "tokenizer", "vllm_config", "wake_up"],
    "RequestOutput": ["add", "ec_transfer_params", "encoder_prompt", "encoder_prompt_token_ids",
                      "finished", "kv_transfer_params", "lora_request", "metrics",
                      "num_cache_creation_tokens", "num_cached_tokens", "outputs", "prompt",
                      "prompt_logprobs", "prompt_token_id_logprobs", "prompt_token_ids",
                      "request_id"],
    "CompletionOutput": ["cumulative_logprob", "finish_reason", "finished", "index", "logprobs",
                         "lora_request", "routed_experts", "sampling_mask",
                         "spec_decode_metrics", "stop_reason", "text", "token_ids",
                         "weight_versions"],
    "SamplingParams": [
        "all_stop_token_ids", "allowed_token_ids", "bad_words", "bad_words_token_ids", "clone",
        "detokenize", "eos_token_id", "extra_args", "flat_logprobs", "for_sampler_warmup",
        "frequency_penalty", "from_optional", "ignore_eos", "include_stop_str_in_output",
        "logit_bias", "logprob_token_ids", "logprobs", "max_tokens", "min_p", "min_tokens", "n",
        "num_logprobs", "output_kind", "output_text_buffer_length", "presence_penalty",
        "prompt_logprob_start", "prompt_logprob_token_ids", "prompt_logprobs",
        "repetition_detection", "repetition_penalty", "routed_experts_prompt_start",
        "sampling_type", "seed", "skip_clone", "skip_reading_prefix_cache",
        "skip_special_tokens", "spaces_between_special_tokens", "stop", "stop_token_ids",
        "stream_interval", "structured_outputs", "temperature", "thinking_token_budget", "top_k",
        "top_p", "trace_decode_token_ids", "update_from_generation_config",
        "update_from_tokenizer", "verify", "watermarking"],
}


def objects(llm):
    [out] = llm.generate(["Once"], SamplingParams(max_tokens=2), use_tqdm=False)
    return {"LLM": llm, "LLMEngine": llm.llm_engine, "RequestOutput": out,
            "CompletionOutput": out.outputs[0], "SamplingParams": SamplingParams()}


@pytest.mark.parametrize("kind", list(VLLM_NAMES))
def test_every_vllm_name_is_pagedkits_or_says_it_is_not(llm, kind):
    target = objects(llm)[kind]
    for name in VLLM_NAMES[kind]:
        listed = name in VLLM_ONLY_ATTRIBUTES[kind]
        try:
            getattr(target, name)
        except AttributeError as error:
            assert listed, f"vLLM's {kind}.{name}: a bare AttributeError ({error})"
            assert str(error).startswith(f"pagedkit's {kind} has no {name} (vLLM 0.32's); ")
            assert "docs/api.md" in str(error) and error.name == name
        else:
            assert not listed, f"{kind}.{name} is listed as vLLM's only, yet pagedkit has it"
    assert set(VLLM_ONLY_ATTRIBUTES[kind]) <= set(VLLM_NAMES[kind])


@pytest.mark.parametrize("kind", list(VLLM_NAMES))
def test_a_typo_of_pagedkits_own_name_gets_pythons_message(llm, kind):
    target = objects(llm)[kind]
    for typo in ("request_idd", "max_token", "outptus", "get_tokeniser"):
        with pytest.raises(AttributeError, match=f"^'{kind}' object has no attribute "):
            getattr(target, typo)


# ------------------------------------- finding 4: BeamSearchParams(max_tokens=0)
@pytest.mark.parametrize("width", [1, 2])
def test_beam_search_of_no_tokens_is_the_prompt_as_in_vllm(llm, width):
    """vLLM 0.32: llm.beam_search(["Once upon"], BeamSearchParams(beam_width=w,
    max_tokens=0)) -> one beam, the prompt: tokens [0, 611, 610], text
    'Once upon', cum_logprob 0.0, finish_reason None (w = 1 and 2)."""
    [out] = llm.beam_search(["Once upon"], BeamSearchParams(beam_width=width, max_tokens=0))
    assert [(b.tokens, b.text, b.cum_logprob, b.finish_reason) for b in out.sequences] == [
        ([0, 611, 610], "Once upon", 0.0, None)]


@pytest.mark.parametrize("max_tokens", [-1, -5])
def test_a_negative_beam_max_tokens_is_refused(max_tokens):
    # vLLM 0.32 takes it and returns the prompt (as for 0): pagedkit refuses a nonsense count
    with pytest.raises(ValueError, match=f"max_tokens must be >= 0, got {max_tokens}"):
        BeamSearchParams(beam_width=2, max_tokens=max_tokens)


# ------------------------------------------- finding 5: a count of 1, singular
def test_messages_say_one_in_the_singular():
    small = LLM("tiny", block_size=2, num_blocks=1)
    with pytest.raises(ValueError, match="shorten the prompt to 1 token or fewer"):
        small.generate([[1, 2]], use_tqdm=False)
    with pytest.raises(ValueError, match="max_model_len is 2; shorten the prompt to 1 token or"):
        LLM("tiny", block_size=2, num_blocks=4, max_model_len=2).generate([[1, 2]],
                                                                         use_tqdm=False)
    with pytest.raises(ValueError, match="got 3 sampling params for 1 prompt: give one"):
        small.generate([[1]], [SamplingParams()] * 3, use_tqdm=False)
    engine = small.llm_engine
    assert "1 block x 2 tokens" in repr(engine) and "0 requests in flight" in repr(engine)
    engine.add_request("a", [1], SamplingParams(max_tokens=1))
    assert repr(engine).endswith(", 1 request in flight)")
    text = llm_engine.block_past_sequences(1, 2, "x")
    assert "1 tokens" not in text and "1 blocks" not in text


# ----------------------------------------- finding 8: the default block size
def test_the_block_size_advice_names_the_constant_and_vllms_cpu_default(monkeypatch):
    """vLLM 0.32's CPU build, given no block_size, picks 128 (its
    llm.llm_engine.vllm_config.cache_config.block_size, run on the tiny model)."""
    said = llm_engine.block_past_sequences(4096, 1024, "it does not fit")
    assert said.endswith("give block_size=16 (pagedkit's default; vLLM's CPU build picks 128) "
                         "or another up to 1024")
    monkeypatch.setattr(llm_engine, "DEFAULT_BLOCK_SIZE", 32)
    assert "give block_size=32 (pagedkit's default" in llm_engine.block_past_sequences(
        4096, 1024, "it does not fit")
    assert llm_engine.block_past_sequences(4096, 20, "x").endswith("give block_size=20 or less")


# ------------------------------------------------ finding 7: vLLM's reprs
#: vLLM 0.32: llm.generate(["Once upon a time"], SamplingParams(temperature=0,
#: max_tokens=4)), its RequestOutput's outputs[0]
VLLM_COMPLETION_REPR = (
    "CompletionOutput(index=0, text=', there was a', token_ids=[14, 431, 297, 261], "
    "routed_experts=None, sampling_mask=None, cumulative_logprob=None, logprobs=None, "
    "finish_reason=length, stop_reason=None)")
#: and the RequestOutput's (vLLM numbers its requests on from its earlier calls)
VLLM_REQUEST_REPR = (
    "RequestOutput(request_id=54, prompt='Once upon a time', prompt_token_ids=[0, 611, 610, "
    "261, 373], encoder_prompt=None, encoder_prompt_token_ids=None, prompt_logprobs=None, "
    "prompt_token_id_logprobs=None, outputs=[" + VLLM_COMPLETION_REPR + "], finished=True, "
    "metrics=None, lora_request=None, num_cached_tokens=0, num_cache_creation_tokens=0)")
#: vLLM's fields pagedkit has not (their values above)
VLLM_ONLY_FIELDS = ("routed_experts=None, sampling_mask=None, ", "encoder_prompt=None, ",
                    "encoder_prompt_token_ids=None, ", "prompt_token_id_logprobs=None, ",
                    "lora_request=None, ")


def test_reprs_read_as_vllms(llm):
    [out] = LLM("tiny", block_size=32, num_blocks=64).generate(
        ["Once upon a time"], SamplingParams(temperature=0, max_tokens=4), use_tqdm=False)
    expected = VLLM_COMPLETION_REPR
    for field in VLLM_ONLY_FIELDS:
        expected = expected.replace(field, "")
    assert repr(out.outputs[0]) == expected
    request = VLLM_REQUEST_REPR.replace("request_id=54", "request_id=0")
    for field in VLLM_ONLY_FIELDS:
        request = request.replace(field, "")
    head = request.split("metrics=None")[0]
    assert repr(out).startswith(head + "metrics=RequestMetrics(arrival_time=")
    # then vLLM's num_cached_tokens (its num_cache_creation_tokens, after it in vLLM's
    # repr, pagedkit has not), and pagedkit's own num_preemptions
    assert repr(out).endswith(", num_cached_tokens=0, num_preemptions=0)")


@pytest.mark.parametrize("n", [1, 2])
def test_reprs_with_logprobs_and_n_samples(llm, n):
    params = SamplingParams(n=n, temperature=0.8, seed=0, max_tokens=2, logprobs=1,
                            stop=["zzz"])
    [out] = llm.generate(["Once upon a time"], params, use_tqdm=False)
    assert repr(out).count("CompletionOutput(index=") == n
    for completion in out.outputs:
        ids = completion.token_ids
        said = repr(completion)
        assert said.startswith(f"CompletionOutput(index={completion.index}, "
                               f"text={completion.text!r}, token_ids={ids}, "
                               f"cumulative_logprob={completion.cumulative_logprob}, "
                               f"logprobs=[{{{ids[0]}: Logprob(logprob=")
        assert said.endswith("finish_reason=length, stop_reason=None)")
