"""The twelfth newcomer's engine findings (4, 6 and nits): every vLLM engine
argument's refusal says what that argument takes, and that is what it takes;
kv_cache_memory_bytes=None is vLLM's "unset" and its errors name it; a device
pagedkit cannot run on is refused by name; output_kind's message names
RequestOutputKind.CUMULATIVE."""

import ast
import re

import pytest
import torch

from pagedkit import LLM, EngineArgs, SamplingParams
from pagedkit.engine.args import (
    INT_ARGS,
    ONE_DEVICE_ARGS,
    VLLM_CALL_ARGS,
    check_call_args,
    check_engine_args,
)
from pagedkit.model.loader import resolve_device
from pagedkit.sampling_params import RequestOutputKind

BAD = object()  # a value no argument takes
CANDIDATES = [None, True, False, *range(-3, 4), 2**20, 1.0, 2e9, "1", "auto", "fcfs", "uni",
              "raw_logprobs", "string", {}, [], BAD]


def refusal(call):
    with pytest.raises((TypeError, ValueError)) as info:
        call()
    return str(info.value)


def accepts(call):
    try:
        call()
    except (TypeError, ValueError):
        return False
    return True


def promised(message: str, value: object) -> bool:
    """Whether `message` (a refusal of a bad value) says `value` is taken:
    "True or False", "an integer >= K (or -1 ...)", "... >= K (or None ...)",
    or "takes name=A or B only"."""
    if "must be True or False" in message:
        return isinstance(value, bool)
    if "must be an integer (not a bool) or None" in message:  # priority: any, ignored
        return value is None or (isinstance(value, int) and not isinstance(value, bool))
    least = re.search(r">= (-?\d+)", message)
    if least:
        if value is None:
            return "(or None" in message
        is_int = isinstance(value, int) and not isinstance(value, bool)
        return is_int and (value >= int(least[1]) or ("(or -1" in message and value == -1))
    listed = re.search(r"takes \w+=(.*?) only", message)
    assert listed, f"the message says nothing of what is taken: {message!r}"
    return any(type(value) is type(v) and value == v
               for v in map(ast.literal_eval, listed[1].split(" or ")))


@pytest.mark.parametrize("name", sorted(ONE_DEVICE_ARGS))
def test_each_engine_arguments_refusal_is_true_for_that_argument(name):
    """For every vLLM engine argument pagedkit takes: its refusal names it,
    and each candidate value is accepted exactly when that message says so
    (kv_cache_memory_bytes said "(or -1: no limit)", max_logprobs' rule,
    and took neither None nor -1)."""
    message = refusal(lambda: check_engine_args("LLM", {name: BAD}))
    assert message.startswith(f"LLM: {name}")
    for value in CANDIDATES:
        said = promised(message, value)
        assert accepts(lambda v=value: check_engine_args("LLM", {name: v})) == said, (name, value)
        if not said:
            assert f"LLM: {name}" in refusal(lambda v=value: check_engine_args("LLM", {name: v}))


def test_the_integer_arguments_say_their_own_rule():
    assert set(INT_ARGS) == {n for n, (a, _) in ONE_DEVICE_ARGS.items() if a == "int"}
    for name in INT_ARGS:
        assert INT_ARGS[name][2] in refusal(lambda n=name: check_engine_args("LLM", {n: BAD}))
    assert "or -1" not in refusal(lambda: check_engine_args("LLM", {"kv_cache_memory_bytes": 0}))


@pytest.mark.parametrize("name", sorted(VLLM_CALL_ARGS))
def test_each_call_arguments_refusal_is_true_for_that_argument(name):
    message = refusal(lambda: check_call_args("LLM.generate()", {name: BAD}, (name,)))
    assert f"{name}=" in message
    for value in [v for v in CANDIDATES if not isinstance(v, list)]:  # a list: one per prompt
        taken = accepts(lambda v=value: check_call_args("LLM.generate()", {name: v}, (name,)))
        assert taken == promised(message, value), (name, value)


def test_kv_cache_memory_bytes_none_is_unset_as_in_vllm():
    default, unset = LLM("tiny"), LLM("tiny", kv_cache_memory_bytes=None)
    assert unset.llm_engine.kv.allocator.num_blocks == default.llm_engine.kv.allocator.num_blocks
    given = LLM("tiny", kv_cache_memory_bytes=None, kv_cache_memory=2**20)
    assert given.llm_engine.kv.allocator.num_blocks == LLM(
        "tiny", kv_cache_memory=2**20).llm_engine.kv.allocator.num_blocks
    args = EngineArgs(model="tiny", kv_cache_memory_bytes=None)
    assert "kv_cache_memory_bytes=None" in repr(args)


@pytest.mark.parametrize("kwargs", [
    {"kv_cache_memory_bytes": -1}, {"kv_cache_memory_bytes": 0}, {"kv_cache_memory_bytes": 2e9},
    {"kv_cache_memory_bytes": "1"}, {"kv_cache_memory_bytes": 10},
    {"kv_cache_memory_bytes": 2**60}, {"kv_cache_memory_bytes": 2**20, "num_blocks": 4},
    {"kv_cache_memory_bytes": 2**20, "kv_cache_memory": 2**20}])
def test_an_error_for_kv_cache_memory_bytes_names_it(kwargs):
    message = refusal(lambda: LLM("tiny", **kwargs))
    assert "kv_cache_memory_bytes" in message
    if "kv_cache_memory" not in kwargs:  # the name not given is not the one advised
        assert not re.search(r"kv_cache_memory(?!_bytes)", message), message


DEVICES = ["meta", torch.device("meta"), "xla", "mps", "xpu", "hpu", "ipu", "lazy", "vulkan",
           "hip", "fpga", "gpu", "", "CPU", " cpu", "cpu0", 0, -1, None, 1.5,
           "cuda", "cuda:0", "cuda:99", "cpu", "cpu:0", "cpu:1", torch.device("cpu", 0), "auto"]


@pytest.mark.parametrize("device", DEVICES, ids=repr)
def test_each_device_either_runs_or_is_refused_by_name(device):
    """meta used to end in Tensor.item()'s RuntimeError, mps and xla in
    torch's own errors (newcomer 12, finding 6)."""
    try:
        llm = LLM("tiny", device=device, num_blocks=8)
    except ValueError as err:
        assert repr(str(device) if isinstance(device, torch.device) else device) in str(err)
        return
    assert llm.llm_engine.device.type in ("cpu", "cuda")
    out = llm.generate(["Once"], SamplingParams(max_tokens=2, temperature=0), use_tqdm=False)
    assert len(out[0].outputs[0].token_ids) == 2


@pytest.mark.parametrize("device, ok", [("cuda", True), ("cuda:0", True), ("cuda:1", True),
                                        ("cuda:2", False), ("cuda:99", False)])
def test_a_cuda_index_past_the_machines_gpus_is_refused_by_name(monkeypatch, device, ok):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    if ok:
        assert resolve_device(device) == torch.device(device)
    else:
        with pytest.raises(ValueError, match=rf"device '{device}': this machine has 2 CUDA"):
            resolve_device(device)


@pytest.mark.parametrize("kind", ["DELTA", "FINAL_ONLY", 1, 2])
def test_output_kinds_refusal_names_cumulative(kind):
    value = getattr(RequestOutputKind, kind) if isinstance(kind, str) else kind
    message = refusal(lambda: SamplingParams(output_kind=value))
    assert "pagedkit takes output_kind=RequestOutputKind.CUMULATIVE" in message
    for taken in (RequestOutputKind.CUMULATIVE, 0):
        assert SamplingParams(output_kind=taken) == SamplingParams()
