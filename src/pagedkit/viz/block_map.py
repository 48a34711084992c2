"""The block map: GPU memory as a grid of physical blocks, one cell each.

A cell is colored by the request that owns it and filled from the bottom as
tokens arrive; a white badge shows the ref count of a shared block; an amber
frame flashes on the blocks of a copy-on-write; cached-but-free blocks are
slate, free ones pale; swapped-out blocks appear hatched in a CPU area below.
Hovering a cell names its block id, owners, ref count and tokens.
"""

from __future__ import annotations

import string
from typing import Any

import numpy as np

from ..i18n import _, counted
from .block_grid import CELL, Grid, block_map_data, grid_for
from .controls import Player
from .frames import CACHED, FREE, Frame
from .palette import (
    CACHED_COLOR,
    CELL_SCALE,
    COW_COLOR,
    FILL_SCALE,
    FREE_COLOR,
    NUM_INDICES,
    OWNER_COLORS,
    shades_of,
    tint,
)
from .recorder import Recorder
from .view import View, title_layout, title_margin, wrap_title

_LETTERS = string.ascii_uppercase


def as_recorder(source: Any) -> Recorder:
    """A `Recorder` as is; anything else (LLM, engine, paged simulator, KVCacheManager)
    gets one. A contiguous simulator has no blocks to draw: that is a `TypeError`
    saying what to use instead."""
    if isinstance(source, Recorder):
        return source
    spec = getattr(source, "spec", None)
    if getattr(source, "memory_manager", None) is not None and spec is not None \
            and not getattr(spec, "paged", True):
        raise TypeError(
            f"a {spec.label} Simulator reserves contiguous regions and has no blocks to "
            "draw: watch a paged one (Simulator(trace, 'paged')), or compare both with "
            "ContiguousVsPaged(replay(trace, num_blocks=..., block_size=...))")
    return Recorder.attach(source)


def request_name(order: int) -> str:
    """The letters of the `order`-th request seen: A .. Z, then AA, AB, .. (as
    spreadsheet columns), so no two requests of a recording share a name."""
    name = ""
    order += 1
    while order:
        order, r = divmod(order - 1, 26)
        name = _LETTERS[r] + name
    return name


