"""The fourth newcomer's findings (a vLLM user's first hour): each a value
the user gave, served as vLLM serves it or refused naming it."""

from __future__ import annotations

import dataclasses
import re
import warnings

import numpy as np
import pytest

from pagedkit import LLM, BeamSearchParams, KVCacheTooSmallWarning, SamplingParams
from pagedkit.models import TINY_DIR

GREEDY = SamplingParams(temperature=0, max_tokens=4)
PROMPT = "Once upon a time"


@pytest.fixture(scope="module")
def reference():
    return LLM("tiny", num_blocks=16).generate(PROMPT, GREEDY, use_tqdm=False)[0]


@pytest.fixture(scope="module")
def saved_tiny(tmp_path_factory):
    """The tiny model saved as a local directory (vLLM's LLM(model=path, tokenizer=path))."""
    path = tmp_path_factory.mktemp("saved_tiny")
    llm = LLM("tiny", num_blocks=4)
    llm.llm_engine.runner.model.save_pretrained(path)
    llm.get_tokenizer().save_pretrained(path)
    return path


# F13: tokenizer= as a name or path (vLLM's form) is loaded, as vLLM loads it
@pytest.mark.parametrize("model, tokenizer", [
    ("tiny", "tiny"), ("tiny", "saved"), ("saved", "tiny"), ("saved", "saved"),
    ("tiny", "tiny_dir"), ("saved", None), ("tiny", "saved_path")])
def test_tokenizer_by_name_or_path(reference, saved_tiny, model, tokenizer):
    names = {"tiny": "tiny", "saved": str(saved_tiny), "tiny_dir": str(TINY_DIR),
             "saved_path": saved_tiny, None: None}
    llm = LLM(names[model], tokenizer=names[tokenizer], num_blocks=16)
    out = llm.generate(PROMPT, GREEDY, use_tqdm=False)[0]
    assert out.prompt_token_ids == reference.prompt_token_ids
    assert out.outputs[0].token_ids == reference.outputs[0].token_ids
    assert out.outputs[0].text == reference.outputs[0].text


@pytest.mark.parametrize("tokenizer, error, named", [
    (123, TypeError, "got 123 (int)"), (b"tiny", TypeError, "b'tiny'"),
    ("", ValueError, "tokenizer is empty"), ("  ", ValueError, "tokenizer is empty"),
    ("./no/such/dir", FileNotFoundError, "'./no/such/dir' does not exist"),
    ("/no/such/tokenizer", FileNotFoundError, "'/no/such/tokenizer' does not exist"),
    (object(), TypeError, "(object)")])
def test_a_tokenizer_that_is_not_one_is_refused_at_construction(tokenizer, error, named):
    with pytest.raises(error, match="tokenizer") as info:
        LLM("tiny", tokenizer=tokenizer, num_blocks=4)
    assert named in str(info.value)
    assert "tiny" in str(info.value)  # what to give instead


def test_a_directory_without_a_tokenizer_is_refused_naming_it(tmp_path):
    with pytest.raises(OSError, match=f"local directory {str(tmp_path)!r}"):
        LLM("tiny", tokenizer=str(tmp_path), num_blocks=4)


# F4: an empty model name is not the current directory
@pytest.mark.parametrize("model", ["", " ", "\t"])
def test_an_empty_model_is_refused(model):
    with pytest.raises(ValueError, match=r"model is empty .*model='tiny'"):
        LLM(model)


# F7: LLM.beam_search sends each beam as a prompt; past what the engine takes
# as a prompt, the beams end at 'length' (as generate ends a sequence at
# max_model_len), with a warning when the KV cache set the limit
BEAM_PROMPTS = ["Once upon a time there was a little girl named Lily who",  # 14 tokens
                "Tom and Lily", "The little dog ran to the park"]
BEAM_MAX_TOKENS = 10


@pytest.fixture(scope="module")
def beams_whole():
    """Each prompt's beams from a cache that holds them, for every max_tokens."""
    llm = LLM("tiny", num_blocks=64, block_size=4)
    lengths = [len(llm.get_tokenizer()(p)["input_ids"]) for p in BEAM_PROMPTS]
    cache = {}

    def get(width, max_tokens):
        if (width, max_tokens) not in cache:
            cache[width, max_tokens] = llm.beam_search(
                BEAM_PROMPTS, BeamSearchParams(beam_width=width, max_tokens=max_tokens))
        return cache[width, max_tokens]
    return lengths, get


