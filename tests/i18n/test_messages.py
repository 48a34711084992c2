"""pagedkit's messages in two languages (issue #29, docs/i18n.md).

The catalog is checked against the source as Babel reads it now: every message
marked ``_()`` / ``N_()`` / ``ngettext()`` has a Chinese translation, none fuzzy,
none left over from a message that is gone; the committed ``.mo`` is what Babel
compiles from the ``.po``; each translation has its message's placeholders (so
``.format`` never raises). Then real calls: a check's verdict and hint, in
Chinese after ``set_language("zh-CN")`` and in English again, byte for byte,
after ``set_language("en")``.
"""

from __future__ import annotations

import ast
import gettext
import io
import re
import string
from pathlib import Path

import pytest
from babel.messages.extract import extract_from_dir
from babel.messages.mofile import write_mo
from babel.messages.pofile import read_po

import pagedkit
from pagedkit import i18n

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "src" / "pagedkit"
PO = i18n.LOCALE_DIR / "zh_CN" / "LC_MESSAGES" / "pagedkit.po"
MO = PO.with_suffix(".mo")
CHINESE = re.compile(r"[\u4e00-\u9fff]")


@pytest.fixture(autouse=True)
def english_after():
    """Every test leaves pagedkit speaking English, as it found it."""
    assert pagedkit.get_language() == "en"
    yield
    i18n.set_language("en")


def _method_map() -> list[tuple[str, str]]:
    """babel.cfg's sections, as `pybabel extract -F babel.cfg` reads them."""
    from babel.messages.frontend import parse_mapping_cfg
    with open(ROOT / "babel.cfg") as f:
        method_map, _options = parse_mapping_cfg(f)
    return method_map


def _extracted() -> dict[str, tuple]:
    """msgid -> the whole message id (a tuple for plurals), from the source now."""
    found = {}
    for _file, _line, message, _comments, _context in extract_from_dir(
            str(PACKAGE), method_map=_method_map()):
        key = message if isinstance(message, str) else message[0]
        found[key] = message
    return found


def _catalog():
    with open(PO, "rb") as f:
        return read_po(f)


def _fields(text: str) -> list[tuple[str, str, str]]:
    """The ``{name!conversion:spec}`` fields of a format string, sorted."""
    return sorted((name, conv or "", spec or "")
                  for _lit, name, spec, conv in string.Formatter().parse(text)
                  if name is not None)


def test_catalog_is_complete():
    """Every message in the source has a Chinese translation; no fuzzy, no obsolete."""
    extracted = _extracted()
    assert len(extracted) > 100, "Babel found almost no messages: is babel.cfg right?"
    catalog = _catalog()
    in_po = {m.id if isinstance(m.id, str) else m.id[0]: m for m in catalog if m.id}
    missing = sorted(set(extracted) - set(in_po))
    assert not missing, (f"{len(missing)} messages are not in {PO.name}, first {missing[:3]}: "
                         f"run the update in docs/i18n.md and translate them")
    obsolete = sorted(set(in_po) - set(extracted))
    assert not obsolete and not catalog.obsolete, (
        f"messages no longer in the source: {(obsolete or list(catalog.obsolete))[:3]}")
    for key, message in in_po.items():
        strings = message.string if isinstance(message.string, tuple) else (message.string,)
        assert all(s.strip() for s in strings), f"untranslated: {key!r}"
        assert not message.fuzzy, f"fuzzy (check, then drop the flag): {key!r}"
        assert isinstance(message.id, tuple) == isinstance(extracted[key], tuple), key


def test_mo_is_what_babel_compiles_from_the_po():
    """Message for message, as gettext reads them (not byte for byte: Babel
    writes its own version into the header, so bytes would differ across Babel
    releases while every translation is the same)."""
    compiled = io.BytesIO()
    write_mo(compiled, _catalog())
    compiled.seek(0)

    def messages(mo) -> dict:
        return {k: v for k, v in gettext.GNUTranslations(mo)._catalog.items() if k != ""}

    with MO.open("rb") as committed:
        assert messages(committed) == messages(compiled), (
            "the committed .mo is stale: pybabel compile (docs/i18n.md)")


