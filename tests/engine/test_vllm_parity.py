"""The vLLM-shaped front end where a newcomer found it differed from vLLM
0.32 (newcomer 8, finding 6), each case as vLLM 0.32 gave it, run here
beside it on the tiny model (block_size 32, float32): what pagedkit now
matches, and what it refuses instead, naming what to do (docs/api.md,
"Compared with vLLM"). tests/vllm/test_sampling_ints.py has the integer
fields value by value, and test_api_compat.py the names of vLLM's `LLM`
and `LLMEngine` checked against vLLM itself.
"""

from __future__ import annotations

import copy
import pickle

import pytest

from pagedkit import LLM, LLMEngine, SamplingParams
from pagedkit.vllm_names import VLLM_ONLY_ATTRIBUTES

PROMPT = "Once upon a time"


@pytest.fixture(scope="module")
def engine():
    return LLMEngine("tiny", block_size=32, num_blocks=16, dtype="float32")


def run(engine) -> dict[str, object]:
    """Step until nothing is unfinished: each request's last output."""
    last = {}
    while engine.has_unfinished_requests():
        for out in engine.step():
            last[out.request_id] = out
    return last


# ------------------------------------------------------ stop lists (vLLM: lists)
@pytest.mark.parametrize("kwargs, field, want", [
    ({"stop": "x"}, "stop", ["x"]),
    ({"stop": ["a", "a"]}, "stop", ["a", "a"]),          # vLLM keeps repeats
    ({"stop": ("a", "b")}, "stop", ["a", "b"]),          # a tuple is taken (docs/api.md)
    ({}, "stop", []), ({"stop": None}, "stop", []),
    ({"stop_token_ids": [1, 2]}, "stop_token_ids", [1, 2]),
    ({"stop_token_ids": (1, 2)}, "stop_token_ids", [1, 2]),
    ({"stop_token_ids": [2, 2, 1]}, "stop_token_ids", [2, 1]),  # vLLM: each id once
    ({}, "stop_token_ids", []), ({"stop_token_ids": None}, "stop_token_ids", []),
])
def test_stop_and_stop_token_ids_are_lists_as_vllms(kwargs, field, want):
    value = getattr(SamplingParams(**kwargs), field)
    assert type(value) is list and value == want


def test_a_stop_list_is_the_params_own():
    given = ["x"]
    params = SamplingParams(stop=given)
    params.stop.append("y")  # vLLM's lists take an append
    assert given == ["x"] and params.stop == ["x", "y"]
    clone = params.clone()
    assert clone == params and clone.stop is not params.stop


def test_params_are_unhashable_as_vllms():
    with pytest.raises(TypeError, match="unhashable type: 'SamplingParams'"):
        hash(SamplingParams())
    assert SamplingParams(stop="a") == SamplingParams(stop=["a"])


def test_a_list_changed_after_add_request_does_not_reach_the_request(engine):
    """vLLM 0.32 clones the params on add_request: the same greedy text
    with and without the change (', there was a little girl named Lily')."""
    params = SamplingParams(temperature=0, max_tokens=8)
    engine.add_request("plain", PROMPT, params)
    want = run(engine)["plain"].outputs[0]
    params = SamplingParams(temperature=0, max_tokens=8)
    engine.add_request("changed", PROMPT, params)
    params.stop.append("there")
    params.stop_token_ids.append(want.token_ids[0])
    got = run(engine)["changed"].outputs[0]
    assert (got.text, got.finish_reason) == (want.text, "length")


def test_a_list_changed_before_add_request_is_checked_again(engine):
    """vLLM 0.32 too: 'stop cannot contain an empty string'."""
    params = SamplingParams(temperature=0, max_tokens=8)
    params.stop.append("")
    with pytest.raises(ValueError, match=r"stop\[0\] must be a non-empty string"):
        engine.add_request("empty-stop", PROMPT, params)
    assert not engine.has_unfinished_requests() and "empty-stop" not in engine.groups
    params.stop[0] = "there"  # the change before the call is taken, as in vLLM
    engine.add_request("stop-there", PROMPT, params)
    out = run(engine)["stop-there"].outputs[0]
    assert (out.text, out.finish_reason, out.stop_reason) == (", ", "stop", "there")


# ------------------------------------------------------------------- seed=-1
@pytest.mark.parametrize("seed, want", [(-1, None), (None, None), (0, 0), (2**64 - 1, 2**64 - 1)])
def test_seed_minus_one_is_no_seed_as_in_vllm(seed, want):
    assert SamplingParams(seed=seed).seed == want


