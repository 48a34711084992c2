"""Every ``--help`` fits the terminal in both languages (newcomer 27, N2).

argparse measured its lines with ``len()`` and broke them only at spaces (and at
hyphens): a Chinese line ran to twice the terminal's width (141 columns at
COLUMNS=80) and broke inside ``my-labs/zh-CN/`` and between ``25`` and ``GB/s``; the
top-level command list was never wrapped (its ``bench`` line: 153 columns in English).
`pagedkit.i18n.terminal.HelpFormatter` measures in columns and breaks between words
or between Chinese characters only. Here: every help screen of every command, en and
zh, at COLUMNS=80 and 60: no line wider than the terminal (argparse's width, COLUMNS
- 2), and the same words, paths and numbers as on a wide terminal, none cut."""

from __future__ import annotations

import argparse
import ast
import contextlib
import importlib
import io
import itertools
import re
from collections import Counter
from pathlib import Path

import pytest

import pagedkit
from pagedkit import i18n
from pagedkit.__main__ import COMMANDS, main
from pagedkit.bench.__main__ import BENCHMARKS
from pagedkit.i18n.terminal import HelpFormatter, text_width, wrap

SRC = Path(pagedkit.__file__).parent


def _subcommands(module: str) -> list[str]:
    """The sub-commands of a command's parser (``vllm compare``, ``i18n build``)."""
    parser = importlib.import_module(module)._parser()
    return [name for action in parser._actions
            if isinstance(action, argparse._SubParsersAction) for name in action.choices]


#: every help screen: (module with its own main, or None for python -m pagedkit, argv)
SCREENS = ([(None, [])] + [(None, [name]) for name in COMMANDS]
           + [(None, ["bench", name]) for name in BENCHMARKS]
           + [(None, ["vllm", name]) for name in _subcommands("pagedkit.vllm.__main__")]
           + [("pagedkit.i18n.__main__", [])]
           + [("pagedkit.i18n.__main__", [name])
              for name in _subcommands("pagedkit.i18n.__main__")]
           + [("pagedkit.exercises.nbgrader", []), ("pagedkit.model.support", []),
              ("pagedkit.models.train_tiny", [])])


def _help(module: str | None, argv: list[str], language: str, columns: int,
          monkeypatch) -> str:
    monkeypatch.setenv("COLUMNS", str(columns))
    monkeypatch.setenv("PAGEDKIT_LANGUAGE", language)
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
            if module is None:
                main([*argv, "--help"])
            else:
                run = importlib.import_module(module)
                run = getattr(run, "main", None) or run._main
                with i18n.speaking(language), i18n.argparse_speaking():
                    run([*argv, "--help"])
    finally:
        pagedkit.set_language("en")
    return out.getvalue()


def _words(text: str) -> Counter:
    """The text's English words, paths and numbers (runs of narrow characters)."""
    return Counter(re.findall(r"[^\s\u1100-\uffff]+", text.replace("\u2014", " ")))


@pytest.mark.parametrize("language", ["en", "zh-CN"])
@pytest.mark.parametrize("module,argv", SCREENS, ids=lambda x: " ".join(x) if isinstance(x, list)
                         else (x or "pagedkit"))
def test_help_fits_the_terminal_and_cuts_no_word(module, argv, language, monkeypatch):
    wide = _help(module, argv, language, 1000, monkeypatch)
    assert "--help" in wide or "-h" in wide
    if language == "zh-CN" and module is None and argv[:1] != ["bench"] and argv != ["demo"]:
        assert re.search("[\u4e00-\u9fff]", wide)  # the screen is Chinese
    for columns in (80, 60):
        text = _help(module, argv, language, columns, monkeypatch)
        lines = text.splitlines()
        too_wide = [line for line in lines if text_width(line) > columns - 2
                    and " " in line.strip()]  # one token wider than the terminal may be
        assert too_wide == [], (columns, too_wide)
        assert _words(text) == _words(wide), columns  # no word, path or number cut
        # a number keeps the word after it (25 GB/s, 80 个)
        for line, after in itertools.pairwise(lines):
            number = re.search(r"(?:^|\s)([\d.,]*\d)$", line)
            if number and after.strip():
                pair = f"{number.group(1)} {after.split()[0]}"
                assert pair not in wide, (columns, line, after)


def test_every_parser_uses_the_help_formatter():
    """Each ArgumentParser and sub-parser pagedkit builds names `HelpFormatter` (a
    parser left out would wrap by len() again)."""
    missing = []
    for path in sorted(SRC.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in ("ArgumentParser", "add_parser")):
                kinds = [k.value.id for k in node.keywords if k.arg == "formatter_class"
                         and isinstance(k.value, ast.Name)]
                if kinds != ["HelpFormatter"]:
                    missing.append(f"{path.relative_to(SRC)}:{node.lineno}")
    assert missing == []
    assert issubclass(HelpFormatter, argparse.HelpFormatter)


@pytest.mark.parametrize("text,width,lines", [
    ("经每块 GPU 25 GB/s 的 CPU-GPU 链路换出再换回", 20,
     ["经每块 GPU 25 GB/s", "的 CPU-GPU 链路换出", "再换回"]),
    ("即简体中文实验（labs/zh-CN/，复制到 my-labs/zh-CN/）；本命令", 30,
     ["即简体中文实验（labs/zh-CN/，", "复制到 my-labs/zh-CN/）；本命", "令"]),
    ("its own --no-progress, given before", 20, ["its own", "--no-progress, given", "before"]),
    ("一二三四五，六七八", 10, ["一二三四", "五，六七八"]),  # no line starts with ，
    ("一二三（四五六）七", 8, ["一二三", "（四五", "六）七"]),  # （ ends no line, ） starts none
    ("最后一步 33 个页块", 10, ["最后一步", "33 个页块"]),
    ("a /very/long/path/longer/than/the/width b", 10,
     ["a", "/very/long/path/longer/than/the/width", "b"]),
    ("", 10, []),
])
def test_wrap(text, width, lines):
    assert wrap(text, width) == lines
    for line in lines:
        assert text_width(line) <= width or " " not in line
