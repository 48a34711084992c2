"""A translated page says which version of its English source it follows
(a first line ``<!-- translated from SOURCE, sha256 HEX: ... -->``), and fails
here when the English page has changed since: the lab catalogs' per-cell
check, for whole documents. (README.zh-CN.md is written for Chinese readers,
not translated line for line, and docs/zh-CN/model.md has no English page.)"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TRANSLATED = ["docs/zh-CN/teachers_guide.md"]
HEADER = re.compile(r"<!-- translated from (\S+), sha256 ([0-9a-f]{16}):")


def staleness(page: Path, root: Path = ROOT) -> str | None:
    """Why `page` does not follow its English source now (None: it does)."""
    match = HEADER.match(page.read_text().splitlines()[0])
    if not match:
        return f"{page.name}: its first line must name its English source and its sha256"
    source, recorded = root / match.group(1), match.group(2)
    now = hashlib.sha256(source.read_bytes()).hexdigest()[:16]
    if now != recorded:
        return (f"{page.name} was translated from an older {match.group(1)} (sha256 {recorded}, "
                f"now {now}): bring the translation up to date (git diff the English page), "
                "then record the new sha256 in its first line")
    return None


@pytest.mark.parametrize("name", TRANSLATED)
def test_a_translated_page_follows_its_english_source(name):
    assert staleness(ROOT / name) is None, staleness(ROOT / name)


def test_a_changed_or_unnamed_source_is_found(tmp_path):
    english, page = tmp_path / "en.md", tmp_path / "zh.md"
    english.write_text("one\n")
    sha = hashlib.sha256(b"one\n").hexdigest()[:16]
    page.write_text(f"<!-- translated from en.md, sha256 {sha}: x -->\n一\n")
    assert staleness(page, tmp_path) is None
    english.write_text("two\n")
    assert "older en.md" in staleness(page, tmp_path)
    page.write_text("一\n")
    assert "must name its English source" in staleness(page, tmp_path)