@pytest.mark.parametrize("first, then", [("zh-CN", "en"), ("en", "zh-CN")])
def test_a_cached_grid_shows_its_hints_in_the_language_of_the_moment(first, then):
    """The boundary grids are built once (cached); a case's hint is made when
    a verdict shows it, so it follows `set_language` like every message."""
    from pagedkit.exercises import hint_text, lab05, lab06, lab07, lab09

    grids = (lab05.admit_grid, lab05.finish_grid, lab06.victims_grid, lab07.hashes_grid,
             lab09.fit_grid)
    try:
        for grid in grids:
            grid.cache_clear()
            pagedkit.set_language(first)
            built = grid()
            pagedkit.set_language(then)
            shown = [hint_text(case.hint) for case in built[:50] if case.hint]
            assert shown, grid.__name__
            assert all(bool(CHINESE.search(h)) == (then == "zh-CN") for h in shown), (
                grid.__name__, shown[0])
    finally:
        pagedkit.set_language("en")


def test_translations_keep_the_placeholders():
    """Same fields, conversions and specs: ``.format(**fields)`` works in both; and
    Babel's own checks (what ``pybabel compile`` reports as errors) find nothing."""
    catalog = _catalog()
    assert [(m.id, [str(e) for e in errors]) for m, errors in catalog.check()] == []
    for message in catalog:
        if not message.id:
            continue
        ids = message.id if isinstance(message.id, tuple) else (message.id,)
        strings = message.string if isinstance(message.string, tuple) else (message.string,)
        for text in strings:
            assert _fields(text) == _fields(ids[-1]), (ids[0], text)


def test_messages_are_translated_at_call_time():
    """No ``_()`` / ``ngettext()`` outside a function: made at import time, a
    message would stay in the language of the moment the module was imported."""
    wrong = []
    for path in PACKAGE.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        inside = set()
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                inside.update(id(n) for n in ast.walk(node))
        wrong += [f"{path.relative_to(PACKAGE)}:{node.lineno}" for node in ast.walk(tree)
                  if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                  and node.func.id in ("_", "ngettext") and id(node) not in inside]
    assert not wrong, f"translated at import time: {wrong}"


def test_no_message_inside_an_f_string():
    """Babel reads an f-string as one token: a ``_()`` inside one is never extracted."""
    wrong = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.JoinedStr):
                wrong += [f"{path.relative_to(PACKAGE)}:{node.lineno}" for call in ast.walk(node)
                          if isinstance(call, ast.Call) and isinstance(call.func, ast.Name)
                          and call.func.id in ("_", "ngettext", "counted")]
    assert not wrong, wrong


def test_no_function_that_translates_names_a_variable_underscore():
    """``for x, _ in ...`` in a function that calls ``_()`` makes ``_`` local
    there: the call raises UnboundLocalError (in English too)."""
    wrong = []
    for path in PACKAGE.rglob("*.py"):
        for fn in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            body = [n for stmt in fn.body for n in ast.walk(stmt)]
            calls = any(isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
                        and n.func.id == "_" for n in body)
            stores = [n.lineno for n in body if isinstance(n, ast.Name) and n.id == "_"
                      and isinstance(n.ctx, ast.Store)]
            if calls and stores:
                wrong.append(f"{path.relative_to(PACKAGE)}:{fn.name} assigns _ at {stores}")
    assert not wrong, wrong


def _wrong_blocks_for(num_tokens: int, block_size: int) -> int:
    return num_tokens // block_size  # rounds down: the hint ladder's favourite


