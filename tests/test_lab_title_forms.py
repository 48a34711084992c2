"""Every way the READMEs print a lab opens it, in both editions (``lab`` and ``lab --lang
zh-CN``): its number, its name, its full title (each edition's first heading), its title
as each table prints it (README.md's ``06 When memory runs out``, labs/README.md's
``When memory runs out``, labs/zh-CN/README.md's ``当显存耗尽时``), and a Chinese title
from any of its characters on (``显存耗尽时``: Chinese writes no spaces between words, so
a newcomer drops the ``当`` of ``当……时``). Read from the tables themselves, so a lab or a
table added later is held to it too (a newcomer's ``lab 显存耗尽时`` and ``lab "06 When
memory runs out"`` were "no lab")."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pagedkit import lab
from pagedkit.__main__ import main as cli

ROOT = Path(__file__).resolve().parents[1]
LABS = sorted((ROOT / "labs").glob("*.ipynb"))
FOLDERS = {language: lab.edition(ROOT, language) for language in lab.EDITIONS}


@pytest.fixture(autouse=True)
def _no_copies_in_this_checkout(monkeypatch):
    """`lab --print` makes the copy it opens: not in this checkout."""
    monkeypatch.setattr(lab, "copy_labs", lambda root, language="en": ([], []))


def _printed_forms() -> dict[str, set[str]]:
    """Each lab's file -> every form of it the READMEs' tables print."""
    forms: dict[str, set[str]] = {p.name: set() for p in LABS}
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for number, title, file in re.findall(r"^\| \[(\d\d\w?) ([^\]]+)\]\(labs/(\w+\.ipynb)\)",
                                          readme, re.M):
        forms[file] |= {f"{number} {title}", title, number}
    for page in (ROOT / "labs" / "README.md", ROOT / "labs" / "zh-CN" / "README.md"):
        text = page.read_text(encoding="utf-8")
        for number, file, title in re.findall(r"^\| \[(\w+)\]\((\w+\.ipynb)\) \| ([^|]+?) \|",
                                              text, re.M):
            forms[file] |= {number, title, file, file.removesuffix(".ipynb")}
    for path in LABS:
        forms[path.name] |= {lab.lab_title(folder / path.name) for folder in FOLDERS.values()
                             if (folder / path.name).is_file()}
    return forms


FORMS = _printed_forms()


def test_the_tables_give_every_lab_its_number_name_and_titles():
    """The forms below come from the tables: each table lists every lab (else a lab
    would go untested here)."""
    for file, forms in FORMS.items():
        numbers = {form for form in forms if re.fullmatch(r"\d\d\w?", form)}
        assert numbers == {file.split("_", 1)[0]}, (file, forms)
        assert {file, file.removesuffix(".ipynb")} < forms, (file, forms)
        assert any(form.startswith(f"{min(numbers)} ") for form in forms), (file, forms)


@pytest.mark.parametrize("language", list(lab.EDITIONS))
@pytest.mark.parametrize("file", sorted(FORMS), ids=lambda f: f.removesuffix(".ipynb"))
def test_every_printed_form_opens_its_lab(capsys, file, language):
    if not (FOLDERS[language] / file).is_file():
        pytest.skip(f"no {language} edition of {file}")
    wrong = []
    for form in sorted(FORMS[file]):
        cases = {form} if form.endswith(".ipynb") else {form, form.lower(), form.upper()}
        for spelling in cases:  # a title in any case (the files are lower case)
            if lab.find_lab(FOLDERS[language], spelling) != (file, []):
                wrong.append(spelling)
        if cli(["lab", form, "--lang", language, "--print"]) != 0 or \
                Path(capsys.readouterr().out.split()[-1]).name != file:
            wrong.append(f"cli: {form}")
    assert not wrong, wrong


def _chinese_tails(title: str) -> list[str]:
    """`title` from each of its Chinese characters on, but its first (``显存耗尽时`` and
    ``耗尽时`` of ``当显存耗尽时``), each as far as the next punctuation too; a remark in
    brackets left out, as the lab names leave it (``（选做）``)."""
    title = re.sub(r"[(（][^)）]*[)）]", "", title).strip()
    tails = [title[i:] for i in range(1, len(title)) if "\u4e00" <= title[i] <= "\u9fff"]
    return sorted({t for tail in tails for t in (tail, re.split(r"[^\w ]", tail)[0])} - {""})


@pytest.mark.parametrize("language", list(lab.EDITIONS))
@pytest.mark.parametrize("file", sorted(FORMS), ids=lambda f: f.removesuffix(".ipynb"))
def test_a_chinese_title_names_its_lab_from_any_of_its_characters(file, language):
    """The start of an English word names a lab (`lab when`); a Chinese title from any of
    its characters on names it the same: alone, or among the labs it could mean (``页``
    is in several titles), never "no lab" and never another lab."""
    if not (FOLDERS[language] / file).is_file():
        pytest.skip(f"no {language} edition of {file}")
    wrong = []
    for title in sorted(FORMS[file]):
        for tail in _chinese_tails(title):
            found, could_be = lab.find_lab(FOLDERS[language], tail)
            if found != file and file not in could_be:
                wrong.append((tail, found, could_be))
    assert not wrong, wrong


@pytest.mark.parametrize("language", list(lab.EDITIONS))
def test_the_newcomers_chinese_short_title_opens_lab_06(capsys, language):
    assert cli(["lab", "显存耗尽时", "--lang", language, "--print"]) == 0
    assert Path(capsys.readouterr().out.split()[-1]).name == "06_preemption.ipynb"
