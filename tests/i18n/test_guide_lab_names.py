"""The teachers' guides name each lab as the lab names itself (newcomer 27, N6).

docs/zh-CN/teachers_guide.md called lab 09 ``09 更进一步`` in its two tables and its
misconceptions list, while the lab, labs/zh-CN/README.md and lab 08's 下一步 call it
``PagedAttention 之外``: ``lab --lang zh-CN 更进一步`` found no lab. Here every
``| NN name |`` row and ``**NN name.**`` heading of both guides opens lab NN by that
name (`pagedkit.lab.find_lab`, the one rule for lab names), or shortens its title
(each of its words in the title: ``Split-KV and paged prefill``). (Failed before: the
three zh names of lab 09.)"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pagedkit.lab import find_lab, lab_title

ROOT = Path(__file__).resolve().parents[2]
GUIDES = {"en": (ROOT / "docs" / "teachers_guide.md", ROOT / "labs"),
          "zh-CN": (ROOT / "docs" / "zh-CN" / "teachers_guide.md", ROOT / "labs" / "zh-CN")}


def _named(text: str) -> list[tuple[str, str]]:
    """(number, name) of each lab the guide names: table rows and bold headings."""
    found = re.findall(r"^\| (\d\d[a-z]?) ([^|]+?) \|", text, re.M)
    found += re.findall(r"^\*\*(\d\d[a-z]?) ([^*]+?)[.。]\*\*", text, re.M)
    return [(number, re.sub(r"\s*[（(][^）)]*[）)]", "", name).strip())
            for number, name in found]


@pytest.mark.parametrize("language", GUIDES)
def test_the_guide_names_each_lab_by_a_name_that_opens_it(language):
    guide, labs = GUIDES[language]
    named = _named(guide.read_text(encoding="utf-8"))
    assert len({number for number, _ in named}) >= 12
    wrong = []
    for number, name in named:
        [lab] = labs.glob(f"{number}_*.ipynb")
        opens = find_lab(labs, name)[0] == lab.name
        shortens = all(word.lower() in lab_title(lab).lower() for word in name.split())
        if not (opens or shortens):
            wrong.append((number, name, lab_title(lab)))
    assert wrong == []
