"""Tests beside the real vLLM.

Tests marked ``vllm`` need vLLM's CPU build (requirements-vllm.txt, in a venv
of its own: docs/vllm.md). Where it is not importable they are skipped, unless
PAGEDKIT_REQUIRE_VLLM=1 (CI's vLLM step sets it): then they fail, so a broken
install cannot pass as skipped. The other tests here run everywhere.
"""

from __future__ import annotations

import functools
import os

import pytest

# vLLM in this process (its engine core otherwise runs in a child process),
# and block hashes published whole (32 bytes) rather than cut to 64-bit ints.
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES", "0")


@functools.cache
def vllm_import_error() -> str | None:
    """Why vLLM cannot be imported here (None: it can)."""
    from pagedkit.vllm.compare import vllm_missing

    return vllm_missing()


def pytest_runtest_setup(item):
    if item.get_closest_marker("vllm") is None:
        return
    why = vllm_import_error()
    if why is None:
        return
    if os.environ.get("PAGEDKIT_REQUIRE_VLLM") == "1":
        pytest.fail(f"PAGEDKIT_REQUIRE_VLLM=1 but {why}", pytrace=False)
    pytest.skip(f"{why} (PAGEDKIT_REQUIRE_VLLM=1 makes this a failure)")