class BlockMap(View):
    """Watch a recording's blocks: ``BlockMap(recorder)`` or ``BlockMap(llm)``.

    >>> from pagedkit.memory import KVCacheManager
    >>> kv = KVCacheManager(num_blocks=16, block_size=4)
    >>> view = BlockMap(kv)
    >>> _ = kv.allocate_slots("A", [1, 2, 3, 4, 5]); _ = view.recorder.cut()
    >>> view.index = 1; view
    BlockMap(16 blocks, step 1/1: 2 used, 0 shared, 0 cached)
    """

    def __init__(self, source: Any, *, player: Player | None = None,
                 columns: int | None = None) -> None:
        self.recorder = as_recorder(source)
        self.grid: Grid = grid_for(self.recorder.num_blocks, columns)
        super().__init__(player or Player(self.recorder))

    @property
    def frame(self) -> Frame:
        return self.recorder[self.index]

    def summary(self, index: int | None = None) -> str:
        i = self._at(index)
        f = self.recorder[i]
        m = f.memory
        extra = _(", {swapped} swapped out").format(swapped=m.swapped) if m.swapped else ""
        extra += _(", {n} copied on write").format(n=len(f.copies)) if f.copies else ""
        return (_("{blocks}, {step_label}: {used} used, {shared} shared, {cached} cached{extra}")
                  .format(blocks=counted(f.num_blocks, 'block'), step_label=self._step_text(i),
                          used=m.used, shared=m.shared, cached=m.cached, extra=extra))

    def text(self, index: int | None = None) -> str:
        """The summary, and for pools up to 1,024 blocks the map in letters:
        ``.`` free, ``~`` cached, ``A`` a full block of the first request
        (``a`` partly filled), ``2``-``9`` a block shared by that many (``+``
        ten or more), ``?`` a block whose owner the recorder never saw.
        Requests are named A .. Z, then AA, AB, .. in the order first seen;
        once a frame shows a two-letter name, every cell is two characters
        wide. A legend names each letter's request."""
        i = self._at(index)
        f = self.recorder[i]
        lines = [repr(self) if index is None else f"BlockMap({self.summary(i)})"]
        if f.num_blocks > 1024:
            return lines[0]
        letters = {}
        for s in f.blocks:
            if s.owners:
                key = f.request(s.owners[0])
                if key not in letters:
                    order = self.recorder.first_seen.get(key)
                    letters[key] = "?" if order is None else request_name(order)
        width = max(map(len, letters.values()), default=1)
        cols = self.grid.columns
        for row in range(self.grid.rows):
            cells = [_char(f, b, letters) for b in range(row * cols,
                                                          min((row + 1) * cols, f.num_blocks))]
            lines.append(f"{row * cols:5d} " + "".join(
                c * width if c in ".~" else c.ljust(width) for c in cells))
        if letters:
            lines.append("      " + ", ".join(f"{c}={k}" for k, c in letters.items()
                                              if c != "?"))
        return "\n".join(lines)

    # ---------------------------------------------------------------- drawing
    def _geometry(self) -> tuple[float, int, int]:
        cols = self.grid.columns
        cell_px = float(min(40, max(10, 720 // cols)))  # fits a notebook's output area
        cpu_rows = -(-self.recorder.cpu_blocks_seen // cols)
        total_rows = self.grid.rows + (cpu_rows + 1 if cpu_rows else 0)
        return cell_px, cpu_rows, total_rows

    def _build(self, fig: Any) -> None:
        cols, rows = self.grid.columns, self.grid.rows
        cell_px, cpu_rows, total_rows = self._geometry()
        # square cells; at least wide enough for two legend entries side by side
        plot_w = max((cols + 0.1) * cell_px, _legend_width(2))
        plot_h = (total_rows + 0.1) * cell_px
        blocks = np.arange(self.grid.num_blocks)
        x = self.grid.column(blocks)
        y0 = self.grid.row(blocks).astype(float)
        scale = dict(cmin=0, cmax=NUM_INDICES - 1)
        fig.add_bar(name="cells", x=x, base=y0, y=np.full(len(x), CELL), width=CELL,
                    marker=dict(color=np.zeros(len(x)), colorscale=CELL_SCALE,
                                line=dict(width=0.6, color="#BDBDBD"), **scale),
                    hovertemplate="%{hovertext}<extra></extra>", showlegend=False)
        fig.add_bar(name="tokens", x=x, base=y0 + CELL, y=np.zeros(len(x)), width=CELL,
                    marker=dict(color=np.zeros(len(x)), colorscale=FILL_SCALE,
                                line=dict(width=0), **scale),
                    hoverinfo="skip", showlegend=False)
        fig.add_bar(name="swapped out (CPU)", x=[], base=[], y=[], width=CELL,
                    marker=dict(color=[], colorscale=FILL_SCALE, pattern=dict(
                        shape="/", fgcolor="white", fgopacity=0.6), **scale),
                    hovertemplate="%{hovertext}<extra></extra>", showlegend=False)
        badge_px = max(8, cell_px * 0.5)
        fig.add_scatter(name="shared", x=[], y=[], mode="markers+text", text=[],
                        marker=dict(symbol="circle", size=badge_px * 1.6, color="white",
                                    line=dict(width=1, color="#333")),
                        textfont=dict(size=badge_px * 0.75, color="#111"),
                        textposition="middle center", hoverinfo="skip", showlegend=False)
        fig.add_scatter(name="copy-on-write", x=[], y=[], mode="lines",
                        line=dict(color=COW_COLOR, width=2, dash="dot"),
                        hoverinfo="skip", showlegend=False)
        fig.add_scatter(name=_("copy-on-write blocks"), x=[], y=[], mode="markers",
                        marker=dict(symbol="square-open", size=cell_px * 1.05, color=COW_COLOR,
                                    line=dict(width=3, color=COW_COLOR)),
                        hoverinfo="skip", showlegend=False)
        for name, color, symbol in (
                (_("free"), FREE_COLOR, "square"), (_("cached (free, reusable)"), CACHED_COLOR,
                                                 "square"),
                (_("tokens, by request and seq."), OWNER_COLORS[0], "square"),
                (_("reserved, not yet filled"), tint(OWNER_COLORS[0]), "square"),
                (_("shared (ref count)"), "white", "circle"),
                (_("copy-on-write"), COW_COLOR, "square-open")):
            fig.add_scatter(name=name, x=[None], y=[None], mode="markers",
                            marker=dict(symbol=symbol, size=11, color=color,
                                        line=dict(width=1, color="#555")))
        # drawn like the CPU cells themselves: the owner's color, hatched
        fig.add_bar(name=_("swapped out to CPU"), x=[None], y=[None], width=CELL,
                    marker=dict(color=OWNER_COLORS[0], line=dict(width=1, color="#555"),
                                pattern=dict(shape="/", fgcolor="white", fgopacity=0.6)))
        legend_rows = _legend_rows(_LEGEND_ITEMS, plot_w)
        legend_px = legend_rows * _LEGEND_ROW_PX + 10
        ticks = np.arange(rows)
        tickvals = list(ticks + CELL / 2)
        ticktext = [str(r * cols) for r in ticks]
        if cpu_rows:
            tickvals += [rows + 1 + r + CELL / 2 for r in range(cpu_rows)]
            ticktext += [f"CPU {r * cols}" for r in range(cpu_rows)]
        margin = dict(l=55, r=15, t=title_margin(_TITLE_LINES), b=legend_px + 12)
        self._title_px = plot_w + margin["l"] + margin["r"] - 10
        fig.update_layout(
            barmode="overlay", bargap=0, template="simple_white",
            width=int(plot_w + margin["l"] + margin["r"]),
            height=int(plot_h + margin["t"] + margin["b"]),
            margin=margin, hovermode="closest",
            title=title_layout(),
            # fixed-width entries, and room for all their rows: no legend scrollbar
            legend=dict(orientation="h", yanchor="top", y=-0.01, x=0, font=dict(size=11),
                        entrywidth=_LEGEND_ENTRY_PX, maxheight=legend_px + 20),
            xaxis=dict(range=[-0.55, -0.55 + plot_w / cell_px], showgrid=False,
                       zeroline=False, showticklabels=False, ticks="", showline=False,
                       fixedrange=True),
            yaxis=dict(range=[total_rows, -0.1], showgrid=False, zeroline=False, ticks="",
                       tickvals=tickvals, ticktext=ticktext, showline=False,
                       tickfont=dict(size=9, color="#777"), fixedrange=True),
        )

    def _draw(self, fig: Any, index: int) -> None:
        frame = self.recorder[index]
        d = block_map_data(frame, self.recorder.first_seen, shades_of(self.recorder))
        grid = self.grid
        cells, tokens, cpu, badges, cow_lines, cow = fig.data[:6]
        cells.marker.color = d.color
        cells.hovertext = d.hover
        rows = grid.row(np.arange(grid.num_blocks)).astype(float)
        height = CELL * d.fill
        tokens.marker.color = d.color
        tokens.y = height
        tokens.base = rows + CELL - height
        cpu_rows = grid.cpu_row(d.cpu_blocks).astype(float)
        cpu.x = grid.column(d.cpu_blocks)
        cpu.base = cpu_rows
        cpu.y = np.full(len(d.cpu_blocks), CELL)
        cpu.marker.color = d.cpu_color
        cpu.hovertext = d.cpu_hover
        badges.x = grid.column(d.badge_blocks)
        badges.y = grid.row(d.badge_blocks) + CELL / 2
        badges.text = d.badge_text
        cow.x = grid.column(d.cow_blocks)
        cow.y = grid.row(d.cow_blocks) + CELL / 2
        lx: list[float | None] = []
        ly: list[float | None] = []
        for src, dst in d.cow_pairs:
            lx += [grid.column(src), grid.column(dst), None]
            ly += [grid.row(src) + CELL / 2, grid.row(dst) + CELL / 2, None]
        cow_lines.x, cow_lines.y = lx, ly
        fig.layout.title.text = self._title(frame, index)

    def _title(self, f: Frame, index: int) -> str:
        m = f.memory
        usage = f"{m.tokens / (m.used * f.block_size):.0%}" if m.used else "–"
        note = self._opening_note(index)
        return wrap_title([f"<b>{self._step_label(index)}</b>",
                           _("{n} used").format(n=m.used), _("{n} shared").format(n=m.shared),
                           _("{n} cached").format(n=m.cached), _("{n} free").format(n=m.free),
                           _("{swapped} on CPU").format(swapped=m.swapped) if m.swapped else "",
                           _("slots filled {usage}").format(usage=usage),
                           _("blocks of {tokens}").format(tokens=counted(f.block_size, "token")),
                           f"<i>{note}</i>" if note else ""],
                          getattr(self, "_title_px", 700))


#: lines the title may take: the map is as narrow as its columns (8 columns: 480 px)
_TITLE_LINES = 3
#: the number of legend entries; fixed-width entries make its rows predictable
_LEGEND_ITEMS = 7
_LEGEND_ENTRY_PX = 160  # room for "reserved, not yet filled" at 11 px
_LEGEND_ROW_PX = 21


def _legend_width(columns: int) -> float:
    """Pixels that `columns` legend entries side by side take (plotly: 40 px of
    swatch and gaps, the entry, 5 px between entries)."""
    return columns * (40 + _LEGEND_ENTRY_PX + 5) - 5 + 1


def _legend_rows(items: int, plot_w: float) -> int:
    """How many rows plotly wraps a horizontal legend of `items` into, below a
    plot area `plot_w` pixels wide."""
    per_row = 1
    while per_row < items and _legend_width(per_row + 1) <= plot_w:
        per_row += 1
    return -(-items // per_row)


def _char(f: Frame, block: int, letters: dict) -> str:
    s = f.blocks[block]
    if s.status == FREE:
        return "."
    if s.status == CACHED:
        return "~"  # not "c", which is request C's partly filled block
    if s.ref_count > 1:
        return str(s.ref_count) if s.ref_count < 10 else "+"
    if not s.owners:
        return "?"
    letter = letters[f.request(s.owners[0])]
    return letter if s.num_tokens == f.block_size else letter.lower()
