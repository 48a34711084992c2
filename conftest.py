"""For every test, the labs' notebooks included: the processes they start
(`python -m pagedkit ...`, nbval's notebook kernels) import this checkout's
package from src/, as pytest itself does (pyproject's ``pythonpath``), whatever
else is installed or on PYTHONPATH."""

import atexit
import os
import shutil
import tempfile
from pathlib import Path

SRC = str(Path(__file__).resolve().parent / "src")
os.environ["PYTHONPATH"] = os.pathsep.join(
    [SRC, *(p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != SRC)])

# The build track keeps a learner's pieces in ~/.pagedkit/my_engine.py (or
# $PAGEDKIT_TRACK), and labs 03-08 save theirs there as they run: under the tests
# they save the stubs. The tests and their notebook kernels use a file of their
# own, so running the tests never overwrites a learner's work; its folder goes
# when the run ends (tests/labs/test_track.py runs pytest to see that it does).
TRACK_DIR = Path(tempfile.mkdtemp(prefix="pagedkit-track-"))
os.environ["PAGEDKIT_TRACK"] = str(TRACK_DIR / "my_engine.py")
atexit.register(shutil.rmtree, TRACK_DIR, ignore_errors=True)

# Lab 10 runs beside vLLM, and its committed outputs are vLLM's: nbval runs it
# where vLLM is importable (CI's vLLM step, PAGEDKIT_REQUIRE_VLLM=1, where a
# broken install then fails it). Elsewhere tests/labs/test_lab10_without_vllm.py
# runs it and checks that every vLLM cell says vLLM is not installed. The same
# holds for its Chinese edition, labs/zh-CN/10_meet_vllm.ipynb.
if os.environ.get("PAGEDKIT_REQUIRE_VLLM") != "1":
    import importlib.util

    if importlib.util.find_spec("vllm") is None:
        collect_ignore = ["labs/10_meet_vllm.ipynb", "labs/zh-CN/10_meet_vllm.ipynb"]
