"""The Chinese labs' committed outputs are the Chinese run's own.

`python -m pagedkit.i18n check` compares a generated notebook's *sources*
with what the generator makes; nbval compares its outputs with a fresh run,
but only where both run. This catches the case between: a Chinese notebook
whose committed check verdicts and hints are English (built on older code,
or outputs kept from the English run), which nbval then fails in CI."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ZH_LABS = sorted((ROOT / "labs" / "zh-CN").glob("[0-9][0-9]*.ipynb"))
#: What an exercise check or hint prints in English, each with a Chinese msgstr (a
#: code cell's own print, shared by both editions, may say "not written yet" alone).
ENGLISH_MARKERS = ("not written yet: replace", "  Hint: ", "Hint 1/", "cases pass", "cases match")


def _output_texts(path: Path):
    for cell in json.loads(path.read_text())["cells"]:
        for out in cell.get("outputs", []):
            texts = [out.get("text", "")]
            texts += [out.get("data", {}).get(kind, "") for kind in ("text/plain",
                                                                      "text/markdown")]
            for text in texts:
                yield cell["id"], "".join(text) if isinstance(text, list) else text


@pytest.mark.parametrize("path", ZH_LABS, ids=lambda p: p.name)
def test_chinese_labs_hold_no_english_check_output(path):
    found = [(cell, marker) for cell, text in _output_texts(path)
             for marker in ENGLISH_MARKERS if marker in text]
    assert not found, (f"{path.name}: English check output in cells {found}: rebuild it "
                       f"(python -m pagedkit.i18n build labs/{path.name})")


def test_there_are_chinese_labs():
    assert len(ZH_LABS) >= 13


#: what an English message left in a Chinese one looks like: an ASCII "; " or " (" right
#: after Chinese text, or the PrefixCacheMap's English summary (newcomer 15, findings 10, 13)
ENGLISH_SEAMS = re.compile(r"[\u3000-\u303f\u4e00-\u9fff\uff00-\uffef](?:; | \()"
                           r"|PrefixCacheMap\(batch ")


@pytest.mark.parametrize("path", ZH_LABS, ids=lambda p: p.name)
def test_chinese_outputs_hold_no_english_seams(path):
    found = [(cell, m.group(0)) for cell, text in _output_texts(path)
             for m in ENGLISH_SEAMS.finditer(text)]
    assert not found, (f"{path.name}: cells {found}: rebuild it "
                       f"(python -m pagedkit.i18n build labs/{path.name})")


def _say_messages() -> list[str]:
    """Every sentence pagedkit.vllm.say makes (lab 10's printed run figures), as in the source."""
    from babel.messages.extract import extract_from_file

    path = ROOT / "src" / "pagedkit" / "vllm" / "say.py"
    return [message for _, message, _, _ in extract_from_file("python", str(path))]


def _words(message: str) -> str:
    """A message's longest stretch of words between its placeholders."""
    return max(re.split(r"\{[^}]*\}", message), key=len).strip()


def test_lab10_prints_its_run_sentences_in_the_labs_language():
    """Lab 10's code cells are shared; the sentences around its run figures come from
    pagedkit.vllm.say in the language the lab set (they were f-strings, English in both
    editions). Each sentence's words: in the English lab's outputs where its cell keeps
    them (the timings' cell does not), in the Chinese lab's never."""
    english = "\n".join(t for _, t in _output_texts(ROOT / "labs" / "10_meet_vllm.ipynb"))
    chinese = "\n".join(t for _, t in _output_texts(ROOT / "labs" / "zh-CN" /
                                                    "10_meet_vllm.ipynb"))
    messages = _say_messages()
    assert len(messages) >= 20
    untimed = [m for m in messages if "tokens/s" not in m and "load average" not in m]
    assert [m for m in untimed if _words(m) not in english] == []
    assert [m for m in messages if _words(m) in chinese] == []
