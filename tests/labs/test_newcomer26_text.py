"""newcomer26, a teacher's fact-check of labs 05-09: the numbers the lab text
states equal what the code computes, and exercises state their rules before
the check needs them. In English and in Chinese."""

import json
import re
from pathlib import Path

import pytest

from pagedkit.sim import OPT_13B, LatencyModel

ROOT = Path(__file__).resolve().parents[2]
CONTEXT, BLOCK = 500, 16
PAGED = OPT_13B.kv_slots // BLOCK // -(-CONTEXT // BLOCK)  # 983 blocks // 32 = 30


def _cells(lab: str, language: str) -> list[dict]:
    path = ROOT / "labs" / (lab if language == "en" else f"zh-CN/{lab}")
    return json.loads(path.read_text(encoding="utf-8"))["cells"]


def _text(cell: dict) -> str:
    return " ".join("".join(cell["source"]).split())


def _output(cell: dict) -> str:
    return "".join("".join(o.get("text", "")) for o in cell.get("outputs", []))


def test_paged_count_is_what_blocks_of_16_hold():
    assert PAGED == 30 and OPT_13B.kv_slots < 31 * 32 * BLOCK


@pytest.mark.parametrize("language", ["en", "zh"])
def test_lab09_prints_and_says_the_paged_count(language):
    """Finding 7: lab 09 printed 'paged memory about 31' (kv_slots // 500),
    while the same cells charge reads through blocks of 16: 30 fit."""
    cells = _cells("09_beyond.ipynb", language)
    printed = [c for c in cells if c["cell_type"] == "code" and "KV slots on this A100" in
               _output(c)]
    assert len(printed) == 1
    assert re.search(rf"paged memory {PAGED} \(in blocks of 16, 32 each\)\.", _output(printed[0]))
    costs = [c for c in cells if c["cell_type"] == "code" and "paged memory" in _output(c)
             and "USD" in _output(c)]
    assert len(costs) == 1 and f"batch  {PAGED}:" in _output(costs[0])
    prose = " ".join(_text(c) for c in cells if c["cell_type"] == "markdown")
    if language == "en":  # findings 7 and 8
        assert f"{PAGED} paged sequences instead of 7" in prose
        assert f"{PAGED} paged in blocks of 16" in prose
        assert "about 31" not in prose and "conversation midway" not in prose
    else:
        assert f"{PAGED} 个分页序列" in prose and "进行到一半的 ShareGPT" not in prose


@pytest.mark.parametrize("language", ["en", "zh"])
def test_lab05_roofline_sentence_matches_the_model(language):
    """Finding 7 in lab 05's cell 3: batch, K/V ms and step ms from the model."""
    m = LatencyModel(OPT_13B)
    kv = m.memory_time(PAGED * CONTEXT, block_size=BLOCK) - m.memory_time(0)
    step = m.step_time(PAGED, PAGED * CONTEXT, block_size=BLOCK)
    one = m.step_time(1, CONTEXT, block_size=BLOCK)
    cell = next(c for c in _cells("05_continuous_batching.ipynb", language)
                if c["cell_type"] == "markdown" and "roofline" in _text(c))
    text = _text(cell)
    for number in (f"{kv * 1e3:.1f} ms", f"{step * 1e3:.1f}", f"{one * 1e3:.1f} ms",
                   f"{step / one:.1f}×"):
        assert number in text, (number, text)
    assert re.search(rf"(batch|批大小) {PAGED}\b", text)


@pytest.mark.parametrize("language", ["en", "zh"])
def test_lab06_exercise2_says_shared_blocks_move_once(language):
    """Finding 5: the check counts distinct block ids; the instructions say so."""
    cells = _cells("06_preemption.ipynb", language)
    i = next(i for i, c in enumerate(cells) if c["cell_type"] == "code"
             and "def preemption_mode(" in "".join(c["source"]))
    text = _text(cells[i - 1])
    said = ("moved once", "distinct block ids") if language == "en" else ("只搬运一次",
                                                                         "不同的页块 id")
    assert all(words in text for words in said), text
