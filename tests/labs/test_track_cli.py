"""Newcomer 32, finding 6: the build track outside a notebook.
``python -m pagedkit.exercises.track`` printed nothing and exited 0; now it
checks the saved pieces and says so, with an exit status to match. And
`track.save` of a function with no source to read (piped into ``python -``)
is refused by name instead of an OSError."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

SOLUTIONS = Path(__file__).resolve().parents[2] / "labs" / "solutions"


def run(env_track, *args, stdin=None):
    env = dict(os.environ)
    if env_track is None:
        env.pop("PAGEDKIT_TRACK", None)
    else:
        env["PAGEDKIT_TRACK"] = env_track
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env,
                          input=stdin, timeout=900)


def save_from(path, piece, source_file):
    code = (f"import importlib.util\n"
            f"spec = importlib.util.spec_from_file_location('nb', {str(source_file)!r})\n"
            "nb = importlib.util.module_from_spec(spec); spec.loader.exec_module(nb)\n"
            f"from pagedkit.exercises import track; track.save(nb.{piece})\n")
    out = run(str(path), "-c", code)
    assert out.returncode == 0, out.stderr


def test_help_says_what_it_checks_and_where_the_pieces_are():
    out = run(None, "-m", "pagedkit.exercises.track", "--help")
    assert out.returncode == 0
    assert out.stdout.startswith("usage: python -m pagedkit.exercises.track")
    assert "~/.pagedkit/my_engine.py" in out.stdout and "PAGEDKIT_TRACK" in out.stdout


def test_nothing_saved_and_the_track_off_are_said_with_status_1(tmp_path):
    out = run(str(tmp_path / "none.py"), "-m", "pagedkit.exercises.track")
    assert out.returncode == 1
    assert "none of your pieces is saved yet" in out.stdout
    out = run("", "-m", "pagedkit.exercises.track")
    assert out.returncode == 1 and "the build track is off here" in out.stdout


def test_a_right_piece_passes_and_a_wrong_one_is_named(tmp_path):
    saved = tmp_path / "my_engine.py"
    save_from(saved, "choose_victims", SOLUTIONS / "lab06_preemption.py")
    out = run(str(saved), "-m", "pagedkit.exercises.track")
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"your pieces: {saved}" in out.stdout
    assert "DIFFERS" not in out.stdout and "state equal to pagedkit's" in out.stdout
    wrong = tmp_path / "wrong.py"
    wrong.write_text("def choose_victims(running, free_blocks):\n"
                     "    return [rid for rid, _need, _held in running[:1]] if free_blocks < 1 "
                     "else []\n")
    save_from(saved, "choose_victims", wrong)
    out = run(str(saved), "-m", "pagedkit.exercises.track")
    assert out.returncode == 1 and "DIFFERS" in out.stdout and "choose_victims" in out.stdout


@pytest.mark.parametrize("how", ["stdin", "exec"])
def test_a_function_without_source_is_refused_by_name(tmp_path, how):
    code = ("from pagedkit.exercises import track\n"
            "def admit(waiting, tokens_left, seats_left, free_blocks, block_size, "
            "chunked=False):\n    return []\n")
    if how == "exec":
        code = f"exec({code!r})\n"
    code += ("try:\n    track.save(admit)\nexcept ValueError as err:\n    print('REFUSED', err)\n")
    saved = tmp_path / "my_engine.py"
    out = run(str(saved), "-", stdin=code)
    assert out.returncode == 0, out.stderr
    assert "REFUSED save cannot read admit's source" in out.stdout, out.stdout
    assert "nothing saved" in out.stdout and not saved.exists()


def test_it_speaks_the_language_pagedkit_language_names(tmp_path):
    """Newcomer 34: README.zh-CN points Chinese learners at this command, and
    it answered in English under PAGEDKIT_LANGUAGE=zh-CN; a bad value is said
    in one line with status 2, as `python -m pagedkit` says it."""
    env = dict(os.environ, PAGEDKIT_TRACK=str(tmp_path / "none.py"), PAGEDKIT_LANGUAGE="zh-CN")
    out = subprocess.run([sys.executable, "-m", "pagedkit.exercises.track"], capture_output=True,
                         text=True, env=env, timeout=900)
    assert out.returncode == 1
    assert "你还没有保存任何部件" in out.stdout, out.stdout
    out = subprocess.run([sys.executable, "-m", "pagedkit.exercises.track", "--bogus"],
                         capture_output=True, text=True, env=env, timeout=900)
    assert out.returncode == 2 and "用法：" in out.stderr, out.stderr  # argparse's words too
    env["PAGEDKIT_LANGUAGE"] = "fr"
    out = subprocess.run([sys.executable, "-m", "pagedkit.exercises.track"], capture_output=True,
                         text=True, env=env, timeout=900)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "PAGEDKIT_LANGUAGE='fr' is not a language pagedkit speaks" in out.stderr


@pytest.mark.parametrize("steps", [1, 2, 17])
def test_the_step_count_is_said_in_the_singular_for_one(monkeypatch, steps):
    """Newcomer 40: "DIFFERS (1 steps)"."""
    from types import SimpleNamespace

    from pagedkit.exercises import track

    monkeypatch.setattr(track, "lockstep", lambda *a, **k: SimpleNamespace(passed=False,
                                                                         steps=steps))
    pieces = SimpleNamespace(plugged=lambda: True, top_p_filter=None)
    monkeypatch.setattr(track, "_need_pieces", lambda *a: None)
    said = []
    scenario = next(s for s in track.CHECK_ORDER if s != "sampling")
    track.check(pieces, scenarios=[scenario], log=said.append)
    word = "step" if steps == 1 else "steps"
    assert said == [f"{scenario:>15}: DIFFERS ({steps} {word})"]