@pytest.mark.parametrize("seed", [-2, 2**64])
def test_a_seed_out_of_range_is_refused_saying_the_range(seed):
    with pytest.raises(ValueError, match=rf"\[0, 2\*\*64 - 1\], or -1 or None .* got {seed}"):
        SamplingParams(seed=seed)


# ------------------------------------------------- whole floats as token counts
@pytest.mark.parametrize("field", ["max_tokens", "min_tokens"])
@pytest.mark.parametrize("value, want", [(5.0, 5), (1.0, 1)])
def test_a_whole_float_is_its_count(field, value, want):
    params = SamplingParams(**{"max_tokens": 8, field: value})
    assert getattr(params, field) == want and type(getattr(params, field)) is int


def test_max_tokens_5_0_generates_5_tokens_as_in_vllm():
    out = LLM("tiny", block_size=32, num_blocks=8).generate(
        [PROMPT], SamplingParams(temperature=0, max_tokens=5.0), use_tqdm=False)[0]
    assert out.outputs[0].text == ", there was a little"  # vLLM 0.32's, 5 tokens
    assert len(out.outputs[0].token_ids) == 5


@pytest.mark.parametrize("field, value, named", [
    ("max_tokens", 5.5, "got 5.5: give 5 or 6"), ("min_tokens", 2.5, "got 2.5: give 2 or 3"),
    ("max_tokens", float("inf"), "got inf"), ("max_tokens", float("nan"), "got nan"),
])
def test_a_float_that_is_no_whole_number_is_refused(field, value, named):
    with pytest.raises(ValueError, match=f"{field} must be a whole number, {named}"):
        SamplingParams(**{field: value})


# ------------------------------------------------------------- abort's counts
def test_after_an_abort_both_counts_say_nothing_is_unfinished_as_vllms(engine):
    """vLLM 0.32, the same calls: [0, False] after abort and after each of
    the next steps. pagedkit's next step still reports the abort."""
    engine.add_request("c", PROMPT, SamplingParams(temperature=0, max_tokens=10))
    engine.step()
    engine.abort_request(["c"])
    assert [engine.get_num_unfinished_requests(), engine.has_unfinished_requests()] == [0, False]
    step = engine.step()
    assert [(o.request_id, o.outputs[0].finish_reason) for o in step] == [("c", "abort")]
    assert [engine.get_num_unfinished_requests(), engine.has_unfinished_requests()] == [0, False]
    assert list(engine.step()) == []


def test_a_waiting_request_aborted_counts_nothing_either(engine):
    engine.add_request("w", PROMPT, SamplingParams(temperature=0, max_tokens=10))
    assert [engine.get_num_unfinished_requests(), engine.has_unfinished_requests()] == [1, True]
    engine.abort_request("w")
    assert [engine.get_num_unfinished_requests(), engine.has_unfinished_requests()] == [0, False]
    assert [o.outputs[0].finish_reason for o in engine.step()] == ["abort"]


# ------------------------------------------------------------ duplicate ids
def test_a_repeated_request_id_is_refused_saying_why_and_what_to_do(engine):
    """vLLM 0.32 serves both, each output named 'd', and abort_request('d')
    ends both: pagedkit refuses the second (docs/api.md)."""
    engine.add_request("d", "A", SamplingParams(temperature=0, max_tokens=2))
    with pytest.raises(ValueError) as info:
        engine.add_request("d", "The dog", SamplingParams(temperature=0, max_tokens=3))
    message = str(info.value)
    assert "request id 'd' is already in the engine" in message
    assert "name a request by its id" in message
    assert "give another id, or abort_request(['d']) and step() first" in message
    assert list(run(engine)) == ["d"] and run(engine) == {}


# ------------------------------------------------- vLLM's names pagedkit lacks
@pytest.fixture(scope="module")
def llm():
    return LLM("tiny", block_size=32, num_blocks=8)


CASES = [(kind, name) for kind, names in VLLM_ONLY_ATTRIBUTES.items() for name in names]


def targets(llm):
    """One object of each class `VLLM_ONLY_ATTRIBUTES` lists names of."""
    [out] = llm.generate(["Once"], SamplingParams(max_tokens=2), use_tqdm=False)
    return {"LLM": llm, "LLMEngine": llm.llm_engine, "RequestOutput": out,
            "CompletionOutput": out.outputs[0], "SamplingParams": SamplingParams()}


