"""`pagedkit bench study`: the stated rule on small notebooks whose count is
known, optional sections found whatever the heading level and wherever a cell
starts, and the course's promise that every lab's core fits one session."""

import difflib

import nbformat
import pytest

from pagedkit.bench import labs, study
from pagedkit.bench.__main__ import main as bench_cli


def _notebook(tmp_path, cells, name="00_test.ipynb"):
    nb = nbformat.v4.new_notebook(cells=cells)
    path = tmp_path / name
    nbformat.write(nb, path)
    return path


md, code = nbformat.v4.new_markdown_cell, nbformat.v4.new_code_cell


def test_the_rule_prices_words_code_lines_cells_and_exercises(tmp_path):
    path = _notebook(tmp_path, [
        md("# Title\n\n" + "word " * 198),                       # 200 words with the title's
        code("x = 1\n\n# a comment\ny = 2"),                      # 2 lines, 1 cell
        code("def f():\n    # YOUR CODE HERE\n    raise NotImplementedError\n\ncheck(f)"),
    ])
    s = study.study(path)
    assert (s.core.words, s.core.code_lines, s.core.code_cells, s.core.exercises) == (200, 5, 2, 1)
    expected = (200 / study.WORDS_PER_MINUTE + 5 * study.SECONDS_PER_CODE_LINE / 60
                + 2 * study.SECONDS_PER_CELL / 60 + study.MINUTES_PER_EXERCISE)
    assert s.core_minutes == pytest.approx(expected)
    assert s.optional.minutes == 0 and s.total_minutes == pytest.approx(expected)


def test_optional_sections_end_at_a_heading_of_their_level_or_above(tmp_path):
    path = _notebook(tmp_path, [
        md("# Lab\n\none two"),
        md("## 1. Core\n\nthree four five\n\n## 2. Optional: extra\n\nsix seven"),  # 2 parts
        code("a = 1"),                                             # under the optional heading
        md("### A subsection\n\neight"),                           # still optional (deeper)
        md("### Exercise 3 (optional) — deeper\n\nnine"),
        md("## 3. Core again\n\nten"),
        code("b = 2"),
        md("### Exercise 4 (optional)\n\neleven"),
        code("# YOUR CODE HERE\nraise NotImplementedError"),
        md("### Back to core\n\ntwelve"),
    ])
    s = study.study(path)
    # core words: "# Lab" 2 + "one two" 2, "## 1. Core" 3 + 3, "## 3. Core again" 4 + 1,
    # "### Back to core" 4 + 1
    assert s.core.words == 2 + 2 + 3 + 3 + 4 + 1 + 4 + 1
    assert (s.core.code_cells, s.core.exercises) == (1, 0)
    assert (s.optional.code_cells, s.optional.exercises) == (2, 1)
    assert s.optional.words == 4 + 2 + 3 + 1 + 6 + 1 + 4 + 1


def test_every_lab_core_fits_one_session():
    """Issue #27: each lab is one class session of at most 90 minutes, optional
    sections apart. A lab that grows past it must mark or move a section."""
    studies = [study.study(p) for p in labs.find_labs(labs.HOME / "labs", None)]
    over = {s.name: round(s.core_minutes) for s in studies
            if s.core_minutes > study.SESSION_MINUTES}
    assert not over, f"labs whose core takes over {study.SESSION_MINUTES} min: {over}"
    assert all(s.total_minutes > 20 for s in studies)   # 04b and 10: optional as a whole


