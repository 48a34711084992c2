"""The tenth newcomer's findings at the edge of the API, each pinned beside what
vLLM 0.32 does (its figures measured on the tiny model's weights, blocks of 32:
tests/vllm/test_beside_vllm.py runs both)."""

import functools
import itertools
from typing import ClassVar

import pytest
import torch

from pagedkit import LLM, BeamSearchParams, EngineArgs, LLMEngine, SamplingParams
from pagedkit.memory.block_hash import ROOT_HASH, hash_block, salt_keys
from pagedkit.model.loader import DTYPES

IDS = [0, *range(10, 80)]  # 71 tokens: two full blocks of 32 before the last token
TEXT = "Once upon a time there was a little girl named Lily. " * 3
GREEDY = SamplingParams(temperature=0, max_tokens=3)


@pytest.fixture(scope="module")
def llm():
    return LLM("tiny", block_size=32, num_blocks=64)


def run(llm, prompt, **kwargs):
    kwargs.setdefault("use_tqdm", False)
    [out] = llm.generate(prompt, kwargs.pop("params", GREEDY), **kwargs)
    return out


def salted(form, salt):
    """`form` of the prompt, with `salt` as its cache_salt (MISSING: no key at all)."""
    prompt = {"{prompt}": {"prompt": TEXT},
              "{prompt_token_ids}": {"prompt_token_ids": IDS},
              "{prompt_token_ids, prompt}": {"prompt_token_ids": IDS, "prompt": "my text"}}[form]
    if salt is MISSING:
        return prompt
    return {**prompt, "cache_salt": salt}


MISSING = object()
FORMS = ["{prompt}", "{prompt_token_ids}", "{prompt_token_ids, prompt}"]
SALTS = [MISSING, None, "", "a", "b"]


def key(salt):
    """The salt a block is named with: vLLM keys a salt only if it is non-empty."""
    return None if salt is MISSING or not salt else salt


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("first, second", list(itertools.product(SALTS, SALTS)),
                         ids=lambda s: "missing" if s is MISSING else repr(s))
def test_same_salt_shares_the_prefix_another_never_does(llm, form, first, second):
    """Findings 1 and 2: a TokensPrompt with its text, and a cache_salt, were
    refused. vLLM 0.32 (salt.py): salt "a" 0 cached tokens, "a" again 64, "b" 0."""
    assert llm.reset_prefix_cache()
    a, b = run(llm, salted(form, first)), run(llm, salted(form, second))
    assert a.num_cached_tokens == 0
    shared = key(first) == key(second)
    prompt_len = len(b.prompt_token_ids)
    assert b.num_cached_tokens == (prompt_len - 1) // 32 * 32 * shared
    assert a.outputs[0].token_ids == b.outputs[0].token_ids
    expected_prompt = {"{prompt}": TEXT, "{prompt_token_ids}": None,
                       "{prompt_token_ids, prompt}": "my text"}[form]
    assert a.prompt == b.prompt == expected_prompt


def test_the_text_of_a_tokens_prompt_is_only_reported(llm):
    """vLLM serves the ids, whatever the text says: the same tokens as the ids alone."""
    plain = run(llm, IDS)
    for text in ("my text", "", TEXT):
        out = run(llm, {"prompt_token_ids": IDS, "prompt": text})
        assert (out.prompt, list(out.prompt_token_ids)) == (text, IDS)
        assert out.outputs[0].token_ids == plain.outputs[0].token_ids


@pytest.mark.parametrize("salt", [None, "a"])
def test_token_ids_with_a_text_of_none_are_the_ids_alone(llm, salt):
    """Thirteenth newcomer: vLLM serves ``{"prompt_token_ids": ids, "prompt":
    None}`` (no text) and reports ``prompt=None``; pagedkit refused it. A
    text of None alone is still no prompt."""
    plain = run(llm, IDS)
    given = {"prompt_token_ids": IDS, "prompt": None, "cache_salt": salt}
    out = run(llm, given)
    assert (out.prompt, list(out.prompt_token_ids)) == (None, IDS)
    assert out.outputs[0].token_ids == plain.outputs[0].token_ids
    assert given == {"prompt_token_ids": IDS, "prompt": None, "cache_salt": salt}  # untouched
    with pytest.raises(TypeError, match=r"\['prompt'\] must be a string"):
        run(llm, {"prompt": None})


