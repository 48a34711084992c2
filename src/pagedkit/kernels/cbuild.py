"""Building a C kernel on first use: compile once per machine, load with ctypes.

`cpu_decode.py` and `cpu_linear.py` each call `build(their .c file, what)`.
The first call in a process compiles the file with the machine's C compiler
(``$CC``, else ``cc``; well under a second) for this CPU (``-march=native``)
with OpenMP, into a cache folder (``$PAGEDKIT_CACHE_DIR``, else
``$XDG_CACHE_HOME/pagedkit`` or ``~/.cache/pagedkit``), named by a hash of
the source, the compiler, the flags and the CPU: later processes load it.
It compiles with ``-ffast-math`` (so the exponentials vectorize) but links
without it: gcc would otherwise link ``crtfastmath.o``, whose constructor
sets the CPU's flush-to-zero flags for the whole process when the library
loads, and torch's own results would change (tiny values would become 0).
The library links ``libgomp.so.1``, the OpenMP runtime torch's CPU wheels
load, so both share one pool of threads. Where it cannot be built (no
compiler, no OpenMP, as with Apple's clang), `build` says why and the
caller runs its torch path.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import platform
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path

CACHE_ENV_VAR = "PAGEDKIT_CACHE_DIR"
#: Compiling: -ffast-math lets the exponentials vectorize (the C files use no
#: infinities). Linking: without it (see the module's docstring).
FLAGS = ("-O3", "-march=native", "-ffast-math", "-fopenmp", "-fPIC")
LINK_FLAGS = ("-shared", "-fopenmp")


def _cpu_description() -> str:
    """What the compiled code depends on besides the source: the CPU's model and flags."""
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor() or platform.machine()
    lines = [line for line in info.splitlines() if line.startswith(("model name", "flags"))]
    return "\n".join(dict.fromkeys(lines))


def _cache_dir() -> Path:
    configured = os.environ.get(CACHE_ENV_VAR)
    if configured:
        return Path(configured)
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "pagedkit"


def _compile(compiler: list[str], source: Path, target: Path) -> None:
    """Compile `source` into `target`, atomically (processes may build it at once)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        built, obj = Path(tmp) / target.name, Path(tmp) / f"{source.stem}.o"
        for command in ([*compiler, *FLAGS, "-c", "-o", str(obj), str(source)],
                        [*compiler, *LINK_FLAGS, "-o", str(built), str(obj), "-lm"]):
            run = subprocess.run(command, capture_output=True, text=True, timeout=120)
            if run.returncode != 0:
                raise OSError(f"{' '.join(command)} failed: {run.stderr.strip()[:400]}")
        os.replace(built, target)


def _load(compiler: list[str], source: Path, target: Path) -> ctypes.CDLL:
    """The library at `target`, built first if it is not there; built again
    once if what is there does not load (a file cut short, say)."""
    if not target.exists():
        _compile(compiler, source, target)
    try:
        return ctypes.CDLL(str(target))
    except OSError:
        _compile(compiler, source, target)
        return ctypes.CDLL(str(target))


@functools.cache
def build(source: Path, what: str) -> ctypes.CDLL | str:
    """The library built from `source` (`what` it is, for messages), or why
    there is none (built once per process)."""
    named = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if named is None:
        return "no C compiler was found (set CC, or install gcc)"
    compiler = shlex.split(named)  # CC may hold a command: "ccache gcc", "gcc -m64"
    try:
        version = subprocess.run([*compiler, "--version"], capture_output=True, text=True,
                                 timeout=30).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        return f"the C compiler {named!r} does not run ({exc})"
    key = hashlib.sha256("\n".join([source.read_text(), named, version, " ".join(FLAGS),
                                    " ".join(LINK_FLAGS), _cpu_description()]).encode())
    target = _cache_dir() / f"{source.stem}-{key.hexdigest()[:16]}.so"
    try:
        return _load(compiler, source, target)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"{what} could not be built with {named} ({exc})"
