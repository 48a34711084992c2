"""labs/README.md (and its Chinese edition) says how long a core lab takes,
"about X to Y minutes": X and Y are the shortest and longest core of the core
labs by `python -m pagedkit bench study`'s rule, as docs/teachers_guide.md's
table gives them (newcomer 15, finding 11b: the README said 35 to 85 while
the command gave 86 for lab 08 and 89 for lab 09)."""

import re
from pathlib import Path

import pytest

from pagedkit.bench.study import study

ROOT = Path(__file__).resolve().parents[2]
PAGES = {"labs/README.md": r"about (\d+) to (\d+) minutes",
         "labs/zh-CN/README.md": r"大约需要 (\d+) 到 (\d+) 分钟",
         "i18n/zh-CN/labs_README.md": r"大约需要 (\d+) 到 (\d+) 分钟"}


def core_minutes():
    """Each core lab's core, in whole minutes as the command's table rounds them
    (an optional lab, 04b, 04c, 10, has no core)."""
    minutes = {}
    for path in sorted((ROOT / "labs").glob("*.ipynb")):
        core = study(path).core_minutes
        if core > 0:
            minutes[path.stem] = round(core)
    return minutes


@pytest.mark.parametrize("page", PAGES)
def test_the_readme_gives_the_range_of_the_core_labs(page):
    minutes = core_minutes()
    assert set(minutes) == {p.stem for p in (ROOT / "labs").glob("0[0-9]_*.ipynb")}
    [said] = re.findall(PAGES[page], (ROOT / page).read_text(encoding="utf-8"))
    assert tuple(map(int, said)) == (min(minutes.values()), max(minutes.values())), minutes
