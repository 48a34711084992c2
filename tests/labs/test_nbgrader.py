"""The labs under nbgrader (`pagedkit.exercises.nbgrader`).

Without nbgrader: every exercise is a solution cell and a check cell with
nbgrader's metadata, and the instructor's version fills every stub with the
reference solution, which passes its check. With nbgrader (requirements-dev;
CI sets PAGEDKIT_REQUIRE_NBGRADER=1, so there it cannot skip): the round trip
on lab 02 — ``generate_assignment`` gives back the committed lab's cells
with no solution left, and ``autograde`` gives the reference solutions full
marks, the unsolved release zero, and a plausible wrong answer loses exactly
its exercise's point."""

import ast
import importlib
import importlib.util
import inspect
import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from pagedkit.exercises import nbgrader as ng

from .wrong_answers import WRONG

LABS = sorted(ng.LABS.glob("*.ipynb"))
#: Labs whose exercises do not carry nbgrader's metadata yet, and why (none: lab
#: 04c's puzzles, a comment and `...` in a kernel body, are filled by
#: `pagedkit.exercises.nbgrader.fill`'s puzzle rule since #27).
NOT_GRADED_YET: set[str] = set()


def _cells(path):
    return json.loads(path.read_text())["cells"]


@pytest.mark.parametrize("path", LABS, ids=lambda p: p.stem)
def test_every_exercise_is_a_solution_cell_then_its_check_cell(path):
    nb = json.loads(path.read_text())
    found = ng.exercises(nb)
    stubs = [i for i, c in enumerate(nb["cells"])
             if c["cell_type"] == "code" and "YOUR CODE" in ng.text(c)]
    if path.stem in NOT_GRADED_YET:
        assert not found and stubs, "graded now: take it off NOT_GRADED_YET"
        return
    assert [solution for solution, *_ in found] == stubs, "a stub without nbgrader metadata"
    ids = [nb["cells"][i]["metadata"]["nbgrader"]["grade_id"] for s, c, *_ in found for i in (s, c)]
    assert len(ids) == len(set(ids)), f"grade ids repeat: {ids}"
    for solution, check, module, name in found:
        assert name in importlib.import_module(f"pagedkit.exercises.{module}").CHECKS
        meta = nb["cells"][check]["metadata"]["nbgrader"]
        assert meta["points"] == 1 and meta["locked"] and not meta["solution"]
        assert not nb["cells"][solution]["metadata"]["nbgrader"]["grade"]
        assert "YOUR CODE" not in ng.text(nb["cells"][check])
    assert found or path.name.startswith("10_"), "every lab but lab 10 (a demonstration) has one"


def test_every_check_of_the_package_has_its_exercise_in_a_lab():
    found = {(module, name) for path in LABS
             for *_, module, name in ng.exercises(json.loads(path.read_text()))}
    expected = {(lab, name) for lab in [*(f"lab0{i}" for i in range(10)), "lab04c"]
                for name in importlib.import_module(f"pagedkit.exercises.{lab}").CHECKS}
    assert found == expected


@pytest.mark.parametrize("path", LABS, ids=lambda p: p.stem)
def test_the_instructor_version_holds_solutions_that_pass_their_checks(path):
    source = ng.source_notebook(path)
    namespace = {}    # one, as in the notebook: a solution may call an earlier exercise's
    for solution, check, module, name in ng.exercises(source):
        code = ng.text(source["cells"][solution])
        begin, end = code.index(ng.SOLUTION[0]), code.index(ng.SOLUTION[1])
        region = code[begin:end]
        assert "raise NotImplementedError" not in region
        assert not re.search(r"= \.\.\.$", region, re.M)     # lab 04's kernel stub
        ast.parse(code)
        assert ng.HIDDEN[0] in ng.text(source["cells"][check])
        if name == "paged_kernel" or module == "lab04c":  # Triton kernels: each check runs
            continue            # ~10 s; test_exercises and test_lab04c_puzzles_filled run them
        exec(compile(code, f"<{path.stem}:{name}>", "exec"), namespace)
        check_fn = importlib.import_module(f"pagedkit.exercises.{module}").CHECKS[name]
        result = check_fn(namespace[name])
        assert result.passed, result.message
    assert all(not c.get("outputs") for c in source["cells"] if c["cell_type"] == "code")


def _nbgrader(course, *args):
    # nbgrader runs `alembic` by name: the interpreter's own scripts first on PATH
    path = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])
    done = subprocess.run([sys.executable, "-m", "nbgrader", *args, "--force"], cwd=course,
                          capture_output=True, text=True, timeout=1800,
                          env={**os.environ, "PATH": path})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


def _wrong(notebook, name, wrong_fn):
    """`notebook` with the solution cell of `name` replaced by a wrong answer."""
    nb = json.loads(notebook.read_text())
    [(solution, *_)] = [e for e in ng.exercises(nb) if e[3] == name]
    nb["cells"][solution]["source"] = (inspect.getsource(wrong_fn)
                                       + f"\n\n{name} = {wrong_fn.__name__}\n")
    return nb


