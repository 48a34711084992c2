"""The labs' sentences on the build track's range (newcomer 30, N11): lab 08
saves a piece too (`top_p_filter`) and adds a ninth setting, "sampling", but
labs/README.md (en and zh) said labs 03-07 and listed six pieces' labs, lab 03
said "from this lab to lab 07" and lab 08 named only what labs 03-07 saved.
Each sentence is compared with `track`: its labs (`_lab_range`), its pieces
(`PIECES`) and its settings (`CHECK_ORDER`)."""

import json
import re
from pathlib import Path

import pytest

from pagedkit.exercises import track

ROOT = Path(__file__).resolve().parents[2]
FIRST, LAST = track._lab_range().split("-")  # "03", "08"
NUMBERS = {10: ("ten", "十")}


def _cell(lab: str, heading: str) -> str:
    cells = json.loads((ROOT / "labs" / lab).read_text(encoding="utf-8"))["cells"]
    (text,) = ["".join(c["source"]) for c in cells
               if c["cell_type"] == "markdown" and "".join(c["source"]).startswith(heading)]
    return " ".join(text.split())


def _paragraph(path: Path, start: str) -> str:
    (text,) = [p for p in path.read_text(encoding="utf-8").split("\n\n") if p.startswith(start)]
    return " ".join(text.split())


def _ranges(text: str) -> list[tuple[str, str]]:
    return re.findall(r"(\d\d)\s*[-–]\s*(\d\d)", text)


@pytest.mark.parametrize("path, start", [
    ("labs/README.md", "**The build track.**"),
    ("labs/zh-CN/README.md", "**构建路线"),
    ("i18n/zh-CN/labs_README.md", "**构建路线"),
])
def test_the_labs_readme_gives_the_track_s_labs_and_every_piece(path, start):
    text = _paragraph(ROOT / path, start)
    assert _ranges(text) == [(FIRST, LAST)], text
    assert "top_p_filter" in text, text
    if "zh" not in path:
        assert all(f"`{piece}`" in text for piece in track.PIECES), text


@pytest.mark.parametrize("edition", ["", "zh-CN/"])
def test_lab_03_says_the_track_runs_to_the_last_lab_that_saves_a_piece(edition):
    heading = "## Build track" if not edition else "## 构建路线"
    text = _cell(f"{edition}03_paging.ipynb", heading)
    said = re.findall(r"(?:to lab|到实验) (\d\d)", text)
    assert said == [LAST], text


@pytest.mark.parametrize("edition", ["", "zh-CN/"])
def test_lab_08_names_its_own_piece_and_the_sampling_setting(edition):
    heading = "## Build track" if not edition else "## 构建路线"
    text = _cell(f"{edition}08_full_engine.ipynb", heading)
    assert "`top_p_filter`" in text and ('"sampling"' in text or "`sampling`" in text), text
    assert track.CHECK_ORDER[0] == "sampling" and ("first" in text or "先" in text), text
    english, chinese = NUMBERS[len(track.CHECK_ORDER)]
    assert (english if not edition else chinese) in text, text
