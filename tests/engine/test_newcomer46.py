"""Newcomer 46's findings (issue #26), each as it was met."""

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from pagedkit import LLM, SamplingParams
from pagedkit.model import accel
from pagedkit.model.loader import DTYPES

GREEDY = SamplingParams(temperature=0, max_tokens=4, ignore_eos=True)
PROMPT = {"prompt_token_ids": [1, 5, 77, 30, 12]}


def small_llama(dtype: torch.dtype):
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=96,
                         num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=128)
    return LlamaForCausalLM(config).eval().to(dtype)


ASKED = sorted(DTYPES) + sorted({str(d) for d in DTYPES.values()}) + ["auto"]


@pytest.mark.parametrize("own", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("asked", ASKED)
def test_a_model_object_is_served_in_its_own_dtype_or_refused_unchanged(own, asked):
    """LLM(model_object, dtype=other) converted the caller's model in place,
    and an LLM already serving it then failed in index_copy_. A dtype other
    than the object's own is refused before anything changes, naming both and
    what to do; its own (by any name) or "auto" serves."""
    model = small_llama(own)
    first = LLM(model, num_blocks=8, block_size=8)
    before = first.generate(PROMPT, GREEDY, use_tqdm=False)[0].outputs[0].token_ids
    value = getattr(torch, asked.removeprefix("torch.")) if asked.startswith("torch.") else asked
    wanted = own if asked == "auto" else (value if isinstance(value, torch.dtype)
                                          else DTYPES[value])
    if wanted == own:
        second = LLM(model, num_blocks=8, block_size=8, dtype=value)
        assert second.generate(PROMPT, GREEDY, use_tqdm=False)[0].outputs[0].token_ids == before
    else:
        with pytest.raises(ValueError) as info:
            LLM(model, num_blocks=8, block_size=8, dtype=value)
        assert str(info.value) == (
            f"dtype={value!r} is not the model object's own dtype ({own}): serving it so would "
            "convert your model in place (and break any LLM already serving it); convert it "
            f"yourself first (model.to({wanted})) or leave dtype unset ('auto', the model's own)")
    assert all(p.dtype == own for p in model.parameters())
    assert first.generate(PROMPT, GREEDY, use_tqdm=False)[0].outputs[0].token_ids == before


@pytest.mark.parametrize("asked", ["float32", "bfloat16", "float16", "float64", "auto"])
def test_a_model_loaded_by_name_takes_any_dtype(asked):
    llm = LLM("tiny", num_blocks=8, dtype=asked)
    assert llm.generate(PROMPT, GREEDY, use_tqdm=False)[0].outputs[0].token_ids


@pytest.mark.parametrize("width, why", [(64, True), (255, True), (256, False), (512, False)])
def test_the_packing_rule_says_it_is_a_rule_not_a_law(width, why):
    """bench linears (in cache) timed a 256 x 4096 output layer faster packed
    while the report said such layers "run as fast unpacked": the reason now
    names auto's rule and where it was measured, not a speed."""
    reason = accel.below_rule(width, 4096)
    assert (reason is not None) == why
    if why:
        assert reason == ("layers under 256 inputs wide stay unpacked (auto's rule: "
                          "docs/benchmarks.md, 'The tiny model packed')")
