"""Every check rejects the plausible wrong answers listed in `wrong_answers.py`
— at least three per exercise — with a message, never an exception. If a
check is loosened until a listed mistake passes, this fails."""

import importlib
import importlib.util

import pytest

from .wrong_answers import MESSAGES, WRONG


def every_exercise():
    for lab in [*(f"lab0{i}" for i in range(10)), "lab04c"]:
        for name in importlib.import_module(f"pagedkit.exercises.{lab}").CHECKS:
            yield lab, name


def test_every_exercise_has_three_wrong_answers():
    missing = [f"{lab}.{name}" for lab, name in every_exercise()
               if len(WRONG.get((lab, name), [])) < 3]
    assert not missing, f"fewer than three wrong answers for {missing}"
    stale = sorted(set(WRONG) - set(every_exercise()))
    assert not stale, f"wrong answers for exercises that no longer exist: {stale}"


@pytest.mark.parametrize("lab, name, wrong", [
    pytest.param(lab, name, fn, id=f"{lab}.{name}.{fn.__name__}")
    for (lab, name), fns in WRONG.items() for fn in fns])
def test_check_rejects_wrong_answer(lab, name, wrong):
    check = importlib.import_module(f"pagedkit.exercises.{lab}").CHECKS[name]
    result = check(wrong)
    assert not result.passed, f"{lab}.{name} accepts the wrong answer {wrong.__name__}"
    assert repr(result).startswith("❌") and result.message
    for words in MESSAGES.get(wrong.__name__, ()):
        assert words in result.message, (wrong.__name__, result.message)


def test_the_wrong_kernels_files_leave_nothing_behind(tmp_path):
    """The wrong Triton kernels are written to module files (Triton reads a
    kernel's source from its file): a process that imports them leaves no
    folder in the temporary directory once it ends (newcomer 8 found 854
    wrong_kernels_* and wrong_puzzles_* folders in /tmp)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    code = ("import os, tests.labs.wrong_answers as w; "
            "print(sum(os.path.exists(k.fn.__code__.co_filename) "
            "for (lab, _), ks in w.WRONG.items() if lab == 'lab04c' for k in ks))")
    done = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True,
                          text=True, env={**os.environ, "TMPDIR": str(tmp_path)}, check=True)
    if importlib.util.find_spec("triton") is not None:
        assert int(done.stdout) > 0     # the kernels' files were there while it ran
    assert list(tmp_path.iterdir()) == []