def beam_search_warned(llm, params):
    """The outputs and, per prompt cut short, what the call's one warning
    (issue #26: one per call) says of it, as ``"prompts[i]: ..."``."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        outs = llm.beam_search(BEAM_PROMPTS, params)
    said = [str(w.message) for w in caught if w.category is KVCacheTooSmallWarning]
    assert len(said) <= 1, said
    return outs, [f"{name}: {text}" for message in said for name, text in per_prompt(message)]


def per_prompt(message):
    """A warning's lines as (prompt name, text): 'prompts[0], prompts[2]: x'
    and 'prompts[0] to prompts[2]: x' say x of each."""
    lines = message.split("\n")
    pairs = []
    for line in lines[1:] if len(lines) > 1 else lines:
        names, text = line.split(": ", 1)
        for part in names.split(", "):
            ends = re.findall(r"prompts\[(\d+)\]", part)
            first, last = int(ends[0]), int(ends[-1])
            pairs += [(f"prompts[{i}]", text) for i in range(first, last + 1)]
    return pairs


@pytest.mark.parametrize("width", [1, 2, 3])
@pytest.mark.parametrize("num_blocks, block_size", [(4, 4), (5, 4), (6, 4), (7, 4), (2, 8),
                                                    (3, 8), (4, 8), (1, 16), (2, 16)])
def test_beam_search_ends_its_beams_at_the_cache_and_says_so(beams_whole, width, num_blocks,
                                                             block_size):
    lengths, whole = beams_whole
    capacity = num_blocks * block_size
    llm = LLM("tiny", num_blocks=num_blocks, block_size=block_size)
    outs, said = beam_search_warned(llm, BeamSearchParams(beam_width=width,
                                                          max_tokens=BEAM_MAX_TOKENS))
    cut = []
    for i, (out, prompt_len) in enumerate(zip(outs, lengths, strict=True)):
        reached = min(BEAM_MAX_TOKENS, capacity - prompt_len)
        want = whole(width, reached)[i].sequences  # the same search, to where it could go
        assert [s.tokens for s in out.sequences] == [s.tokens for s in want]
        assert [s.cum_logprob for s in out.sequences] == pytest.approx(
            [s.cum_logprob for s in want], abs=1e-4)
        if reached < BEAM_MAX_TOKENS:
            cut.append(i)
            longest = [s for s in out.sequences if len(s.tokens) == capacity]
            assert longest and all(s.finish_reason == "length" for s in longest)
            advice = f"num_blocks={-(-(prompt_len + BEAM_MAX_TOKENS) // block_size)} or more"
            assert any(m.startswith(f"prompts[{i}]: the beams (beam_width={width}, max_tokens="
                                    f"{BEAM_MAX_TOKENS}) ended with finish_reason='length' "
                                    f"after {reached} generated token")
                       and advice in m and f"lower max_tokens to {reached}" in m for m in said)
        else:
            assert all(s.finish_reason is None for s in out.sequences)
    assert len(said) == len(cut)
    assert llm.llm_engine.memory_stats()["used_blocks"] == 0
    if cut:  # the advice serves them whole, silently
        bigger = max(-(-(lengths[i] + BEAM_MAX_TOKENS) // block_size) for i in cut)
        outs, said = beam_search_warned(LLM("tiny", num_blocks=bigger, block_size=block_size),
                                        BeamSearchParams(beam_width=width,
                                                         max_tokens=BEAM_MAX_TOKENS))
        assert not said
        assert ([[s.tokens for s in o.sequences] for o in outs]
                == [[s.tokens for s in o.sequences] for o in whole(width, BEAM_MAX_TOKENS)])


@pytest.mark.parametrize("max_model_len", [15, 18, 20])
def test_beam_search_ends_its_beams_at_max_model_len_as_generate_does(beams_whole,
                                                                      max_model_len):
    lengths, whole = beams_whole
    llm = LLM("tiny", num_blocks=64, block_size=4, max_model_len=max_model_len)
    outs, said = beam_search_warned(llm, BeamSearchParams(beam_width=2,
                                                          max_tokens=BEAM_MAX_TOKENS))
    assert not said  # max_model_len asked for: no cache too small
    for i, (out, prompt_len) in enumerate(zip(outs, lengths, strict=True)):
        reached = min(BEAM_MAX_TOKENS, max_model_len - prompt_len)
        assert ([s.tokens for s in out.sequences]
                == [s.tokens for s in whole(2, reached)[i].sequences])
        greedy = llm.generate(BEAM_PROMPTS[i], SamplingParams(temperature=0,
                                                              max_tokens=BEAM_MAX_TOKENS),
                              use_tqdm=False)[0].outputs[0]
        assert len(greedy.token_ids) == reached  # where generate ends, too


# F2 / F2b: beam_search's limits are said in beam_width's terms
@pytest.mark.parametrize("max_logprobs", [None, 0, 1, 2, 7, 20, 50])
@pytest.mark.parametrize("width", [1, 2, 3, 10, 11, 25, 26, 512, 513, 1000])
def test_beam_width_limits_are_said_as_beam_width(max_logprobs, width):
    kwargs = {} if max_logprobs is None else {"max_logprobs": max_logprobs}
    llm = LLM("tiny", num_blocks=16, **kwargs)
    most = 20 if max_logprobs is None else max_logprobs
    params = BeamSearchParams(beam_width=width, max_tokens=1)
    if 2 * width > 1024:
        with pytest.raises(ValueError) as info:
            llm.beam_search(["Once"], params)
        assert str(info.value).startswith(f"beam_search(): beam_width={width} ")
        widest = min(1024, most) // 2  # every limit's smallest (issue #26 N11: was 512)
        assert ("give beam_width=" in str(info.value)) == (widest >= 1)
        if widest >= 1:  # the advice holds
            assert f"give beam_width={widest} or less" in str(info.value)
            llm.beam_search(["Once"], BeamSearchParams(beam_width=widest, max_tokens=1))
    elif 2 * width > most:
        with pytest.raises(ValueError) as info:
            llm.beam_search(["Once"], params)
        message = str(info.value)
        assert message.startswith(f"beam_search(): beam_width={width} asks for 2 x beam_width = "
                                  f"{2 * width} logprobs")
        assert f"max_logprobs={2 * width})" in message
        assert (f"give beam_width={most // 2} or less" in message) == (most >= 2)
        assert "generate" not in message and not re.search(r"(?<!max_)logprobs=", message)
        if most >= 2:  # the advice holds
            llm.beam_search(["Once"], BeamSearchParams(beam_width=most // 2, max_tokens=1))
    else:
        out = llm.beam_search(["Once"], params)[0]
        assert len(out.sequences) == width
    assert llm.llm_engine.memory_stats()["used_blocks"] == 0


@pytest.mark.parametrize("prompts, who", [(["Once"], "beam_search()"),
                                          (["Once", "Tom"], "prompts[0]"),
                                          (["Once upon a time"], "beam_search()"),
                                          ([[0], "Once upon a time"], "prompts[1]")])
def test_beam_search_prompt_errors_name_the_prompt_as_generate_does(prompts, who):
    llm = LLM("tiny", num_blocks=2, block_size=1)  # holds a 1-token prompt only
    with pytest.raises(ValueError) as info:
        llm.beam_search(prompts, BeamSearchParams(beam_width=2, max_tokens=2))
    assert str(info.value).startswith(f"{who}: the prompt ")


# F6 / F10: vLLM's call arguments, taken where they change nothing
CALL_ARGS_OK = [("lora_request", None), ("lora_request", [None, None]), ("priority", 0),
                ("priority", None), ("priority", [0, 0]), ("tokenization_kwargs", None),
                ("tokenization_kwargs", {}), ("mm_processor_kwargs", None),
                ("mm_processor_kwargs", {}),
                # newcomer 32: vLLM 0.32's default policy 'fcfs' ignores any priority
                ("priority", 1), ("priority", [5, -3]), ("priority", -2),
                ("priority", np.int64(2))]
CALL_ARGS_REFUSED = [("lora_request", "my-adapter"), ("lora_request", [None, "a"]),
                     ("tokenization_kwargs", {"truncation": True}),
                     ("mm_processor_kwargs", {"x": 1})]


@pytest.fixture(scope="module")
def llm():
    return LLM("tiny", num_blocks=32)


@pytest.mark.parametrize("name, value", CALL_ARGS_OK)
def test_generate_takes_vllms_arguments_that_change_nothing(llm, reference, name, value):
    outs = llm.generate([PROMPT, PROMPT], GREEDY, use_tqdm=False, **{name: value})
    assert [o.outputs[0].token_ids for o in outs] == [reference.outputs[0].token_ids] * 2


@pytest.mark.parametrize("name, value", CALL_ARGS_REFUSED)
@pytest.mark.parametrize("call", ["generate", "chat", "add_request"])
def test_vllms_call_arguments_that_would_change_something_are_refused(llm, call, name, value):
    if call == "add_request" and name == "mm_processor_kwargs":
        return  # not an argument of vLLM's add_request
    before = llm.llm_engine.memory_stats()
    calls = {"generate": lambda: llm.generate([PROMPT, PROMPT], GREEDY, **{name: value}),
             "chat": lambda: llm.chat([{"role": "user", "content": "Hi"}], GREEDY,
                                      **{name: value}),
             "add_request": lambda: llm.llm_engine.add_request("r", PROMPT, GREEDY,
                                                               **{name: value})}
    caller = {"generate": "LLM.generate()", "chat": "LLM.chat()",
              "add_request": "LLMEngine.add_request()"}[call]
    with pytest.raises(TypeError) as info:
        calls[call]()
    assert str(info.value).startswith(f"{caller}: {name}={value!r} is vLLM's, not pagedkit's")
    assert llm.llm_engine.memory_stats() == before and not llm.llm_engine.groups


@pytest.mark.parametrize("name, value", [("lora_request", None), ("priority", 0),
                                         ("priority", 7), ("tokenization_kwargs", None),
                                         ("trace_headers", None)])
def test_add_request_takes_vllms_arguments_that_change_nothing(name, value):
    engine = LLM("tiny", num_blocks=16).llm_engine
    engine.add_request("r", PROMPT, GREEDY, None, **{name: value})
    while engine.has_unfinished_requests():
        engine.step()


@pytest.mark.parametrize("value", [True, 0.0, "high", [0, 1.5]])
@pytest.mark.parametrize("call", ["generate", "chat", "add_request"])
def test_a_priority_that_is_no_integer_is_refused_by_type(llm, call, value):
    before = llm.llm_engine.memory_stats()
    calls = {"generate": lambda: llm.generate([PROMPT, PROMPT], GREEDY, priority=value),
             "chat": lambda: llm.chat([{"role": "user", "content": "Hi"}], GREEDY,
                                      priority=value),
             "add_request": lambda: llm.llm_engine.add_request("r", PROMPT, GREEDY,
                                                               priority=value)}
    with pytest.raises(TypeError) as info:
        calls[call]()
    caller = {"generate": "LLM.generate()", "chat": "LLM.chat()",
              "add_request": "LLMEngine.add_request()"}[call]
    assert str(info.value).startswith(f"{caller}: priority={value!r} is refused: priority must "
                                      "be an integer (not a bool) or None: ")
    assert llm.llm_engine.memory_stats() == before and not llm.llm_engine.groups


@pytest.mark.parametrize("call, name", [("generate", "lora_requests"), ("generate", "tools"),
                                        ("chat", "prio"), ("add_request", "mm_processor_kwargs"),
                                        ("generate", "nonsense")])
def test_an_argument_the_call_does_not_take_is_a_plain_type_error(llm, call, name):
    calls = {"generate": lambda: llm.generate(PROMPT, GREEDY, **{name: None}),
             "chat": lambda: llm.chat([{"role": "user", "content": "Hi"}], GREEDY,
                                      **{name: None}),
             "add_request": lambda: llm.llm_engine.add_request("r", PROMPT, GREEDY,
                                                               **{name: None})}
    with pytest.raises(TypeError, match=f"got an unexpected keyword argument {name!r}"):
        calls[call]()


@pytest.mark.parametrize("value, ok", [(None, True), ("my-adapter", False)])
def test_beam_search_takes_lora_request_none(llm, value, ok):
    params = BeamSearchParams(beam_width=2, max_tokens=2)
    if ok:
        assert llm.beam_search([PROMPT], params, lora_request=value)
    else:
        with pytest.raises(TypeError, match="lora_request='my-adapter' is vLLM's"):
            llm.beam_search([PROMPT], params, lora_request=value)


@pytest.mark.parametrize("value", [None, "auto", "string", [], "openai"])
def test_chat_tools_and_content_format(llm, value):
    messages = [{"role": "user", "content": "Hi"}]
    if value in (None, "auto", "string"):
        kwargs = ({"tools": None} if value is None
                  else {"chat_template_content_format": value})
        assert llm.chat(messages, GREEDY, use_tqdm=False, **kwargs)
    else:
        name = "tools" if value == [] else "chat_template_content_format"
        with pytest.raises(TypeError, match=re.escape(f"{name}={value!r} is vLLM's")):
            llm.chat(messages, GREEDY, **{name: value})


def test_get_tokenizer_and_model_config(llm):
    engine = llm.llm_engine
    assert engine.get_tokenizer() is llm.get_tokenizer() is engine.tokenizer
    assert LLM("tiny", num_blocks=4, skip_tokenizer_init=True).llm_engine.get_tokenizer() is None
    with pytest.raises(AttributeError, match=r"no model_config.*max_model_len"):
        engine.model_config  # noqa: B018
    assert not hasattr(engine, "model_config")


def build_with_seed(where: str, seed):
    """An engine with this engine seed, built as `LLM` or from `EngineArgs`."""
    from pagedkit import EngineArgs
    from pagedkit.engine import LLMEngine

    if where == "LLM":
        return LLM("tiny", num_blocks=4, seed=seed)
    return LLMEngine.from_engine_args(EngineArgs(model="tiny", num_blocks=4, seed=seed))


# F5: seed=None is refused as vLLM 0.32 refuses it, saying what to give
@pytest.mark.parametrize("where", ["LLM", "EngineArgs"])
def test_seed_none_says_what_to_give(where):
    with pytest.raises(TypeError) as info:
        build_with_seed(where, None)
    message = str(info.value)
    assert message.startswith("seed must be an integer (0 to 2**32-1), got None")
    assert "vLLM 0.32 refuses None too" in message and "seed=random.randrange(2**32)" in message


@pytest.mark.parametrize("seed", [-1, -2, -2**31, -2**32, -2**64])
@pytest.mark.parametrize("where", ["LLM", "EngineArgs"])
def test_a_negative_engine_seed_says_the_range_and_what_minus_one_means(seed, where):
    """Newcomer 45: LLM(seed=-1) said only "seed must be >= 0": a user carrying
    SamplingParams' -1 ("no seed") over met no range and no way out."""
    with pytest.raises(ValueError) as info:
        build_with_seed(where, seed)
    message = str(info.value)
    assert message.startswith(f"seed must be 0 to 2**32-1 (4294967295), got {seed}: ")
    assert "-1 means no seed only in SamplingParams" in message
    assert "leave seed unset (0)" in message


