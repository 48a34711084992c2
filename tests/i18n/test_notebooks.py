"""The Chinese labs from one source (issue #29): `pagedkit.i18n.notebooks`.

A small clone in a temporary folder (one English lab, its catalog, the real
glossary) is built and checked; then each check is shown to fail on the
mutation it exists for: an English cell changed, a translation dropped, a
generated cell edited, a term that departs from the glossary. The last test
holds this repository itself to the check."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from pagedkit.i18n import notebooks as nbs
from pagedkit.i18n.__main__ import main as cli

ROOT = Path(__file__).resolve().parents[2]
STEM = "01_demo"

ANSWER = "from pagedkit.i18n import get_language\nprint(6 * 7, get_language())"
ENGLISH = [
    new_markdown_cell(
        "# Lab 01 — Paging\n\n[![Open In Colab](https://colab.research.google.com/assets/"
        "colab-badge.svg)](https://colab.research.google.com/github/pagedkit/pagedkit/blob/"
        "main/labs/01_demo.ipynb)\n\nA **block table** per sequence; see [docs](../docs/x.md).",
        id="title"),
    new_code_cell('# Setup: on Colab, install pagedkit first.\nimport sys', id="colab"),
    new_markdown_cell("## 1. Copy-on-write\n\nNext: [lab 02](02_next.ipynb), "
                      "[a solution](solutions/lab01.py), <a href=\"../docs/y.md\">y</a>.",
                      id="cow"),
    new_code_cell(ANSWER, id="answer",
                  metadata={"nbgrader": {"grade": False, "solution": False}}),
    new_markdown_cell("## Recap\n\nWrite the code in a `code block`.", id="recap"),
]
CHINESE = {
    "title": "# 实验 01 — 分页\n\n[![Open In Colab](https://colab.research.google.com/assets/"
             "colab-badge.svg)](https://colab.research.google.com/github/pagedkit/pagedkit/"
             "blob/main/labs/01_demo.ipynb)\n\n每个序列一张**页表**；见 [文档](../docs/x.md)。",
    "cow": "## 1. 写时复制\n\n下一个：[实验 02](02_next.ipynb)，[参考答案](solutions/lab01.py)，"
           "<a href=\"../docs/y.md\">y</a>。",
    "recap": "## 小结\n\n把代码写进 `code block`。",
}


@pytest.fixture
def clone(tmp_path) -> Path:
    """labs/01_demo.ipynb, its complete catalog, the real glossary and .ci/notebooks.py."""
    root = tmp_path / "clone"
    (root / "labs").mkdir(parents=True)
    (root / "docs").mkdir()
    (root / ".ci").mkdir()
    shutil.copy(ROOT / nbs.GLOSSARY, root / nbs.GLOSSARY)
    shutil.copy(ROOT / ".ci" / "notebooks.py", root / ".ci" / "notebooks.py")
    nb = new_notebook(cells=ENGLISH, metadata={"kernelspec": {
        "display_name": "Python 3", "language": "python", "name": "python3"}})
    nbformat.write(nb, root / "labs" / f"{STEM}.ipynb")
    nbs.skeleton(root, root / "labs" / f"{STEM}.ipynb")
    fill(root, CHINESE)
    (root / nbs.INDEX_SOURCE).write_text(f"# 实验\n\n| [01]({STEM}.ipynb) | 分页 |\n"
                                         "| [05](05_x.ipynb) | 连续批处理 |\n")
    nbs.build(root, STEM, execute=False)
    nbs.write_index(root)
    return root


def fill(root: Path, zh: dict[str, str]) -> None:
    path = nbs.catalog_path(root, STEM)
    catalog = json.loads(path.read_text())
    for entry in catalog["cells"]:
        entry["zh"] = zh.get(entry["id"], entry["zh"])
    nbs.write_catalog(path, catalog)


def catalog(root: Path) -> dict:
    return json.loads(nbs.catalog_path(root, STEM).read_text())


def edit_english(root: Path, cell_id: str, source: str) -> None:
    path = root / "labs" / f"{STEM}.ipynb"
    nb = nbformat.read(path, as_version=4)
    next(c for c in nb.cells if c.id == cell_id).source = source
    nbformat.write(nb, path)


def test_the_skeleton_is_the_contracts_shape(tmp_path):
    root = tmp_path / "c"
    (root / "labs").mkdir(parents=True)
    nbformat.write(new_notebook(cells=ENGLISH), root / "labs" / f"{STEM}.ipynb")
    path, counts = nbs.skeleton(root, Path("labs") / f"{STEM}.ipynb")
    assert path == root / "i18n" / "zh-CN" / "labs" / f"{STEM}.json"
    assert counts == {"new": 3, "kept": 0, "stale": 0, "dropped": 0}
    text = path.read_text(encoding="utf-8")
    assert text.endswith("}\n") and text == json.dumps(json.loads(text), ensure_ascii=False,
                                                        indent=1) + "\n"
    assert json.loads(text) == {"source": f"labs/{STEM}.ipynb", "language": "zh-CN", "cells": [
        {"id": c.id, "sha": nbs.cell_sha(c.source), "zh": ""}
        for c in ENGLISH if c.cell_type == "markdown"]}
    import hashlib
    assert nbs.cell_sha(ENGLISH[0].source) == hashlib.sha256(
        ENGLISH[0].source.encode()).hexdigest()[:16]


def test_a_complete_clone_passes_and_the_generated_lab_is_as_the_contract_says(clone):
    assert nbs.problems(clone) == []
    nb = nbformat.read(clone / nbs.OUTPUT / f"{STEM}.ipynb", as_version=4)
    assert [c.id for c in nb.cells] == ["title", "colab", nbs.SET_LANGUAGE_ID, "cow", "answer",
                                        "recap"]
    assert nb.cells[2].source == 'import pagedkit\npagedkit.set_language("zh-CN")'
    assert nb.cells[4].source == ANSWER and nb.cells[4].metadata.nbgrader
    title, cow = nb.cells[0].source, nb.cells[3].source
    assert "blob/main/labs/zh-CN/01_demo.ipynb" in title  # its own Colab badge
    assert "(../../docs/x.md)" in title
    assert "(02_next.ipynb)" in cow and "(../solutions/lab01.py)" in cow
    assert 'href="../../docs/y.md"' in cow


def test_links_rewritten_for_the_deeper_folder():
    assert nbs.rewrite_target("../docs/a.md#x") == "../../docs/a.md#x"
    assert nbs.rewrite_target("solutions/lab03.py") == "../solutions/lab03.py"
    for same in ("03_paging.ipynb", "04b_split_kv_and_prefill.ipynb#2", "README.md",
                 "https://x.org/a", "#section", "mailto:a@b.c"):
        assert nbs.rewrite_target(same) == same
    assert nbs.rewrite_links("[a](../x.md) [b]: ../y.md\n[c]: ../z.md") == \
        "[a](../../x.md) [b]: ../y.md\n[c]: ../../z.md"
    binder = "https://mybinder.org/v2/gh/pagedkit/pagedkit/main?urlpath=lab/tree/labs"
    assert nbs.rewrite_links(f"(`{binder}`) [x]({binder}/03_paging.ipynb)") == \
        f"(`{binder}/zh-CN`) [x]({binder}/zh-CN/03_paging.ipynb)"
    assert nbs.rewrite_links("运行 `pip install -r requirements.txt && python -m pagedkit lab`，"
                             "`python -m pagedkit lab --help`") == \
        ("运行 `pip install -r requirements.txt && python -m pagedkit lab --lang zh-CN`，"
         "`python -m pagedkit lab --help`")


CODE_FORMS = [  # each holds what the link rewriter would rewrite outside code
    "`kernel[grid](args)`",
    "``a `b` [c](d)``",
    "`[x](y.md) across\na line`",
    '`<a href="y.md">`',
    "```python\nkernel[grid](args)\n[r]: y.md\n```",
    "~~~\n[x](y.md)\n~~~",
    "  ```\n<img src=\"p.png\">\n  ```",
]


@pytest.mark.parametrize("code", CODE_FORMS)
def test_code_is_no_link(code):
    """Newcomer 15, finding 6: zh lab 04 showed `kernel[grid](../args)`, a code
    span taken for a relative link. Code stays as written; a link beside it is
    still rewritten."""
    text = f"see [docs](../docs/x.md) and\n{code}\nthen [sol](solutions/a.py)"
    assert nbs.rewrite_links(text) == \
        f"see [docs](../../docs/x.md) and\n{code}\nthen [sol](../solutions/a.py)"


def _edition(span: str) -> str:
    """An English code span as the Chinese edition quotes it on purpose: the command
    and Binder's folder opening the Chinese labs (`rewrite_links`'s last steps)."""
    span = span.replace("python -m pagedkit lab`", "python -m pagedkit lab --lang zh-CN`")
    return span.replace("urlpath=lab/tree/labs`", "urlpath=lab/tree/labs/zh-CN`")


def test_every_zh_cell_quotes_the_english_code():
    """Every code span and block of every zh lab's markdown is its English cell's
    (whitespace aside: a span may break across lines elsewhere), over all labs."""
    def code(text):
        return sorted(" ".join(m.group(0).split()) for m in nbs._CODE.finditer(text))

    differ = []
    for stem in nbs.stems_with_catalogs(ROOT):
        english = {c.id: c.source for c in nbs.markdown_cells(
            nbs.read_notebook(ROOT / "labs" / f"{stem}.ipynb"))}
        for cell in nbs.markdown_cells(nbs.read_notebook(nbs.output_path(ROOT, stem))):
            want = sorted(_edition(s) for s in code(english[cell.id]))
            if code(cell.source) != want:
                differ.append((stem, cell.id, set(code(cell.source)) ^ set(want)))
    assert not differ
    assert sum(len(code(c.source)) for c in nbs.markdown_cells(
        nbs.read_notebook(nbs.output_path(ROOT, "04_paged_attention")))) > 50


def _blocks(markdown: str) -> list[str]:
    """The block structure of `markdown` as a CommonMark reader (mistune, which
    nbconvert renders with) parses it: headings, paragraphs, list items, code..."""
    import mistune

    def walk(nodes):
        for node in nodes:
            if node["type"] not in ("text", "softbreak", "linebreak", "blank_line"):
                yield node["type"]
            yield from walk(node.get("children") or [])

    parse = mistune.create_markdown(renderer="ast", plugins=["table", "math"])
    return [t for t in walk(parse(markdown)) if t in BLOCKS]


BLOCKS = {"heading", "paragraph", "block_text", "list", "list_item", "block_code",
          "block_quote", "table", "block_math", "thematic_break", "block_html"}


def test_every_zh_cell_has_its_english_cells_blocks():
    """Newcomer 15, finding 5: two zh cells lost bullets (a line break before
    ``* `` dropped in translation, so they read as literal "* " in a paragraph).
    Every zh lab's markdown cell has the English cell's headings, paragraphs, list
    items and code blocks, in order, over all labs."""
    differ, cells = [], 0
    for stem in nbs.stems_with_catalogs(ROOT):
        english = {c.id: c.source for c in nbs.markdown_cells(
            nbs.read_notebook(ROOT / "labs" / f"{stem}.ipynb"))}
        for cell in nbs.markdown_cells(nbs.read_notebook(nbs.output_path(ROOT, stem))):
            cells += 1
            if _blocks(cell.source) != _blocks(english[cell.id]):
                differ.append((stem, cell.id, nbs.first_words(cell.source),
                               _blocks(english[cell.id]), _blocks(cell.source)))
    assert not differ
    assert cells > 200 and _blocks("text\n* a\n* b") == \
        ["paragraph", "list", "list_item", "block_text", "list_item", "block_text"]
    assert _blocks("text * a * b") == ["paragraph"]


def test_a_changed_english_cell_fails_until_revised(clone, capsys):
    edit_english(clone, "cow", "## 1. Copy-on-write, again\n\nNew words.")
    found = nbs.problems(clone)
    assert len(found) == 1 and "English cell cow ('## 1. Copy-on-write, again" in found[0]
    assert cli(["--root", str(clone), "check"]) == 1
    assert "changed since it was translated" in capsys.readouterr().err
    # skeleton keeps the translation, takes the new sha, marks it stale: still failing
    _, counts = nbs.skeleton(clone, clone / "labs" / f"{STEM}.ipynb")
    assert counts == {"new": 0, "kept": 2, "stale": 1, "dropped": 0}
    entry = next(e for e in catalog(clone)["cells"] if e["id"] == "cow")
    assert entry["zh"] == CHINESE["cow"] and entry["stale"] is True
    assert "marked stale" in " ".join(nbs.problems(clone))
    with pytest.raises(ValueError, match="marked stale"):
        nbs.build(clone, STEM, execute=False)
    path = nbs.catalog_path(clone, STEM)
    revised = catalog(clone)
    for e in revised["cells"]:
        if e.pop("stale", None):
            e["zh"] = "## 1. 写时复制（再谈）\n\n新的内容。"
    nbs.write_catalog(path, revised)
    assert "is not what the generator makes now" in " ".join(nbs.problems(clone))
    nbs.build(clone, STEM, execute=False)
    assert nbs.problems(clone) == []


def test_a_dropped_or_empty_translation_fails(clone):
    full = catalog(clone)
    dropped = dict(full, cells=[e for e in full["cells"] if e["id"] != "recap"])
    nbs.write_catalog(nbs.catalog_path(clone, STEM), dropped)
    assert nbs.problems(clone) == [
        "i18n/zh-CN/labs/01_demo.json: markdown cell recap ('## Recap Write the code in a "
        "`code ...') has no translation (python -m pagedkit.i18n skeleton "
        "labs/01_demo.ipynb adds its entry)"]
    fill(clone, {})
    nbs.write_catalog(nbs.catalog_path(clone, STEM), full)
    fill(clone, {"recap": "  "})
    assert "is not translated yet" in " ".join(nbs.problems(clone))


def test_an_entry_for_a_cell_gone_fails(clone):
    extra = catalog(clone)
    extra["cells"].append({"id": "gone", "sha": "0" * 16, "zh": "旧的"})
    nbs.write_catalog(nbs.catalog_path(clone, STEM), extra)
    assert ["an entry for cell gone" in p for p in nbs.problems(clone)] == [True]


def test_an_edited_generated_cell_fails(clone):
    path = clone / nbs.OUTPUT / f"{STEM}.ipynb"
    nb = nbformat.read(path, as_version=4)
    nb.cells[3].source += "\n手改的一句。"
    nbformat.write(nb, path)
    found = nbs.problems(clone)
    assert len(found) == 1 and "cell 3 (id cow" in found[0] and "build" in found[0]
    assert "'手改的一句。', the generator's '(no line)'" in found[0]
    nbs.build(clone, STEM, execute=False)
    assert nbs.problems(clone) == []
    nb.cells.pop()  # a cell missing
    nbformat.write(nb, path)
    assert "generator makes" in " ".join(nbs.problems(clone))


def test_a_wrong_term_fails_and_a_code_block_is_not_a_kv_block(clone):
    fill(clone, {"cow": CHINESE["cow"].replace("写时复制", "写入时复制")})
    nbs.build(clone, STEM, execute=False)
    assert nbs.problems(clone) == [
        "i18n/zh-CN/labs/01_demo.json: cell cow says 'Copy-on-write' in English; its "
        "translation lacks the glossary's 写时复制 (docs/glossary.md)"]
    fill(clone, {"cow": CHINESE["cow"], "title": CHINESE["title"].replace("页表", "块表")})
    nbs.build(clone, STEM, execute=False)
    assert ["lacks the glossary's 页表" in p for p in nbs.problems(clone)] == [True]


def test_glossary_terms_read_from_docs_and_matched_on_prose_only():
    glossary = nbs.Glossary.read(ROOT / nbs.GLOSSARY)
    english = {t.english[0] for t in glossary.terms}
    assert {"copy-on-write", "block table", "prefix caching", "continuous batching",
            "near-zero waste", "physical block"} <= english
    assert glossary.departures("Use `block_table` and a code block, see [x](block-table.md)",
                               "用代码") == []
    assert glossary.departures("Two block-tables.", "两张表") == [("block-tables", "页表")]
    assert glossary.departures("PagedAttention's kernel", "核函数") == []


def test_skeleton_never_overwrites_translations(clone):
    before = catalog(clone)
    _, counts = nbs.skeleton(clone, clone / "labs" / f"{STEM}.ipynb")
    assert counts == {"new": 0, "kept": 3, "stale": 0, "dropped": 0}
    assert catalog(clone) == before


def test_stray_generated_notebook_and_the_index(clone):
    shutil.copy(clone / nbs.OUTPUT / f"{STEM}.ipynb", clone / nbs.OUTPUT / "05_x.ipynb")
    assert "labs/zh-CN/05_x.ipynb has no catalog" in " ".join(nbs.problems(clone))
    (clone / nbs.OUTPUT / "05_x.ipynb").unlink()
    readme = clone / nbs.OUTPUT / "README.md"
    assert readme.read_text() == f"# 实验\n\n| [01]({STEM}.ipynb) | 分页 |\n"  # only labs in zh
    readme.write_text(readme.read_text() + "| [05](05_x.ipynb) | 连续批处理 |\n")
    assert "labs/zh-CN/README.md is not what" in " ".join(nbs.problems(clone))
    nbs.write_index(clone)
    (clone / nbs.INDEX_SOURCE).write_text("# 实验\n")
    nbs.write_index(clone)
    assert nbs.problems(clone) == ["labs/zh-CN/README.md has no row for 01_demo.ipynb: add one "
                                   "to i18n/zh-CN/labs_README.md"]


def test_cli_usage_errors(clone, capsys):
    with pytest.raises(SystemExit) as e:
        cli(["--root", str(clone), "build", "labs/99_none.ipynb"])
    assert e.value.code == 2
    assert "'labs/99_none.ipynb' is not an English lab" in capsys.readouterr().err
    assert cli(["--root", str(clone), "build", "--no-execute"]) == 0
    assert cli(["--root", str(clone), "check"]) == 0


def test_build_executes_with_chinese_messages(clone):
    out = nbs.build(clone, STEM, execute=True, timeout=300)
    nb = nbformat.read(out, as_version=4)
    answer = next(c for c in nb.cells if c.id == "answer")
    assert answer.outputs[0]["text"] == "42 zh-CN\n" and answer.execution_count == 3
    assert nbs.problems(clone) == []


def test_this_repository_passes_the_check():
    assert nbs.problems(ROOT) == []