@pytest.mark.parametrize("salt", ["a", "tenant-7", "é" * 40])
@pytest.mark.parametrize("algo", ["sha256", "sha256_cbor"])
def test_the_salt_is_an_extra_key_of_the_first_block_only(salt, algo):
    """The first block's name covers the salt, as vLLM keys it; the second
    chains from the first (and differs from an unsalted one only through it)."""
    llm = LLM("tiny", block_size=32, num_blocks=16, prefix_caching_hash_algo=algo)
    engine = llm.llm_engine
    run(llm, {"prompt_token_ids": IDS, "cache_salt": salt})
    keys = [engine.kv.allocator.block_key(b) for b in range(16)]
    keys = [k for k in keys if k is not None]
    first = next(k for k in keys if k.parent is None)
    second = next(k for k in keys if k.parent is first)
    assert first.extra_keys == salt_keys(salt) == (("cache_salt", salt),)
    assert second.extra_keys is None
    hash_fn = engine.kv.allocator.hash_fn
    root = engine.kv.allocator.root_hash
    assert first.hash == hash_block(root, IDS[:32], (("cache_salt", salt),), hash_fn)
    assert second.hash == hash_block(first.hash, IDS[32:64], None, hash_fn)
    assert hash_fn is not None and first.hash != hash_block(ROOT_HASH, IDS[:32], None, hash_fn)


@pytest.mark.parametrize("salt, kind", [(1, "int"), (b"a", "bytes"), (["a"], "list"),
                                        (True, "bool")])
@pytest.mark.parametrize("form", FORMS)
def test_a_salt_that_is_not_a_string_is_refused_by_name(llm, form, salt, kind):
    prompt = salted(form, salt)
    with pytest.raises(TypeError, match=rf"prompt\['cache_salt'\] must be a string, got .* "
                                        rf"\({kind}\)"):
        llm.generate(prompt, GREEDY, use_tqdm=False)
    assert not llm.llm_engine.has_unfinished_requests()


@pytest.mark.parametrize("text", [5, ["my", "text"], b"my text"])
def test_a_text_beside_the_ids_that_is_not_a_string_is_refused_by_name(llm, text):
    with pytest.raises(TypeError, match=r"prompt\['prompt'\] must be a string \(the prompt's "
                                        r"text\), got"):
        llm.generate({"prompt_token_ids": IDS, "prompt": text}, GREEDY, use_tqdm=False)
    assert not llm.llm_engine.has_unfinished_requests()


def test_beam_search_carries_the_salt_into_its_beams(llm):
    """vLLM's beam search gives each beam's requests the prompt's salt: its
    cached blocks are the salt's, and the beams are those of the unsalted prompt."""
    params = BeamSearchParams(beam_width=2, max_tokens=4)
    assert llm.reset_prefix_cache()
    [plain] = llm.beam_search([IDS], params)
    assert llm.reset_prefix_cache()
    [salted_out] = llm.beam_search([{"prompt_token_ids": IDS, "cache_salt": "a"}], params)
    assert [b.tokens for b in plain.sequences] == [b.tokens for b in salted_out.sequences]
    pool = llm.llm_engine.kv.allocator
    firsts = [k for k in map(pool.block_key, range(pool.num_blocks))
              if k is not None and k.parent is None]
    assert firsts and all(k.extra_keys == salt_keys("a") for k in firsts)


# ------------------------------------------------------------------- dtype
#: vLLM 0.32's ModelConfig, each string tried (EngineArgs(...).create_model_config()):
#: these give a dtype, and every other string is refused (case as written)
VLLM_DTYPES = {"half": torch.float16, "float16": torch.float16, "float": torch.float32,
               "float32": torch.float32, "bfloat16": torch.bfloat16}
VLLM_REFUSES = ["AUTO", "HALF", "Half", "FLOAT", "BFloat16", "double", "fp16", "fp32", "bf16",
                "torch.float16", " float16", "", "float8"]


@pytest.mark.parametrize("name", sorted(VLLM_DTYPES))
def test_every_dtype_name_vllm_takes_is_taken(name):
    """Finding 3: 'float' was refused; vLLM maps it to float32."""
    assert LLM("tiny", dtype=name, num_blocks=8).llm_engine.dtype == VLLM_DTYPES[name]


