"""Labs 04 and 04c where Triton is not installed (macOS has no wheels;
newcomer 18, findings 1 and 2). CI has Triton, so these tests take it away:
``sys.modules["triton"] = None`` makes ``import triton`` raise ImportError and
``importlib.util.find_spec("triton")`` answer None, as on a Mac.

* Every Triton exercise check says Triton is missing, for a written kernel
  and for a stub alike. A notebook's stand-in ``jit`` (``lambda fn: fn``)
  leaves a plain function, and the checks used to read that as "not a
  kernel": "give the check your kernel itself: the function decorated with
  @triton.jit", to a learner who had decorated it.
* Both labs run top to bottom in both languages, every Triton-only cell
  saying it is skipped. Lab 04 stopped at its Triton primer (``tl``
  undefined: ``D: tl.constexpr`` is evaluated when the kernel is defined),
  so Run All never reached exercise 4, sections 6-7 or the build track."""

import ast
import sys
from pathlib import Path

import nbformat
import pytest

import pagedkit
from pagedkit import exercises
from pagedkit.exercises import lab04, lab04c

ROOT = Path(__file__).resolve().parents[2]
LABS = ROOT / "labs"
SOLUTIONS = LABS / "solutions"
NO_TRITON = {"en": "Triton is not installed here (it has no macOS wheels): {needs} Linux or Colab",
             "zh-CN": "这里没有安装 Triton（它没有 macOS 的 wheel）：{needs} Linux 或 Colab"}
NEEDS = {("en", "lab04c"): "the puzzles need", ("en", "lab04"): "this exercise needs",
         ("zh-CN", "lab04c"): "这些谜题需要", ("zh-CN", "lab04"): "这个练习需要"}


def missing(language: str, lab: str) -> str:
    return NO_TRITON[language].format(needs=NEEDS[language, lab])


@pytest.fixture
def no_triton(monkeypatch):
    monkeypatch.setitem(sys.modules, "triton", None)
    monkeypatch.setitem(sys.modules, "triton.language", None)


class tl:  # lab 04c's stand-in, so the kernels define without Triton
    constexpr = int


def jit(fn):  # lab 04c's stand-in jit: the function itself
    return fn


def written_kernels() -> dict[str, object]:
    """The reference kernels of labs/solutions, defined as a notebook without
    Triton defines them: with the stand-ins `tl` and `jit`."""
    namespace = {"tl": tl, "jit": jit}
    source = (SOLUTIONS / "lab04c_triton_puzzles.py").read_text()
    source = source.replace("import triton\nimport triton.language as tl\n", "")
    exec(compile(source.replace("@triton.jit", "@jit"), "lab04c_solutions", "exec"), namespace)
    source = (SOLUTIONS / "lab04_paged_attention.py").read_text()
    body = source[source.index("    @triton.jit\n    def paged_kernel"):]
    body = "\n".join(line[4:] for line in body.splitlines()).replace("@triton.jit", "@jit")
    exec(compile(body.split("\n\n\n")[0], "lab04_solutions", "exec"), namespace)
    return {name: namespace[name] for name in
            [*(f"{puzzle}_kernel" for puzzle in lab04c.PUZZLES), "paged_kernel"]}


@jit
def stub_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):  # as a notebook hands it out
    ...