def test_a_check_speaks_chinese_then_english_again():
    from pagedkit.exercises import lab00, lab03

    def not_written(*args):
        raise NotImplementedError

    english = [repr(lab00.check_blocks_for(_wrong_blocks_for)),
               lab03.check_append_slots(lambda *a: [])._repr_markdown_(),
               repr(lab03.check_append_slots(not_written))]
    assert "Hint: the 5th token needs a second block" in english[0]

    pagedkit.set_language("zh-CN")
    assert pagedkit.get_language() == "zh-CN"
    chinese = [repr(lab00.check_blocks_for(_wrong_blocks_for)),
               lab03.check_append_slots(lambda *a: [])._repr_markdown_(),
               repr(lab03.check_append_slots(not_written))]
    assert chinese[0] == ("❌ blocks_for: _wrong_blocks_for(5, 4) 返回了 1，应为 2。  提示："
                          "第 5 个 token 需要第二个页块；只填了一部分的页块也要占一整个页块："
                          "向上取整，而不是向下")
    for text in chinese:
        assert CHINESE.search(text), text
        assert "Hint" not in text and "returned" not in text, text
    assert "页表" in chinese[1] or "页块" in chinese[1]
    assert chinese[2].endswith("尚未编写：把 `...` / NotImplementedError 换成你的代码")

    pagedkit.set_language("en")
    again = [repr(lab00.check_blocks_for(_wrong_blocks_for)),
             lab03.check_append_slots(lambda *a: [])._repr_markdown_(),
             repr(lab03.check_append_slots(not_written))]
    assert again == english


def test_hints_made_at_import_time_are_translated_where_shown():
    """Lab 05's table of cases is built once, at import, with English hints
    (``N_``); the verdict translates the hint it shows."""
    from pagedkit.exercises import lab05
    english = repr(lab05.check_finish_steps(lambda lens, seats, policy: list(lens)))
    assert english.endswith("Hint: a static batch starts only when every request of the "
                            "previous batch has finished: its longest request sets the pace")
    pagedkit.set_language("zh-CN")
    chinese = repr(lab05.check_finish_steps(lambda lens, seats, policy: list(lens)))
    assert chinese.endswith("提示：静态批处理要等上一批的每个请求都结束后才开始下一批："
                            "批中最长的请求决定节奏"), chinese
    pagedkit.set_language("en")
    assert repr(lab05.check_finish_steps(lambda lens, seats, policy: list(lens))) == english


@pytest.mark.parametrize("spelling, tag", [
    ("zh-CN", "zh-CN"), ("zh-cn", "zh-CN"), ("ZH-CN", "zh-CN"), ("zh_CN", "zh-CN"),
    ("zh_cn", "zh-CN"), (" zh-CN ", "zh-CN"), ("en", "en"), ("EN", "en"), (" En", "en")])
def test_a_language_is_named_one_way_everywhere(monkeypatch, spelling, tag):
    """Newcomer 19, finding 7: `lab --lang zh-cn` was accepted, `set_language("zh-cn")`,
    `PAGEDKIT_LANGUAGE=zh-cn` and `zh_CN` refused: one rule (`language_tag`) for all."""
    assert i18n.language_tag(spelling) == tag
    pagedkit.set_language(spelling)
    assert pagedkit.get_language() == tag
    pagedkit.set_language("en")
    monkeypatch.setenv("PAGEDKIT_LANGUAGE", spelling)
    i18n.language_from_environment()
    assert pagedkit.get_language() == tag
    pagedkit.set_language("en")


@pytest.mark.parametrize("language", ["fr", "zh", "zh-TW", "zh CN", "zhCN", "", None, "english"])
def test_an_unknown_language_is_refused_and_nothing_changes(language):
    from pagedkit.exercises import lab00
    pagedkit.set_language("zh-CN")
    before = repr(lab00.check_blocks_for(_wrong_blocks_for))
    with pytest.raises(ValueError, match="is not one pagedkit speaks"):
        pagedkit.set_language(language)
    assert pagedkit.get_language() == "zh-CN"
    assert repr(lab00.check_blocks_for(_wrong_blocks_for)) == before


def test_a_missing_catalog_is_refused_and_nothing_changes(monkeypatch, tmp_path):
    from pagedkit.exercises import lab00
    english = repr(lab00.check_blocks_for(_wrong_blocks_for))
    monkeypatch.setattr(i18n, "LOCALE_DIR", tmp_path)  # an installation without the .mo
    with pytest.raises(FileNotFoundError):
        pagedkit.set_language("zh-CN")
    assert pagedkit.get_language() == "en"
    assert repr(lab00.check_blocks_for(_wrong_blocks_for)) == english


