"""The labs under nbgrader: the instructor's version of each lab, and a course folder.

``python -m pagedkit.exercises.nbgrader COURSE_DIR [--labs 00,02] [--lang zh-CN]``
writes an nbgrader course (of the Chinese labs, labs/zh-CN/, with ``--lang zh-CN``):
``nbgrader_config.py`` and ``source/labNN/<lab>.ipynb`` for each lab. Then, in
COURSE_DIR, ``nbgrader generate_assignment labNN`` makes
the students' copy and ``nbgrader autograde labNN`` grades their submissions
with the labs' own checks (docs/teachers_guide.md, "Grading with nbgrader").

The committed labs are the students' version. Each exercise is two cells
carrying nbgrader's metadata: a *solution cell* (the function's stub, grade
id ``labNN-name``) and a *check cell* (the lab's check, ``labNN-name-check``,
locked, one point). `source_notebook` builds the instructor's version from
it: every stub gets the reference solution of ``labs/solutions/`` between
nbgrader's solution markers, and every check cell a hidden assertion that the
check passed, whose message is the check's own verdict (`hidden_test`). So
``generate_assignment`` gives back the committed stubs (`CODE_STUB`), with no
solution and no hidden test left, and under
``autograde`` a check cell loses its point exactly when the lab's check fails
(a check itself never raises: a student's notebook always runs through).
``autograde`` warns that each check cell's checksum "has changed", untouched
ones too: nbgrader records the checksum with the hidden test in and releases
the cell without it, then puts the recorded cell back; harmless, and no cell
can fail without a hidden test (docs/teachers_guide.md, nbgrader issue #1961).
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import sys
import textwrap
from pathlib import Path

from ..i18n import language_tag
from ..i18n.terminal import HelpFormatter
from ..lab import EDITIONS, find_lab, unnamed_lab

#: The checkout's labs and their reference solutions.
HOME = Path(__file__).resolve().parents[3]
LABS = HOME / "labs"
SOLUTIONS = LABS / "solutions"

#: What a solution becomes in the students' copy: the committed stubs' body.
CODE_STUB = "# YOUR CODE HERE\nraise NotImplementedError"
SOLUTION = ("### BEGIN SOLUTION", "### END SOLUTION")
HIDDEN = ("### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS")
#: The lines around lab 04's Triton exercise, whose answer is two lines of a kernel.
KERNEL_REGION = ("# ---- YOUR CODE", "# ---- your code ends here")
#: Lab 04c's puzzle stubs: this comment, then `...`, after the kernel's given first lines.
PUZZLE_STUB = "# YOUR CODE:"
#: The hidden test's name for a check's result, where the check cell keeps none.
GRADED = "_graded"

CONFIG = f'''# nbgrader's configuration for the pagedkit labs (pagedkit.exercises.nbgrader).
import os
c = get_config()  # noqa: F821
# The course is the folder this file is in: move or copy it, and it still is.
course = os.path.dirname(os.path.abspath(__file__))
c.CourseDirectory.root = course
c.CourseDirectory.db_url = "sqlite:///" + os.path.join(course, "gradebook.db")
# The labs' own stub, so that the students' copy is the committed lab.
c.ClearSolutions.code_stub = {{"python": {CODE_STUB!r}}}
# A lab's cells run for seconds; a loaded machine can make that minutes. Per cell:
# an answer that never returns costs this much of its student's grading run.
c.Execute.timeout = 600
# The build-track cells of labs 03-08 save and load a learner's pieces
# (pagedkit.exercises.track): off while grading, so that no student's code runs
# in another's notebook and the grader's own saved pieces stay as they are.
os.environ["PAGEDKIT_TRACK"] = ""
'''

#: The config pagedkit wrote before 2026-12 (newcomer 21's finding 5): it pinned the
#: course to the absolute folder it was written in. Such a file is pagedkit's, not a
#: teacher's edit: a re-run replaces it and says so.
PINNED_CONFIG = f'''# nbgrader's configuration for the pagedkit labs (pagedkit.exercises.nbgrader).
c = get_config()  # noqa: F821
c.CourseDirectory.root = {{root!r}}
c.CourseDirectory.db_url = "sqlite:///" + {{db!r}}
# The labs' own stub, so that the students' copy is the committed lab.
c.ClearSolutions.code_stub = {{{{"python": {CODE_STUB!r}}}}}
# A lab's cells run for seconds; a loaded machine can make that minutes.
c.Execute.timeout = 600
# The build-track cells of labs 03-08 save and load a learner's pieces
# (pagedkit.exercises.track): off while grading, so that no student's code runs
# in another's notebook and the grader's own saved pieces stay as they are.
import os  # noqa: E402
os.environ["PAGEDKIT_TRACK"] = ""
'''


def pinned_root(config: str) -> str | None:
    """The folder an earlier pagedkit config (`PINNED_CONFIG`) pinned the course
    to, or None if `config` is not one."""
    written = PINNED_CONFIG.format(root="ROOT", db="DB")
    pattern = re.escape(written).replace(re.escape("'ROOT'"), "(.+)").replace(
        re.escape("'DB'"), "(.+)")
    match = re.fullmatch(pattern, config)
    return None if match is None else ast.literal_eval(match.group(1))


_CHECK = re.compile(r"(?:(\w+) = )?(lab\d\d[a-z]?)\.check_(\w+)\((\w+)\)")


def text(cell: dict) -> str:
    """A cell's source as one string (a notebook file may store a list of lines)."""
    return "".join(cell["source"])


