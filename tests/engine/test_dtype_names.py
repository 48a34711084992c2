"""dtype spellings: pagedkit takes exactly the ones vLLM 0.32 takes.

The two sources of stop 38 disagreed: vLLM's ``_get_and_verify_dtype`` lower-cases
a string, but ``ModelConfig``'s pydantic check (``dtype: Literal["auto", "half",
"float16", "bfloat16", "float", "float32"] | torch.dtype``) runs first. The real
vLLM settles it (vLLM 0.32.0 CPU build, run 2026-12-03 on
src/pagedkit/models/tiny: ``LLM(model=<that folder>, dtype=X, block_size=32,
enforce_eager=True)`` with VLLM_ENABLE_V1_MULTIPROCESSING=0
VLLM_CPU_KVCACHE_SPACE=1): every spelling below, the dtype vLLM's model config
took, or None where ``LLM`` raised pydantic's ValidationError."""

import pytest
import torch

from pagedkit import LLM
from pagedkit.model.loader import DTYPES

VLLM_0_32 = {
    "auto": torch.float16, "AUTO": None, "Auto": None,
    "half": torch.float16, "HALF": None, "Half": None,
    "float16": torch.float16, "FLOAT16": None, "Float16": None,
    "float": torch.float32, "FLOAT": None, "Float": None,
    "float32": torch.float32, "FLOAT32": None, "Float32": None,
    "bfloat16": torch.bfloat16, "BFLOAT16": None, "BFloat16": None,
    "float64": None, "FLOAT64": None, " half": None, "half ": None, "fp16": None,
    "torch.float16": None, torch.float16: torch.float16, torch.float32: torch.float32,
    torch.bfloat16: torch.bfloat16, torch.float64: torch.float64,
}

#: Where pagedkit differs on purpose (docs/api.md, "Compared with vLLM"): "auto" keeps the
#: model's own dtype (the tiny model's float32; vLLM's CPU build swaps a float32 config for
#: float16), and "float64" is pagedkit's own name for exact references.
PAGEDKIT_OWN = {"auto": torch.float32, "float64": torch.float64}


@pytest.mark.parametrize("dtype", list(VLLM_0_32), ids=repr)
def test_pagedkit_takes_the_dtype_spellings_vllm_takes(dtype):
    want = PAGEDKIT_OWN.get(dtype, VLLM_0_32[dtype]) if isinstance(dtype, str) else VLLM_0_32[dtype]
    if want is None:
        with pytest.raises(ValueError, match="dtype must be"):
            LLM("tiny", dtype=dtype, num_blocks=8)
    else:
        assert LLM("tiny", dtype=dtype, num_blocks=8).llm_engine.dtype == want


def case_spellings():
    """Every name vLLM takes, and pagedkit's float64, in other cases and with
    spaces around it (the name as written is a dtype: the tests above)."""
    for name in ["auto", *DTYPES]:
        for spelling in {name, name.upper(), name.capitalize(), name.swapcase(),
                         name[:-1] + name[-1].upper(), f" {name}", f"{name} ",
                         f"\t{name.upper()}\n"} - {name}:
            yield name, spelling


@pytest.mark.parametrize("name, spelling", sorted(case_spellings()))
def test_a_name_in_another_case_is_refused_naming_the_name_meant(name, spelling, monkeypatch):
    """vLLM refuses 'HALF' (the record above); so does pagedkit, before the
    weights load, and says which name was meant."""
    import pagedkit.engine.llm_engine as llm_engine

    monkeypatch.setattr(llm_engine, "load_model", lambda *a, **k: pytest.fail("loaded first"))
    with pytest.raises(ValueError) as refused:
        LLM("tiny", dtype=spelling, num_blocks=8)
    assert str(refused.value).endswith(
        f"got {spelling!r} (names are lower-case without spaces, as vLLM takes them: "
        f"use {name!r})")