def forked_block_map():
    """A block map showing sequence A (5 tokens in blocks of 4) forked into B."""
    from pagedkit.memory import KVCacheManager
    from pagedkit.viz import BlockMap
    kv = KVCacheManager(num_blocks=16, block_size=4)
    view = BlockMap(kv)
    kv.allocate_slots("A", [1, 2, 3, 4, 5])
    kv.fork("A", "B")
    view.recorder.cut()
    view.index = 1
    return view


def _block_map_texts():
    view = forked_block_map()
    fig = view.figure()
    legend = [t.name for t in fig.data if t.showlegend is not False]
    return [repr(view), view.text(), fig.layout.title.text, *legend,
            *fig.data[0].hovertext[:3]]


def test_a_widget_speaks_chinese_then_english_again():
    english = _block_map_texts()
    assert "reserved, not yet filled" in english and "shared (ref count)" in english
    pagedkit.set_language("zh-CN")
    chinese = _block_map_texts()
    assert "已预留，尚未填" in chinese and "共享（引用计数）" in chinese, chinese
    assert "页块大小 4 个 token" in chinese[2] and "第 1/1 步" in chinese[2], chinese[2]
    assert any("引用计数 2" in h for h in chinese), chinese
    for text in chinese[2:]:
        assert CHINESE.search(text), text
    pagedkit.set_language("en")
    assert _block_map_texts() == english


def _simulator_texts():
    from pagedkit.sim import plots
    from pagedkit.sim.experiments import fig2_memory_breakdown, paper_trace
    from pagedkit.sim.report import Comparison, Report, format_table
    fig = plots.plot_fig2(fig2_memory_breakdown(paper_trace("sharegpt", duration=5, seed=0)))
    report = Report("quick", rows=[Comparison("Fig. 2", "token states, vLLM", 96.3, 96.3, "%",
                                              "paged")],
                    seconds={"fig2": 1.5}, speed={"iterations": 1200, "seconds": 1.5,
                                                  "iterations_per_second": 800})
    return [fig.layout.title.text, fig.layout.yaxis.title.text, *[t.name for t in fig.data],
            format_table(report)]


def test_the_simulator_speaks_chinese_then_english_again():
    english = _simulator_texts()
    assert english[0] == "Fig. 2: KV cache usage by memory manager"
    pagedkit.set_language("zh-CN")
    chinese = _simulator_texts()
    assert chinese[0] == "图 2：各内存管理器的 KV Cache 使用情况"
    assert "内部碎片" in chinese and "外部碎片" in chinese, chinese
    assert "分页只浪费每个序列最后一个页块的空尾部" in chinese[-1], chinese[-1]
    assert chinese[-1].startswith("图"), chinese[-1]
    pagedkit.set_language("en")
    assert _simulator_texts() == english


def test_the_command_line_help_speaks_chinese_when_asked(monkeypatch, capsys):
    from pagedkit.__main__ import main

    def help_text() -> str:
        with pytest.raises(SystemExit):
            main(["--help"])
        return capsys.readouterr().out

    monkeypatch.delenv("PAGEDKIT_LANGUAGE", raising=False)
    english = help_text()
    assert "Each command has its own options" in english
    monkeypatch.setenv("PAGEDKIT_LANGUAGE", "zh-CN")
    chinese = help_text()
    assert "每个命令都有自己的选项" in chinese and "用法：" in chinese  # argparse's own too
    assert "内置模型服务一批请求" in chinese
    monkeypatch.setenv("PAGEDKIT_LANGUAGE", "klingon")
    assert main(["--help"]) == 2  # said in one line, not a traceback
    assert "PAGEDKIT_LANGUAGE='klingon'" in capsys.readouterr().err
    assert pagedkit.get_language() == "zh-CN"
    i18n.set_language("en")
    monkeypatch.delenv("PAGEDKIT_LANGUAGE")
    assert help_text() == english