def test_minus_one_still_means_no_seed_in_a_request():
    params = SamplingParams(temperature=1.0, max_tokens=3, seed=-1)
    output = LLM("tiny", num_blocks=8).generate("Once upon a time", params, use_tqdm=False)[0]
    assert len(output.outputs[0].token_ids) == 3


@pytest.mark.parametrize("seed", [0, 1, 2**31, 2**32 - 1])
def test_integer_seeds_are_taken(seed):
    assert LLM("tiny", num_blocks=4, seed=seed).generate(PROMPT, GREEDY, use_tqdm=False)


@pytest.mark.parametrize("seed", [2**32, 2**32 + 1, 2**63, 2**64 - 1, 2**64])
def test_an_engine_seed_vllm_refuses_is_refused_too(seed):
    """Newcomer 44: LLM(seed=2**32) ran here and vLLM 0.32 refuses it ("Seed
    must be between 0 and 2**32 - 1"); a request's seed keeps 2**64-1."""
    for where in ("LLM", "EngineArgs"):
        with pytest.raises(ValueError) as info:
            build_with_seed(where, seed)
        assert str(info.value).startswith(f"seed must be 0 to 2**32-1 (4294967295), got {seed}")
        assert "seed % 2**32" in str(info.value)
    params = SamplingParams(temperature=1.0, max_tokens=2, seed=2**64 - 1)
    assert LLM("tiny", num_blocks=4).generate(PROMPT, params, use_tqdm=False)


