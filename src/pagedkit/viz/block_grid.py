"""Block-map data: a frame laid out as a grid of cells, as arrays ready to draw.

Each physical block is one cell, filled from the bottom like a glass: the
filled part is its tokens, the empty part above is the slots it reserved but
has not used (paging's only waste, paper §4.2). This module turns a `Frame`
into the numbers a figure needs — positions, color indices, fill levels,
hover text, badges — and nothing else, so it is tested without plotly.

Swapped-out blocks live in CPU memory, drawn as extra rows below the GPU
grid: they are not GPU blocks, but the learner should see where the
preempted request's KV went (paper §4.5).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass

import numpy as np

from .._validation import check_int
from ..i18n import _, counted, join_names
from .frames import CACHED, EMPTY_BLOCK, FREE, BlockState, Frame
from .palette import color_index, owner_color_index, owner_key

CELL = 0.9  # a cell's width and height in grid units; the rest is the gap


@dataclass(frozen=True)
class Grid:
    """`num_blocks` cells in rows of `columns`, block 0 at the top left."""

    num_blocks: int
    columns: int

    @property
    def rows(self) -> int:
        return -(-self.num_blocks // self.columns)

    def column(self, blocks: np.ndarray | int) -> np.ndarray | int:
        return blocks % self.columns

    def row(self, blocks: np.ndarray | int) -> np.ndarray | int:
        return blocks // self.columns

    def cpu_row(self, cpu_blocks: np.ndarray | int) -> np.ndarray | int:
        """CPU swap blocks sit below the GPU grid, after one empty row."""
        return self.rows + 1 + cpu_blocks // self.columns


def grid_for(num_blocks: int, columns: int | None = None) -> Grid:
    """A readable grid: 16 columns up to 256 blocks, 32 up to 1,024, then 64."""
    check_int("num_blocks", num_blocks, minimum=1)
    if columns is None:
        columns = 16 if num_blocks <= 256 else 32 if num_blocks <= 1024 else 64
    check_int("columns", columns, minimum=1)
    return Grid(num_blocks, min(columns, num_blocks))


@dataclass(frozen=True)
class BlockMapData:
    """Everything the block map draws for one frame (arrays indexed by block id)."""

    color: np.ndarray  # color index per block (see palette)
    fill: np.ndarray  # tokens held / block_size, 0 for free blocks
    hover: list[str]
    badge_blocks: np.ndarray  # shared blocks, drawn with their ref count
    badge_text: list[str]
    cow_blocks: np.ndarray  # blocks a copy-on-write read from or wrote to this step
    cow_pairs: tuple[tuple[int, int], ...]  # (src, dst)
    cpu_blocks: np.ndarray  # CPU swap blocks in use, drawn whole (hover: their tokens)
    cpu_color: np.ndarray
    cpu_hover: list[str]


def block_map_data(frame: Frame, first_seen: Mapping[Hashable, int],
                   shades: Mapping[Hashable, int] | None = None) -> BlockMapData:
    """Lay out `frame` for drawing; `first_seen` fixes each request's color,
    `shades` each sequence's shade of it (`Recorder.shades`)."""
    bs = frame.block_size
    n = frame.num_blocks
    color = np.empty(n, dtype=np.int16)
    fill = np.empty(n, dtype=np.float32)
    hover: list[str] = [""] * n
    badges: list[int] = []
    for b, state in enumerate(frame.blocks):
        if state is EMPTY_BLOCK:  # most of an idle pool: skip the general path
            color[b], fill[b], hover[b] = 0, 0.0, _("block {b}: free").format(b=b)
            continue
        color[b] = color_index(frame, state, first_seen, shades)
        fill[b] = state.num_tokens / bs if state.status != FREE else 0.0
        hover[b] = _hover(frame, b, state)
        if state.ref_count > 1:
            badges.append(b)
    cow = sorted({b for pair in frame.copies for b in pair})
    cpu = sorted(frame.swapped)
    cpu_color = np.array([_owner_index(frame, frame.swapped[c].owners, first_seen, shades)
                          for c in cpu], dtype=np.int16)
    return BlockMapData(
        color=color,
        fill=fill,
        hover=hover,
        badge_blocks=np.array(badges, dtype=np.int64),
        badge_text=[f"×{frame.blocks[b].ref_count}" for b in badges],
        cow_blocks=np.array(cow, dtype=np.int64),
        cow_pairs=frame.copies,
        cpu_blocks=np.array(cpu, dtype=np.int64),
        cpu_color=cpu_color,
        cpu_hover=[_cpu_hover(frame, c) for c in cpu],
    )


def _owners(frame: Frame, owners: tuple) -> str:
    if not owners:
        return _("owner unknown")
    requests = dict.fromkeys(frame.request(s) for s in owners)
    names = join_names(owners)
    if list(requests) == list(owners):
        return _("owned by {names}").format(names=names)
    return (_("owned by {names} (request {items})")
             .format(names=names, items=join_names(requests)))


def _owner_index(frame: Frame, owners: tuple, first_seen: Mapping[Hashable, int],
                 shades: Mapping[Hashable, int] | None) -> int:
    """The color index of a swapped block's oldest owner (0 without one)."""
    if not owners:
        return 0
    return owner_color_index(owner_key(frame, owners[0]), first_seen,
                             (shades or {}).get(owners[0], 0))


def _hover(frame: Frame, block: int, s: BlockState) -> str:
    bs = frame.block_size
    if s.status == FREE:
        return _("block {block}: free").format(block=block)
    if s.status == CACHED:
        return (_("block {block}: cached prefix, {num_tokens}/{tokens}, no owner (reusable "
                  "until evicted)")
                  .format(block=block, num_tokens=s.num_tokens, tokens=counted(bs, 'token')))
    shared = _(", shared ×{ref_count}").format(ref_count=s.ref_count) if s.ref_count > 1 else ""
    return (_("block {block}: {num_tokens}/{tokens}, ref count {ref_count}{shared}, {owners}")
              .format(block=block, num_tokens=s.num_tokens, tokens=counted(bs, 'token'),
                      ref_count=s.ref_count, shared=shared, owners=_owners(frame, s.owners)))


def _cpu_hover(frame: Frame, cpu: int) -> str:
    s = frame.swapped[cpu]
    source = "" if s.from_block is None else (_(" from GPU block {from_block}")
                                               .format(from_block=s.from_block))
    return (_("CPU block {cpu}: swapped out{source}, {num_tokens}/{tokens}, {owners}")
              .format(cpu=cpu, source=source, num_tokens=s.num_tokens,
                      tokens=counted(frame.block_size, 'token'), owners=_owners(frame, s.owners)))
