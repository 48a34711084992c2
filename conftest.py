"""For every test, the labs' notebooks included: the processes they start
(`python -m pagedkit ...`, nbval's notebook kernels) import this checkout's
package from src/, as pytest itself does (pyproject's ``pythonpath``), whatever
else is installed or on PYTHONPATH."""

import os
from pathlib import Path

SRC = str(Path(__file__).resolve().parent / "src")
os.environ["PYTHONPATH"] = os.pathsep.join(
    [SRC, *(p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != SRC)])
