"""``python -m pagedkit bench study [--labs 05,08] [--labs-dir DIR] [--markdown]``:
how long a careful student spends on each lab, by a stated rule.

A lab's run time (``bench labs``) is the least of a class's time: students
read, predict, write code and look at what the cells print. Nobody can time
that for every class, so this estimate counts what a notebook asks of a
reader and prices each thing by one rule, the same for every lab:

* prose: `WORDS_PER_MINUTE` words of markdown a minute (careful reading of
  technical text, formulas and tables included);
* code: `SECONDS_PER_CODE_LINE` per line of code read (blank lines and
  comment-only lines not counted);
* each code cell: `SECONDS_PER_CELL` to run it and read what it prints;
* each exercise (a cell with ``# YOUR CODE``): `MINUTES_PER_EXERCISE`
  to think, write, run the check and fix.

A section whose heading says it is optional (``## Optional ...``, ``###
Exercise 4 (optional)``, ``(optional reading)``) counts apart, up to the next
heading of its level or above: a lab's *core* time leaves those sections
out, and a class session must fit the core (docs/teachers_guide.md). The
rule was set against a careful read-through of the labs as they were before
issue #27 (12 to 14 hours in all; lab 04 100-140 minutes, lab 09 100-130), which
it puts (the labs at commit 8c8936b) at 13.4 hours, lab 04 at 100 minutes and lab 09 at 102: an
estimate of that kind of reading, not a measurement of any class.

The Chinese edition (``labs/zh-CN/``, made by ``python -m pagedkit.i18n``)
is timed by its English original: a translated lab is the same cells, so it is
counted as ``labs/<lab>.ipynb`` of this checkout, optional sections found by the
English headings (one source for both editions). Counting Chinese characters at a
reading rate of its own would price the translation's length, which varies with
the translator, so the two editions' figures could part with no lab changed; the
original's count cannot. A notebook whose markdown is mostly CJK characters but is
not such an edition (no language cell, or cells that are not its original's) is
refused: the rule counts English words.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from .._validation import PROG
from ..i18n import english_error
from ..i18n.notebooks import LANGUAGE, SET_LANGUAGE_ID
from ..i18n.terminal import HelpFormatter
from . import add_no_progress
from .labs import HOME, find_labs

WORDS_PER_MINUTE = 100
SECONDS_PER_CODE_LINE = 6
SECONDS_PER_CELL = 30
MINUTES_PER_EXERCISE = 10
#: The session length every lab's core must fit (issue #27).
SESSION_MINUTES = 90

_HEADING = re.compile(r"^(#{1,6})\s+(.*)$")
_OPTIONAL = re.compile(r"\boptional\b", re.IGNORECASE)
#: CJK ideographs (Unified, Extension A, Compatibility): what a Chinese text is written in
_CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")


@dataclass
class Tally:
    """What a stretch of a notebook asks of its reader."""

    words: int = 0
    code_lines: int = 0
    code_cells: int = 0
    exercises: int = 0

    def add_words(self, text: str) -> None:
        self.words += len(text.split())

    def add_code(self, source: str) -> None:
        self.code_cells += 1
        self.code_lines += sum(1 for line in source.splitlines()
                               if line.strip() and not line.strip().startswith("#"))
        self.exercises += "YOUR CODE" in source

    @property
    def minutes(self) -> float:
        return (self.words / WORDS_PER_MINUTE + self.code_lines * SECONDS_PER_CODE_LINE / 60
                + self.code_cells * SECONDS_PER_CELL / 60
                + self.exercises * MINUTES_PER_EXERCISE)


@dataclass
class LabStudy:
    name: str
    core: Tally
    optional: Tally
    #: the English lab a translated one was timed by (None: the notebook itself)
    original: Path | None = None

    @property
    def core_minutes(self) -> float:
        return self.core.minutes

    @property
    def total_minutes(self) -> float:
        return self.core.minutes + self.optional.minutes


class _Sections:
    """Which part of a notebook a line belongs to: optional from a heading that
    says so up to the next heading of its level or above, else core."""

    def __init__(self) -> None:
        self.optional_level: int | None = None

    def see(self, line: str) -> None:
        m = _HEADING.match(line.strip())
        if m is None:
            return
        level, text = len(m.group(1)), m.group(2)
        if self.optional_level is not None and level <= self.optional_level:
            self.optional_level = None
        if self.optional_level is None and _OPTIONAL.search(text):
            self.optional_level = level

    @property
    def optional(self) -> bool:
        return self.optional_level is not None


def study(path: Path) -> LabStudy:
    """Tally a notebook's core and optional parts, line by line of its markdown
    (one cell may hold several sections); a code cell belongs to the part its
    cell starts in. A Chinese edition is tallied as its English original
    (`english_original`); a ValueError refuses a notebook the rule cannot count."""
    nb = json.loads(path.read_text(encoding="utf-8"))
    original = english_original(path, nb)
    if original is not None:
        nb = json.loads(original.read_text(encoding="utf-8"))
    core, optional = Tally(), Tally()
    sections = _Sections()
    for cell in nb["cells"]:
        source = "".join(cell["source"])
        if cell["cell_type"] == "markdown":
            for line in source.splitlines():
                sections.see(line)
                (optional if sections.optional else core).add_words(line)
        elif cell["cell_type"] == "code":
            (optional if sections.optional else core).add_code(source)
    return LabStudy(path.stem, core, optional, original)


def english_original(path: Path, nb: dict, labs: Path | None = None) -> Path | None:
    """The English lab (``labs/<stem>.ipynb``) that `nb`, at `path`, is the Chinese
    edition of, or None when `nb` is English. `labs` is the English labs' folder:
    by default the one above `path`'s when `path` lies in a ``zh-CN`` folder (the
    labs' tree, in any checkout or copy), else this checkout's. A translated lab is one with the
    language cell ``python -m pagedkit.i18n`` adds; its other cells must be its
    original's, in order (their ids). A ValueError refuses a notebook mostly in CJK
    characters that is not such an edition, and an edition whose original is missing
    or has other cells: a count of either would be silently wrong."""
    cells = nb["cells"]
    if not any(c.get("id") == SET_LANGUAGE_ID for c in cells):
        prose = " ".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
        han = len(_CJK.findall(prose))
        if han > len(prose.split()):
            raise ValueError(
                f"{path}: its markdown is not English ({han:,} CJK characters) and it is not "
                f"an edition made by python -m pagedkit.i18n (no {SET_LANGUAGE_ID!r} cell); "
                f"the rule counts English words: time its English original instead")
        return None
    if labs is None:
        labs = path.parent.parent if path.parent.name == LANGUAGE else HOME / "labs"
    original = labs / f"{path.stem}.ipynb"
    fix = (f"rebuild it (python -m pagedkit.i18n build labs/{path.stem}.ipynb) or time the "
           f"English labs (--labs-dir {labs})")
    if not original.is_file():
        raise ValueError(f"{path} is a {LANGUAGE} edition, timed by its English original, "
                         f"but {original} does not exist: {fix}")
    ids = [c.get("id") for c in cells if c.get("id") != SET_LANGUAGE_ID]
    english = [c.get("id") for c in json.loads(original.read_text(encoding="utf-8"))["cells"]]
    if ids != english:
        raise ValueError(f"{path} is a {LANGUAGE} edition, timed by its English original "
                         f"{original}, but its cells are not the original's "
                         f"({len(ids)} cells, the original {len(english)}): {fix}")
    return original


def format_table(studies: list[LabStudy], markdown: bool = False) -> str:
    rows = [(s.name, s.core.words, s.core.code_lines, s.core.code_cells, s.core.exercises,
             s.core_minutes, s.optional.minutes, s.total_minutes) for s in studies]
    total = [sum(r[i] for r in rows) for i in range(1, 8)]
    # the counts are the core's (newcomer finding 13: a lab all optional read as empty)
    head = ("lab", "core words", "core code lines", "core cells", "core exercises", "core min",
            "optional min", "all min")
    if markdown:
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for r in [*rows, ("all labs", *total)]:
            lines.append(f"| {r[0]} | {r[1]:,} | {r[2]:,} | {r[3]:,} | {r[4]:,} | {r[5]:,.0f} | "
                         f"{r[6]:,.0f} | {r[7]:,.0f} |")
        return "\n".join(lines)
    lines = [f"{head[0]:<34}" + "".join(f"{h:>16}" for h in head[1:])]
    for r in [*rows, ("all labs", *total)]:
        lines.append(f"{r[0]:<34}{r[1]:>16,}{r[2]:>16,}{r[3]:>16,}{r[4]:>16,}"
                     f"{r[5]:>16,.0f}{r[6]:>16,.0f}{r[7]:>16,.0f}")
    return "\n".join(lines)


def rule_text() -> str:
    return (f"rule: {WORDS_PER_MINUTE} words of prose a minute, {SECONDS_PER_CODE_LINE} s per "
            f"line of code, {SECONDS_PER_CELL} s per code cell, {MINUTES_PER_EXERCISE} min per "
            f"exercise; optional sections counted apart (only in 'optional min')")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog=f"{PROG} bench study",
                                description="Estimated student time per lab, by a stated rule.",
                                formatter_class=HelpFormatter)
    p.add_argument("--labs", help="comma-separated labs, each named as the lab command names "
                   "one (number, name or title), e.g. 05,08 (default: all)")
    p.add_argument("--labs-dir", type=Path, default=HOME / "labs",
                   help="the folder of notebooks (default: this checkout's labs/)")
    p.add_argument("--markdown", action="store_true", help="a markdown table")
    add_no_progress(p)
    args = p.parse_args(argv)
    from ..lab import say_other_clone

    say_other_clone("bench study", args.labs_dir)
    try:
        names = None if args.labs is None else [n.strip() for n in args.labs.split(",")
                                                if n.strip()]
        paths = find_labs(args.labs_dir, names)
    except ValueError as err:
        english_error(p, str(err))
    try:
        studies = [study(path) for path in paths]
    except ValueError as err:
        english_error(p, str(err))
    print(format_table(studies, args.markdown))
    print(rule_text())
    timed_by = [s for s in studies if s.original is not None]
    if timed_by:
        print(f"{len(timed_by)} {LANGUAGE} lab(s) timed by their English originals "
              f"(in {timed_by[0].original.parent}): a translation is read in its original's "
              f"time, optional sections as the original marks them")
    over = [s.name for s in studies if s.core_minutes > SESSION_MINUTES]
    print(f"core over {SESSION_MINUTES} min: {', '.join(over) if over else 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
