"""Lists of numbers a widget shows in zh are joined with 、 (newcomer 27, N3's sweep).

The page table's "逻辑页块 0-5 依次位于物理页块 0, 1, 18, 24, 30, 35" (lab 03's
committed zh output) and the contiguous-vs-paged hover "页块 3（请求 0, 1）" joined
with an ASCII ", " (which `i18n.join_names` gives only in English). (Failed before:
3 of 3 zh cases; English stays byte for byte.)"""

from __future__ import annotations

import types

import pytest

from pagedkit import i18n
from pagedkit.viz.compare_view import _requests
from pagedkit.viz.page_table import PageTableData, PageTableRow

ROWS = (PageTableRow(0, 5, 4, 1), PageTableRow(1, 9, 4, 1), PageTableRow(2, 3, 2, 1))


@pytest.mark.parametrize("where", ["gpu", "cpu"])
@pytest.mark.parametrize("language,listed", [("zh-CN", "5、9、3"), ("en", "5, 9, 3")])
def test_a_page_table_lists_its_physical_blocks_as_the_language_lists(where, language,
                                                                       listed):
    with i18n.speaking(language):
        said = PageTableData("A", "r1", where, ROWS, 4).described()
    assert said.endswith(listed), said


@pytest.mark.parametrize("language,listed", [("zh-CN", "r0、r1"), ("en", "r0, r1")])
def test_a_shared_blocks_requests_are_listed_as_the_language_lists(language, listed):
    frame = types.SimpleNamespace(request=lambda seq: f"r{seq // 2}")
    with i18n.speaking(language):
        assert _requests(frame, (0, 1, 2)) == listed
