"""`kernels/cbuild.py`: each C kernel is compiled once per machine into the
cache folder, and later processes load what is there."""

import pytest
from kernel_cases import run_python


@pytest.mark.parametrize("kernel", ["cpu_decode", "cpu_linear"])
def test_each_library_is_built_once_into_the_cache_folder(kernel, tmp_path):
    code = (f"from pagedkit.kernels import {kernel}; import sys; "
            f"why = {kernel}.unavailable(); print(why); sys.exit(why is not None)")
    seen = []
    for _ in range(2):
        run = run_python(code, PAGEDKIT_CACHE_DIR=str(tmp_path))
        if "no C compiler" in run.stdout:
            pytest.skip(run.stdout.strip())
        assert run.returncode == 0, run.stdout + run.stderr[-2000:]
        built = list(tmp_path.iterdir())
        assert len(built) == 1 and built[0].name.startswith(f"{kernel}-")
        assert built[0].suffix == ".so"
        seen.append((built[0].stat().st_ino, built[0].stat().st_mtime_ns))
    assert seen[0] == seen[1]  # the second process loaded the first one's file
