"""Page-table data: one sequence's logical blocks and the physical blocks behind them.

This is the picture of paper Figure 6: to the sequence its KV cache looks
contiguous (logical blocks 0, 1, 2, ...), while the physical blocks lie
wherever the allocator found room — ``A: 3 -> 7 -> 9``.

Row *i* is always logical block *i*: the blocks a sliding window released
stay in the table as released rows (no physical block, no tokens held), so
a sequence's later blocks keep their true numbers, ``A: released ×2 -> 7 -> 9``.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass

from ..i18n import _, join_clauses, join_names, ngettext
from ..memory.block_table import NULL_BLOCK
from .frames import Frame


@dataclass(frozen=True, slots=True)
class PageTableRow:
    logical: int
    physical: int | None  # None: released by a sliding window (it holds nothing now)
    num_tokens: int
    ref_count: int  # sharers of the physical block (1 when not shared, 0 when released)

    @property
    def released(self) -> bool:
        return self.physical is None


@dataclass(frozen=True)
class PageTableData:
    """A sequence's page table at one frame. `where` is ``"gpu"`` or ``"cpu"``
    (swapped out: the physical ids are then CPU swap blocks)."""

    seq: Hashable
    request: Hashable
    where: str
    rows: tuple[PageTableRow, ...]
    block_size: int

    @property
    def physical(self) -> tuple[int | None, ...]:
        """The physical block of each logical block (None where released)."""
        return tuple(r.physical for r in self.rows)

    @property
    def num_released(self) -> int:
        return sum(r.released for r in self.rows)

    @property
    def num_tokens(self) -> int:
        return sum(r.num_tokens for r in self.rows)

    def chain(self) -> str:
        """The page table in one line, e.g. ``A: 3 -> 7 -> 9``."""
        prefix = "cpu " if self.where == "cpu" else ""
        live = [f"{prefix}{r.physical}" for r in self.rows if not r.released]
        released = ([_("released ×{n}").format(n=self.num_released)]
                    if self.num_released else [])
        chain = " -> ".join(released + live) or _("(no blocks)")
        return _("{seq}: {chain}").format(seq=self.seq, chain=chain)

    def described(self) -> str:
        """The page table in words, whose it is and where each logical block
        lies, e.g. ``page table of sequence A (request r1): logical blocks
        0-2 are physical blocks 3, 7, 9`` (a reader of a saved notebook sees
        this, with no figure beside it)."""
        parts = []
        if self.num_released:
            parts.append(ngettext("logical block {logical} released by the sliding window",
                                  "logical blocks {logical} released by the sliding window",
                                  self.num_released)
                         .format(logical=_span(0, self.num_released - 1)))
        live = [r for r in self.rows if not r.released]
        if live:
            where = (ngettext("logical block {logical} is CPU block {physical}",
                              "logical blocks {logical} are CPU blocks {physical}", len(live))
                     if self.where == "cpu" else
                     ngettext("logical block {logical} is physical block {physical}",
                              "logical blocks {logical} are physical blocks {physical}",
                              len(live)))
            parts.append(where.format(logical=_span(live[0].logical, live[-1].logical),
                                      physical=join_names(r.physical for r in live)))
        request = (_(" (request {request})").format(request=self.request)
                   if self.request != self.seq else "")
        swapped = _(", swapped out") if self.where == "cpu" else ""
        return (_("page table of sequence {seq}{request}{swapped}: {blocks}")
                .format(seq=self.seq, request=request, swapped=swapped,
                        blocks=join_clauses(parts) or _("(no blocks)")))


def _span(first: int, last: int) -> str:
    """``3`` or ``0-5``: logical block numbers, first to last."""
    return str(first) if first == last else f"{first}-{last}"


def page_table(frame: Frame, seq: Hashable) -> PageTableData:
    """The page table of `seq` at `frame`; raises naming the sequences that exist."""
    if seq in frame.tables:
        rows = tuple(_released_row(i) if b == NULL_BLOCK else
                     PageTableRow(i, b, frame.blocks[b].num_tokens,
                                  max(frame.blocks[b].ref_count, 1))
                     for i, b in enumerate(frame.tables[seq]))
        where = "gpu"
    elif seq in frame.swapped_tables:
        rows = tuple(_released_row(i) if b == NULL_BLOCK else
                     PageTableRow(i, b, frame.swapped[b].num_tokens,
                                  max(len(frame.swapped[b].owners), 1))
                     for i, b in enumerate(frame.swapped_tables[seq]))
        where = "cpu"
    else:
        known = ", ".join(map(repr, frame.sequences[:10])) or "none"
        raise KeyError(f"sequence {seq!r} holds no blocks at step {frame.index}; "
                       f"sequences with blocks: {known}")
    return PageTableData(seq, frame.request(seq), where, rows, frame.block_size)


def _released_row(logical: int) -> PageTableRow:
    return PageTableRow(logical, None, 0, 0)