# F14: SamplingParams cannot change once built; the error says how to get the value wanted
def _fields(cls):
    return [f.name for f in dataclasses.fields(cls) if f.init]


@pytest.mark.parametrize("name", _fields(SamplingParams))
def test_assigning_a_sampling_param_says_what_to_do(name):
    params = SamplingParams(temperature=0, max_tokens=6)
    before = dataclasses.asdict(params)
    value = getattr(params, name)
    with pytest.raises(dataclasses.FrozenInstanceError) as info:
        setattr(params, name, value)
    assert str(info.value).startswith(f"cannot assign {name}={value!r}: a SamplingParams is "
                                      "checked once")
    assert f"dataclasses.replace(params, {name}={value!r})" in str(info.value)
    with pytest.raises(dataclasses.FrozenInstanceError, match=f"cannot delete {name}"):
        delattr(params, name)
    assert dataclasses.asdict(params) == before
    assert dataclasses.replace(params, **{name: value}) == params  # the advice runs
    clone = params.clone()
    assert clone == params and clone is not params


@pytest.mark.parametrize("name", _fields(BeamSearchParams))
def test_assigning_a_beam_search_param_says_what_to_do(name):
    params = BeamSearchParams(beam_width=2, max_tokens=3)
    value = getattr(params, name)
    with pytest.raises(dataclasses.FrozenInstanceError, match=r"a BeamSearchParams is checked"):
        setattr(params, name, value)
    assert dataclasses.replace(params, **{name: value}) == params


