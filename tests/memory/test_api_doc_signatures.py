"""docs/api.md's signatures of the paging core say which arguments go by keyword.

Newcomer 22 N4: api.md showed ``BlockAllocator(num_blocks, block_size,
enable_prefix_caching=False)``, but the flag is keyword-only, so the call as
written, ``BlockAllocator(4, 2, True)``, is a TypeError.
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

import pagedkit.memory as memory

API = Path(__file__).resolve().parents[2] / "docs" / "api.md"


def _documented():
    text = API.read_text(encoding="utf-8")
    section = text[text.index("## The paging core"):]
    section = section[:section.index("\n## ", 1)]
    found = {}
    for match in re.finditer(r"^- `(\w+)\(([^)]*)\)`", section, re.MULTILINE):
        if hasattr(memory, match[1]) and inspect.isclass(getattr(memory, match[1])):
            found[match[1]] = " ".join(match[2].split())
    return found


DOCUMENTED = _documented()


def test_the_section_documents_the_classes():
    assert {"BlockAllocator", "BlockTable", "KVCacheManager", "ContiguousAllocator"} <= set(
        DOCUMENTED)


@pytest.mark.parametrize("name", sorted(DOCUMENTED))
def test_documented_arguments_pass_as_shown(name):
    params = inspect.signature(getattr(memory, name)).parameters
    keyword_only = False
    for arg in DOCUMENTED[name].split(", "):
        if arg == "*":
            keyword_only = True
            continue
        arg_name = re.match(r"\w+", arg)[0]
        kind = params[arg_name].kind
        shown = "keyword-only" if keyword_only else "positional"
        actual = ("keyword-only" if kind is inspect.Parameter.KEYWORD_ONLY else "positional")
        assert shown == actual, f"api.md shows {name}'s {arg_name} {shown}; it is {actual}"
