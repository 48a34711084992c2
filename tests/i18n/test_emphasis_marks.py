"""Newcomer 21's finding 14: a Chinese check message showed literal ``*第一个*``:
the translation marked with markdown asterisks what the English writes in
capitals (FIRST), and a check's message is plain text (an AssertionError under
nbgrader, a line in the notebook). No zh-CN translation adds ``*...*`` that its
English lacks. (Failed before: 4 messages.)"""

import re
from pathlib import Path

from babel.messages.pofile import read_po

PO = (Path(__file__).resolve().parents[2] / "src" / "pagedkit" / "i18n" / "locale" / "zh_CN"
      / "LC_MESSAGES" / "pagedkit.po")
EMPHASIS = re.compile(r"\*[^*\s][^*]*\*")


def test_no_translation_adds_markdown_emphasis():
    with PO.open("rb") as f:
        catalog = read_po(f)
    added = []
    for message in catalog:
        ids = message.id if isinstance(message.id, tuple) else (message.id,)
        strings = message.string if isinstance(message.string, tuple) else (message.string,)
        added += [(i, s) for i, s in zip(ids, strings, strict=False)
                  if s and EMPHASIS.search(s) and not EMPHASIS.search(i)]
    assert added == []
