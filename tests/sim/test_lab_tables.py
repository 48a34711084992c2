"""The tables of labs 07 and 08 (Fig. 15's savings, the shape of the results) line
up in both languages, and the Chinese ones have no English header words
(newcomer 27, N1). Padding with ``f"{label:<28}"`` counts characters, while a
Chinese character takes two columns: every number of a zh row sat right of its
header, each row by its own amount. Columns are measured here by display width
(east Asian wide and full-width characters take two), independently of
`pagedkit.i18n.text_width`; a table's cells are two or more spaces apart."""

import json
import re
import unicodedata
from pathlib import Path

import pytest

from pagedkit.i18n import aligned, speaking
from pagedkit.sim import experiments as ex
from pagedkit.sim import paper as reference
from pagedkit.sim.experiments import paper_trace

ROOT = Path(__file__).resolve().parents[2]
#: The cells that print these tables (same ids in the English lab and its zh twin).
TABLE_CELLS = {"07_sharing": ("1602c317", "5d015cb6"), "08_full_engine": ("bd534cbc",)}
NOTEBOOKS = [(edition, stem, cell) for edition in ("labs", "labs/zh-CN")
             for stem, cells in TABLE_CELLS.items() for cell in cells]
#: Data names and kept words a zh header may show: trace names, managers, KV.
KEPT = re.compile(r"(sharegpt|alpaca)@\d+|Orca \((Oracle|Max|Pow2)\)|vLLM|KV")
PAPER_SHAREGPT = {"parallel": (16.2, 30.5), "beam": (44.3, 66.3)}


def width(text: str) -> int:
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def cells(line: str) -> list[tuple[int, int, str]]:
    """Each cell of `line` (runs of text two or more spaces apart) with the display
    columns where it starts and ends."""
    return [(width(line[:m.start()]), width(line[:m.end()]), m.group())
            for m in re.finditer(r"\S+(?: \S+)*", line)]


def misaligned(table: str, header_lines: int) -> list[str]:
    """What does not line up: the body's rows (and the last header line) must have
    the same cells, the first flush left at column 0 and every other one ending
    where the same cell of every other row ends; a header line above may leave
    cells blank, but each of its cells ends where a column ends."""
    lines = table.splitlines()
    full = [cells(line) for line in lines[header_lines - 1:]]
    found = [f"row {i}: {len(row)} cells, not {len(full[0])}: {lines[header_lines - 1 + i]!r}"
             for i, row in enumerate(full) if len(row) != len(full[0])]
    if found:
        return found
    found += [f"column 0 of {row[0][2]!r} starts at {row[0][0]}" for row in full if row[0][0]]
    for c in range(1, len(full[0])):
        ends = {row[c][1] for row in full}
        if len(ends) > 1:
            found.append(f"column {c} ends at {sorted(ends)}: "
                         + ", ".join(repr(row[c][2]) for row in full))
    column_ends = {cell[1] for cell in full[0][1:]}
    for line in lines[:header_lines - 1]:
        found += [f"header {text!r} ends at {end}, no column's end {sorted(column_ends)}"
                  for _start, end, text in cells(line) if end not in column_ends]
    return found


def english_header_words(table: str, header_lines: int) -> list[str]:
    header = "\n".join(table.splitlines()[:header_lines])
    return re.findall(r"[A-Za-z]{2,}", KEPT.sub(" ", header))


def _fig15():
    return ex.fig15_sharing_savings(paper_trace("alpaca", rate=10, num_requests=20))


def _bound(preset) -> float:
    return preset.num_params / 1e9  # any number a preset gives: the table prints it


def _shape():
    """`results_shape`'s rows for every scenario of lab 08, with made-up numbers."""
    rows = tuple({"scenario": sc.label, "dataset": sc.dataset, "model": sc.model.name,
                  "decoding": sc.decoding, "manager": m, "requests": 12345,
                  "requests_per_s": rate, "mean_batch_size": 3.25}
                 for sc in ex.SHAPE_SCENARIOS
                 for m, rate in (("Orca (Oracle)", 1.5), ("vLLM", 2.0)))
    return ex.FigureData("§6.2-6.3", "shape", rows)


