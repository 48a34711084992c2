"""Fixtures for the kernel tests: `triton_kernels` (the Triton kernel modules) and `device`.

With a CUDA GPU the kernels are compiled and the tests run on it. Without
one they run in Triton's interpreter, and the switch, TRITON_INTERPRET=1,
has to be on when each kernel is *decorated*: when our kernel modules are
imported, and already when `triton` itself is first imported, because
Triton's own helpers (tl.max, tl.cdiv, ...) are kernels too; Triton also
reads it lazily at a kernel's first run. So this file, which pytest imports
while collecting this folder (before any test runs), turns it on for the
rest of this process, but only on a machine without a GPU, and only if
nothing has imported Triton yet.

That is harmless to the other test folders: without a GPU, compiled Triton
cannot run at all, and `pagedkit.ops` picks the torch references on CPU
whatever TRITON_INTERPRET says (the interpreter is used only when forced with
PAGEDKIT_KERNELS=triton / `ops.set_backend("triton")`). On a GPU machine the
variable is never touched.

If Triton was imported earlier in compiled mode (in the whole suite it is:
transformers imports torch._dynamo, which imports Triton, while the engine
tests are collected), the tests that need `triton_kernels` skip here and
test_kernels_fresh_process.py runs them all in a fresh pytest process.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from types import SimpleNamespace

import pytest
import torch

KERNEL_MODULES = ("store_kv", "paged_decode", "paged_prefill", "copy_blocks")
NO_TRITON = "Triton is not installed"
TOO_LATE = ("Triton was imported before this folder's conftest could switch its interpreter on "
            "(Triton fixes the mode on first import); test_kernels_fresh_process.py runs these "
            "tests in a fresh process")
DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")


def _import_kernels() -> tuple[dict | None, str | None]:
    """The kernel modules by short name, or None and why not."""
    if importlib.util.find_spec("triton") is None:
        return None, NO_TRITON
    if DEVICE.type == "cuda":
        return {m: importlib.import_module(f"pagedkit.kernels.{m}") for m in KERNEL_MODULES}, None
    triton_language = sys.modules.get("triton.language")
    if triton_language is not None and type(triton_language.cdiv).__name__ != "InterpretedFunction":
        return None, TOO_LATE
    os.environ["TRITON_INTERPRET"] = "1"
    modules = {m: importlib.import_module(f"pagedkit.kernels.{m}") for m in KERNEL_MODULES}
    assert all(module.INTERPRETED for module in modules.values())
    return modules, None


KERNELS, NOT_LOADED = _import_kernels()


@pytest.fixture(scope="session")
def triton_kernels() -> SimpleNamespace:
    if KERNELS is None:
        pytest.skip(NOT_LOADED)
    return SimpleNamespace(**KERNELS)


@pytest.fixture(scope="session")
def kernels_not_loaded() -> str | None:
    """Why `triton_kernels` is unavailable in this process (None: it is)."""
    return NOT_LOADED


@pytest.fixture(scope="session")
def device() -> torch.device:
    return DEVICE
