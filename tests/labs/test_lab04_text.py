"""Lab 04's exercise texts, its checkers' docstrings and pass messages say
what the checks run (audit 37): exercise 3 said block sizes 1 to 16 (and so
did check_paged_kernel's docstring) while KERNEL_CASES reach 32, and
exercise 2 said GQA groups of 1, 2 and 4 while the check also runs a group
of 3, at head_dim 12. Every place is read for its numbers and compared with
the cases themselves, in English and in Chinese."""

import json
import re
from pathlib import Path

import pytest
from babel.messages.pofile import read_po

from pagedkit.exercises import lab04

ROOT = Path(__file__).resolve().parents[2]
LAB = "04_paged_attention.ipynb"
EXERCISE_2, EXERCISE_3 = "03e23a16", "926fb356"  # the cells' ids
PO = ROOT / "src" / "pagedkit" / "i18n" / "locale" / "zh_CN" / "LC_MESSAGES" / "pagedkit.po"


def cell_text(lab: Path, cell_id: str) -> str:
    cells = json.loads(lab.read_text(encoding="utf-8"))["cells"]
    return " ".join("".join(c["source"]) for c in cells if c.get("id") == cell_id).replace(
        "\n", " ")


def pass_message(start: str, language: str) -> str:
    """The one message of the catalog whose English begins with `start`, in `language`."""
    with PO.open("rb") as f:
        found = [m for m in read_po(f) if isinstance(m.id, str) and m.id.startswith(start)]
    assert len(found) == 1, (start, [m.id for m in found])
    return found[0].id if language == "en" else found[0].string


def block_range(cases) -> tuple[int, int]:
    sizes = {case[1] for case in cases}  # (context_len, block_size, ...)
    return min(sizes), max(sizes)


BLOCK_RANGES = [  # (what, its text, the pattern of its range, the cases it speaks of)
    ("exercise 3 (English)", lambda: cell_text(ROOT / "labs" / LAB, EXERCISE_3),
     r"block sizes (\d+) to (\d+)", lab04.KERNEL_CASES),
    ("exercise 3 (Chinese)", lambda: cell_text(ROOT / "labs" / "zh-CN" / LAB, EXERCISE_3),
     r"页块大小从 (\d+) 到 (\d+)", lab04.KERNEL_CASES),
    ("check_paged_kernel's docstring", lambda: " ".join(lab04.check_paged_kernel.__doc__.split()),
     r"blocks of (\d+) to (\d+) tokens", lab04.KERNEL_CASES),
    ("check_paged_kernel's pass message (English)",
     lambda: pass_message("all {value} cases match attention on the un-paged K/V", "en"),
     r"block sizes (\d+) to (\d+)", lab04.KERNEL_CASES),
    ("check_paged_kernel's pass message (Chinese)",
     lambda: pass_message("all {value} cases match attention on the un-paged K/V", "zh"),
     r"页块大小 (\d+) 到 (\d+)", lab04.KERNEL_CASES),
    ("check_gather_kv's pass message (English)",
     lambda: pass_message("all {n} cases pass (shuffled blocks", "en"),
     r"block sizes (\d+) to (\d+)", lab04.GATHER_CASES),
    ("check_gather_kv's pass message (Chinese)",
     lambda: pass_message("all {n} cases pass (shuffled blocks", "zh"),
     r"页块大小 (\d+) 到 (\d+)", lab04.GATHER_CASES),
]


@pytest.mark.parametrize("what, text, pattern, cases", BLOCK_RANGES,
                         ids=[row[0] for row in BLOCK_RANGES])
def test_the_block_sizes_said_are_the_checks_own(what, text, pattern, cases):
    said = [tuple(map(int, m)) for m in re.findall(pattern, text())]
    assert said == [block_range(cases)], f"{what} says block sizes {said}"


