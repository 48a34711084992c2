"""The Chinese edition says one thing one way (newcomer 19, findings 3, 4 and 10).

* A rejected variant of a term (docs/glossary.md's table "Variants the Chinese
  edition does not use": 提示词 where the labs say prompt, "lab 03" where they say
  实验 03, ...) comes back nowhere: not in pagedkit's Chinese messages, the Chinese
  labs (catalogs and generated notebooks, outputs included) or the Chinese docs.
* A Chinese lab does not quote, as on screen, English text that pagedkit prints in
  Chinese under zh-CN (lab 00 quoted "not written yet" above a check that prints
  尚未编写).
* Lists, labels and products in Chinese messages use Chinese punctuation.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from babel.messages.pofile import read_po

import pagedkit
from pagedkit import i18n
from pagedkit.i18n import notebooks as nbs

ROOT = Path(__file__).resolve().parents[2]
PO = i18n.LOCALE_DIR / "zh_CN" / "LC_MESSAGES" / "pagedkit.po"
MARKER = "<!-- rejected variants: tests/i18n/test_terms.py reads this table -->"


@pytest.fixture(autouse=True)
def english_after():
    yield
    i18n.set_language("en")


def _catalog():
    with PO.open("rb") as f:
        return [m for m in read_po(f) if m.id]


def _strings(message) -> list[str]:
    return list(message.string) if isinstance(message.string, (tuple, list)) else [message.string]


def _rejected() -> list[tuple[tuple[str, ...], tuple[str, ...]]]:
    """(kept forms, rejected forms) for each row of the glossary's rejected-variants table."""
    lines = (ROOT / "docs" / "glossary.md").read_text(encoding="utf-8").splitlines()
    rows = []
    for line in lines[lines.index(MARKER) + 1:]:
        if not line.startswith("|"):
            break
        cols = [c.strip() for c in line.strip().strip("|").split("|")]
        if set(cols[0]) <= set("-: ") or cols[0].startswith("use"):
            continue
        rows.append((tuple(cols[0].split(" / ")), tuple(cols[1].split(" / "))))
    return rows


def _chinese_texts() -> dict[str, str]:
    """Where the Chinese edition speaks: name -> text (code spans and blocks left out)."""
    texts = {f"{PO.name}: {m.id[:50]!r}": s for m in _catalog() for s in _strings(m)}
    for path in sorted((ROOT / nbs.CATALOGS).glob("*.json")):
        for entry in json.loads(path.read_text(encoding="utf-8"))["cells"]:
            texts[f"{path.name} cell {entry['id']}"] = nbs.prose(entry["zh"])
    for path in sorted((ROOT / nbs.OUTPUT).glob("*.ipynb")):
        for cell in nbs.read_notebook(path)["cells"]:
            outputs = json.dumps(cell.get("outputs", []), ensure_ascii=False)
            texts[f"{path.name} cell {cell.get('id')} outputs"] = outputs
    for path in [ROOT / "README.zh-CN.md", ROOT / nbs.INDEX_SOURCE,
                 *sorted((ROOT / "docs" / "zh-CN").glob("*.md"))]:
        texts[str(path.relative_to(ROOT))] = nbs.prose(path.read_text(encoding="utf-8"))
    return texts


def test_the_rejected_variants_table_is_read():
    rows = dict(_rejected())
    assert rows[("prompt",)] == ("提示词",)
    assert ("批大小",) in rows and ("实验 03",) in rows and len(rows) >= 5


@pytest.mark.parametrize("kept, rejected", _rejected(), ids=lambda forms: forms[0])
def test_no_rejected_variant_comes_back(kept, rejected):
    found = []
    for where, text in _chinese_texts().items():
        for form in kept:  # a gloss of the kept form, prompt（提示词）, is allowed
            for variant in rejected:
                text = text.replace(f"{form}（{variant}）", form)
        found += [f"{where}: {variant!r}" for variant in rejected if variant in text]
    assert not found, (f"the Chinese edition writes {' / '.join(kept)} (docs/glossary.md), "
                       f"not {' / '.join(rejected)}:\n" + "\n".join(found))


