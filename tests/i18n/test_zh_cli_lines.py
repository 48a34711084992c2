"""Each line a zh command line prints is in one language, with Chinese punctuation
(newcomer 27, N3 and N6).

Found under PAGEDKIT_LANGUAGE=zh-CN: `lab --lang fr` listed the editions as
``en, zh-CN``, a trace file's missing columns came as ``output_len, output_tokens``
and every --trace error began ``--trace: `` (an f-string outside the catalog), while
every other simulate usage error reads ``参数 --x：``. And the commands whose
messages are English (docs/i18n.md: demo, bench, vllm) ran a Chinese ``错误：`` into
an English sentence: ``错误：--model 'nonexistent_xyz': could not load ...``,
``错误：unknown lab(s) ['99']; ...``; their errors are now English, line and all."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

import pagedkit
from pagedkit.__main__ import main

SRC = Path(pagedkit.__file__).parent
CJK = re.compile("[\u3000-\u30ff\u4e00-\u9fff\uff00-\uffef]")


def _error(argv: list[str], language: str, monkeypatch, capsys) -> str:
    """The command's usage error (status 2), the lines after its usage."""
    monkeypatch.setenv("PAGEDKIT_LANGUAGE", language)
    try:
        with pytest.raises(SystemExit) as exit_:
            main(argv)
    finally:
        pagedkit.set_language("en")
    assert exit_.value.code == 2
    return capsys.readouterr().err


def _bare(text: str) -> str:
    """`text` without its data: quoted values, JSON examples, Python lists."""
    return re.sub(r"\{[^}]*\}|\[[^\]]*\]|'[^']*'", "", text)


def _trace_files(tmp_path: Path) -> dict[str, Path]:
    files = {"no output column": [{"prompt_len": 5}], "no prompt column": [{"output_len": 5}],
             "bad length": [[-5, 3]]}
    paths = {}
    for name, rows in files.items():
        paths[name] = tmp_path / f"{name.replace(' ', '_')}.json"
        paths[name].write_text(json.dumps(rows))
    (tmp_path / "bad.json").write_text("{nope")
    paths["not json"] = tmp_path / "bad.json"
    paths["missing"] = tmp_path / "nonexistent.json"
    (tmp_path / "no_arrivals.csv").write_text("prompt_len,output_len\n5,3\n")
    paths["no arrivals"] = tmp_path / "no_arrivals.csv"
    return paths


ZH_ERRORS = {
    "lab --lang fr": ["lab", "--lang", "fr"],
    "simulate: too many requests": ["simulate", "--dataset", "sharegpt", "--rate", "2",
                                    "--requests", "2000000000"],
    "simulate --benchmark with comparison options": ["simulate", "--benchmark", "--scale",
                                                     "quick", "--markdown"],
    "--no-progress before lab": ["--no-progress", "lab"],
    **{f"simulate --trace, {name}": ["simulate", "--trace", f"{{{name}}}",
                                     *([] if name == "no arrivals" else ["--rate", "1"])]
       for name in ("no output column", "no prompt column", "bad length", "not json",
                    "missing", "no arrivals")},
}


@pytest.mark.parametrize("case", ZH_ERRORS)
def test_zh_usage_errors_list_and_name_in_chinese(case, tmp_path, monkeypatch, capsys):
    files = {f"{{{name}}}": str(path) for name, path in _trace_files(tmp_path).items()}
    argv = [files.get(arg, arg) for arg in ZH_ERRORS[case]]
    line = _error(argv, "zh-CN", monkeypatch, capsys).splitlines()[-1]
    assert "：错误：" in line
    said = _bare(line.split("：错误：", 1)[1].replace(str(tmp_path), "DIR"))
    assert CJK.search(said), line
    assert ", " not in said and ": " not in said, line  # 、 and ： in Chinese
    english = _error(argv, "en", monkeypatch, capsys).splitlines()[-1]
    assert not CJK.search(english) and ": error: " in english
    if "--trace" in argv:  # said as argparse says an option's error, in both languages
        assert "：错误：参数 --trace：" in line and ": error: argument --trace: " in english


ENGLISH_ERRORS = {
    "demo --model nonexistent": ["demo", "--model", "nonexistent_xyz", "--no-progress"],
    "demo -n": ["demo", "-n", "9", "--num-blocks", "1", "--no-progress"],
    "demo --num-blocks": ["demo", "--num-blocks", "1", "--no-progress"],
    "bench labs --labs 99": ["bench", "labs", "--labs", "99"],
    "bench study --labs 99": ["bench", "study", "--labs", "99"],
    "bench engine --systems": ["bench", "engine", "--systems", "foo"],
    "vllm compare --systems": ["vllm", "compare", "--systems", "foo"],
    "vllm compare --model": ["vllm", "compare", "--model", "/nonexistent"],
}


@pytest.mark.parametrize("case", ENGLISH_ERRORS)
def test_english_errors_of_english_commands_are_english_lines(case, monkeypatch, capsys):
    """demo, bench and vllm say their own errors in English (docs/i18n.md): under zh the
    whole error is English, usage line and ``error:`` too; nothing runs from Chinese into
    English."""
    err = _error(ENGLISH_ERRORS[case], "zh-CN", monkeypatch, capsys)
    assert not CJK.search(err), err
    assert re.search("^usage: ", err, re.M) and ": error: " in err
    assert pagedkit.get_language() == "en"


def test_english_commands_raise_no_mixed_error():
    """Every usage error an English command (demo, bench, vllm) words itself goes through
    `i18n.english_error`: a bare ``parser.error(...)`` there would print a Chinese
    ``错误：`` before its English message."""
    bare = []
    for path in [SRC / "demo.py", SRC / "vllm" / "__main__.py",
                 *sorted((SRC / "bench").glob("*.py"))]:
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "error"
                    and not {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} & {"_"}):
                bare.append(f"{path.relative_to(SRC)}:{node.lineno}")
    assert bare == []