def exercises(nb: dict) -> list[tuple[int, int, str, str]]:
    """``(solution cell index, check cell index, check module, name)`` of every
    exercise, from the nbgrader metadata; a ValueError names a broken pair."""
    found = []
    cells = nb["cells"]
    for i, cell in enumerate(cells):
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if not meta.get("solution"):
            continue
        check = cells[i + 1] if i + 1 < len(cells) else None
        check_meta = check.get("metadata", {}).get("nbgrader", {}) if check else {}
        if not check_meta.get("grade") or check_meta.get("grade_id") != meta["grade_id"] + "-check":
            raise ValueError(f"solution cell {meta['grade_id']!r} is not followed by its "
                             f"check cell")
        match = _CHECK.search(text(check))
        if match is None:
            raise ValueError(f"check cell {check_meta['grade_id']!r} calls no labNN.check_*")
        found.append((i, i + 1, match.group(2), match.group(3)))
    return found


def solution_source(module: str) -> str:
    """The text of the reference solutions of check module `module` (``lab04``)."""
    [path] = sorted(SOLUTIONS.glob(f"{module}_*.py"))
    return path.read_text()


def _function(tree: ast.Module, name: str) -> ast.FunctionDef:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return node
    raise ValueError(f"no function {name!r} in the reference solutions")


def _imports(source: str, tree: ast.Module) -> list[str]:
    """The solution file's top-level imports (a solution body may use them)."""
    lines = source.splitlines()
    return [line for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))
            for line in lines[node.lineno - 1:node.end_lineno]]


def _body(source: str, fn: ast.FunctionDef) -> list[str]:
    """A function's body without its docstring, dedented."""
    first = fn.body[1] if (isinstance(fn.body[0], ast.Expr)
                           and isinstance(fn.body[0].value, ast.Constant)) else fn.body[0]
    lines = source.splitlines()[first.lineno - 1:fn.end_lineno]
    return textwrap.dedent("\n".join(lines)).splitlines()


def _helpers(source: str, tree: ast.Module, fn: ast.FunctionDef, exercises: set[str]) -> list[str]:
    """The solution file's own functions that `fn` calls and the notebook does not
    define as exercises (lab 03's ``slot_of``), as nested definitions."""
    called = {node.id for node in ast.walk(fn) if isinstance(node, ast.Name)}
    lines = source.splitlines()
    found = []
    for node in tree.body:
        if (isinstance(node, ast.FunctionDef) and node.name in called
                and node.name != fn.name and node.name not in exercises):
            found += textwrap.dedent("\n".join(lines[node.lineno - 1:node.end_lineno])).splitlines()
            found.append("")
    return found


def _region(lines: list[str], begin: str, end: str) -> tuple[int, int]:
    start = next(i for i, line in enumerate(lines) if line.strip().startswith(begin))
    stop = next(i for i in range(start, len(lines)) if lines[i].strip().startswith(end))
    return start, stop


def _marked(indent: str, body: list[str]) -> list[str]:
    return ([indent + SOLUTION[0]] + [indent + line if line else "" for line in body]
            + [indent + SOLUTION[1]])