def test_the_check_finds_a_rejected_variant():
    """The search above is not vacuous: the terms it rejects are words the
    English source would make a translator reach for."""
    texts = " ".join(_chinese_texts().values())
    assert texts.count("prompt") > 100 and "实验 03" in texts and "批大小" in texts


def _shape(text: str) -> str:
    """`text` with what varies left out: placeholders, numbers and one-letter
    variables (``step {index}/{last}``, ``step 12/36`` and ``step k/N`` alike)."""
    text = re.sub(r"\{[^{}]*\}|\b\d+\b|\b[A-Za-z]\b", "#", text.replace("*", ""))
    return " ".join(text.split()).lower()


def test_a_chinese_lab_quotes_no_english_that_pagedkit_prints_in_chinese():
    """Newcomer 19, finding 3: lab 00 quoted "not written yet", lab 02 "stranded in
    holes", lab 06 "step 12/36", while the package printed 尚未编写, 困在空洞里 and
    第 12/36 步 right below. A quote in a Chinese lab (“...” or `...` with a space in
    it; not code such as “block * block_size + offset”) that is a piece of one of
    pagedkit's English messages must be what the Chinese message says too."""
    messages = [(_shape(m.id), _shape(s)) for m in _catalog() for s in _strings(m)
                if isinstance(m.id, str) and s]
    found = []
    for path in sorted((ROOT / nbs.CATALOGS).glob("*.json")):
        for entry in json.loads(path.read_text(encoding="utf-8"))["cells"]:
            quotes = re.findall(r"“([A-Za-z][^”]*)”", entry["zh"])
            quotes += [q for q in re.findall(r"`([A-Za-z][^`]*)`", entry["zh"]) if " " in q]
            for quote in quotes:
                shape = _shape(quote)
                if len(shape) < 6 or re.search(r"[_=()\[\]]", quote) or quote[0].isupper():
                    continue  # too short, code, or a title (the paper's §6.4 “Shared prefix”)
                if any(shape in english and shape not in chinese
                       for english, chinese in messages):
                    found.append(f"{path.name} cell {entry['id']}: “{quote}”")
    assert not found, ("quoted as on screen, but pagedkit prints these in Chinese under "
                       "zh-CN: quote the Chinese\n" + "\n".join(found))


def test_the_quote_check_catches_the_three_quotes_newcomer_19_found():
    messages = [(_shape(m.id), _shape(s)) for m in _catalog() for s in _strings(m)
                if isinstance(m.id, str) and s]
    for quote in ("not written yet", "stranded in holes", "step *k*/*N*", "step 12/36"):
        assert any(_shape(quote) in e and _shape(quote) not in c for e, c in messages), quote


def test_chinese_messages_use_chinese_punctuation_for_lists_and_products():
    """Newcomer 19, finding 10: ``1 + k x draft_cost``, ``属于 0, 2``, ``页表 0: 0 -> 1``."""
    ascii_times = [s for m in _catalog() for s in _strings(m) if re.search(r"\s x\s", s)]
    assert not ascii_times, ascii_times
    pagedkit.set_language("zh-CN")
    assert i18n.join_names([0, 2]) == "0、2"
    i18n.set_language("en")
    assert i18n.join_names([0, 2]) == "0, 2"


def _hovers_and_table():
    from pagedkit.viz.page_table import page_table

    from .test_messages import forked_block_map
    view = forked_block_map()
    hovers = [h for h in view.figure().data[0].hovertext if h]
    frame = view.recorder.frames[-1]
    return hovers, page_table(frame, "A").chain()


def test_the_block_map_names_its_owners_as_sequences_and_the_table_with_a_chinese_colon():
    hovers, chain = _hovers_and_table()
    assert any("owned by A, B" in h for h in hovers), hovers
    assert chain.startswith("A: "), chain
    pagedkit.set_language("zh-CN")
    hovers, chain = _hovers_and_table()
    assert any("属于序列 A、B" in h for h in hovers), hovers
    assert not any(re.search(r"属于 \w+, ", h) for h in hovers), hovers
    assert chain.startswith("A：") and ": " not in chain, chain
