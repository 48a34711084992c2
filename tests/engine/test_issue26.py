"""Issue #26's findings that needed engine code (a vLLM user feels at home,
a newcomer's first hour has no rough edge), each pinned."""

import re

import pytest

from pagedkit import LLM, SamplingParams

TINY_MAX_MODEL_LEN = 2048  # the embedded model's max_position_embeddings

#: a block longer than any sequence that does not fit: (engine arguments, the
#: max_model_len the error names, what its memory part says)
TOO_LONG_BLOCKS = [
    (dict(block_size=100000), TINY_MAX_MODEL_LEN, r"one such block \(409600000 bytes\) is more "
                                                  "than the default KV cache budget"),
    (dict(block_size=100000, max_model_len=8), 8, "one such block"),
    (dict(block_size=70000, kv_cache_memory=2**20), TINY_MAX_MODEL_LEN,
     "more than kv_cache_memory=1048576 bytes"),
    (dict(block_size=100000, num_blocks=10**4), TINY_MAX_MODEL_LEN,
     r"10000 such blocks need 4096000000000 bytes \(3814.70 GiB\), but .* bytes .* are"),
    (dict(block_size=2049, num_blocks=10**6), TINY_MAX_MODEL_LEN, "1000000 such blocks need"),
    (dict(block_size=64, max_model_len=32, num_blocks=10**8), 32, "100000000 such blocks"),
]


@pytest.mark.parametrize("kwargs, limit, cost", TOO_LONG_BLOCKS,
                         ids=[str(k) for k, _, _ in TOO_LONG_BLOCKS])
def test_a_block_longer_than_any_sequence_is_named_not_the_memory(kwargs, limit, cost):
    """N1: block_size=100000 was refused for memory, with advice to give
    num_blocks=58 (a 21 GiB cache) or block_size=65536: the real cause is a
    block longer than any sequence. The error names block_size, its value,
    the max_model_len and what to give; the advice is accepted."""
    with pytest.raises(ValueError) as e:
        LLM("tiny", **kwargs)
    text = str(e.value)
    assert text.startswith(f"block_size={kwargs['block_size']} is longer than any sequence: "
                           f"max_model_len is {limit}, so no sequence fills more than {limit} "
                           f"of a block's {kwargs['block_size']} slots, and ")
    assert re.search(cost, text), text
    assert "num_blocks=" not in text.split("; give ")[-1]  # fewer blocks would not help
    advice = int(re.search(r"give block_size=(\d+)", text).group(1))
    assert advice == min(16, limit)
    LLM("tiny", **{**kwargs, "block_size": advice, "num_blocks": 4, "kv_cache_memory": None})


@pytest.mark.parametrize("kwargs, message", [
    (dict(block_size=2048, num_blocks=10**6), "give num_blocks="),  # as long as a sequence
    (dict(block_size=16, num_blocks=10**9), "give num_blocks="),
    (dict(block_size=2048, kv_cache_memory=2**20), "give block_size=256 or less"),
])
def test_a_block_no_longer_than_a_sequence_keeps_the_memory_advice(kwargs, message):
    with pytest.raises(ValueError, match=message) as e:
        LLM("tiny", **kwargs)
    assert "longer than any sequence" not in str(e.value)


@pytest.mark.parametrize("block_size", [2049, 3000])
def test_a_long_block_that_fits_is_served(block_size):
    """Exact, only wasteful: the engine serves it (as vLLM does)."""
    llm = LLM("tiny", block_size=block_size)
    assert llm.llm_engine.kv.block_size == block_size


def _advised(message: str, name: str) -> int | None:
    found = re.search(rf"(?:lower {name} to |give {name}=)(\d+)", message)
    return int(found.group(1)) if found else None


ENGINES = [dict(num_blocks=8), dict(num_blocks=40), dict(num_blocks=64, max_num_seqs=4),
           dict(num_blocks=300), dict(num_blocks=8, block_size=4)]


