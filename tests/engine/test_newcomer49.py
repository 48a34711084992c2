"""Newcomer 49: vLLM 0.32's other engine arguments (generation_config,
load_format, served_model_name, ...) were refused as unknown names, with a
"did you mean" pointing at another argument. Each is now taken at vLLM's
default (it changes nothing) and refused at any other value, by name, value
and default. Every one of them is enumerated; the list itself is checked
against vLLM's own ``EngineArgs`` in tests/vllm/test_engine_args_list.py."""

import math

import pytest

from pagedkit import LLM, EngineArgs, LLMEngine
from pagedkit.engine.args import (
    ONE_DEVICE_ARGS,
    check_engine_args,
    engine_parameters,
    vllm_defaults,
)

NAMES = sorted(vllm_defaults())


def another(default):
    """A value of `default`'s kind that is not it."""
    if default is None or isinstance(default, str):
        return (default or "") + "x"
    if isinstance(default, bool):
        return not default
    if isinstance(default, (int, float)):
        return default + 1
    if isinstance(default, dict):
        return {"a": 1}
    if isinstance(default, list):
        return ["a"]
    raise AssertionError(f"a default of a kind the list should not hold: {default!r}")


def test_the_list_is_vllms_others_only():
    assert len(NAMES) > 200
    assert not set(NAMES) & set(engine_parameters()) and not set(NAMES) & set(ONE_DEVICE_ARGS)
    for name, default in vllm_defaults().items():
        assert not name.startswith("_")
        assert default is None or isinstance(default, (bool, int, float, str, dict, list))
        assert not isinstance(default, (dict, list)) or not default, name
        assert not isinstance(default, float) or math.isfinite(default), name


@pytest.mark.parametrize("name", NAMES)
def test_taken_at_vllms_default_refused_elsewhere(name):
    default = vllm_defaults()[name]
    assert check_engine_args("LLM", {name: default}) == {name: default}
    assert check_engine_args("LLM", {name: None}) == {name: None}  # vLLM's "unset"
    value = another(default)
    with pytest.raises(ValueError) as refused:
        check_engine_args("EngineArgs", {name: value})
    message = str(refused.value)
    assert message.startswith(f"EngineArgs: {name}={value!r} is vLLM's engine argument")
    shown = "None" if default is None else f"{default!r} (vLLM's default) or None"
    assert f"taken only as {name}={shown}," in message and "docs/api.md" in message
    assert "did you mean" not in message


@pytest.mark.parametrize("kwargs", [
    {"generation_config": "auto", "load_format": "auto", "download_dir": None,
     "tokenizer_revision": None, "hf_token": None, "disable_sliding_window": False,
     "num_gpu_blocks_override": None, "kv_events_config": None, "async_scheduling": None,
     "served_model_name": None, "model_impl": "auto", "runner": "auto", "hf_overrides": {}},
    {"watermark": 0}, {"watermark": 0.0}, {"hf_overrides": None, "compilation_config": None}])
def test_the_newcomers_script_builds_and_serves(kwargs):
    llm = LLM("tiny", use_tqdm_on_load=False, num_blocks=16, block_size=4, **kwargs)
    assert llm.generate("Once", use_tqdm=False)[0].outputs[0].token_ids
    assert LLMEngine.from_engine_args(EngineArgs(model="tiny", num_blocks=16, **kwargs))


def test_a_typo_still_gets_the_closest_name():
    with pytest.raises(TypeError, match="did you mean 'block_size'"):
        LLM("tiny", blok_size=4)


@pytest.mark.parametrize("usage_context", [None, "ENGINE_CONTEXT", object()])
@pytest.mark.parametrize("stat_loggers", [None, []])
def test_from_engine_args_takes_vllms_usage_context(usage_context, stat_loggers):
    engine = LLMEngine.from_engine_args(EngineArgs(model="tiny", num_blocks=16),
                                        usage_context=usage_context, stat_loggers=stat_loggers)
    assert not engine.has_unfinished_requests()


@pytest.mark.parametrize("kwargs", [{"stat_loggers": [print]}, {"enable_multiprocessing": True},
                                    {"stat_loggers": [object()], "enable_multiprocessing": 1}])
def test_from_engine_args_refuses_what_would_change_something(kwargs):
    with pytest.raises(ValueError, match="leave both out"):
        LLMEngine.from_engine_args(EngineArgs(model="tiny", num_blocks=16), **kwargs)
