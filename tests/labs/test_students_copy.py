"""A graded class's students' copy without the solutions (newcomer 15,
finding 11): docs/teachers_guide.md tells a teacher to hand out pagedkit as a
wheel built from the clone (`pip wheel --no-deps -w dist .`) with the lab
notebooks, since a clone holds labs/solutions/. This builds that wheel (from
a copy of the clone's package files, so that the build leaves nothing in the
clone) and checks that it holds no solution and that the checks run from it
alone."""

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_the_wheel_has_no_solutions_and_its_checks_run(tmp_path):
    pytest.importorskip("setuptools")
    clone = tmp_path / "clone"
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        (clone / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, clone / name)
    shutil.copytree(ROOT / "src", clone / "src",
                    ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps",
                            "--no-build-isolation", "-q", "-w", str(tmp_path / "dist"), "."],
                           cwd=clone, capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stderr[-2000:]
    [wheel] = (tmp_path / "dist").glob("pagedkit-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        archive.extractall(tmp_path / "installed")
    assert "pagedkit/exercises/lab05.py" in names
    assert not [n for n in names if "solutions" in n or n.startswith("labs/")], names[:5]
    check = ("import pagedkit\nfrom pagedkit.exercises import lab05\n"
             "print(pagedkit.__file__)\n"
             "print(lab05.check_finish_steps(lambda lens, n, policy: [0] * len(lens)))\n"
             "import right\nprint(lab05.check_finish_steps(right.finish_steps))\n")
    # a student's right answer, written where the student works (review 41)
    shutil.copy(ROOT / "labs" / "solutions" / "lab05_continuous_batching.py", tmp_path / "right.py")
    ran = subprocess.run([sys.executable, "-c", check], cwd=tmp_path, capture_output=True,
                         text=True, timeout=600,
                         env={"PYTHONPATH": str(tmp_path / "installed"), "PATH": "/usr/bin:/bin",
                              "HOME": str(tmp_path)})
    assert ran.returncode == 0, ran.stderr[-2000:]
    where, verdict, right = ran.stdout.splitlines()[:3]
    assert where.startswith(str(tmp_path / "installed")), where
    assert verdict.startswith("❌ finish_steps: "), verdict
    assert right.startswith("✅ finish_steps"), right