def test_nbgrader_round_trip(tmp_path, lab="02", wrong_name="first_fit"):
    """Lab 02: three exercises, so a wrong answer to one leaves two points (and
    notebook runs of a few seconds: autograde runs the lab three times)."""
    if os.environ.get("PAGEDKIT_REQUIRE_NBGRADER") != "1":
        pytest.importorskip("nbgrader")
    [path] = [p for p in LABS if p.name.startswith(lab + "_")]
    course, assignment = tmp_path / "course", ng.assignment_name(path)
    [source] = ng.write_course(course, [path])
    _nbgrader(course, "generate_assignment", assignment)

    release = course / "release" / assignment / path.name
    committed, released = _cells(path), _cells(release)
    released_code = "\n".join(ng.text(c) for c in released)
    for marker in (*ng.SOLUTION, *ng.HIDDEN, "the lab's check did not pass"):
        assert marker not in released_code
    for solution, check, _, _ in ng.exercises(json.loads(path.read_text())):
        for i in (solution, check):      # the students' copy is the committed lab
            assert ng.text(released[i]) == ng.text(committed[i])
            assert released[i]["metadata"]["nbgrader"]["grade_id"] == \
                committed[i]["metadata"]["nbgrader"]["grade_id"]

    module = ng.exercises(json.loads(path.read_text()))[0][2]
    submissions = {"reference": json.loads(source.read_text()),
                   "unsolved": json.loads(release.read_text()),
                   "wrong": _wrong(source, wrong_name, WRONG[(module, wrong_name)][0])}
    for student, nb in submissions.items():
        target = course / "submitted" / student / assignment / path.name
        target.parent.mkdir(parents=True)
        target.write_text(json.dumps(nb))
    _nbgrader(course, "autograde", assignment)

    from nbgrader.api import Gradebook
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        scores = {s: gradebook.find_submission(assignment, s).score for s in submissions}
        points = gradebook.find_assignment(assignment).max_score
    exercises = len(ng.exercises(json.loads(path.read_text())))
    assert points == exercises
    assert scores == {"reference": points, "unsolved": 0, "wrong": points - 1}
    shutil.rmtree(course)


def test_grading_turns_the_build_track_off_and_a_course_needs_the_labs(tmp_path, monkeypatch):
    ng.write_course(tmp_path / "course", [])
    config = (tmp_path / "course" / "nbgrader_config.py").read_text()
    assert 'os.environ["PAGEDKIT_TRACK"] = ""' in config
    compile(config, "nbgrader_config.py", "exec")
    monkeypatch.setattr(ng, "LABS", tmp_path / "nowhere")
    with pytest.raises(SystemExit):
        ng.main([str(tmp_path / "other")])
    assert not (tmp_path / "other").exists()


def test_lab04c_puzzles_filled_are_the_reference_kernels():
    """Lab 04c (#27): each puzzle's stub keeps its given first lines and gets the
    rest of the reference kernel between the solution markers; the kernel so
    filled passes its check (run in Triton's interpreter, one process each)."""
    pytest.importorskip("triton")
    [path] = [p for p in LABS if p.stem == "04c_triton_puzzles"]
    committed = json.loads(path.read_text())
    source = ng.source_notebook(path)
    found = ng.exercises(source)
    assert [name for *_, name in found] == ["store_kv_kernel", "gather_kernel", "decode_kernel",
                                            "merge_kernel"]
    for solution, _check, module, name in found:
        code = ng.text(source["cells"][solution])
        stub = ng.text(committed["cells"][solution])
        given = stub.split("# YOUR CODE:")[0]
        assert code.startswith(given) and ng.SOLUTION[0] in code and "\n    ...\n" not in code
        if name != "gather_kernel":     # one kernel through its check: each takes ~10 s
            continue
        import tempfile

        with tempfile.TemporaryDirectory() as folder:   # Triton reads a kernel from its file
            file = os.path.join(folder, f"filled_{name}.py")
            with open(file, "w") as f:
                f.write("import triton\nimport triton.language as tl\njit = triton.jit\n\n"
                        + code + "\n")
            spec = importlib.util.spec_from_file_location(f"filled_{name}", file)
            filled = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(filled)
            result = importlib.import_module(f"pagedkit.exercises.{module}").CHECKS[name](
                getattr(filled, name))
        assert result.passed, result.message


def test_a_teachers_edits_are_kept_unless_forced(tmp_path, capsys):
    """Writing a course again keeps a teacher's edited source/ notebooks and
    config (names them, writes nothing), replaces them with --force, and
    refuses a file as the course folder (sixth newcomer's N8)."""
    course = tmp_path / "course"
    assert ng.main([str(course), "--labs", "00"]) == 0
    config = course / "nbgrader_config.py"
    [notebook] = (course / "source" / "lab00").glob("*.ipynb")
    assert ng.main([str(course), "--labs", "00"]) == 0       # unchanged: written again quietly
    for path in (config, notebook):
        original = path.read_text()
        path.write_text(original + " ")                       # a teacher's edit
        with pytest.raises(SystemExit):
            ng.main([str(course), "--labs", "00,02"])
        err = capsys.readouterr().err
        assert str(path) in err and "--force" in err
        assert path.read_text() == original + " "             # kept
        assert not (course / "source" / "lab02").exists()     # nothing else written
        assert ng.main([str(course), "--labs", "00", "--force"]) == 0
        assert path.read_text() == original                   # replaced when asked
    with pytest.raises(SystemExit):
        ng.main([str(config)])
    assert "is a file" in capsys.readouterr().err
