"""argparse's own words in the zh command line (issue #26): ``usage:``, ``options``,
``error:``, ``the following arguments are required``, ... come out in Chinese for
every command's ``--help`` and usage errors, through the catalog
(`pagedkit.i18n.argparse_speaking`); in English they are argparse's, byte for byte."""

from __future__ import annotations

import argparse
import ast
import inspect
import re

import pytest

import pagedkit
from pagedkit import i18n
from pagedkit.__main__ import COMMANDS, main
from pagedkit.bench.__main__ import BENCHMARKS

#: every command and sub-command a learner can ask for help or get a usage error
COMMAND_LINES = ([[name] for name in COMMANDS] + [["bench", name] for name in BENCHMARKS]
                 + [["vllm", "compare"], ["vllm", "events"]])
#: usage errors argparse words itself: an unknown option, a missing or invalid value
BAD = {"unknown option": ["--no-such-option"], "missing value": ["--no-progress", "--seed"]}
#: lab hands options it does not know to jupyter lab (which would start): its own
#: parser's error is a missing --lang value
LAB_BAD = {"unknown option": ["--lang"], "missing value": ["--lang"]}


def _argparse_messages() -> set[str]:
    """Every message argparse's source translates: ``_("...")`` and ``ngettext``."""
    found = set()
    for node in ast.walk(ast.parse(inspect.getsource(argparse))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            texts = [a.value for a in node.args if isinstance(a, ast.Constant)
                     and isinstance(a.value, str)]
            if node.func.id in ("_", "ngettext"):
                found.update(texts)
    return found


def test_every_argparse_message_is_in_the_catalog():
    """The list in pagedkit.i18n is argparse's own (a new Python's message fails here),
    and each has a Chinese translation."""
    marked = set(i18n.ARGPARSE_MESSAGES) | {"expected %s argument", "expected %s arguments",
                                            "conflicting option string: %s",
                                            "conflicting option strings: %s"}
    assert _argparse_messages() <= marked
    with i18n.speaking("zh-CN"):
        untranslated = [m for m in i18n.ARGPARSE_MESSAGES if i18n._(m) == m]
        untranslated += [m for m in i18n.argparse_plurals(2) if not re.search("[\u4e00-\u9fff]", m)]
    assert untranslated == []


def _english_pieces() -> list[re.Pattern]:
    """What would show an argparse message left in English: its literal words (two or
    more, between placeholders), and the one-word headings at a line's start."""
    pieces = []
    for message in _argparse_messages():
        for part in re.split(r"%\(\w+\)[sr]|%[sr]", message):
            if len(re.findall(r"[A-Za-z]+", part)) >= 2:
                pieces.append(re.compile(re.escape(part.strip())))
    return [*pieces, re.compile(r"(?m)^\s*(usage|options|positional arguments):")]


def _said(argv: list[str], capsys) -> str:
    with pytest.raises(SystemExit):
        main(argv)
    out = capsys.readouterr()
    return out.out + out.err


@pytest.mark.parametrize("how", ["--help", *BAD])
@pytest.mark.parametrize("command", COMMAND_LINES, ids=" ".join)
def test_zh_command_line_says_argparse_words_in_chinese(command, how, monkeypatch, capsys):
    monkeypatch.setenv("PAGEDKIT_LANGUAGE", "zh-CN")
    argv = command + (LAB_BAD if command == ["lab"] else BAD).get(how, [how])
    try:
        said = _said(argv, capsys)
    finally:
        i18n.set_language("en")
    left = [p.pattern for p in _english_pieces() if p.search(said)]
    assert not left, (left, said)
    assert "用法：" in said
    if how != "--help":
        assert "错误：" in said


def test_english_command_line_keeps_argparse_words(monkeypatch, capsys):
    monkeypatch.delenv("PAGEDKIT_LANGUAGE", raising=False)
    said = _said(["demo", "--no-such-option"], capsys)
    assert said.startswith("usage: python -m pagedkit demo")
    assert "error: unrecognized arguments: --no-such-option" in said
    assert "options:" in _said(["simulate", "--help"], capsys)
    assert pagedkit.get_language() == "en"
    assert argparse._ is not i18n._  # only while a command runs


def test_zh_progress_bars_name_their_work_in_chinese(monkeypatch, capsys):
    """tqdm's description and unit of every bar pagedkit draws (demo, generate, beam
    search, the simulator) come from the catalog: Chinese in the zh command line."""
    from pagedkit import LLM
    from pagedkit.sampling_params import BeamSearchParams
    from pagedkit.sim.experiments import paper_trace
    from pagedkit.sim.managers import PAGED
    from pagedkit.sim.simulator import simulate

    monkeypatch.setenv("PAGEDKIT_LANGUAGE", "zh-CN")
    try:
        assert main(["demo", "--max-tokens", "2"]) == 0
        demo = capsys.readouterr().err
        llm = LLM("tiny", block_size=4, num_blocks=64, use_tqdm_on_load=False)
        llm.generate(["Once upon a time"], use_tqdm=True)
        llm.beam_search(["Once upon a time"], BeamSearchParams(beam_width=2, max_tokens=2),
                        use_tqdm=True)
        simulate(paper_trace("alpaca", num_requests=20), PAGED, progress=True)
        bars = capsys.readouterr().err
    finally:
        i18n.set_language("en")
    assert "演示: " in demo and "token/s" in demo and "tok/s" not in demo
    assert "生成: " in bars and "束搜索: " in bars
    assert "上的 vLLM: " in bars and "请求/s" in bars and " on " not in bars
