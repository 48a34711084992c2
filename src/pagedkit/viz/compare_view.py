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

from ..i18n import _, counted, join_names
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
        if not isinstance(comparison, Comparison):  # newcomer 42: the trace itself
            raise TypeError(f"ContiguousVsPaged takes a replay's Comparison, got "
                            f"{type(comparison).__name__}: pass replay(trace, num_blocks=..., "
                            "block_size=...)")
        self.comparison = comparison
        self.recorder = comparison.recorder  # the paged side's: where the view opens
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
        return (_("{policy} vs paged, {step_label}: contiguous wastes {w:.0%} of {slots} "
                  "({waiting} waiting), paged {w2:.0%} ({waiting2} waiting)")
                  .format(policy=self.comparison.policy, step_label=self._step_text(i),
                          w=w['contiguous_wasted_share'],
                          slots=counted(self.comparison.capacity, 'slot'), waiting=c.waiting,
                          w2=w['paged_wasted_share'], waiting2=p.requests.waiting))

    def text(self, index: int | None = None) -> str:
        i = self._at(index)
        w = self.figures(i)
        return "\n".join([
            f"{type(self).__name__}({self.summary(i)})",
            (_("  contiguous: {tokens}, {w} reserved ahead, {w2} never used, {w3} stranded in "
              "holes")
              .format(tokens=counted(w['contiguous_tokens'], 'token'),
                      w=w['contiguous_reserved_ahead'], w2=w['contiguous_never_used'],
                      w3=w['contiguous_stranded'])),
            (_("  paged:      {tokens}, {w} unfilled in last blocks")
              .format(tokens=counted(w['paged_tokens'], 'token'), w=w['paged_unfilled'])),
        ])

    # ---------------------------------------------------------------- drawing
    def _build(self, fig: Any) -> None:
        cap = self.comparison.capacity
        scale = dict(cmin=0, cmax=NUM_INDICES - 1)
        for name, colors, pattern in (
                (_("tokens"), FILL_SCALE, ""), (_("reserved for later tokens"), CELL_SCALE, ""),
                (_("never used (internal fragmentation)"), CELL_SCALE, "x"),
                (_("tokens (paged)"), FILL_SCALE, ""),
                (_("unfilled tail of a block"), CELL_SCALE, "")):
            fig.add_bar(name=name, orientation="h", x=[], y=[], base=[], width=_HEIGHT,
                        marker=dict(color=[], colorscale=colors, line=dict(width=0.5,
                                                                          color="white"),
                                    pattern=dict(shape=pattern, fgcolor="#666"), **scale),
                        hovertemplate="%{hovertext}<extra></extra>", showlegend=False)
        fig.add_bar(name=_("free hole"), orientation="h", x=[], y=[], base=[], width=_HEIGHT,
                    marker=dict(color="white", line=dict(width=1, color="#BBB")),
                    hovertemplate="%{hovertext}<extra></extra>", showlegend=False)
        for name, color, symbol in (
                (_("tokens, colored by request"), OWNER_COLORS[0], "square"),
                (_("reserved, not (yet) filled"), tint(OWNER_COLORS[0]), "square"),
                (_("never used (internal fragmentation)"), "#999", "square-x-open"),
                (_("free hole: stranded if the next request fits in none "
                 "(external fragmentation)"), "white", "square")):
            fig.add_scatter(name=name, x=[None], y=[None], mode="markers",
                            marker=dict(symbol=symbol, size=11, color=color,
                                        line=dict(width=1, color="#555")))
        fig.update_layout(
            # 840 px: fits a notebook's output area (~850 px) without a scrollbar
            barmode="overlay", template="simple_white", width=840, height=370,
            margin=dict(l=95, r=15, t=title_margin(2), b=90), title=title_layout(size=12),
            legend=dict(orientation="h", y=-0.3, x=0, font=dict(size=11)),
            xaxis=dict(range=[0, cap], title_text=_("KV slots (token positions)"),
                       showgrid=False, fixedrange=True),
            yaxis=dict(range=[-0.5, 1.5], tickvals=[_PAGED, _CONTIGUOUS],
                       ticktext=[_("paged"), _("contiguous<br>({policy})").format(
                           policy=self.comparison.policy)],
                       showgrid=False, fixedrange=True),
        )

    def _draw(self, fig: Any, index: int) -> None:
        c = self.comparison.contiguous[index]
        p = self.comparison.paged[index]
        first_seen = self.comparison.recorder.first_seen
        color = np.array([owner_color_index(r.request, first_seen) for r in c.regions])
        regions = c.regions
        spans = {
            _("tokens"): [(r.start, r.start + r.used) for r in regions],
            _("reserved ahead"): [(r.start + r.used, r.start + r.need) for r in regions],
            _("never used"): [(r.start + r.need, r.start + r.size) for r in regions],
        }
        for trace, (what, span) in zip(fig.data[:3], spans.items(), strict=True):
            starts = np.array([lo for lo, _hi in span])
            trace.base = starts
            trace.x = np.array([hi for _lo, hi in span]) - starts if span else starts
            trace.y = np.full(len(regions), _CONTIGUOUS)
            trace.marker.color = color
            trace.hovertext = [(_("request {request}: {what} {slots} (region {start}..{value})")
                                 .format(request=r.request, what=what,
                                         slots=counted(hi - lo, 'slot'), start=r.start,
                                         value=r.start + r.size))
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
            (_("block {b} (request {requests}): {num_tokens}/{tokens}")
              .format(b=b, requests=_requests(p, p.blocks[b].owners),
                      num_tokens=p.blocks[b].num_tokens, tokens=counted(bs, 'token')))
            for b in used]
        holes = fig.data[5]
        holes.base = np.array([s for s, _n in c.holes])
        holes.x = np.array([n for _s, n in c.holes])
        holes.y = np.full(len(c.holes), _CONTIGUOUS)
        holes.hovertext = [_("free hole of {slots} at {s}").format(slots=counted(n, "slot"), s=s)
                           + self._hole_note(c, n) for s, n in c.holes]
        fig.layout.title.text = self._title(index)

    @staticmethod
    def _hole_note(c: ContiguousFrame, size: int) -> str:
        """Whether the waiting head's region fits in a free hole of `size` slots."""
        if c.next_size is None:
            return ""
        if size < c.next_size:
            return (_(" (too small for the next request's {next_size}-slot region)")
                     .format(next_size=c.next_size)) + (
                _(": stranded") if c.external_fragmentation else "")
        return _(" (the next request's {next_size}-slot region fits)").format(next_size=c.next_size)

    def _title(self, index: int) -> str:
        w = self.figures(index)
        c, p = self.comparison.contiguous[index], self.comparison.paged[index]
        return (_("<b>{step_label}</b> · contiguous: {w} tokens, {w2} reserved ahead, {w3} "
                  "never used, {w4} stranded in holes → <b>{w5:.0%} wasted</b>, {running} "
                  "running, {waiting} waiting<br>paged: {tokens}, {w6} unfilled in last blocks "
                  "→ <b>{w7:.0%} wasted</b>, {running2} running, {waiting2} waiting")
                  .format(step_label=self._step_text(index), w=w['contiguous_tokens'],
                          w2=w['contiguous_reserved_ahead'], w3=w['contiguous_never_used'],
                          w4=w['contiguous_stranded'], w5=w['contiguous_wasted_share'],
                          running=c.running, waiting=c.waiting,
                          tokens=counted(w['paged_tokens'], 'token'), w6=w['paged_unfilled'],
                          w7=w['paged_wasted_share'], running2=p.requests.running,
                          waiting2=p.requests.waiting))


def _requests(frame: Frame, owners: tuple) -> str:
    """The requests a paged block's owners serve (sequences of one request once)."""
    return join_names(dict.fromkeys(map(frame.request, owners))) or _("unknown")
