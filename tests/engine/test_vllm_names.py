"""The AttributeError of the five vLLM-shaped classes (`vllm_only_attribute`)
when a property of theirs raises AttributeError inside: Python then asks
``__getattr__`` for the property's name, and the answer is the property's own
error, not "no attribute" nor vLLM's advice."""

import pytest

from pagedkit import LLM
from pagedkit.vllm_names import VLLM_ONLY_ATTRIBUTES
from tests.engine.test_vllm_parity42 import objects


@pytest.fixture(scope="module")
def made():
    return objects(LLM("tiny", block_size=32, num_blocks=64))


@pytest.mark.parametrize("kind", list(VLLM_ONLY_ATTRIBUTES))
@pytest.mark.parametrize("name", ["broken", "n_gpu_blocks"])
def test_an_attribute_error_inside_a_property_is_the_propertys(made, kind, name):
    """`name`: a fresh one, and one vLLM has (the advice must not hide it either)."""
    target = made[kind]

    def broken(self):
        return self.no_such_field_inside  # AttributeError inside the property

    subclass = type(f"Broken{kind}", (type(target),), {name: property(broken)})
    object.__setattr__(target, "__class__", subclass)
    try:
        with pytest.raises(AttributeError) as error:
            getattr(target, name)
    finally:
        object.__setattr__(target, "__class__", subclass.__mro__[1])
    assert error.value.name == "no_such_field_inside", str(error.value)
    assert "no_such_field_inside" in str(error.value)


def test_the_engines_groups_property_says_what_is_missing(made):
    engine = made["LLMEngine"]
    scheduler = engine.__dict__.pop("scheduler")
    try:
        with pytest.raises(AttributeError, match="'scheduler'"):
            _ = engine.groups
    finally:
        engine.scheduler = scheduler