def test_the_cli_prints_a_table_and_the_rule(tmp_path, capsys):
    _notebook(tmp_path, [md("# Lab\n\n" + "w " * 98)], "00_a.ipynb")
    _notebook(tmp_path, [md("# Lab (optional)\n\nx y")], "01_b.ipynb")
    assert bench_cli(["study", "--labs-dir", str(tmp_path), "--markdown"]) == 0
    out = capsys.readouterr().out
    assert "| 00_a | 100 | 0 | 0 | 0 | 1 | 0 | 1 |" in out
    assert "| 01_b | 0 | 0 | 0 | 0 | 0 | 0 | 0 |" in out
    assert "100 words of prose a minute" in out and "core over 90 min: none" in out
    # the counts are the core's: an all-optional lab does not read as empty (finding 13)
    assert "| lab | core words | core code lines | core cells | core exercises | core min |" in out
    assert "counted apart (only in 'optional min')" in out
    with pytest.raises(SystemExit) as exit_info:
        bench_cli(["study", "--labs-dir", str(tmp_path), "--labs", "07"])
    assert exit_info.value.code == 2 and "unknown lab(s) ['07']" in capsys.readouterr().err


def _table(page, header):
    """The markdown table of `page` whose first line starts with `header`."""
    lines = page.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header))
    stop = next((i for i in range(start, len(lines)) if not lines[i].startswith("|")), len(lines))
    return lines[start:stop]


def test_the_teachers_guide_shows_what_bench_study_gives_now():
    """The guide's time table says it is ``bench study --markdown``'s output;
    it went stale as the labs changed (newcomer 8's finding 8) because no test
    compared the two. Its Chinese twin has the same numbers under a translated
    header and total label."""
    docs = labs.HOME / "docs"
    studies = [study.study(p) for p in labs.find_labs(labs.HOME / "labs", None)]
    computed = study.format_table(studies, markdown=True).splitlines()
    advice = ("run `python -m pagedkit bench study --markdown` and paste its table into "
              "docs/teachers_guide.md and docs/zh-CN/teachers_guide.md (there under the Chinese "
              "header, total row 全部实验), then record the English page's new sha256 in the "
              "zh page's first line")
    english = _table(docs / "teachers_guide.md", "| lab | core words")
    assert english == computed, "\n".join(
        ["the teachers' guide's time table is stale:",
         *difflib.unified_diff(english, computed, "guide", "bench study", lineterm=""), advice])
    chinese = _table(docs / "zh-CN" / "teachers_guide.md", "| 实验 | 核心单词数")
    assert len(chinese) == len(computed) and chinese[-1].startswith("| 全部实验 |")
    assert [row.split("|")[2:] for row in chinese[1:]] == \
        [row.split("|")[2:] for row in computed[1:]], advice
    assert [row.split("|")[1] for row in chinese[2:-1]] == \
        [row.split("|")[1] for row in computed[2:-1]], advice


def _zh_labs():
    return labs.find_labs(labs.HOME / "labs" / "zh-CN", None)


@pytest.mark.parametrize("zh_path", _zh_labs(), ids=lambda p: p.stem)
def test_a_chinese_lab_is_timed_as_its_english_original(zh_path):
    """Newcomer 15, finding 4: ``--labs-dir labs/zh-CN`` counted Chinese prose as
    words (lab 00: 513 for 1,570) and found no section optional (选做 is not
    "optional"): 763 core + 0 optional min against 759 + 219, silently. A
    translated lab is timed by its original: the same core and optional parts."""
    english = study.study(labs.HOME / "labs" / zh_path.name)
    chinese = study.study(zh_path)
    assert chinese.original == labs.HOME / "labs" / zh_path.name
    assert (chinese.core, chinese.optional) == (english.core, english.optional)


