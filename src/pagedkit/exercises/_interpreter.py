"""What lab 04's Triton exercise and lab 04c's puzzles share: reading a
learner's ``@triton.jit`` kernel's source, and running it on cases in a
fresh process under Triton's interpreter (Triton reads ``TRITON_INTERPRET``
when it is first imported, so the notebook's own process cannot)."""

from __future__ import annotations

import importlib.util
import inspect
import json
import os
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Callable

from ..i18n import _
from . import CheckResult, not_written, require_function


def kernel_source(name: str, kernel: Callable, unwritten: Callable[[str], str | None]
                  ) -> tuple[str, str] | CheckResult:
    """``(source, function name)`` of a ``@triton.jit`` kernel, or the result
    that says why there is none to run: a stub, a plain Python function, a
    source that cannot be read, or one `unwritten` finds not written yet
    (it returns the message). Ask `no_triton` first: without Triton, a
    notebook's stand-in ``jit`` leaves a plain function, not a kernel."""
    fn = getattr(kernel, "fn", None)
    if fn is None:  # not a Triton kernel: a stub, or a plain Python function
        require_function(name, kernel)
        try:
            kernel()
        except NotImplementedError as err:
            return not_written(name, kernel, err)
        except Exception:
            pass
        return CheckResult(name, False, _("give the check your kernel itself: the function "
                                        "decorated with @triton.jit"))
    try:
        source = textwrap.dedent(inspect.getsource(fn))
    except (OSError, TypeError) as err:
        return CheckResult(name, False, _("cannot read your kernel's source ({err}); define it "
                                          "in a notebook cell or a .py file").format(err=err))
    message = unwritten(source)
    if message:
        return CheckResult(name, False, message)
    return source, fn.__name__


def no_triton(name: str, needs: str) -> CheckResult | None:
    """The result for a machine without Triton (macOS has no wheels), else None."""
    if importlib.util.find_spec("triton") is None:
        return CheckResult(name, False, _("Triton is not installed here (it has no macOS "
                                          "wheels): {needs} Linux or Colab").format(needs=needs))
    return None


def run_in_interpreter(runner: str, spec: dict, timeout: float
                       ) -> tuple[list[dict], int, str]:
    """Run module `runner` (``python -m``) on `spec` in a fresh process with
    ``TRITON_INTERPRET=1``: its JSON result lines, its exit code, its
    stderr. Raises `subprocess.TimeoutExpired` after `timeout` seconds."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(spec, f)
    env = {k: v for k, v in os.environ.items() if k != "PAGEDKIT_KERNELS"}
    env.update(TRITON_INTERPRET="1", OMP_NUM_THREADS="1")
    try:
        done = subprocess.run([sys.executable, "-m", runner, f.name], capture_output=True,
                              text=True, env=env, timeout=timeout)
    finally:
        os.unlink(f.name)
    results = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return results, done.returncode, done.stderr


def still_a_stub(source: str) -> bool:
    """Does `source` still hold a stub — a ``...`` or a ``raise
    NotImplementedError`` (nbgrader's release) — in its code? Comments do
    not count: ``# one program per token ... and head`` is a written line."""
    code = (line.split("#", 1)[0] for line in source.splitlines())
    return any("..." in line or "raise NotImplementedError" in line for line in code)