#: Each table a lab prints, made by the package, and its number of header lines.
TABLES = {"fig15": (lambda: ex.savings_table(_fig15(), paper=reference.FIG15_SAVING), 1),
          "sharegpt": (lambda: ex.savings_table(_fig15(), paper=PAPER_SHAREGPT), 1),
          "shape": (lambda: ex.shape_table(_shape(), bound_above=_bound), 2)}


@pytest.mark.parametrize("language", ["en", "zh-CN"])
@pytest.mark.parametrize("name", list(TABLES))
def test_each_table_lines_up_by_display_width(name, language):
    make, header_lines = TABLES[name]
    with speaking(language):
        table = make()
    assert not misaligned(table, header_lines), table
    rows = len(ex.SHAPE_SCENARIOS) if name == "shape" else len(ex.SHARING_SCENARIOS)
    assert len(table.splitlines()) == header_lines + rows
    if language == "zh-CN":
        assert re.search(r"[\u4e00-\u9fff]", table)
        assert not english_header_words(table, header_lines), table


def test_zh_labels_read_as_the_lab_text_says_them():
    """`宽度=2` mixed a formula into the words; the lab text says 宽度为 6 的束搜索."""
    with speaking("zh-CN"):
        table = ex.savings_table(_fig15(), paper=reference.FIG15_SAVING)
        settings = [sc.display for sc in ex.SHAPE_SCENARIOS]
    labels = [line.split("  ")[0].rstrip() for line in table.splitlines()[1:]]
    assert labels == ["并行采样 n=2", "并行采样 n=4", "并行采样 n=6", "宽度为 2 的束搜索",
                      "宽度为 4 的束搜索", "宽度为 6 的束搜索", "共享前缀 80 个 token",
                      "共享前缀 341 个 token"]
    assert settings[-1] == "alpaca，OPT-13B，宽度为 4 的束搜索"
    assert not any("=" in s and "宽度" in s for s in labels + settings)


def test_english_tables_say_what_the_labs_said():
    with speaking("en"):
        fig15 = ex.savings_table(_fig15(), paper=reference.FIG15_SAVING)
        sharegpt = ex.savings_table(_fig15(), paper=PAPER_SHAREGPT)
        shape = ex.shape_table(_shape(), bound_above=_bound)
    assert fig15.splitlines()[0].split("  ")[0] == "alpaca@10, 20 requests"
    assert [c[2] for c in cells(fig15.splitlines()[0])][1:] == ["saved (simulated)", "paper"]
    assert [c[2] for c in cells(fig15.splitlines()[1])] == ["parallel sampling n=2",
                                                            cells(fig15.splitlines()[1])[1][2],
                                                            "6.1%"]
    assert [c[2] for c in cells(fig15.splitlines()[-1])][2] == "-"
    assert [c[2] for c in cells(sharegpt.splitlines()[-3])][2] == "44.3-66.3%"
    head = [[c[2] for c in cells(line)] for line in shape.splitlines()[:2]]
    assert head == [["KV", "arithmetic-", "Orca (Oracle)", "vLLM", "Orca (Oracle)", "vLLM"],
                    ["setting", "slots", "bound above", "requests", "requests/s", "requests/s",
                     "gain", "batch", "batch"]]
    first = [c[2] for c in cells(shape.splitlines()[2])]
    assert first == ["sharegpt, OPT-13B, one sample", "15,728", "13", "12,345", "1.50", "2.00",
                     "1.33x", "3.2", "3.2"]


def test_aligned_refuses_rows_of_different_lengths():
    with pytest.raises(ValueError, match=r"rows of \[1, 2\] cells"):
        aligned([["a", "b"], ["c"]])


def _output(edition: str, stem: str, cell_id: str) -> str:
    nb = json.loads((ROOT / edition / f"{stem}.ipynb").read_text(encoding="utf-8"))
    cell = next(c for c in nb["cells"] if c.get("id") == cell_id)
    return "".join("".join(o.get("text", "")) for o in cell["outputs"]
                   if o.get("name") == "stdout").rstrip("\n")


@pytest.mark.parametrize(("edition", "stem", "cell_id"), NOTEBOOKS)
def test_committed_lab_tables_line_up(edition, stem, cell_id):
    """The tables as a learner sees them: the committed outputs nbval compares."""
    table = _output(edition, stem, cell_id)
    header_lines = 2 if stem.startswith("08") else 1
    assert not misaligned(table, header_lines), table
    if edition.endswith("zh-CN"):
        assert not english_header_words(table, header_lines), table
