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
from types import SimpleNamespace

import pytest

from pagedkit.exercises import CheckResult
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


@pytest.mark.parametrize("path", LABS, ids=lambda p: p.stem)
def test_a_graded_check_cell_fails_with_the_checks_own_verdict(path):
    """Newcomer 8's finding 5a: under autograde a failing check cell said only
    "the lab's check did not pass". Every check cell of the instructor's
    version, run with a check that fails, now raises an AssertionError whose
    message is the check's verdict (call, expectation, hint); with one that
    passes it runs through and its last line gives the verdict, the ✅ line
    the lab shows. (A stand-in check, so that every cell is run, the Triton
    ones too; the round trip below runs the real checks under nbgrader.)"""
    source = ng.source_notebook(path)
    for _solution, check, module, name in ng.exercises(source):
        code = ng.text(source["cells"][check])
        *body, last = ast.parse(code).body
        assert ast.unparse(last).startswith("display("), \
            f"{name}: the cell does not display the verdict"
        argument = re.search(rf"check_{name}\((\w+)\)", code).group(1)
        for passed in (False, True):
            verdict = CheckResult(name, passed, f"{name}(3, 4) returned 1, expected 2.  "
                                                "Hint: the tail block is partly full")
            calls = []

            def stand_in(fn, verdict=verdict, calls=calls):
                calls.append(fn)
                return verdict

            namespace = {module: SimpleNamespace(**{f"check_{name}": stand_in}),
                         argument: object()}
            run = compile(ast.Module(body, type_ignores=[]), f"<{name}-check>", "exec")
            if passed:
                exec(run, namespace)
                shown = []
                namespace["display"] = shown.append
                exec(compile(ast.Module([last], type_ignores=[]), "<last>", "exec"), namespace)
                assert shown == [verdict]
            else:
                with pytest.raises(AssertionError) as failure:
                    exec(run, namespace)
                assert str(failure.value) == repr(verdict)
            assert calls and all(fn is namespace[argument] for fn in calls)


def _nbgrader(course, *args):
    """Run ``nbgrader ARGS --force`` in `course`; its log (stderr and stdout)."""
    # nbgrader runs `alembic` by name: the interpreter's own scripts first on PATH
    path = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])
    done = subprocess.run([sys.executable, "-m", "nbgrader", *args, "--force"], cwd=course,
                          capture_output=True, text=True, timeout=1800,
                          env={**os.environ, "PATH": path})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stderr + done.stdout


def _wrong(notebook, name, wrong_fn):
    """`notebook` (a path or a notebook) with the solution cell of `name`
    replaced by a wrong answer, and the helpers of wrong_answers.py it calls."""
    nb = json.loads(notebook.read_text()) if hasattr(notebook, "read_text") else notebook
    [(solution, *_)] = [e for e in ng.exercises(nb) if e[3] == name]
    helpers = [wrong_fn.__globals__[n] for n in wrong_fn.__code__.co_names
               if inspect.isfunction(wrong_fn.__globals__.get(n))]
    nb["cells"][solution]["source"] = ("\n\n".join(inspect.getsource(f)
                                                   for f in [*helpers, wrong_fn])
                                       + f"\n\n{name} = {wrong_fn.__name__}\n")
    return nb


_CHECKSUM = re.compile(r"Attribute 'checksum' for cell (\S+) has changed! "
                       r"\(should be: (\w+), got: (\w+)\)")


def _checksum_warnings(log):
    """``{student: {grade id: (should be, got)}}`` from autograde's log."""
    found = {}
    for student, part in re.findall(r"Sanitizing \S*?/submitted/(\w+)/(.*?)(?=Sanitizing|\Z)",
                                    log, re.S):
        found[student] = {cell: (should, got) for cell, should, got in _CHECKSUM.findall(part)}
    return found


def _check_outputs(graded, exercises):
    """``{name: (error message or None, text of its results)}`` of each check
    cell of an autograded notebook."""
    cells = json.loads(graded.read_text())["cells"]
    found = {}
    for _solution, check, _module, name in exercises:
        outputs = cells[check]["outputs"]
        errors = [o for o in outputs if o["output_type"] == "error"]
        assert len(errors) <= 1
        shown = "".join("".join(o["data"].get("text/plain", "")) for o in outputs
                        if o["output_type"] in ("execute_result", "display_data"))
        found[name] = (f"{errors[0]['ename']}: {errors[0]['evalue']}" if errors else None, shown)
    return found