@pytest.mark.parametrize("kind, name", CASES, ids=[f"{k}.{n}" for k, n in CASES])
def test_a_vllm_name_pagedkit_lacks_says_what_to_use(llm, kind, name):
    target = targets(llm)[kind]
    with pytest.raises(AttributeError) as info:
        getattr(target, name)
    assert str(info.value).startswith(f"pagedkit's {kind} has no {name} (vLLM 0.32's); ")
    assert str(info.value).endswith("(docs/api.md, \"vLLM's names pagedkit lacks\")")
    instead = VLLM_ONLY_ATTRIBUTES[kind][name].split("{engine}")[0]
    assert instead in str(info.value) and "{engine}" not in str(info.value)
    assert info.value.name == name and info.value.obj is target
    assert not hasattr(target, name)


@pytest.mark.parametrize("name", ["embed", "encode", "get_metrics"])
def test_the_newcomers_three_name_what_pagedkit_offers(llm, name):
    with pytest.raises(AttributeError) as info:
        getattr(llm, name)
    offered = {"embed": "use generate", "encode": "use generate",
               "get_metrics": "out.metrics"}[name]
    assert offered in str(info.value)


@pytest.mark.parametrize("kind", list(VLLM_ONLY_ATTRIBUTES))
def test_any_other_missing_name_gets_pythons_message(llm, kind):
    target = targets(llm)[kind]
    with pytest.raises(AttributeError, match=f"^'{kind}' object has no attribute 'no_such'$"):
        target.no_such  # noqa: B018
    own = {"LLM": "get_tokenizer", "LLMEngine": "get_tokenizer", "RequestOutput": "outputs",
           "CompletionOutput": "text", "SamplingParams": "max_tokens"}[kind]
    assert getattr(target, own) is not None  # a name it has is found as ever


@pytest.mark.parametrize("kind, name", CASES, ids=[f"{k}.{n}" for k, n in CASES])
def test_a_vllm_name_read_on_the_class_says_the_same(llm, kind, name):
    """Newcomer 49: ``SamplingParams.from_optional`` (a classmethod in vLLM) is
    read on the class, which gave Python's bare message; the class says what
    its instances say (`pagedkit.sampling_params.VllmNames`)."""
    cls = type(targets(llm)[kind])
    with pytest.raises(AttributeError) as info:
        getattr(cls, name)
    assert str(info.value).startswith(f"pagedkit's {kind} has no {name} (vLLM 0.32's); ")
    assert info.value.name == name and info.value.obj is cls
    with pytest.raises(AttributeError, match=f"^type object '{kind}' has no attribute 'no_such'$"):
        cls.no_such  # noqa: B018


class MyParams(SamplingParams):
    """A user's subclass."""


def test_a_subclass_keeps_the_classs_messages():
    with pytest.raises(AttributeError, match=r"^pagedkit's SamplingParams has no from_optional"):
        MyParams.from_optional  # noqa: B018
    params = MyParams(temperature=0, max_tokens=3)
    assert copy.deepcopy(params) == params and pickle.loads(pickle.dumps(params)) == params


@pytest.mark.parametrize("module", ["pagedkit.vllm_names", "pagedkit.sampling_params",
                                    "pagedkit.engine.outputs", "pagedkit.engine.llm"])
def test_each_module_imports_first_in_a_fresh_interpreter(module):
    """Review: the metaclass's lookup of a missing ``__abstractmethods__`` (made
    by @dataclass) imported the half-loaded vllm_names."""
    import subprocess
    import sys

    run = subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True,
                         text=True, check=False)
    assert run.returncode == 0, run.stderr


def test_a_dunder_probe_gets_pythons_message_at_once():
    for cls in (LLM, LLMEngine, SamplingParams):
        with pytest.raises(AttributeError, match=f"^type object '{cls.__name__}' has no "
                                                 "attribute '__no_such__'$"):
            cls.__no_such__  # noqa: B018
        assert getattr(cls, "__wrapped__", None) is None


def test_a_class_of_another_package_with_the_metaclass_gets_pythons_message():
    from pagedkit.sampling_params import VllmNames

    class LLM2(metaclass=VllmNames):
        pass

    assert not hasattr(LLM2, "get_metrics")
    with pytest.raises(AttributeError, match=r"^type object 'LLM2' has no attribute 'x'$"):
        LLM2.x  # noqa: B018
