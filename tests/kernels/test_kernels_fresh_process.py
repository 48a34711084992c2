"""Run the Triton kernel tests in a fresh process when this one cannot interpret them.

Triton fixes interpreter mode when it is first imported, and in a full
`python -m pytest` run something has imported it (compiled) before
tests/kernels/conftest.py could switch the interpreter on. Then every test
that needs the kernels skips in this process, and this test runs them in a
new pytest process that starts with TRITON_INTERPRET=1.
"""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
#: The tests that need the interpreted kernels (a file, or one test of a file).
KERNEL_TEST_FILES = ["test_kernels_triton.py",
                     "test_step_path.py::test_the_triton_kernels_through_a_step"]


def test_triton_kernel_tests_pass_in_a_fresh_process(kernels_not_loaded):
    if kernels_not_loaded is None:
        pytest.skip("the Triton kernel tests run in this process")
    if kernels_not_loaded == "Triton is not installed":
        pytest.skip(kernels_not_loaded)
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    env.pop("PAGEDKIT_KERNELS", None)
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         *(str(HERE / name) for name in KERNEL_TEST_FILES)],
        cwd=HERE.parents[1], env=env, capture_output=True, text=True, timeout=1200)
    report = out.stdout[-6000:] + out.stderr[-2000:]
    assert out.returncode == 0, report
    passed = re.search(r"(\d+) passed", out.stdout)
    assert passed and int(passed.group(1)) >= 20, report
    assert "Triton was imported before" not in out.stdout, report
