"""The committed notebooks are light, carry no widget state, and follow the
lesson template: Colab badge and install cell, objectives, recap."""

import importlib.util
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "labs").glob("[0-9][0-9]*.ipynb"))  # 04b too
#: The Chinese edition (generated, labs/zh-CN/): tidy like the English labs.
ZH_NOTEBOOKS = sorted((ROOT / "labs" / "zh-CN").glob("[0-9][0-9]*.ipynb"))

spec = importlib.util.spec_from_file_location("ci_notebooks", ROOT / ".ci" / "notebooks.py")
ci_notebooks = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ci_notebooks)


@pytest.mark.parametrize("path", NOTEBOOKS + ZH_NOTEBOOKS,
                         ids=lambda p: str(p.relative_to(ROOT / "labs")))
def test_notebook_is_tidy(path):
    assert ci_notebooks.problems(path) == []


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_follows_the_lesson_template(path):
    nb = nbformat.read(path, as_version=4)
    text = "\n".join(c.source for c in nb.cells)
    first_markdown = next(c.source for c in nb.cells if c.cell_type == "markdown")
    assert "colab.research.google.com" in first_markdown, "Open in Colab badge"
    assert "google.colab" in text, "a first cell that installs pagedkit on Colab only"
    lower = text.lower()
    assert "learning objectives" in lower or "you will" in lower
    assert "recap" in lower


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_runner_means_one_thing(path):
    """`engine.runner` is the engine's ModelRunner; a lab that imports the module
    pagedkit.model.runner names it apart (`runner_module`), so one name never
    means both (lab 08 bound `runner` to the module beside `engine.runner`)."""
    import re

    code = "\n".join(c.source for c in nbformat.read(path, as_version=4).cells
                     if c.cell_type == "code")
    assert not re.search(r"from pagedkit\.model import (.*, )?runner\b(?! as)", code)
    assert not re.search(r"\bimport pagedkit\.model\.runner as runner\b", code)


def test_notebooks_run_with_a_build_track_of_their_own(tmp_path, monkeypatch):
    """`.ci/notebooks.py run` (and the Chinese edition's build, which calls its
    `execute`) gives the kernel an empty track file of its own: a piece saved
    in ~/.pagedkit/my_engine.py by whoever runs it never reaches the
    committed outputs, and the notebook's own saves never reach that file."""
    home = tmp_path / "home"
    mine = home / ".pagedkit" / "my_engine.py"
    mine.parent.mkdir(parents=True)
    mine.write_text("# a learner's pieces\n")
    monkeypatch.setenv("HOME", str(home))
    for variable in ("PAGEDKIT_TRACK", "USERPROFILE"):
        monkeypatch.delenv(variable, raising=False)
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "from pagedkit.exercises import track\n"
        "path = track.pieces_path()\n"
        "print(path.parent.name.startswith('pagedkit-track-'), path.exists(), "
        "path.parent.is_dir())\n"
        "_ = path.write_text('# saved by the notebook\\n')")])
    nb.metadata["kernelspec"] = ci_notebooks.KERNELSPEC
    path = tmp_path / "lab.ipynb"
    nbformat.write(nb, path)
    ci_notebooks.run(path, timeout=120)
    out = nbformat.read(path, as_version=4).cells[0].outputs
    assert [o.get("text") for o in out] == ["True False True\n"]
    assert mine.read_text() == "# a learner's pieces\n"
    assert not list((tmp_path).glob("pagedkit-track-*"))