def test_nbgrader_round_trip(tmp_path, lab="02", wrong_name="first_fit"):
    """Lab 02: three exercises, so a wrong answer to one leaves two points (and
    notebook runs of a few seconds: autograde runs the lab four times).

    Also what the teacher reads (newcomer 8's finding 5): a failing check cell
    of the graded notebook shows the check's own verdict, hint included, a
    passing one its ✅ line; and nbgrader's "Attribute 'checksum' ... has
    changed!" warning comes for every check cell of a submission without the
    hidden tests (a student's copy, untouched or not) and for no cell of one
    with them, the untouched cell's `got` being the released cell's checksum,
    as docs/teachers_guide.md says."""
    if os.environ.get("PAGEDKIT_REQUIRE_NBGRADER") != "1":
        pytest.importorskip("nbgrader")
    [path] = [p for p in LABS if p.name.startswith(lab + "_")]
    course, assignment = tmp_path / "course", ng.assignment_name(path)
    [source], _note = ng.write_course(course, [path])
    _nbgrader(course, "generate_assignment", assignment)

    release = course / "release" / assignment / path.name
    committed, released = _cells(path), _cells(release)
    released_code = "\n".join(ng.text(c) for c in released)
    for marker in (*ng.SOLUTION, *ng.HIDDEN, ng.GRADED):
        assert marker not in released_code
    found = ng.exercises(json.loads(path.read_text()))
    for solution, check, _, _ in found:
        for i in (solution, check):      # the students' copy is the committed lab
            assert ng.text(released[i]) == ng.text(committed[i])
            assert released[i]["metadata"]["nbgrader"]["grade_id"] == \
                committed[i]["metadata"]["nbgrader"]["grade_id"]

    module = found[0][2]
    checks = importlib.import_module(f"pagedkit.exercises.{module}").CHECKS
    names = [name for *_, name in found]
    check_ids = {name: f"lab{lab}-{name}-check" for name in names}
    all_wrong = json.loads(release.read_text())        # a student's copy, every answer wrong
    for name in names:
        all_wrong = _wrong(all_wrong, name, WRONG[(module, name)][0])
    edited = found[names.index(wrong_name)][1]          # and one check cell edited
    all_wrong["cells"][edited]["source"] = ng.text(all_wrong["cells"][edited]) + "\n# done!"
    submissions = {"reference": json.loads(source.read_text()),
                   "unsolved": json.loads(release.read_text()),
                   "wrong": _wrong(source, wrong_name, WRONG[(module, wrong_name)][0]),
                   "all_wrong": all_wrong}
    for student, nb in submissions.items():
        target = course / "submitted" / student / assignment / path.name
        target.parent.mkdir(parents=True)
        target.write_text(json.dumps(nb))
    log = _nbgrader(course, "autograde", assignment)

    from nbgrader.api import Gradebook
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        scores = {s: gradebook.find_submission(assignment, s).score for s in submissions}
        points = gradebook.find_assignment(assignment).max_score
        recorded = {name: gradebook.find_source_cell(check_ids[name], path.stem,
                                                     assignment).checksum for name in names}
    assert points == len(found)
    assert scores == {"reference": points, "unsolved": 0, "wrong": points - 1, "all_wrong": 0}

    # what the graded notebooks show
    def graded(student):
        return _check_outputs(course / "autograded" / student / assignment / path.name, found)

    for name, (error, _shown) in graded("all_wrong").items():
        verdict = repr(checks[name](WRONG[(module, name)][0]))
        assert "  Hint: " in verdict and error == f"AssertionError: {verdict}", name
    for name, (error, shown) in graded("wrong").items():
        if name == wrong_name:
            assert error == f"AssertionError: {checks[name](WRONG[(module, name)][0])!r}"
        else:
            assert error is None and shown.startswith(f"✅ {name}: "), (name, shown)
    for name, (error, shown) in graded("reference").items():
        assert error is None and shown.startswith(f"✅ {name}: all "), (name, shown)
    for name, (error, _shown) in graded("unsolved").items():
        assert error.startswith(f"AssertionError: ❌ {name}: not written yet"), error
    restored = _cells(course / "autograded" / "all_wrong" / assignment / path.name)[edited]
    assert ng.text(restored) == ng.text(_cells(source)[edited])   # the edit is undone

    # no "Cell output is ✅ ... cannot be converted to a float" for a passing check cell
    # (newcomer 15, finding 8: the verdict was the cell's value, read as partial credit)
    assert "cannot be converted to" not in log, log[-3000:]

    # nbgrader's checksum warning: exactly the check cells of a copy without hidden tests
    warnings = _checksum_warnings(log)
    assert set(warnings) == set(submissions)
    assert warnings["reference"] == warnings["wrong"] == {}
    releases = {name: released[check]["metadata"]["nbgrader"]["checksum"]
                for _solution, check, _module, name in found}
    assert warnings["unsolved"] == {check_ids[n]: (recorded[n], releases[n]) for n in names}
    assert set(warnings["all_wrong"]) == set(check_ids.values())
    for name in names:
        should, got = warnings["all_wrong"][check_ids[name]]
        assert should == recorded[name] != got
        assert (got == releases[name]) == (name != wrong_name)   # an edit: another checksum
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
    """Writing a course again keeps a teacher's edited source/ notebooks
    (names them, writes nothing), replaces them with --force, and
    refuses a file as the course folder (sixth newcomer's N8); the refusal
    says how to keep a notebook's edits and write the other labs (--labs
    without the edited ones; newcomer 8's finding 12)."""
    course = tmp_path / "course"
    assert ng.main([str(course), "--labs", "00"]) == 0
    config = course / "nbgrader_config.py"
    [notebook] = (course / "source" / "lab00").glob("*.ipynb")
    assert ng.main([str(course), "--labs", "00"]) == 0       # unchanged: written again quietly
    original = notebook.read_text()
    notebook.write_text(original + " ")                      # a teacher's edit
    with pytest.raises(SystemExit):
        ng.main([str(course), "--labs", "00,02"])
    err = capsys.readouterr().err
    assert str(notebook) in err and "--force" in err and "another folder" in err
    assert "(here --labs 02)" in err, err
    assert notebook.read_text() == original + " "            # kept
    assert not (course / "source" / "lab02").exists()        # nothing else written
    assert ng.main([str(course), "--labs", "00", "--force"]) == 0
    assert notebook.read_text() == original                  # replaced when asked
    # newcomer 8's finding 12: the advice to leave the edited lab out is right
    edit = notebook.read_text() + " "
    notebook.write_text(edit)
    with pytest.raises(SystemExit):
        ng.main([str(course), "--labs", "00"])
    assert "every lab asked for is edited: nothing else to write" in capsys.readouterr().err
    assert ng.main([str(course), "--labs", "02"]) == 0
    assert (course / "source" / "lab02").is_dir() and notebook.read_text() == edit
    with pytest.raises(SystemExit):
        ng.main([str(config)])
    assert "is a file" in capsys.readouterr().err


