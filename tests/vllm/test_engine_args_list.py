"""pagedkit's list of vLLM's other engine arguments
(src/pagedkit/engine/vllm_engine_args.json, `engine.args.vllm_defaults`)
is vLLM 0.32's own: every public field of its ``EngineArgs`` that is
neither pagedkit's argument nor one of `ONE_DEVICE_ARGS`, with its default
(None where vLLM's default is a config object)."""

import dataclasses

import pytest

from pagedkit.engine.args import ONE_DEVICE_ARGS, engine_parameters, vllm_defaults


def vllms_others():
    from vllm.engine.arg_utils import EngineArgs

    simple = (type(None), bool, int, float, str)
    out = {}
    for f in dataclasses.fields(EngineArgs):
        if f.name.startswith("_") or f.name in engine_parameters() or f.name in ONE_DEVICE_ARGS:
            continue
        default = (f.default if f.default is not dataclasses.MISSING
                   else f.default_factory())
        plain = isinstance(default, simple) or (isinstance(default, (dict, list)) and not default)
        out[f.name] = default if plain else None
    return out


@pytest.mark.vllm
def test_the_list_is_vllms():
    assert vllm_defaults() == vllms_others()
