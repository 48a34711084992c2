"""The install layout: every package folder is listed, kernels/ maps to
pagedkit.kernels, and `import pagedkit` stays cheap."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_every_package_folder_is_listed_in_pyproject():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    found = {".".join(p.parent.relative_to(ROOT).parts)
             for p in (ROOT / "pagedkit").rglob("__init__.py")}
    found |= {"pagedkit.kernels." + ".".join(p.parent.relative_to(ROOT / "kernels").parts)
              for p in (ROOT / "kernels").rglob("__init__.py")}
    found = {name.rstrip(".") for name in found}
    assert found == listed, f"pyproject packages differ: missing {found - listed}, " \
                            f"stale {listed - found}"


def test_kernels_folder_is_pagedkit_kernels_and_inert_as_top_level_kernels():
    """From the repository root, kernels/ is also visible as a top-level
    `kernels`, the name of a PyPI package transformers probes for: the probe
    must still say "not installed" and the import must stay side-effect free."""
    import pagedkit.kernels

    assert Path(pagedkit.kernels.__file__).parent == ROOT / "kernels"
    code = ("import sys, transformers.utils.import_utils as u; "
            "assert not u.is_kernels_available(); "
            "import kernels; print(sorted(k for k in vars(kernels) if not k.startswith('__')))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_import_pagedkit_and_memory_do_not_load_torch():
    code = "import sys, pagedkit, pagedkit.memory; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