def fill(stub: str, module: str, name: str, exercises: set[str] = frozenset()) -> str:
    """`stub` with the reference solution of `name` between solution markers;
    `exercises` are the functions the notebook's learner writes (a solution
    calls those, and brings along any other helper of its file)."""
    source = solution_source(module)
    tree = ast.parse(source)
    lines = stub.splitlines()
    if any(line.strip().startswith(KERNEL_REGION[0]) for line in lines):
        start, stop = _region(lines, *KERNEL_REGION)
        solved = source.splitlines()
        s_start, s_stop = _region(solved, *KERNEL_REGION)
        indent = re.match(r"\s*", lines[start]).group(0)
        body = textwrap.dedent("\n".join(solved[s_start + 1:s_stop])).splitlines()
        named = [indent + "# " + line.strip() for line in lines[start + 1:stop] if line.strip()]
        return "\n".join(lines[:start + 1] + named + _marked(indent, body) + lines[stop:])
    fn = _function(tree, name)
    stub_fn = _function(ast.parse(stub), name)
    if [a.arg for a in stub_fn.args.args] != [a.arg for a in fn.args.args]:
        raise ValueError(f"{name}: the stub's parameters differ from the solution's")
    puzzle = [i for i, line in enumerate(lines) if line.strip().startswith(PUZZLE_STUB)
              and i + 1 < len(lines) and lines[i + 1].strip() == "..."]
    if puzzle:          # lab 04c: a kernel whose first lines are given, the rest is `...`
        at = puzzle[0]
        def code(line: str) -> str:
            return line.split("#", 1)[0].strip()
        given = {code(line) for line in lines[stub_fn.body[0].lineno - 1:at]}
        body = [line for line in _body(source, fn) if not code(line) or code(line) not in given]
        indent = re.match(r"\s*", lines[at]).group(0)
        return "\n".join(lines[:at + 1] + _marked(indent, body) + lines[at + 2:])
    at = next(i for i, line in enumerate(lines) if line.strip() == "# YOUR CODE HERE")
    if lines[at + 1].strip() != "raise NotImplementedError":
        raise ValueError(f"{name}: the stub is not `# YOUR CODE HERE`, then "
                         f"`raise NotImplementedError`")
    indent = re.match(r"\s*", lines[at]).group(0)
    body = _imports(source, tree) + _helpers(source, tree, fn, exercises) + _body(source, fn)
    return "\n".join(lines[:at] + _marked(indent, body) + lines[at + 2:])


def hidden_test(check: str) -> str:
    """The assertion that makes a check cell fail when its check does, with the
    check's own verdict as its message (the failing call, what was expected,
    the hint), then the verdict itself as the cell's output, as in the lab.

    The check it asserts on is imported afresh from the package's files
    (``pagedkit.exercises`` and its modules, taken out of ``sys.modules`` for
    that and put back after), not taken from the notebook's ``labNN``: a
    student's earlier cell can rebind ``labNN.check_name`` or a helper of
    ``pagedkit.exercises`` (newcomer 21 gave herself full marks so) and still
    not change what grades her. It
    does not stop a student who patches something else in the same process
    (the model, the simulator, ``importlib`` itself): nbgrader runs the
    student's code and the tests in one kernel (docs/teachers_guide.md).
    So the check runs a second time, after the cell's own call; a check is
    deterministic: the same verdict, at the cost of that second run.

    The verdict is shown by ``display()``, not as the cell's value: autograde
    reads a graded cell's value as partial credit, and one that is no number
    (a ✅ line) drew a warning for every passing check cell ("cannot be
    converted to a float ... future releases may treat as error"); a
    displayed output it leaves alone (nbgrader 0.9's `determine_grade`)."""
    match = _CHECK.search(check)
    _variable, module, name, argument = match.groups()
    ours = '[k for k in _sys.modules if k.split(".")[:2] == ["pagedkit", "exercises"]]'
    return "\n".join([
        HIDDEN[0],
        f"# {module}.check_{name} as pagedkit's files define it, whatever the cells above",
        "# rebound: pagedkit.exercises imported afresh for it, then the notebook's put back",
        "import importlib as _importlib, sys as _sys, pagedkit as _pagedkit",
        f"_ours = {{k: _sys.modules.pop(k) for k in {ours}}}",
        "try:",
        f'    {GRADED} = _importlib.import_module("pagedkit.exercises.{module}")'
        f".check_{name}({argument})",
        "finally:",
        f"    for _k in {ours}:",
        "        del _sys.modules[_k]",
        "    _sys.modules.update(_ours)",
        '    _pagedkit.exercises = _ours["pagedkit.exercises"]',
        f"assert {GRADED}.passed is True, repr({GRADED})",
        f"display({GRADED})",
        HIDDEN[1]])