def test_the_checks_below_are_every_check_that_needs_triton():
    """Each function of pagedkit.exercises that asks `no_triton` is enumerated below."""
    asking = set()
    for path in Path(exercises.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and node.name != "no_triton" and any(
                    isinstance(call, ast.Call) and getattr(call.func, "id", None) == "no_triton"
                    for call in ast.walk(node)):
                asking.add(f"{path.stem}.{node.name}")
    assert asking == {"lab04c.check", "lab04c.serve", "lab04.check_paged_kernel"}


def triton_checks():
    """(id, lab, the check called on a kernel, the kernel's name or None for the stub)."""
    for puzzle in lab04c.PUZZLES:
        for kernel in (f"{puzzle}_kernel", None):
            yield (f"check_{puzzle}_kernel-{kernel or 'stub'}", "lab04c",
                   lambda k, puzzle=puzzle: lab04c.check(puzzle, k), kernel)
            keyword = f"{puzzle}_kernel"
            yield (f"serve({keyword})-{kernel or 'stub'}", "lab04c",
                   lambda k, keyword=keyword: lab04c.serve(**{keyword: k}), kernel)
    for kernel in ("paged_kernel", None):
        yield (f"check_paged_kernel-{kernel or 'stub'}", "lab04", lab04.check_paged_kernel,
               kernel)


CHECKS = list(triton_checks())


@pytest.mark.parametrize("language", ["en", "zh-CN"])
@pytest.mark.parametrize("lab, check, kernel", [c[1:] for c in CHECKS],
                         ids=[c[0] for c in CHECKS])
def test_every_triton_check_says_triton_is_missing(no_triton, language, lab, check, kernel):
    kernels = written_kernels()
    pagedkit.set_language(language)
    try:
        result = check(kernels[kernel] if kernel else stub_kernel)
    finally:
        pagedkit.set_language("en")
    assert not result.passed
    assert result.message == missing(language, lab), result.message


def run_without_triton(lab: Path) -> nbformat.NotebookNode:
    """`lab` executed in a fresh kernel whose first cell takes Triton away."""
    from nbclient import NotebookClient

    nb = nbformat.read(lab, as_version=4)
    nb.cells.insert(0, nbformat.v4.new_code_cell(
        'import sys\nsys.modules["triton"] = None\nsys.modules["triton.language"] = None'))
    NotebookClient(nb, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": str(lab.parent)}}).execute()
    del nb.cells[0]
    return nb


def printed(cell) -> str:
    return "".join(out.get("text", "") if out.output_type == "stream"
                   else str(out.get("data", {}).get("text/plain", "")) for out in cell.outputs)


EDITIONS = [pytest.param(folder / f"{stem}.ipynb", language, id=f"{stem}-{language}")
            for stem in ("04_paged_attention", "04c_triton_puzzles")
            for folder, language in ((LABS, "en"), (LABS / "zh-CN", "zh-CN"))]


@pytest.mark.parametrize("lab, language", EDITIONS)
def test_the_lab_runs_top_to_bottom_and_its_triton_cells_say_they_are_skipped(lab, language):
    nb = run_without_triton(lab)
    code = [cell for cell in nb.cells if cell.cell_type == "code"]
    errors = [(cell.id, out.get("ename"), out.get("evalue")) for cell in code
              for out in cell.outputs if out.output_type == "error"]
    assert errors == []
    if lab.stem == "04_paged_attention":
        said = {cell.id: printed(cell) for cell in code}
        primer = next(cell.id for cell in code if "def gather_rows" in cell.source)
        assert said[primer] == ("Triton is not installed here (it has no macOS wheels): "
                                "gather_rows is not run, and\nexercise 3's kernel cannot be "
                                "checked; skip to section 5.\n")
        check = next(cell.id for cell in code if "check_paged_kernel(" in cell.source)
        assert missing(language, "lab04") in said[check]
        run = next(cell.id for cell in code if 'use_backend("triton")' in cell.source)
        assert said[run].startswith("Triton is not installed here (it has no macOS wheels), so "
                                    "the kernel is not run;")
        exercise_4 = next(cell.id for cell in code
                          if "check_online_softmax_update(" in cell.source)
        assert said[exercise_4]  # the torch exercise after the Triton section ran
    else:
        checks = [cell for cell in code if "lab04c.check_" in cell.source
                  or "lab04c.serve(" in cell.source]
        assert len(checks) == 6  # four puzzles and two serving runs
        for cell in checks:
            assert missing(language, "lab04c") in printed(cell), printed(cell)
