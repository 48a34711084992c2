"""`python -m pagedkit bench calls` and the pages that quote its count."""

from __future__ import annotations

import re
from pathlib import Path

from pagedkit.bench.calls import decode_step_calls

DOCS = Path(__file__).resolve().parents[2] / "docs"
#: the most functions a decode step may call: issue #22's target (96 when it was
#: filed, 56 before the round that moved the step check and the kernels' view of a
#: table to where their data is built, 51 before the stop rule became one function)
CEILING = 50


def test_the_docs_quote_the_count_bench_calls_gives_now(monkeypatch):
    """Tenth newcomer's N10: benchmarks.md said the command "counts the same 64
    functions in 15 files" and "still counts 78" (dated logs in the present
    tense) while it printed 56 in 14. architecture.md's figure is the count;
    any other page that says what the command counts, in the present, says the same."""
    for name in ("PAGEDKIT_PREPACK", "PAGEDKIT_COMPILE", "PAGEDKIT_KERNELS"):
        monkeypatch.delenv(name, raising=False)
    calls = decode_step_calls()
    now = (len(calls), len({owner for owner, _ in calls}))
    assert now[0] <= CEILING, sorted(calls)
    architecture = (DOCS / "architecture.md").read_text(encoding="utf-8")
    assert re.search(r"pagedkit's calls\s+\*\*(\d+) in (\d+) files\*\*", architecture).groups() \
        == tuple(map(str, now))
    present = re.compile(r"bench calls`\s+(?:still\s+)?counts\s+(?:the\s+same\s+)?(\d+)")
    for page in sorted(DOCS.rglob("*.md")):
        for count in present.findall(page.read_text(encoding="utf-8")):
            assert int(count) == now[0], f"{page.name} says bench calls counts {count}"
