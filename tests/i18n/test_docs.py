"""The Chinese edition's pages (issue #29): README.zh-CN.md gives the README's two set-up
commands and opens the Chinese labs, every page links only what exists, Binder has
JupyterLab's Chinese language pack."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README_ZH = ROOT / "README.zh-CN.md"
PAGES = [README_ZH, ROOT / "docs" / "glossary.md", ROOT / "docs" / "zh-CN" / "model.md",
         ROOT / "docs" / "zh-CN" / "teachers_guide.md", ROOT / "labs" / "zh-CN" / "README.md",
         ROOT / "i18n" / "zh-CN" / "labs_README.md", ROOT / "README.md"]
# every page of docs/ too, in both languages (newcomer 35: the teachers' guide linked a
# model.md that only docs/zh-CN/ has), and the English labs' index
PAGES += sorted({*ROOT.joinpath("docs").glob("*.md"), *ROOT.joinpath("docs", "zh-CN").glob("*.md"),
                 ROOT / "labs" / "README.md"} - set(PAGES))


def bash_commands(text: str) -> list[str]:
    block = re.search(r"```bash\n(.*?)```", text, re.S).group(1)
    return [line for line in block.splitlines() if line and not line.startswith("#")]


def test_the_chinese_readme_has_the_two_setup_commands_and_the_chinese_labs():
    english = (ROOT / "README.md").read_text().split("## Quickstart", 1)[1]
    chinese = README_ZH.read_text()
    assert bash_commands(chinese) == bash_commands(english)
    assert "python -m pagedkit lab --lang zh-CN" in chinese
    for host in ("colab.research.google.com/github/pagedkit/pagedkit/blob/main/labs/zh-CN/",
                 "mybinder.org/v2/gh/pagedkit/pagedkit/main?urlpath=lab/tree/labs/zh-CN/"):
        assert host + "00_start_here.ipynb" in chinese
    assert "[简体中文](README.zh-CN.md)" in (ROOT / "README.md").read_text().split("\n\n")[1]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page):
    # the index template is written to labs/zh-CN/README.md: its links resolve from there
    base = ROOT / "labs" / "zh-CN" if page.name == "labs_README.md" else page.parent
    prose = re.sub(r"```.*?```|`[^`]*`", "", page.read_text(), flags=re.S)
    targets = re.findall(r"\]\(([^)\s]+)\)", prose)
    relative = [t.split("#")[0] for t in targets if not re.match(r"[a-z]+:|#", t)]
    missing = [t for t in relative if not (base / t).exists()]
    assert missing == []


def test_binder_has_jupyterlabs_chinese_language_pack():
    names = [line.split("#")[0].strip().lower()
             for line in (ROOT / "binder" / "requirements.txt").read_text().splitlines()]
    assert "jupyterlab-language-pack-zh-cn" in names


def test_the_chinese_pages_start_the_labs_as_the_english_ones_do():
    for page in (README_ZH, ROOT / "labs" / "zh-CN" / "README.md",
                 ROOT / "docs" / "zh-CN" / "teachers_guide.md"):
        text = page.read_text()
        assert "jupyter lab labs" not in text and "python -m pagedkit lab" in text, page