@pytest.mark.parametrize("engine", ENGINES, ids=[str(e) for e in ENGINES])
@pytest.mark.parametrize("beams", [False, True])
@pytest.mark.parametrize("count", [10**6, 1000, 257, 65, 41, 9])
def test_generates_advice_on_n_and_beam_width_passes_every_limit(engine, beams, count):
    """N11: beam_width=10**6 was told 'lower beam_width to 256' (max_num_seqs)
    and 256 was then refused by the KV cache. The advice is now the smallest
    of the limits (max_num_seqs, the cache): the value it names is served."""
    llm = LLM("tiny", **engine)
    name = "beam_width" if beams else "n"
    params = dict(max_tokens=3, temperature=0)
    params = (SamplingParams(use_beam_search=True, beam_width=count, **params) if beams
              else SamplingParams(n=count, **params))
    prompt = [5] * 20  # one full block of 16 shared (five of 4)
    try:
        llm.generate([prompt], params, use_tqdm=False)
    except ValueError as e:
        advice = _advised(str(e), name)
    else:
        return
    assert advice is not None and advice < count
    fewer = (SamplingParams(use_beam_search=True, beam_width=advice, max_tokens=3, temperature=0)
             if beams else SamplingParams(n=advice, max_tokens=3, temperature=0))
    [out] = llm.generate([prompt], fewer, use_tqdm=False)
    assert len(out.outputs) == (1 if beams else advice)  # beams: the best n=1 of them
    with pytest.raises(ValueError):  # and it is the most: one more is refused
        llm.generate([prompt], (SamplingParams(use_beam_search=True, beam_width=advice + 1,
                                               max_tokens=3, temperature=0) if beams else
                                SamplingParams(n=advice + 1, max_tokens=3, temperature=0)),
                     use_tqdm=False)


@pytest.mark.parametrize("max_logprobs", [None, 0, 1, 2, 7, 20, 600, 2000, -1])
@pytest.mark.parametrize("width", [10**6, 513, 300, 11])
def test_beam_searchs_advice_on_beam_width_passes_every_limit(max_logprobs, width):
    """N11 for LLM.beam_search: a width past the vocabulary was told
    'give beam_width=512 or less', and 512 was then refused by max_logprobs."""
    from pagedkit.sampling_params import BeamSearchParams

    kwargs = {} if max_logprobs is None else {"max_logprobs": max_logprobs}
    llm = LLM("tiny", num_blocks=16, **kwargs)
    try:
        llm.beam_search(["Once"], BeamSearchParams(beam_width=width, max_tokens=1))
    except ValueError as e:
        advice = _advised(str(e), "beam_width")
    else:
        return
    most = 20 if max_logprobs is None else max_logprobs
    widest = min(1024, 1024 if most == -1 else most) // 2
    assert advice == (widest if widest >= 1 else None)
    if advice:
        llm.beam_search(["Once"], BeamSearchParams(beam_width=advice, max_tokens=1))
        with pytest.raises(ValueError):
            llm.beam_search(["Once"], BeamSearchParams(beam_width=advice + 1, max_tokens=1))


def _folder_without_tokenizer(tmp_path, kind: str):
    """A model folder of config and weights only: the tiny model's, or a
    random GPT-2 / Qwen2 / Mistral (transformers builds an empty tokenizer for
    the first two, and fails in sentencepiece's terms for Llama and Mistral)."""
    import shutil

    from transformers import (
        GPT2Config,
        GPT2LMHeadModel,
        MistralConfig,
        MistralForCausalLM,
        Qwen2Config,
        Qwen2ForCausalLM,
    )

    from pagedkit.models import TINY_DIR

    folder = tmp_path / kind
    if kind == "tiny":
        folder.mkdir()
        for name in ("config.json", "generation_config.json", "model.safetensors"):
            shutil.copy(TINY_DIR / name, folder / name)
        return folder
    small = dict(num_hidden_layers=1, hidden_size=32, num_attention_heads=2,
                 num_key_value_heads=1, intermediate_size=64, vocab_size=100)
    model = {"gpt2": lambda: GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2,
                                                        vocab_size=100, eos_token_id=0,
                                                        bos_token_id=0)),
             "qwen2": lambda: Qwen2ForCausalLM(Qwen2Config(**small)),
             "mistral": lambda: MistralForCausalLM(MistralConfig(**small))}[kind]()
    model.save_pretrained(folder)
    return folder


KINDS = ["tiny", "gpt2", "qwen2", "mistral"]