def test_one_table_of_names_vllms_and_float64():
    assert {**VLLM_DTYPES, "float64": torch.float64} == DTYPES


@pytest.mark.parametrize("name", [*VLLM_REFUSES, 123, ["float"], None])
def test_a_name_vllm_refuses_is_refused_listing_the_names(name):
    with pytest.raises(ValueError) as refused:
        LLM("tiny", dtype=name, num_blocks=8)
    meant = CASE_SLIPS.get(name) if isinstance(name, str) else None
    hint = f" (names are lower-case without spaces, as vLLM takes them: use {meant!r})"
    assert str(refused.value) == DTYPE_REFUSAL.format(name=repr(name)) + (hint if meant else "")


#: The names above vLLM refuses only for their case or spaces: the refusal names the one meant
CASE_SLIPS = {"AUTO": "auto", "HALF": "half", "Half": "half", "FLOAT": "float",
              "BFloat16": "bfloat16", " float16": "float16"}
DTYPE_REFUSAL = ("dtype must be 'auto', one of 'half', 'float16', 'float', 'float32', "
                 "'bfloat16', 'float64' (vLLM's names, and float64) or one of torch.bfloat16, "
                 "torch.float16, torch.float32, torch.float64; got {name}")
SERVED_TORCH = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


@pytest.mark.parametrize("dtype", [getattr(torch, n) for n in dir(torch)
                                   if isinstance(getattr(torch, n), torch.dtype)],
                         ids=str)
def test_a_torch_dtype_is_served_only_where_a_name_is(dtype):
    """Thirteenth newcomer: a torch.dtype was never checked, so complex64
    served (its imaginary parts dropped), float8 was blamed on the model and
    int8 met torch's own error. Every torch dtype is either one of the names'
    or refused by the same message."""
    if dtype in SERVED_TORCH:
        assert LLM("tiny", dtype=dtype, num_blocks=8).llm_engine.dtype == dtype
        return
    with pytest.raises(ValueError) as refused:
        LLM("tiny", dtype=dtype, num_blocks=8)
    assert str(refused.value) == DTYPE_REFUSAL.format(name=repr(dtype))


@pytest.mark.parametrize("dtype", ["FLOAT32", "fp16", torch.int8])
def test_a_bad_dtype_is_refused_before_the_model_loads(dtype, monkeypatch):
    import pagedkit.engine.llm_engine as llm_engine

    def no_load(*args, **kwargs):
        raise AssertionError("the model was loaded before its dtype was checked")

    monkeypatch.setattr(llm_engine, "load_model", no_load)
    with pytest.raises(ValueError, match="dtype must be"):
        LLM("tiny", dtype=dtype, num_blocks=8)


@pytest.mark.parametrize("request_id", ["r", "a b", "7"])  # an int id: refused (newcomer42)
def test_add_request_returns_the_id_abort_request_takes(request_id):
    """Thirteenth newcomer: vLLM's add_request returns an id, pagedkit's
    returned None, so ``rid = add_request(...); abort_request(rid)`` aborted
    nothing and the request ran on."""
    engine = LLMEngine("tiny", num_blocks=8)
    rid = engine.add_request(request_id, [1, 2, 3], SamplingParams(max_tokens=4))
    assert rid == str(request_id)
    assert engine.abort_request(rid) is True
    assert not engine.has_unfinished_requests()


# ---------------------------------------------------------------- use_tqdm
class Bar:
    """A tqdm-like bar that records what is done to it."""

    made: ClassVar[list] = []

    def __init__(self, **kwargs):
        self.kwargs, self.updates, self.closed = kwargs, [], 0
        Bar.made.append(self)

    def update(self, n=1):
        self.updates.append(n)

    def close(self):
        self.closed += 1


@pytest.mark.parametrize("num_prompts", [0, 1, 3])
def test_a_callable_use_tqdm_makes_the_bar_generate_updates_and_closes(llm, num_prompts):
    """Finding 4 (vLLM's signature: bool | Callable[..., tqdm]): it was refused."""
    Bar.made = []
    outs = llm.generate([IDS[:5 + i] for i in range(num_prompts)], GREEDY, use_tqdm=Bar)
    [bar] = Bar.made
    assert bar.kwargs == {"total": num_prompts, "desc": "generate"}
    assert (sum(bar.updates), bar.closed, len(outs)) == (num_prompts, 1, num_prompts)