# F19: vLLM's module paths a script imports from
@pytest.mark.parametrize("module, name, same_as", [
    ("pagedkit.outputs", "RequestOutput", "RequestOutput"),
    ("pagedkit.outputs", "CompletionOutput", "CompletionOutput"),
    ("pagedkit.engine.arg_utils", "EngineArgs", "EngineArgs"),
    ("pagedkit.sampling_params", "SamplingParams", "SamplingParams"),
    ("pagedkit.sampling_params", "BeamSearchParams", "BeamSearchParams"),
    ("pagedkit.inputs", "TokensPrompt", "TokensPrompt"),
    ("pagedkit.inputs", "TextPrompt", "TextPrompt"),
    ("pagedkit.sampling_params", "RequestOutputKind", None)])
def test_vllms_module_paths(module, name, same_as):
    import importlib

    import pagedkit

    got = getattr(importlib.import_module(module), name)
    if same_as:
        assert got is getattr(pagedkit, same_as)


@pytest.mark.parametrize("kind", ["CUMULATIVE", "DELTA", "FINAL_ONLY"])
def test_request_output_kind_is_taken_at_cumulative_only(kind):
    from pagedkit.sampling_params import RequestOutputKind

    value = getattr(RequestOutputKind, kind)
    assert value.value == ["CUMULATIVE", "DELTA", "FINAL_ONLY"].index(kind)  # vLLM's values
    if kind == "CUMULATIVE":
        assert SamplingParams(output_kind=value).max_tokens == 16
    else:
        with pytest.raises(TypeError, match="output_kind=<RequestOutputKind"):
            SamplingParams(output_kind=value)