def decode_groups_and_dims() -> tuple[set[int], list[int]]:
    cases = lab04.decode_cases()  # (context_len, block_size, q_heads, kv_heads, head_dim, scale)
    return {hq // hkv for _, _, hq, hkv, _, _ in cases}, sorted({d for *_, d, _ in cases})


DECODE_TEXTS = [  # (what, its text, groups "lo to hi", the group named, the head dims)
    ("exercise 2 (English)", lambda: cell_text(ROOT / "labs" / LAB, EXERCISE_2),
     r"GQA groups of (\d+) to (\d+)", r"a group of (\d+) among them",
     r"head_dim (\d+) and (\d+)"),
    ("exercise 2 (Chinese)", lambda: cell_text(ROOT / "labs" / "zh-CN" / LAB, EXERCISE_2),
     r"GQA 分组为 (\d+) 到 (\d+)", r"其中有一组是 (\d+)", r"head_dim 为 (\d+) 和 (\d+)"),
    ("check_paged_decode_attention's pass message (English)",
     lambda: pass_message("all {n} cases match SDPA on the un-paged K/V", "en"),
     r"GQA groups of (\d+) to (\d+)", None, r"head_dim (\d+) and (\d+)"),
    ("check_paged_decode_attention's pass message (Chinese)",
     lambda: pass_message("all {n} cases match SDPA on the un-paged K/V", "zh"),
     r"GQA 组大小 (\d+) 到 (\d+)", None, r"head_dim (\d+) 和 (\d+)"),
]


@pytest.mark.parametrize("what, text, groups, named, dims", DECODE_TEXTS,
                         ids=[row[0] for row in DECODE_TEXTS])
def test_the_gqa_groups_and_head_dims_said_are_the_checks_own(what, text, groups, named, dims):
    run_groups, run_dims = decode_groups_and_dims()
    text = text()
    said = [tuple(map(int, m)) for m in re.findall(groups, text)]
    assert len(said) == 1, f"{what}: no one range of groups in {text!r}"
    lo, hi = said[0]
    assert set(range(lo, hi + 1)) == run_groups, f"{what} says groups {lo} to {hi}"
    if named:  # the group that is not a power of two, which the text points out
        group = [int(m) for m in re.findall(named, text)]
        assert len(group) == 1 and group[0] in run_groups and group[0] & (group[0] - 1)
    assert [list(map(int, m)) for m in re.findall(dims, text)] == [run_dims], what


# ---- newcomer 11 finding 8: exercise 3 said 2^31 where the check says 2^32
EXERCISE_3_FAR = {"en": r"starts past 2\^(\d+) elements", "zh": r"从 2\^(\d+) 个元素之后开始"}
FAR_MESSAGES = [", in a cache so big that its blocks start past", ", a cache past",
                " (the cache past", "block * stride_block is past"]


def far_exponent() -> int:
    """N of the check's far cache, whose blocks start past 2^N elements (read
    from the runner's source: importing it would switch Triton's interpreter on)."""
    source = (ROOT / "src" / "pagedkit" / "exercises" / "_kernel_runner.py").read_text()
    return int(re.search(r"^FAR_BLOCKS = 2\*\*(\d+)", source, re.M).group(1))


@pytest.mark.parametrize("language", ["en", "zh"])
def test_the_far_cache_said_is_the_checks_own(language):
    lab = ROOT / "labs" / (LAB if language == "en" else f"zh-CN/{LAB}")
    said = re.findall(EXERCISE_3_FAR[language], cell_text(lab, EXERCISE_3))
    in_messages = [re.findall(r"2\^(\d+)", pass_message(start, language)) for start in FAR_MESSAGES]
    assert said == [str(far_exponent())], said
    assert all(found == [str(far_exponent())] for found in in_messages), in_messages


# ---- newcomer 11 finding 9: the stand-in cell blamed exercise 2 for exercise 1's stub
STAND_IN = "0160b0ff"


def stand_in_choice(paged_decode_attention) -> str:
    """What the stand-in cell says it runs, for this exercise-2 function (the
    cell up to the run itself)."""
    import torch

    from pagedkit.kernels import reference

    cells = json.loads((ROOT / "labs" / LAB).read_text(encoding="utf-8"))["cells"]
    code = "".join(next(c["source"] for c in cells if c.get("id") == STAND_IN))
    assert "tiny = LLM(" in code
    namespace = {"torch": torch, "reference": reference, "HQ": 4, "D": 8, "k_cache": None,
                 "v_cache": None, "table_a": None, "T": 3,
                 "paged_decode_attention": paged_decode_attention}
    exec(code.split("tiny = LLM(")[0], namespace)
    return namespace["who"]


def test_the_stand_in_names_the_function_not_written():
    def gather_kv(cache, block_table, num_tokens):
        raise NotImplementedError

    def written_on_gather_kv(query, k_cache, v_cache, block_table, context_len):
        return gather_kv(k_cache, block_table, context_len)

    def paged_decode_attention(query, k_cache, v_cache, block_table, context_len):
        raise NotImplementedError

    def written(query, k_cache, v_cache, block_table, context_len):
        return query

    assert stand_in_choice(written_on_gather_kv) == "the stand-in (gather_kv is not written yet)"
    assert stand_in_choice(paged_decode_attention) == \
        "the stand-in (paged_decode_attention is not written yet)"
    assert stand_in_choice(written) == "your paged_decode_attention"


@pytest.mark.parametrize("lab", ["04_paged_attention.ipynb", "04b_split_kv_and_prefill.ipynb"])
@pytest.mark.parametrize("folder", ["labs", "labs/zh-CN"])
def test_labs_04_and_04b_lead_on_to_lab_04c(lab, folder):
    """Lab 04c names lab 04 (and 04b) as its prerequisites, yet neither led to it
    (newcomer 29, finding 6): the cell of each one's "Next" links it."""
    cells = json.loads((ROOT / folder / lab).read_text(encoding="utf-8"))["cells"]
    nexts = ["".join(c["source"]) for c in cells if c["cell_type"] == "markdown"
             and ("**Next:**" in "".join(c["source"]) or "**下一步：**" in "".join(c["source"]))]
    assert len(nexts) == 1, len(nexts)
    assert "(04c_triton_puzzles.ipynb)" in nexts[0].split("**Next:**" if folder == "labs"
                                                          else "**下一步：**")[1], nexts[0][-400:]


@pytest.mark.parametrize("folder", ["labs", "labs/zh-CN"])
def test_the_primer_says_which_ideas_its_small_kernel_shows(folder):
    """The primer's small kernel was said to hold "every idea" of the five, though
    it never asks `tl.program_id` (newcomer 29, finding 10): the text before it
    must say so whenever the kernel does not."""
    cells = json.loads((ROOT / folder / LAB).read_text(encoding="utf-8"))["cells"]
    at = next(i for i, c in enumerate(cells) if "def gather_rows(" in "".join(c["source"]))
    kernel = "".join(cells[at]["source"]).split("def gather_rows(", 1)[1].split("\n\n\n")[0]
    said = "".join(cells[at - 1]["source"])
    if "tl.program_id" not in kernel:
        assert "every idea" not in said and "全部概念" not in said, said[-300:]
        assert "`tl.program_id`" in said and "(1,)" in said, said[-300:]