def source_notebook(path: Path) -> dict:
    """The instructor's version of the lab at `path`: solutions and hidden tests in."""
    nb = json.loads(path.read_text())
    cells = nb["cells"]
    found = exercises(nb)
    names = {name for *_, name in found}
    for solution, check, module, name in found:
        cells[solution]["source"] = fill(text(cells[solution]), module, name, names)
        cells[check]["source"] = text(cells[check]) + "\n" + hidden_test(text(cells[check]))
    for cell in cells:
        if cell["cell_type"] == "code":
            cell["outputs"], cell["execution_count"] = [], None
    return nb


def assignment_name(path: Path) -> str:
    """``labNN`` (``lab04b``) for a lab notebook."""
    return "lab" + path.name.split("_")[0]


def _target(root: Path, lab: Path) -> Path:
    """Where the course at `root` keeps the source version of `lab`."""
    return root / "source" / assignment_name(lab) / lab.name


def _keep_edits(root: Path, labs: list[Path], edited: list[Path]) -> str:
    """How to write the course and keep the teacher's `edited` notebooks:
    leave their labs out of ``--labs``, or use another folder."""
    rest = [lab.name.split("_")[0] for lab in labs if _target(root, lab) not in edited]
    here = (f"here --labs {','.join(rest)}" if rest
            else "here every lab asked for is edited: nothing else to write")
    return (f"leave the edited labs out of --labs ({here}), or write the course into another "
            f"folder (or move them aside)")


#: What grading the labs needs of a config (a teacher's may lack it): the assignments
#: to these targets, as `ast.unparse` writes them, and how the teacher reads them.
NEEDED = {"c.ClearSolutions.code_stub": "c.ClearSolutions.code_stub",
          "os.environ['PAGEDKIT_TRACK']": 'os.environ["PAGEDKIT_TRACK"] = ""'}


def assigned(config: str) -> set[str]:
    """The targets `config` assigns to (``c.CourseDirectory.root``, ...), read
    by parsing it: a commented-out line assigns nothing."""
    return {ast.unparse(target) for node in ast.walk(ast.parse(config))
            if isinstance(node, ast.Assign) for target in node.targets}


def kept_config(config: Path) -> str:
    """What to tell a teacher whose edited `config` (course_id, exchange: nbgrader's
    own docs send one there) was kept, naming any line of pagedkit's it lacks."""
    note = (f"kept {config} as you edited it (pagedkit's differs; --force writes pagedkit's "
            f"over it)")
    try:
        targets = assigned(config.read_text())
    except SyntaxError as e:
        return note + (f"; Python cannot read it (line {e.lineno}: {e.msg}), and neither can "
                       f"nbgrader: fix it, or --force")
    lacks = [line for target, line in NEEDED.items() if target not in targets]
    if lacks:
        note += (f"; it lacks {', '.join(lacks)}, which grading the labs needs: copy those "
                 f"lines from pagedkit's (python -m pagedkit.exercises.nbgrader OTHER_FOLDER "
                 f"writes one)")
    return note


def write_course(root: Path, labs: list[Path], *, force: bool = False
                 ) -> tuple[list[Path], str | None]:
    """An nbgrader course at `root`: its config and each lab's source version;
    returns the labs' files and a note for the teacher (None for none).

    A ``source/`` notebook already there with other content (a teacher's
    edits) is kept: nothing is written and the files are named, unless
    `force` replaces them. A config already there with other content is
    kept and the labs are written (the note says so, and names any line
    the labs need that it lacks); `force` replaces it too. A file equal to
    what would be written is left as it is."""
    if root.exists() and not root.is_dir():
        raise NotADirectoryError(f"the course folder {root} is a file; give a folder (new or "
                                 "one written before)")
    config = root / "nbgrader_config.py"
    files = {config: CONFIG}
    for path in labs:
        files[_target(root, path)] = json.dumps(source_notebook(path), indent=1,
                                                ensure_ascii=False) + "\n"
    stale = [t for t, content in files.items() if not t.exists() or t.read_text() != content]
    note = None
    pinned = pinned_root(config.read_text()) if config in stale and config.exists() else None
    if pinned is not None:        # pagedkit's own earlier config: no edit to keep
        note = (f"replaced {config}, which pagedkit wrote earlier pinned to {pinned}, with "
                f"one that takes the course to be the folder it is in")
    elif config in stale and config.exists() and not force:
        stale.remove(config)
        note = kept_config(config)
    edited = [t for t in stale if t.exists() and not (t == config and pinned is not None)]
    if edited and not force:
        raise FileExistsError(
            f"{len(edited)} file(s) of the course differ from what would be written (edited "
            f"since?): {', '.join(map(str, edited))}. Nothing was written; to keep the edits, "
            f"{_keep_edits(root, labs, edited)}; to replace them, pass --force")
    for target in stale:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(files[target])
    return list(files)[1:], note