# F15: more samples (or beams) than max_num_seqs: the message names n and why they must fit
@pytest.mark.parametrize("cap", [1, 2, 4])
@pytest.mark.parametrize("count", [2, 3, 5, 8])
@pytest.mark.parametrize("beams", [False, True])
def test_more_sequences_than_max_num_seqs_names_n_and_why(cap, count, beams):
    llm = LLM("tiny", num_blocks=64, max_num_seqs=cap)
    params = (SamplingParams(n=count, use_beam_search=True, temperature=0, max_tokens=3)
              if beams else SamplingParams(n=count, max_tokens=3))
    name = "beam_width" if beams else "n"
    if count <= cap:
        assert len(llm.generate(PROMPT, params, use_tqdm=False)[0].outputs) == count
        return
    with pytest.raises(ValueError) as info:
        llm.generate([PROMPT, PROMPT], params)
    message = str(info.value)
    assert message.startswith(f"prompts[0]: the {name}={count} "
                              f"{'beams' if beams else 'samples'} run together as one group")
    assert f"need {count} sequence slots in the same step, but max_num_seqs is {cap}" in message
    assert message.endswith(f"lower {name} to {cap}{' or less' * (cap > 1)}, or build the "
                            f"engine with max_num_seqs={count} or more")
    assert not llm.llm_engine.groups
    # the advice runs
    fewer = (dataclasses.replace(params, n=cap, beam_width=None) if beams
             else dataclasses.replace(params, n=cap))
    assert len(llm.generate(PROMPT, fewer, use_tqdm=False)[0].outputs) == cap
    bigger = LLM("tiny", num_blocks=64, max_num_seqs=count)
    assert len(bigger.generate(PROMPT, params, use_tqdm=False)[0].outputs) == count