@pytest.mark.parametrize("keeps_needed_lines", [True, False])
def test_an_edited_config_is_kept_and_labs_are_added(tmp_path, capsys, keeps_needed_lines):
    """Newcomer 15, finding 9: a teacher edits nbgrader_config.py (course_id,
    exchange, as nbgrader's docs say); adding a lab then refused to write
    anything. Now the config is kept, the lab written, and the teacher told
    so, and told which lines the labs need if the edit dropped them; --force
    writes pagedkit's config over it."""
    course = tmp_path / "course"
    assert ng.main([str(course), "--labs", "00"]) == 0
    capsys.readouterr()
    config = course / "nbgrader_config.py"
    pagedkits = config.read_text()
    edited = pagedkits + 'c.CourseDirectory.course_id = "pa101"\n'
    if not keeps_needed_lines:
        edited = edited.replace('os.environ["PAGEDKIT_TRACK"] = ""', "")
    config.write_text(edited)
    assert ng.main([str(course), "--labs", "09,05"]) == 0
    out, err = capsys.readouterr()
    assert config.read_text() == edited                           # kept
    assert (course / "source" / "lab09").is_dir() and (course / "source" / "lab05").is_dir()
    assert "lab09" in out and f"kept {config} as you edited it" in err and "--force" in err
    assert ("PAGEDKIT_TRACK" in err) is not keeps_needed_lines, err
    assert ng.main([str(course), "--labs", "00", "--force"]) == 0
    assert config.read_text() == pagedkits                        # replaced when asked
    capsys.readouterr()
    assert ng.main([str(course), "--labs", "00"]) == 0          # pagedkit's: nothing to say
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("name, lab", [("9", "lab09"), ("09", "lab09"), ("4b", "lab04b"),
                                       ("paging", "lab03"), ("Paging", "lab03"),
                                       ("03_paging.ipynb", "lab03")])
def test_labs_are_named_as_the_lab_command_names_them(tmp_path, capsys, name, lab):
    """Newcomer 15, finding 13: `--labs 9` was refused while `lab 9` and
    `bench study --labs 9` take it (pagedkit.lab.find_lab, the one rule)."""
    assert ng.main([str(tmp_path / "course"), "--labs", name]) == 0
    assert [p.name for p in (tmp_path / "course" / "source").iterdir()] == [lab]


@pytest.mark.parametrize("name, said", [("99", "no lab '99'"), ("04", None), ("0", None)])
def test_a_lab_name_that_names_no_one_lab_is_refused(tmp_path, capsys, name, said):
    if said is None:  # names exactly one: accepted
        assert ng.main([str(tmp_path / "course"), "--labs", name]) == 0
        return
    with pytest.raises(SystemExit):
        ng.main([str(tmp_path / "course"), "--labs", name])
    assert said in capsys.readouterr().err
    assert not (tmp_path / "course").exists()
