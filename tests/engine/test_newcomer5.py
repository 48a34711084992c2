"""The fifth newcomer's findings (N3, N12, N13): SamplingParams takes numpy
and other real scalars as the Python numbers they are, refuses a wrong type
with a TypeError naming it, and never lets torch's bare message through."""

import numpy as np
import pytest
import torch

from pagedkit import LLM, SamplingParams

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
