"""No ASCII punctuation in a Chinese sentence (docs/i18n.md: "use full-width punctuation
in Chinese sentences"): every zh msgstr of the catalog, and the lines `simulate` builds
around them (newcomer: `simulate`'s zh timing line listed its experiments with ", ").
What stays ASCII, as docs/i18n.md keeps it: code spans, placeholders, option names,
numbers, file names and paths, and code or formulas in brackets (``exp(lse)``, ``(0, 1)``,
``[0, 20)``, ``(2 × 40 层 × 5,120 × 2 字节)``)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from babel.messages.pofile import read_po

from pagedkit.i18n import speaking
from pagedkit.sim import report as rp

PO = (Path(__file__).resolve().parents[2] / "src" / "pagedkit" / "i18n" / "locale" / "zh_CN"
      / "LC_MESSAGES" / "pagedkit.po")
HAN = "\u3400-\u9fff"
#: what stays ASCII in a Chinese sentence, masked before the scan (in this order)
KEPT = [re.compile(p) for p in (
    r"`[^`]*`",  # code spans
    r"\{[^{}]*\}",  # placeholders
    r"--?[A-Za-z][\w-]*(=\S*)?",  # option names
    r"\d[\d,.]*\d",  # numbers: 5,120 and 1.5
    r"[\w~/-]*\.(json|csv|py|ipynb|md|txt|mo|po)\b|\b[A-Za-z_.]+/[A-Za-z0-9_./-]*",  # paths
    r"[A-Za-z_][\w.]*\([^()]*(\([^()]*\)[^()]*)*\)",  # a call: exp(lse), log(总权重)
    rf"[(\[][^()\[\]{HAN}]*[)\]]",  # code in brackets: (0, 1), [0, 20), (row_max, row_sum)
    r"\([^()]*[×÷+/=][^()]*\)",  # a formula in brackets: (2 × 40 层 × 5,120 × 2 字节)
    r"\0+\s*,\s*\0+",  # a list of code: (0, 1), (2, 3)
)]
#: ASCII punctuation left: , : ; ? ! ending a clause, ( ) . touching a Chinese character
NIT = re.compile(rf"[,:;?!](?=\s|$|[{HAN}])|(?<=[{HAN}])[().]|[().](?=[{HAN}])")


def nits(text: str) -> list[str]:
    """The ASCII punctuation of `text`'s Chinese lines that docs/i18n.md does not keep,
    each with the text around it."""
    found = []
    for line in text.splitlines():
        if not re.search(f"[{HAN}]", line):
            continue
        plain = line
        for pattern in KEPT:
            plain = pattern.sub(lambda m: "\0" * len(m.group()), plain)
        found += [line[max(0, m.start() - 12):m.end() + 12] for m in NIT.finditer(plain)]
    return found


def _msgstrs() -> list[str]:
    with PO.open("rb") as f:
        catalog = read_po(f)
    return [text for m in catalog if m.id
            for text in (m.string if isinstance(m.string, tuple) else (m.string,))]


def test_the_scan_finds_what_it_should_and_keeps_what_stays_ascii():
    for wrong in ("被调度的序列（id, token 数）", "论文实验: 0%", "时间：a 1 s, b 2 s", "它见上.",
                  "页块(3 个)"):
        assert nits(wrong), wrong
    assert not nits("用 `x, y` 和 {n!r}：--scale quick、5,120 个、见 docs/i18n.md；exp(lse)、"
                    "(0, 1), (2, 3)、[0, 20)、(2 × 40 层 × 5,120 × 2 字节)、log(总权重)")


def test_every_zh_msgstr_punctuates_its_chinese_full_width():
    left = {text[:60]: found for text in _msgstrs() if (found := nits(text))}
    assert not left, left


def test_simulates_timing_line_lists_its_experiments_the_chinese_way():
    report = rp.Report("quick")
    report.speed.update(iterations=19192, seconds=2.08, iterations_per_second=9227)
    report.seconds.update({"fig2+13 sharegpt@2": 1.22, "fig12 alpaca": 10.67, "fig15": 5.73})
    with speaking("zh-CN"):
        table = rp.format_table(report)
    line = table.splitlines()[-1]
    assert "每个实验的墙钟时间" in line and not nits(line), line
    assert line.endswith("fig2+13 sharegpt@2 1.22 s、fig12 alpaca 10.67 s、fig15 5.73 s")
    with speaking("en"):
        english = rp.format_table(report).splitlines()[-1]
    assert english.endswith("fig2+13 sharegpt@2 1.22 s, fig12 alpaca 10.67 s, fig15 5.73 s")


@pytest.mark.parametrize("markdown", [False, True])
def test_the_whole_zh_table_of_a_small_report_has_no_ascii_punctuation(markdown):
    report = rp.Report("test")
    rp._table1_and_fig11(report, rp.paper_trace("sharegpt", num_requests=20),
                         rp.paper_trace("alpaca", num_requests=20))
    report.speed.update(iterations=1, seconds=1.0, iterations_per_second=1)
    report.seconds.update({"a": 1.0, "b": 2.0})
    with speaking("zh-CN"):
        table = rp.format_table(report, markdown=markdown)
    assert not nits(table), nits(table)