@pytest.mark.parametrize("kind", KINDS)
def test_a_model_folder_without_a_tokenizer_is_refused_by_name(tmp_path, kind):
    """N12: a folder of config and weights only was served with an empty
    (1-token) tokenizer, every text no tokens (GPT-2, Qwen2), or failed with
    transformers' 'Couldn't instantiate the backend tokenizer ... sentencepiece'
    (Llama, Mistral). It is refused naming the folder, the files a tokenizer
    is in and what it holds, and what to do."""
    folder = _folder_without_tokenizer(tmp_path, kind)
    with pytest.raises(OSError) as e:
        LLM(str(folder))
    text = str(e.value)
    assert text.startswith(f"local directory {str(folder)!r} has no tokenizer: none of "
                           "tokenizer.json, tokenizer.model, vocab.json")
    assert "(it holds config.json, generation_config.json, model.safetensors)" in text
    assert text.endswith("copy the model's tokenizer files into it, pass tokenizer= (a folder "
                         "or Hugging Face name that holds this model's tokenizer), or pass "
                         "skip_tokenizer_init=True and give prompts as token ids (vLLM's way; "
                         "outputs then carry token ids and no text)")
    with pytest.raises(OSError) as e:
        LLM("tiny", tokenizer=str(folder))
    assert str(e.value).startswith(f"local directory {str(folder)!r} has no tokenizer: none of "
                                   "tokenizer.json")
    assert str(e.value).endswith("use tokenizer='tiny', a local directory with a tokenizer, a "
                                 "Hugging Face name, a tokenizer object, or None (the model's "
                                 "own)")
    # each way out serves: skip_tokenizer_init with token ids, and tokenizer=
    llm = LLM(str(folder), skip_tokenizer_init=True)
    assert llm.llm_engine.tokenizer is None
    [out] = llm.generate([[1, 2, 3]], SamplingParams(max_tokens=2, temperature=0),
                         use_tqdm=False)
    assert len(out.outputs[0].token_ids) == 2 and out.outputs[0].text == ""
    if kind == "tiny":
        [out] = LLM(str(folder), tokenizer="tiny").generate(
            ["Once upon a time"], SamplingParams(max_tokens=2, temperature=0), use_tqdm=False)
        assert out.outputs[0].text


@pytest.mark.parametrize("count", [0, 1, 3, 8, 9, 30, 3000])
def test_a_big_folder_without_a_tokenizer_is_refused_in_a_few_lines(tmp_path, count):
    """Newcomer 8 finding 9: LLM('/tmp') listed every name in the folder
    (28,000 characters), burying what is missing and what to do. The refusal
    names the first 8 and how many more, whatever the folder holds."""
    from pagedkit.model.loader import LISTED_NAMES

    names = [f"file{i:04d}.bin" for i in range(count)]
    for name in names:
        (tmp_path / name).touch()
    with pytest.raises(OSError) as e:
        LLM(str(tmp_path))
    text = str(e.value)
    shown = ", ".join(names[:LISTED_NAMES]) or "nothing"
    more = f" and {count - LISTED_NAMES} more" if count > LISTED_NAMES else ""
    assert ("has no tokenizer: none of tokenizer.json, tokenizer.model, vocab.json, vocab.txt, "
            "spiece.model, sentencepiece.bpe.model or a *.tiktoken file "
            f"(it holds {shown}{more}); copy the model's tokenizer files into it") in text
    assert len(text) < 800, len(text)


def test_a_folder_with_its_tokenizer_files_loads(tmp_path):
    import shutil

    from pagedkit.models import TINY_DIR

    folder = _folder_without_tokenizer(tmp_path, "tiny")
    shutil.copy(TINY_DIR / "tokenizer.json", folder)
    shutil.copy(TINY_DIR / "tokenizer_config.json", folder)
    assert len(LLM(str(folder)).llm_engine.tokenizer) > 1


def test_an_empty_tokenizer_from_a_name_is_refused():
    from pagedkit.model.loader import _checked

    class Empty:
        def __len__(self):
            return 1

    with pytest.raises(OSError, match="model name 'org/name' has no tokenizer: transformers "
                                      r"built an empty Empty \(1 token\) from it; copy"):
        _checked(Empty(), "model name 'org/name'", "model")