def test_chat_takes_a_callable_use_tqdm(llm):
    Bar.made = []
    llm.chat([{"role": "user", "content": "hi"}], GREEDY, use_tqdm=Bar)
    [bar] = Bar.made
    assert (bar.kwargs["total"], sum(bar.updates), bar.closed) == (1, 1, 1)


def test_tqdm_itself_and_a_partial_of_it_are_taken(llm):
    from tqdm import tqdm

    for use_tqdm in (tqdm, functools.partial(tqdm, disable=True), True, False):
        assert run(llm, IDS, use_tqdm=use_tqdm).outputs[0].token_ids


def test_the_bar_is_closed_when_generate_fails(llm):
    Bar.made = []

    def fail(step):
        raise RuntimeError("stop here")

    with pytest.raises(RuntimeError, match="stop here"):
        llm.generate([IDS], GREEDY, use_tqdm=Bar, on_step=fail)
    assert Bar.made[0].closed == 1 and not llm.llm_engine.has_unfinished_requests()


@pytest.mark.parametrize("value", ["yes", 1, None, 0.0, [True]])
def test_a_use_tqdm_neither_bool_nor_callable_is_refused(llm, value):
    with pytest.raises(TypeError, match=r"use_tqdm must be True, False or a function returning "
                                        r"a tqdm-like bar"):
        llm.generate([IDS], GREEDY, use_tqdm=value)
    assert not llm.llm_engine.has_unfinished_requests()


# ---------------------------------------------------- interrupted generate
@pytest.mark.parametrize("params", [
    SamplingParams(temperature=0, max_tokens=6),
    SamplingParams(temperature=1.0, seed=3, max_tokens=6, n=2),
    SamplingParams(temperature=0.8, top_p=0.9, seed=11, max_tokens=6)], ids=str)
def test_after_an_interrupted_generate_greedy_and_seeded_requests_are_a_fresh_engines(params):
    """Finding 12: what docs/api.md promises after an interrupted call."""
    prompts = [IDS, IDS[:20], [0, 5, 9]]
    fresh = LLM("tiny", block_size=32, num_blocks=64)
    expected = [[c.token_ids for c in o.outputs]
                for o in fresh.generate(prompts, params, use_tqdm=False)]
    llm = LLM("tiny", block_size=32, num_blocks=64)
    steps = []

    def interrupt(step):
        steps.append(step)
        if len(steps) == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        llm.generate(prompts, SamplingParams(temperature=1.0, max_tokens=9), use_tqdm=False,
                     on_step=interrupt)
    got = [[c.token_ids for c in o.outputs] for o in llm.generate(prompts, params,
                                                                    use_tqdm=False)]
    assert got == expected


# ------------------------------------------------------------- EngineArgs
@pytest.mark.parametrize("kwargs, error", [
    ({"dtype": "fp16"}, ValueError), ({"block_size": 0}, ValueError),
    ({"max_num_seqs": 0}, ValueError), ({"gpu_memory_utilization": 2.0}, ValueError),
    ({"prefix_caching_hash_algo": "md5"}, ValueError), ({"seed": None}, TypeError)])
def test_engine_args_values_are_checked_when_the_engine_is_built(kwargs, error):
    """Finding 3b: docs/api.md said 'checked at once'; it now says what is
    checked when: the names at once, the values by the engine's own rules."""
    args = EngineArgs(model="tiny", **kwargs)
    with pytest.raises(error):
        LLMEngine.from_engine_args(args)
    with pytest.raises(TypeError, match="block_sise"):
        EngineArgs(model="tiny", block_sise=8)


def test_engine_args_say_what_they_hold():
    """Its __repr__ sat after a return in another function: the default
    ``<pagedkit.engine.args.EngineArgs object at 0x...>`` showed."""
    text = repr(EngineArgs(model="tiny", block_size=8, dtype="float"))
    assert text.startswith("EngineArgs(model='tiny', block_size=8, ")
    assert "dtype='float'" in text