@pytest.mark.parametrize("zh_path", _zh_labs(), ids=lambda p: p.stem)
def test_a_chinese_lab_of_another_tree_is_timed_by_that_trees_english(tmp_path, zh_path):
    """Review 41: the English original was always this checkout's labs/, so
    --labs-dir of another checkout's zh-CN timed its labs by this one's English.
    A copied tree whose English lab has more words: its Chinese edition is
    timed by that copy, with those words."""
    import json
    import shutil

    tree = tmp_path / "labs"
    (tree / "zh-CN").mkdir(parents=True)
    shutil.copy(zh_path, tree / "zh-CN" / zh_path.name)
    nb = json.loads((labs.HOME / "labs" / zh_path.name).read_text(encoding="utf-8"))
    cell = next(c for c in nb["cells"] if c["cell_type"] == "markdown")
    cell["source"] = "".join(cell["source"]) + "\n\n" + "word " * 500
    (tree / zh_path.name).write_text(json.dumps(nb), encoding="utf-8")
    copied, here = study.study(tree / zh_path.name), study.study(labs.HOME / "labs" / zh_path.name)
    chinese = study.study(tree / "zh-CN" / zh_path.name)
    assert chinese.original == tree / zh_path.name
    assert (chinese.core, chinese.optional) == (copied.core, copied.optional)
    assert (copied.core.words + copied.optional.words
            == here.core.words + here.optional.words + 500)


def test_the_zh_headings_mark_as_optional_what_the_english_ones_do():
    """The optional sections come from the English headings (one source); a zh
    reader must see the same sections marked: 选做 in exactly the headings whose
    English says optional."""
    heading = study._HEADING
    wrong = []
    for zh_path in _zh_labs():
        english = {c["id"]: c.source for c in nbformat.read(labs.HOME / "labs" / zh_path.name,
                                                            as_version=4).cells}
        for cell in nbformat.read(zh_path, as_version=4).cells:
            if cell.cell_type != "markdown":
                continue
            en = [m.group(2) for line in english[cell.id].splitlines()
                  if (m := heading.match(line.strip()))]
            zh = [m.group(2) for line in cell.source.splitlines()
                  if (m := heading.match(line.strip()))]
            marks = ([bool(study._OPTIONAL.search(h)) for h in en], ["选做" in h for h in zh])
            if marks[0] != marks[1]:
                wrong.append((zh_path.stem, cell.id, en, zh))
    assert not wrong


def test_the_cli_times_the_zh_folder_as_the_english_one_and_says_so(capsys):
    assert bench_cli(["study", "--markdown"]) == 0
    english = capsys.readouterr().out
    assert bench_cli(["study", "--labs-dir", str(labs.HOME / "labs" / "zh-CN"), "--markdown"]) == 0
    chinese = capsys.readouterr().out
    table = [line for line in english.splitlines() if line.startswith("|")]
    assert [line for line in chinese.splitlines() if line.startswith("|")] == table
    assert f"{len(table) - 3} zh-CN lab(s) timed by their English originals" in chinese


def test_chinese_prose_the_rule_cannot_count_is_refused(tmp_path, capsys):
    """A notebook mostly in CJK characters that is no generated edition, and an
    edition whose cells are not its original's, are refused, naming what to do."""
    _notebook(tmp_path, [md("# 实验\n\n" + "中文的说明文字。" * 20)], "00_zh.ipynb")
    with pytest.raises(SystemExit) as exit_info:
        bench_cli(["study", "--labs-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "not English (142 CJK characters)" in err
    assert "time its English original instead" in err
    # English with a few Chinese words stays English
    path = _notebook(tmp_path, [md("# Lab\n\nThe word 页块 means block, 中文 Chinese.")], "x.ipynb")
    assert study.study(path).core.words == 9
    # an edition (the language cell) whose cells are not its original's
    original = labs.HOME / "labs" / "00_start_here.ipynb"
    nb = nbformat.read(labs.HOME / "labs" / "zh-CN" / original.name, as_version=4)
    del nb.cells[-1]
    nbformat.write(nb, tmp_path / original.name)
    with pytest.raises(ValueError, match=r"its cells are not the original's .*rebuild it"):
        study.study(tmp_path / original.name)
    renamed = tmp_path / "00_renamed.ipynb"
    nbformat.write(nb, renamed)
    with pytest.raises(ValueError, match=r"00_renamed\.ipynb does not exist"):
        study.study(renamed)
