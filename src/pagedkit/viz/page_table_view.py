"""The page-table view: one sequence's logical blocks, linked to where they really are.

Top row: the sequence's logical blocks 0, 1, 2, ... as the sequence sees
them, each filled with its tokens. Bottom strip: the whole physical pool,
block 0 at the left. A line runs from each logical block to its physical
block, so a learner sees a contiguous sequence scattered over the pool
(paper Figure 6) — and, after a copy-on-write, one line jump to a new block.
Blocks a sliding window gave back stay in the top row, pale and unlinked,
so logical block *i* is always the *i*-th cell.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import numpy as np

from ..i18n import _, counted
from .block_map import as_recorder
from .controls import Player
from .frames import Frame
from .page_table import PageTableData, page_table
from .palette import (
    CELL_SCALE,
    FILL_SCALE,
    FREE_INDEX,
    NUM_INDICES,
    color_index,
    owner_color_index,
    shades_of,
)
from .view import View, title_layout, title_margin

_MAX_ROWS = 64  # logical blocks drawn; longer sequences are cut with a note
_OLDEST = "(oldest)"  # the dropdown's value for seq=None (ipywidgets reads None as "no choice");
#                       its label is translated, the value never is


class PageTable(View):
    """``PageTable(recorder, seq="A")``; with no `seq`, the oldest sequence holding blocks."""

    def __init__(self, source: Any, seq: Hashable | None = None, *,
                 player: Player | None = None) -> None:
        self.recorder = as_recorder(source)
        self._seq = seq
        self._chooser: Any = None
        self._refilling = False
        super().__init__(player or Player(self.recorder))

    @property
    def seq(self) -> Hashable | None:
        """The sequence shown; setting it redraws. ``None`` means the oldest one."""
        return self._seq

    @seq.setter
    def seq(self, value: Hashable | None) -> None:
        self._seq = value
        self.redraw()

    def shown_seq(self, index: int | None = None) -> Hashable | None:
        frame = self.recorder[self._at(index)]
        if self._seq is not None:
            return self._seq
        return frame.sequences[0] if frame.sequences else None

    def data(self, index: int | None = None) -> PageTableData | None:
        """The page table shown at `index`, or None when the sequence holds no blocks."""
        frame = self.recorder[self._at(index)]
        seq = self.shown_seq(index)
        if seq is None or seq not in frame.sequences:
            return None
        return page_table(frame, seq)

    def summary(self, index: int | None = None) -> str:
        i = self._at(index)
        return _("{step_label}, {what}").format(step_label=self._step_text(i),
                                                what=self.describe(i))

    def describe(self, index: int | None = None) -> str:
        """The shown sequence's page table in words (`PageTableData.described`),
        without the step."""
        data = self.data(index)
        if data is not None:
            return data.described()
        seq = self.shown_seq(index)
        if seq is None:
            return _("no sequence holds blocks")
        frames = self.recorder.frames
        if any(seq in f.sequences for f in frames):
            return _("sequence {seq!r} holds no blocks").format(seq=seq)
        seen = list(dict.fromkeys(s for f in frames for s in f.sequences))
        return (_("sequence {seq!r} holds blocks at no recorded step; the sequences that do: "
                  "{seen}").format(seq=seq, seen=(", ".join(map(repr, seen[:10]))
                                                  + (", ..." if len(seen) > 10 else ""))
                                                 or _("none")))

    # ---------------------------------------------------------------- widgets
    def _extra_controls(self) -> list[Any]:
        import ipywidgets as w

        self._chooser = w.Dropdown(description=_("sequence"), options=self._options(self.index),
                                   value=_OLDEST if self._seq is None else self._seq,
                                   layout=w.Layout(width="260px"))
        self._chooser.observe(self._chose, names="value")
        return [self._chooser]

    def _chose(self, change: dict) -> None:
        if not self._refilling:
            self.seq = None if change["new"] == _OLDEST else change["new"]

    def _options(self, index: int) -> list[tuple[str, Hashable | None]]:
        frame = self.recorder[index]
        options = [(_("oldest"), _OLDEST)] + [(str(s), s) for s in frame.sequences[:200]]
        if self._seq is not None and self._seq not in frame.sequences:
            options.append((_("{seq} (no blocks now)").format(seq=self._seq), self._seq))
        return options

    # ---------------------------------------------------------------- drawing
    def _build(self, fig: Any) -> None:
        n = self.recorder.num_blocks
        scale = dict(cmin=0, cmax=NUM_INDICES - 1)
        fig.add_heatmap(name="pool", z=[np.zeros(n)], x=np.arange(n), y=[0.0],
                        colorscale=FILL_SCALE, zmin=0, zmax=NUM_INDICES - 1, showscale=False,
                        xgap=1 if n <= 256 else 0,
                        hovertemplate=_("physical block %{x}<extra></extra>"))
        fig.add_scatter(name="links", x=[], y=[], mode="lines", hoverinfo="skip",
                        line=dict(width=1.5, color="#444"))
        fig.add_bar(name="logical cells", x=[], y=[], base=[], width=[],
                    marker=dict(color=[], colorscale=CELL_SCALE, line=dict(width=0.8,
                                                                          color="#999"),
                                **scale), hovertemplate="%{hovertext}<extra></extra>")
        fig.add_bar(name="logical tokens", x=[], y=[], base=[], width=[],
                    marker=dict(color=[], colorscale=FILL_SCALE, line=dict(width=0), **scale),
                    hoverinfo="skip")
        fig.add_scatter(name="labels", x=[], y=[], mode="text", text=[], hoverinfo="skip",
                        textfont=dict(size=10, color="#222"))
        fig.add_scatter(name="physical", x=[], y=[], mode="markers+text", text=[],
                        textposition="bottom center", hoverinfo="skip",
                        marker=dict(symbol="triangle-up", size=9, color="#222"),
                        textfont=dict(size=10))
        fig.update_layout(
            barmode="overlay", template="simple_white", showlegend=False,
            height=350, margin=dict(l=90, r=20, t=title_margin(2), b=40),
            title=title_layout(),
            xaxis=dict(range=[-0.5, n - 0.5], showgrid=False, zeroline=False, ticks="",
                       showticklabels=False, showline=False, fixedrange=True),
            yaxis=dict(range=[-0.9, 2.35], showgrid=False, zeroline=False, ticks="",
                       tickvals=[0, 1.85],
                       ticktext=[_("physical<br>blocks"), _("logical<br>blocks")],
                       showline=False, fixedrange=True),
        )

    def _draw(self, fig: Any, index: int) -> None:
        frame = self.recorder[index]
        first_seen = self.recorder.first_seen
        n = frame.num_blocks
        pool, links, cells, tokens, labels, physical = fig.data[:6]
        shades = shades_of(self.recorder)
        pool.z = [np.array([color_index(frame, b, first_seen, shades) for b in frame.blocks])]
        data = self.data(index)
        rows = data.rows[:_MAX_ROWS] if data else ()
        k = max(len(rows), 1)
        slot = n / k  # each logical block gets an equal share of the width
        centers = (np.arange(len(rows)) + 0.5) * slot - 0.5
        width = np.full(len(rows), slot * 0.9)
        fill = np.array([r.num_tokens / frame.block_size for r in rows])
        owner = owner_color_index(frame.request(data.seq), first_seen,
                                  shades.get(data.seq, 0)) if data else 0
        color = np.array([FREE_INDEX if r.released else owner for r in rows], dtype=int)
        cells.x, cells.base, cells.y, cells.width = centers, np.full(len(rows), 1.5), \
            np.full(len(rows), 0.7), width
        cells.marker.color = color
        cells.hovertext = [(_("logical block {logical}: released (the sliding window has passed "
                             "it; its physical block went back to the pool)")
                             .format(logical=r.logical))
                           if r.released else
                           (_("logical block {logical} → physical block {physical}: "
                             "{num_tokens}/{block_size} tokens")
                             .format(logical=r.logical, physical=r.physical,
                                     num_tokens=r.num_tokens, block_size=frame.block_size))
                           + (_(", shared ×{ref_count}").format(ref_count=r.ref_count)
                              if r.ref_count > 1 else "")
                           for r in rows]
        tokens.x, tokens.base, tokens.y, tokens.width = centers, np.full(len(rows), 1.5), \
            0.7 * fill, width
        tokens.marker.color = color
        labels.x, labels.y = centers, np.full(len(rows), 1.85)
        labels.text = [f"L{r.logical}" + (f" ×{r.ref_count}" if r.ref_count > 1 else "")
                       for r in rows]
        on_gpu = data is not None and data.where == "gpu"
        linked = [(c, r.physical) for c, r in zip(centers, rows, strict=True)
                  if on_gpu and not r.released]
        phys = np.array([p for _c, p in linked])
        lx: list[float | None] = []
        ly: list[float | None] = []
        for c, p in linked:
            lx += [c, float(p), None]
            ly += [1.5, 0.5, None]
        links.x, links.y = lx, ly
        physical.x, physical.y = phys, np.full(len(phys), -0.55)
        physical.text = [str(p) for p in phys] if len(phys) <= 24 else []
        fig.layout.title.text = self._title(frame, index, data)
        if self._chooser is not None and fig is self._figure_widget:
            options = self._options(index)
            if list(self._chooser.options) != options:
                self._refilling = True
                try:
                    self._chooser.options = options
                    self._chooser.value = _OLDEST if self._seq is None else self._seq
                finally:
                    self._refilling = False

    def _title(self, frame: Frame, index: int, data: PageTableData | None) -> str:
        if data is None:
            return f"<b>{self._step_label(index)}</b> · {self.describe(index)}"
        chain = data.chain()
        if len(chain) > 80:
            chain = chain[:77] + "..."
        live = len(data.rows) - data.num_released
        filled = live * data.block_size
        note = _(" · swapped out: on the CPU") if data.where == "cpu" else ""
        if data.num_released:
            note += (_(" · logical blocks 0-{last} released (sliding window)")
                      .format(last=data.num_released - 1))
        more = (_(" · first {n} of {blocks} drawn")
                 .format(n=_MAX_ROWS, blocks=counted(len(data.rows), 'block'))) \
            if len(data.rows) > _MAX_ROWS else ""
        request = (_(" (request {request})").format(request=data.request)
                   if data.request != data.seq else "")
        return (_("<b>{step_label}</b> · sequence {seq}{request}: {tokens} in {blocks}, "
                  "{slots} unfilled{note}{more}<br>page table {chain}")
                  .format(step_label=self._step_label(index), seq=data.seq, request=request,
                          tokens=counted(data.num_tokens, 'token'), blocks=counted(live, 'block'),
                          slots=counted(filled - data.num_tokens, 'slot'), note=note, more=more,
                          chain=chain))