#: an ASCII semicolon right after Chinese text (a CJK character or full-width punctuation)
ASCII_AFTER_CHINESE = re.compile(r"[\u3000-\u303f\u4e00-\u9fff\uff00-\uffef]; ")


def _joined_clauses():
    """Every message pagedkit makes by joining clauses: the dashboard's line, a page
    table in words (a window's release and its blocks), lab 04's, 05's and 06's hints."""
    from pagedkit.exercises import lab04, lab05, lab06
    from pagedkit.memory import KVCacheManager
    from pagedkit.viz import Dashboard, Recorder
    from pagedkit.viz.page_table import page_table

    kv = KVCacheManager(16, 4)
    recorder = Recorder.attach(kv)
    kv.allocate_slots("A", list(range(14)))
    kv.release_outside_window("A", 14, 5)
    recorder.cut()
    dash = Dashboard(recorder)
    dash.index = len(recorder) - 1
    return [repr(dash), page_table(recorder[-1], "A").described(),
            lab04._decode_label(8, 4, 4, 2, 6, 2.0),
            lab05._admit_hint([("a", 10), ("b", 3)], 6, 8, 10, 4),
            lab06._victims_hint([("A", 3, 2), ("B", 2, 2), ("C", 1, 3)], 1)]


def test_clauses_are_joined_with_the_languages_semicolon():
    """Newcomer 15, finding 13: ``……14 个已换出; 序列 0``, ``只有 1 个空闲; 先来先服务``:
    clauses joined in code with an ASCII "; " inside Chinese sentences."""
    english = _joined_clauses()
    assert all("; " in text for text in english), english
    pagedkit.set_language("zh-CN")
    try:
        chinese = _joined_clauses()
    finally:
        pagedkit.set_language("en")
    assert all("；" in text and not ASCII_AFTER_CHINESE.search(text) for text in chinese), chinese
    assert chinese[-1].endswith("）") and english[-1].endswith(")")  # lab 06's rule, in brackets


def _pybabel(*args: str, cwd: Path) -> None:
    """Run ``pybabel`` (Babel's own command line) as docs/i18n.md does."""
    import subprocess
    import sys
    subprocess.run([sys.executable, "-c", "from babel.messages.frontend import main; main()",
                    "-q", *args], cwd=cwd, check=True, capture_output=True)


def _without_dates(text: str) -> str:
    return re.sub(r'"POT-Creation-Date: [^"]*"', "", text)


def test_docs_commands_leave_the_committed_catalogs_as_they_are(tmp_path):
    """docs/i18n.md's `pybabel extract` and `pybabel update` rewrite neither the
    committed template nor the Chinese catalog (save the template's date), so a
    translator who follows them sees only their own change in the diff, not
    thousands of lines a hand edit left unwrapped or unsorted."""
    import shutil
    locale = tmp_path / "locale"
    shutil.copytree(i18n.LOCALE_DIR, locale)
    pot = locale / "pagedkit.pot"
    _pybabel("extract", "-F", "babel.cfg", "--no-location", "--sort-output",
             "--project=pagedkit", "--version=0.1.0", "-o", str(pot), "src/pagedkit", cwd=ROOT)
    committed_pot = (i18n.LOCALE_DIR / "pagedkit.pot").read_text(encoding="utf-8")
    assert _without_dates(pot.read_text(encoding="utf-8")) == _without_dates(committed_pot), \
        "the committed pagedkit.pot is not what `pybabel extract` writes: run docs/i18n.md's step 1"
    _pybabel("update", "-D", "pagedkit", "-i", str(pot), "-d", str(locale), "-l", "zh_CN",
             "--no-fuzzy-matching", "--ignore-obsolete", cwd=ROOT)
    updated = (locale / "zh_CN" / "LC_MESSAGES" / "pagedkit.po").read_text(encoding="utf-8")
    assert _without_dates(updated) == _without_dates(PO.read_text(encoding="utf-8")), \
        "the committed .po is not what `pybabel update` writes: run docs/i18n.md's step 2"