def _edition(name: str) -> str:
    """--lang's value: an edition of the labs, named as `i18n.language_tag` reads a
    language (``zh-CN``, ``zh_CN``, ``zh-cn``), as `lab --lang` takes it."""
    tag = language_tag(name)
    if tag not in EDITIONS:
        raise argparse.ArgumentTypeError(
            f"{name!r}: the labs come in {', '.join(EDITIONS)} (case and - or _ aside)")
    return tag


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m pagedkit.exercises.nbgrader",
                                description="Write an nbgrader course of the pagedkit labs.",
                                formatter_class=HelpFormatter)
    p.add_argument("course", type=Path, help="the course folder to write")
    p.add_argument("--labs", help="comma-separated labs, named as `python -m pagedkit lab` "
                                  "names them: 00,2,4b,paging (default: all with exercises, "
                                  "every lab but 10)")
    p.add_argument("--force", action="store_true",
                   help="replace files of the course that differ from what would be written "
                        "(a teacher's edits); without it they are kept and nothing is written")
    p.add_argument("--lang", default="en", type=_edition, metavar="{" + ",".join(EDITIONS) + "}",
                   help="the edition: en (default, labs/) or zh-CN, the Simplified Chinese "
                        "labs (labs/zh-CN/), whose checks answer in Chinese")
    args = p.parse_args(argv)
    labs = (LABS / EDITIONS[args.lang]).resolve()
    from ..lab import say_other_clone

    say_other_clone("nbgrader", LABS)
    notebooks = {path.name.split("_")[0]: path for path in sorted(labs.glob("*.ipynb"))}
    if not notebooks:
        p.error(f"no labs in {labs}: the course is built from a clone of the repository (git "
                "clone https://github.com/pagedkit/pagedkit, then pip install -e . in it)")
    graded = {n: path for n, path in notebooks.items()  # lab 10 has nothing to grade
              if exercises(json.loads(path.read_text()))}
    chosen = list(graded.values())
    if args.labs is not None:
        chosen = []
        for name in (n.strip() for n in args.labs.split(",")):
            file, could_be = find_lab(labs, name)  # the one rule for lab names
            if file is None:
                p.error(unnamed_lab(labs, name, could_be))
            if labs / file not in graded.values():
                p.error(f"{file} has no exercise, so nothing to grade: the labs with exercises "
                        f"are {', '.join(graded)}")
            chosen.append(labs / file)
    try:
        written, note = write_course(args.course, chosen, force=args.force)
    except (FileExistsError, NotADirectoryError) as e:
        p.error(str(e))
    for target in [args.course / "nbgrader_config.py", *written]:
        print(target)
    if note:
        print(note, file=sys.stderr)
    print(next_step(args.course, chosen), file=sys.stderr)
    return 0


def next_step(course: Path, labs: list[Path]) -> str:
    """What the teacher runs next for the course's `labs`, with the nbgrader this
    Python has. Where ``nbgrader`` is not on PATH (a virtual environment not
    activated; newcomer 36), PATH first gets this interpreter's folder: nbgrader
    runs ``alembic`` from PATH on its first run (newcomer 41: without it, that
    run failed), and the ``nbgrader`` command is there too (else it is ``python
    -m nbgrader`` by this interpreter's path). ``generate_assignment`` takes one
    assignment: several labs get a loop over all of them."""
    import shlex
    import shutil

    nbgrader, path = "nbgrader", ""
    if not shutil.which("nbgrader"):
        folder = Path(sys.executable).parent
        path = (f"export PATH={shlex.quote(str(folder))}:\"$PATH\" (nbgrader runs alembic "
                "from PATH), then ")
        if not (folder / "nbgrader").is_file():
            nbgrader = f"{shlex.quote(sys.executable)} -m nbgrader"
    names = [assignment_name(lab) for lab in labs]
    generate = (f"{nbgrader} generate_assignment {names[0]} (the students' copy)"
                if len(names) == 1 else
                f"for a in {' '.join(names)}; do {nbgrader} generate_assignment \"$a\"; done "
                "(the students' copies)")
    return (f"next, in {course}: {path}{generate}, then {nbgrader} autograde for their "
            "submissions (docs/teachers_guide.md, \"Grading with nbgrader\")")


if __name__ == "__main__":
    sys.exit(main())
