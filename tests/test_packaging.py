"""The install layout: every package folder is listed, no folder can shadow
an editable install, no top-level `kernels`, and `import pagedkit` stays cheap."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "pagedkit"


def test_every_package_folder_is_listed_in_pyproject():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert config["package-dir"] == {"": "src"}  # the src layout (see the next test)
    listed = set(config["packages"])
    found = {".".join(p.parent.relative_to(ROOT / "src").parts)
             for p in PACKAGE.rglob("__init__.py")}
    assert found == listed, f"pyproject packages differ: missing {found - listed}, " \
                            f"stale {listed - found}"


def _clone_named_pagedkit(parent: Path) -> Path:
    """A copy of the files a clone installs from, in a folder named like the clone."""
    clone = parent / "pagedkit"
    clone.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, clone / name)
    shutil.copytree(ROOT / "src", clone / "src",
                    ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    (clone / "labs").mkdir()  # what else a clone holds: folders without __init__.py
    return clone


def test_no_folder_shadows_the_editable_install(tmp_path):
    """Issue #26: `python -m pagedkit` run from the folder that holds the clone.

    The clone (a folder named pagedkit, no __init__.py) is a namespace package
    seen from its parent, and the path search takes it unless a regular
    package named pagedkit sits on some sys.path entry. The README installs
    editable (`-e .`); with the src layout that puts src/ on sys.path, so the
    installed package wins. (The flat layout had setuptools' import-hook finder
    instead, consulted after the path search: this test failed there with
    "cannot import name '__version__' from 'pagedkit' (unknown location)".)
    A bare venv with pagedkit alone, installed as the README does, by pip."""
    parent = tmp_path / "parent"
    parent.mkdir()
    clone = _clone_named_pagedkit(parent)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    pip = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q",
                          "--no-deps", "-e", str(clone)],
                         env=env, capture_output=True, text=True, timeout=600)
    assert pip.returncode == 0, pip.stdout + pip.stderr
    where = subprocess.run([str(python), "-c", "import pagedkit; print(pagedkit.__file__)"],
                           cwd=parent, env=env, capture_output=True, text=True)
    assert where.returncode == 0, where.stderr
    assert Path(where.stdout.strip()) == clone / "src" / "pagedkit" / "__init__.py"
    for argv in (["--version"], ["demo", "--help"], ["bench", "--help"]):
        out = subprocess.run([str(python), "-m", "pagedkit", *argv], cwd=parent, env=env,
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0 and "Traceback" not in out.stderr, (argv, out.stderr)
        assert "pagedkit" in out.stdout


def test_no_top_level_kernels_from_the_repository_root():
    """The kernels live inside the package: from the repository root no top-level
    `kernels` comes from the repository. `kernels` is the name of a PyPI package
    transformers probes for (and, from 5.25, installs): it may be installed, but a
    folder of ours must never stand in for it."""
    import pagedkit.kernels

    assert Path(pagedkit.kernels.__file__).parent == PACKAGE / "kernels"
    code = ("import importlib.util; spec = importlib.util.find_spec('kernels'); "
            "print(spec and (spec.origin or list(spec.submodule_search_locations)[0]))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    found = out.stdout.strip()
    # a venv may live in the clone (CI's .ci-venv): only the root's own folder would shadow
    assert found == "None" or not Path(found).resolve().is_relative_to(ROOT / "kernels"), found


def test_import_pagedkit_and_memory_do_not_load_torch():
    code = "import sys, pagedkit, pagedkit.memory; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_dir_pagedkit_lists_the_public_api_without_loading_torch():
    # Tab completion on `pagedkit.` shows the front door (lazy names), not `importlib`
    code = ("import sys, pagedkit; names = dir(pagedkit); "
            "print(sorted(set(pagedkit.__all__) - set(names)), 'importlib' in names, "
            "'annotations' in names, 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["[]", "False", "False", "False"]