@pytest.fixture
def model_folder(tmp_path):
    return _folder_without_tokenizer(tmp_path, "tiny")  # weights only: tokenizer="tiny"


@pytest.mark.parametrize("given, shown", [({}, True), ({"use_tqdm_on_load": True}, True),
                                          ({"use_tqdm_on_load": False}, False)])
def test_use_tqdm_on_load_shows_or_hides_the_loading_bar(capfd, model_folder, given, shown):
    """N14: use_tqdm_on_load=False left transformers' 'Loading weights' bar on
    (the docs said pagedkit showed none). True, vLLM's default, shows it;
    False hides it; the bars' switch is left as it was either way."""
    from transformers.utils import logging as hf_logging

    for before in (True, False):
        (hf_logging.enable_progress_bar if before else hf_logging.disable_progress_bar)()
        capfd.readouterr()
        LLM(str(model_folder), tokenizer="tiny", **given)
        err = capfd.readouterr().err
        assert ("Loading weights" in err) == (shown and before), err
        assert hf_logging.is_progress_bar_enabled() == before
    hf_logging.enable_progress_bar()


@pytest.mark.parametrize("given", [{}, {"use_tqdm_on_load": True}, {"use_tqdm_on_load": False}])
def test_the_embedded_model_loads_without_a_bar(capfd, given):
    capfd.readouterr()
    LLM("tiny", **given)
    assert "Loading weights" not in capfd.readouterr().err


def test_a_failed_load_leaves_the_bars_as_they_were(tmp_path):
    from transformers.utils import logging as hf_logging

    hf_logging.enable_progress_bar()
    with pytest.raises(OSError):
        LLM(str(tmp_path), use_tqdm_on_load=False)  # an empty folder
    assert hf_logging.is_progress_bar_enabled()


#: vLLM 0.32's prompt token ids for these conversations (LLM.chat on the tiny model's
#: weights, pagedkit.vllm.api_check.make_llm's engine; run beside this change)
VLLM_CHAT_IDS = {
    "user": [0, 87, 85, 293, 28, 223, 201, 67, 656, 302, 86, 991, 28],
    "system": [0, 85, 91, 328, 71, 79, 28, 223, 201, 87, 85, 293, 28, 301, 75, 201, 67, 656,
               302, 86, 991, 28],
    "assistant": [0, 87, 85, 293, 28, 301, 75, 201, 67, 656, 302, 86, 991, 28, 223, 201, 87,
                  85, 293, 28, 223, 41, 81, 393, 201, 67, 656, 302, 86, 991, 28],
}


def _conversation(role: str, message: dict) -> list[dict]:
    if role == "user":
        return [message]
    if role == "system":
        return [message, {"role": "user", "content": "Hi"}]
    return [{"role": "user", "content": "Hi"}, message, {"role": "user", "content": "Go on"}]


@pytest.mark.parametrize("role", list(VLLM_CHAT_IDS))
@pytest.mark.parametrize("content", ["None", "missing", "empty", "no parts", "tool call"])
def test_chat_renders_a_content_of_none_or_missing_as_vllm_does(role, content):
    """N15: a message whose content was None or missing was refused
    ("['content'] must be text, got None"); vLLM renders it as empty text.
    The prompt's token ids are vLLM's own, for every role and shape."""
    message = {"role": role, **{"None": {"content": None}, "missing": {},
                                "empty": {"content": ""}, "no parts": {"content": []},
                                "tool call": {"content": None, "tool_calls": []}}[content]}
    llm = LLM("tiny")
    [out] = llm.chat(_conversation(role, message), SamplingParams(max_tokens=1, temperature=0),
                     use_tqdm=False)
    assert list(out.prompt_token_ids) == VLLM_CHAT_IDS[role]


@pytest.mark.parametrize("content", [5, 1.5, {"text": "Hi"}, [{"type": "image_url"}]])
def test_chat_still_refuses_content_that_is_not_text(content):
    """vLLM fails on these too ('int' object is not iterable, ...)."""
    with pytest.raises((TypeError, ValueError), match=r"messages\[0\]"):
        LLM("tiny").chat([{"role": "user", "content": content}], use_tqdm=False)