@pytest.mark.parametrize("budget", [8, 14, 15, 16, 18, 23, 24, 40])
@pytest.mark.parametrize("chunked", [False, True])
def test_beam_search_cut_by_the_token_budget_says_so(beams_whole, budget, chunked):
    """max_num_batched_tokens below a beam's length (without chunked
    prefill) limits what the engine takes as a prompt, as the cache does."""
    lengths, whole = beams_whole
    if budget < max(lengths):  # a prompt itself past the budget: generate refuses it too
        if not chunked:
            with pytest.raises(ValueError, match="max_num_batched_tokens"):
                LLM("tiny", num_blocks=64, max_num_batched_tokens=budget).beam_search(
                    BEAM_PROMPTS, BeamSearchParams(beam_width=2, max_tokens=BEAM_MAX_TOKENS))
        return
    llm = LLM("tiny", num_blocks=64, block_size=4, max_num_batched_tokens=budget,
              enable_chunked_prefill=chunked)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        outs = llm.beam_search(BEAM_PROMPTS, BeamSearchParams(beam_width=2,
                                                              max_tokens=BEAM_MAX_TOKENS))
    said = [str(w.message) for w in caught if "the beams" in str(w.message)]
    cut = 0
    for i, (out, prompt_len) in enumerate(zip(outs, lengths, strict=True)):
        reached = BEAM_MAX_TOKENS if chunked else min(BEAM_MAX_TOKENS, budget + 1 - prompt_len)
        assert ([s.tokens for s in out.sequences]
                == [s.tokens for s in whole(2, reached)[i].sequences])
        if reached < BEAM_MAX_TOKENS:
            cut += 1
            assert any(m.startswith(f"prompts[{i}]: the beams") and
                       f"max_num_batched_tokens={budget} without chunked prefill" in m and
                       f"max_num_batched_tokens={prompt_len + BEAM_MAX_TOKENS - 1} or more" in m
                       for m in said)
    assert len(said) == cut
    assert all(w.category is UserWarning for w in caught if "the beams" in str(w.message))


@pytest.mark.parametrize("num_blocks", [4, 5, 6, 8, 64])
@pytest.mark.parametrize("budget", [16, 18, 20, 24])
def test_beam_search_advice_names_every_limit_in_the_way_and_serves_them_whole(
        beams_whole, num_blocks, budget):
    """Cut by the cache or by the token budget, the warning's advice names
    every limit a whole search would meet (the review's case: the cache's
    advice alone left the budget to cut the beams again); taken, all of
    it, the search runs whole and silently."""
    lengths, whole = beams_whole
    params = BeamSearchParams(beam_width=2, max_tokens=BEAM_MAX_TOKENS)

    def run(**kwargs):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            outs = LLM("tiny", block_size=4, **kwargs).beam_search(BEAM_PROMPTS, params)
        return outs, [str(w.message) for w in caught if "the beams" in str(w.message)]

    outs, said = run(num_blocks=num_blocks, max_num_batched_tokens=budget)
    blocks = [int(n) for m in said for n in re.findall(r"num_blocks=(\d+) or more", m)]
    tokens = [int(n) for m in said for n in re.findall(r"max_num_batched_tokens=(\d+) or more", m)]
    longest = max(lengths) + BEAM_MAX_TOKENS
    assert (max(blocks, default=0) >= -(-longest // 4)) == (num_blocks * 4 < longest)
    assert (max(tokens, default=0) >= longest - 1) == (budget < longest - 1)
    for chunked in (False, True):  # each way out the advice names
        taken = dict(num_blocks=max([num_blocks, *blocks]), enable_chunked_prefill=chunked,
                     max_num_batched_tokens=budget if chunked else max([budget, *tokens]))
        outs, said = run(**taken)
        assert not said, taken
        assert ([[s.tokens for s in o.sequences] for o in outs]
                == [[s.tokens for s in o.sequences] for o in whole(2, BEAM_MAX_TOKENS)])
