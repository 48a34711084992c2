"""The timeline view: blocks and queues over the whole recording, with a cursor.

Top: used, cached and free blocks stacked to the pool size (and the CPU
blocks holding swapped-out KV, dashed), each at its step's end, after the
requests that finished in it freed theirs: the most in use at once is the
frames' ``peak_used`` (`TimelineData.peak_used`), which the curve can miss.
Bottom: running, waiting and swapped requests, with a bar for every step
that preempted someone. The cursor is the step the other views show; only
the cursor moves when scrubbing, so a long recording stays cheap to browse.
"""

from __future__ import annotations

from typing import Any

from ..i18n import _, ngettext
from .block_map import as_recorder
from .controls import Player
from .palette import CACHED_COLOR, FREE_COLOR, OWNER_COLORS, SWAP_COLOR
from .timeline import TimelineData, timeline
from .view import View, title_layout, title_margin

PREEMPT_COLOR = "#111111"  # not an owner color: a bar is a scheduler decision, not a request


class Timeline(View):
    """``Timeline(recorder)``: memory and scheduler queues over all recorded steps."""

    def __init__(self, source: Any, *, player: Player | None = None) -> None:
        self.recorder = as_recorder(source)
        self._drawn_frames = 0  # how many frames the series in the widget cover
        super().__init__(player or Player(self.recorder))

    def data(self) -> TimelineData:
        return timeline(self.recorder.frames)

    def summary(self, index: int | None = None) -> str:
        i = self._at(index)
        f = self.recorder[i]
        m, r = f.memory, f.requests
        return (_("{n} frames, at {step_label}: {used} used / {free} free / {cached} cached "
                  "blocks, {running} running / {waiting} waiting / {swapped} swapped, "
                  "{preempted} so far")
                .format(n=len(self.recorder), step_label=self._step_text(i), used=m.used,
                        free=m.free, cached=m.cached, running=r.running, waiting=r.waiting,
                        swapped=r.swapped, preempted=self._preempted(i)))

    def _preempted(self, index: int) -> str:
        """"8 preemptions (4 requests)": a request preempted again counts once more
        as a preemption, once as a request (the requests only where the frames name them)."""
        frames = self.recorder.frames[:index + 1]
        total = sum(f.preemptions for f in frames)
        said = ngettext("{total} preemption", "{total} preemptions", total).format(total=total)
        if total == 0 or any(len(f.preempted) != f.preemptions for f in frames):
            return said
        requests = len({rid for f in frames for rid in f.preempted})
        return (ngettext("{preemptions} ({requests} request)",
                         "{preemptions} ({requests} requests)", requests)
                .format(preemptions=said, requests=requests))

    def _build(self, fig: Any) -> None:
        from plotly.subplots import make_subplots

        make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08,
                      subplot_titles=(_("GPU blocks"), _("requests")), figure=fig)
        for name, color in ((_("used blocks (each step's end)"), OWNER_COLORS[0]),
                            (_("cached blocks"), CACHED_COLOR), (_("free blocks"), FREE_COLOR)):
            fig.add_scatter(name=name, x=[], y=[], mode="lines", stackgroup="mem",
                            line=dict(width=0.5, color=color), fillcolor=color,
                            legendgroup="mem", row=1, col=1)
        fig.add_scatter(name=_("CPU blocks (swapped)"), x=[], y=[], mode="lines",
                        line=dict(color=SWAP_COLOR, dash="dash"), row=1, col=1)
        for name, color in ((_("running"), OWNER_COLORS[2]), (_("waiting"), OWNER_COLORS[1]),
                            (_("swapped"), SWAP_COLOR)):
            fig.add_scatter(name=name, x=[], y=[], mode="lines", line=dict(color=color),
                            row=2, col=1)
        fig.add_bar(name=_("requests preempted"), x=[], y=[], marker=dict(color=PREEMPT_COLOR),
                    row=2, col=1)
        for row in (1, 2):
            fig.add_scatter(name=_("now"), x=[], y=[], mode="lines", showlegend=row == 1,
                            line=dict(color="#111", width=2), hoverinfo="skip",
                            row=row, col=1)
        fig.update_layout(template="simple_white", height=460, bargap=0.2,
                          margin=dict(l=60, r=20, t=title_margin(2, below=28), b=40),
                          hovermode="x unified", title=title_layout(),
                          legend=dict(font=dict(size=11)))
        fig.update_xaxes(title_text=_("step"), row=2, col=1)

    def _draw(self, fig: Any, index: int) -> None:
        series = fig.data
        if fig is not self._figure_widget or self._drawn_frames != len(self.recorder):
            d = self.data()
            x = d.index
            for trace, y in zip(series[:8], (d.used, d.cached, d.free, d.swapped_blocks,
                                             d.running, d.waiting, d.swapped,
                                             d.preemptions), strict=True):
                trace.x, trace.y = x, y
            self._peaks = (d.num_blocks, max(max(d.running), max(d.waiting), max(d.swapped),
                                             max(d.preemptions), 1))
            if fig is self._figure_widget:
                self._drawn_frames = len(self.recorder)
        top, bottom = self._peaks
        series[8].x, series[8].y = (index, index), (0, top)
        series[9].x, series[9].y = (index, index), (0, bottom)
        fig.layout.title.text = self._title(index)

    def _title(self, index: int) -> str:
        """Two short lines (a notebook's output area is ~850 px): memory, then requests."""
        f = self.recorder[index]
        m, r = f.memory, f.requests
        total = sum(x.preemptions for x in self.recorder.frames[:index + 1])
        cpu = _(" · {swapped} on CPU").format(swapped=m.swapped) if m.swapped else ""
        return (_("<b>{step_label}</b> · blocks: {used} used · {cached} cached · {free} "
                  "free{cpu}<br>requests: {running} running · {waiting} waiting · {swapped} "
                  "swapped · {total} preempted so far")
                  .format(step_label=self._step_label(index), used=m.used, cached=m.cached,
                          free=m.free, cpu=cpu, running=r.running, waiting=r.waiting,
                          swapped=r.swapped, total=total))
