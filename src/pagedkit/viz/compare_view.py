"""Contiguous vs paged: the same trace, the same memory, two ways to hand it out.

Both rows are one address space of token slots, slot 0 at the left. The
contiguous row shows each request's region: its tokens, the slots reserved
for tokens still to come, the slots it will never use (internal
fragmentation) and the free holes between regions, whose slots are *stranded*
(external fragmentation) when the next request's region fits in none of them.
One word per thing, in the title, legend, hover and text alike. The paged row
shows blocks: tokens, and the unfilled tail of each last block — paging's only
waste (paper §2.3, §4).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._validation import plural
from .controls import Player
from .frames import Frame
from .palette import CELL_SCALE, FILL_SCALE, NUM_INDICES, OWNER_COLORS, owner_color_index, tint
from .replay import Comparison, ContiguousFrame, paged_waste
from .view import View, title_layout, title_margin

_CONTIGUOUS, _PAGED = 1.0, 0.0  # row positions
_HEIGHT = 0.6


class ContiguousVsPaged(View):
    """``ContiguousVsPaged(replay(trace, num_blocks=..., block_size=...))``."""

    def __init__(self, comparison: Comparison, *, player: Player | None = None) -> None:
        self.comparison = comparison
        super().__init__(player or Player(comparison.paged))

    def figures(self, index: int | None = None) -> dict[str, float]:
        """The waste figures at `index`, in token slots (and shares of the capacity)."""
        i = self._at(index)
        c, p = self.comparison.contiguous[i], paged_waste(self.comparison.paged[i])
        cap = self.comparison.capacity
        s = c.stats
        return {
            "contiguous_tokens": s.token_states,
            "contiguous_reserved_ahead": s.reservation,
            "contiguous_never_used": s.internal_fragmentation,
            "contiguous_stranded": c.external_fragmentation,
            "contiguous_wasted_share": c.wasted / cap,
            "paged_tokens": p.tokens,
            "paged_unfilled": p.unfilled,
            "paged_wasted_share": p.wasted / cap,
        }

    def summary(self, index: int | None = None) -> str:
        i = self._at(index)
        w = self.figures(i)
        c, p = self.comparison.contiguous[i], self.comparison.paged[i]
        return (f"{self.comparison.policy} vs paged, {self._step_label(i)}: contiguous wastes "
                f"{w['contiguous_wasted_share']:.0%} of {plural(self.comparison.capacity, 'slot')} "
                f"({c.waiting} waiting), paged {w['paged_wasted_share']:.0%} "
                f"({p.requests.waiting} waiting)")

    def text(self, index: int | None = None) -> str:
        i = self._at(index)
        w = self.figures(i)
        return "\n".join([
            f"{type(self).__name__}({self.summary(i)})",
            f"  contiguous: {plural(w['contiguous_tokens'], 'token')}, "
            f"{w['contiguous_reserved_ahead']} reserved ahead, "
            f"{w['contiguous_never_used']} never used, "
            f"{w['contiguous_stranded']} stranded in holes",
            f"  paged:      {plural(w['paged_tokens'], 'token')}, "
            f"{w['paged_unfilled']} unfilled in last blocks",
        ])

    # ---------------------------------------------------------------- drawing
    def _build(self, fig: Any) -> None:
        cap = self.comparison.capacity
        scale = dict(cmin=0, cmax=NUM_INDICES - 1)
        for name, colors, pattern in (
                ("tokens", FILL_SCALE, ""), ("reserved for later tokens", CELL_SCALE, ""),
                ("never used (internal fragmentation)", CELL_SCALE, "x"),
                ("tokens (paged)", FILL_SCALE, ""), ("unfilled tail of a block", CELL_SCALE, "")):
            fig.add_bar(name=name, orientation="h", x=[], y=[], base=[], width=_HEIGHT,
                        marker=dict(color=[], colorscale=colors, line=dict(width=0.5,
                                                                          color="white"),
                                    pattern=dict(shape=pattern, fgcolor="#666"), **scale),
                        hovertemplate="%{hovertext}<extra></extra>", showlegend=False)
        fig.add_bar(name="free hole", orientation="h", x=[], y=[], base=[], width=_HEIGHT,
                    marker=dict(color="white", line=dict(width=1, color="#BBB")),
                    hovertemplate="%{hovertext}<extra></extra>", showlegend=False)
        for name, color, symbol in (
                ("tokens, colored by request", OWNER_COLORS[0], "square"),
                ("reserved, not (yet) filled", tint(OWNER_COLORS[0]), "square"),
                ("never used (internal fragmentation)", "#999", "square-x-open"),
                ("free hole: stranded if the next request fits in none "
                 "(external fragmentation)", "white", "square")):
            fig.add_scatter(name=name, x=[None], y=[None], mode="markers",
                            marker=dict(symbol=symbol, size=11, color=color,
                                        line=dict(width=1, color="#555")))
        fig.update_layout(
            # 840 px: fits a notebook's output area (~850 px) without a scrollbar
            barmode="overlay", template="simple_white", width=840, height=370,
            margin=dict(l=95, r=15, t=title_margin(2), b=90), title=title_layout(size=12),
            legend=dict(orientation="h", y=-0.3, x=0, font=dict(size=11)),
            xaxis=dict(range=[0, cap], title_text="KV slots (token positions)",
                       showgrid=False, fixedrange=True),
            yaxis=dict(range=[-0.5, 1.5], tickvals=[_PAGED, _CONTIGUOUS],
                       ticktext=["paged", f"contiguous<br>({self.comparison.policy})"],
                       showgrid=False, fixedrange=True),
        )

    def _draw(self, fig: Any, index: int) -> None:
        c = self.comparison.contiguous[index]
        p = self.comparison.paged[index]
        first_seen = self.comparison.recorder.first_seen
        color = np.array([owner_color_index(r.request, first_seen) for r in c.regions])
        regions = c.regions
        spans = {
            "tokens": [(r.start, r.start + r.used) for r in regions],
            "reserved ahead": [(r.start + r.used, r.start + r.need) for r in regions],
            "never used": [(r.start + r.need, r.start + r.size) for r in regions],
        }
        for trace, (what, span) in zip(fig.data[:3], spans.items(), strict=True):
            starts = np.array([lo for lo, _ in span])
            trace.base = starts
            trace.x = np.array([hi for _, hi in span]) - starts if span else starts
            trace.y = np.full(len(regions), _CONTIGUOUS)
            trace.marker.color = color
            trace.hovertext = [f"request {r.request}: {what} {plural(hi - lo, 'slot')} "
                               f"(region {r.start}..{r.start + r.size})"
                               for r, (lo, hi) in zip(regions, span, strict=True)]
        bs = p.block_size
        used = [b for b, s in enumerate(p.blocks) if s.status == "used"]
        fills = np.array([p.blocks[b].num_tokens for b in used])
        pcolor = np.array([owner_color_index(p.request(p.blocks[b].owners[0]), first_seen)
                           if p.blocks[b].owners else 0 for b in used])
        starts = np.array(used) * bs
        tok, tail = fig.data[3], fig.data[4]
        tok.base, tok.x, tok.y = starts, fills, np.full(len(used), _PAGED)
        tail.base, tail.x, tail.y = starts + fills, bs - fills, np.full(len(used), _PAGED)
        tok.marker.color = tail.marker.color = pcolor
        tok.hovertext = tail.hovertext = [
            f"block {b} (request {_requests(p, p.blocks[b].owners)}): "
            f"{p.blocks[b].num_tokens}/{plural(bs, 'token')}" for b in used]
        holes = fig.data[5]
        holes.base = np.array([s for s, _ in c.holes])
        holes.x = np.array([n for _, n in c.holes])
        holes.y = np.full(len(c.holes), _CONTIGUOUS)
        holes.hovertext = [f"free hole of {plural(n, 'slot')} at {s}" + self._hole_note(c, n)
                           for s, n in c.holes]
        fig.layout.title.text = self._title(index)

    @staticmethod
    def _hole_note(c: ContiguousFrame, size: int) -> str:
        """Whether the waiting head's region fits in a free hole of `size` slots."""
        if c.next_size is None:
            return ""
        if size < c.next_size:
            return f" (too small for the next request's {c.next_size}-slot region)" + (
                ": stranded" if c.external_fragmentation else "")
        return f" (the next request's {c.next_size}-slot region fits)"

    def _title(self, index: int) -> str:
        w = self.figures(index)
        c, p = self.comparison.contiguous[index], self.comparison.paged[index]
        return (f"<b>{self._step_label(index)}</b> · contiguous: {w['contiguous_tokens']} "
                f"tokens, {w['contiguous_reserved_ahead']} reserved ahead, "
                f"{w['contiguous_never_used']} never used, {w['contiguous_stranded']} stranded in "
                f"holes → <b>{w['contiguous_wasted_share']:.0%} wasted</b>, {c.running} running, "
                f"{c.waiting} waiting<br>paged: {plural(w['paged_tokens'], 'token')}, "
                f"{w['paged_unfilled']} unfilled in last blocks → "
                f"<b>{w['paged_wasted_share']:.0%} wasted</b>, {p.requests.running} running, "
                f"{p.requests.waiting} waiting")


def _requests(frame: Frame, owners: tuple) -> str:
    """The requests a paged block's owners serve (sequences of one request once)."""
    return ", ".join(map(str, dict.fromkeys(map(frame.request, owners)))) or "unknown"
