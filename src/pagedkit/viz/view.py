"""What every view shares: a player, a text form, a static figure and a widget.

A view is a thin drawing of frames. Subclasses say how to build an empty
figure (`_build`) and how to draw one frame into it (`_draw`); the same
`_draw` fills a static ``go.Figure`` and updates a live ``FigureWidget``, so
the two can never disagree. The widget is built only when a view is
displayed in a widget frontend; everywhere else the view shows a static
figure or its text (see `frontend`).

Text matters too: nbval compares notebook outputs as text, so a view's repr
is a stable one-line summary — never a memory address or a random uid.
"""

from __future__ import annotations

import copy
import itertools
import json
import time
from typing import Any

from ..i18n import _, text_width
from .controls import Played, Player, open_on_busiest  # noqa: F401 (the dashboard's)
from .frontend import display_mode, enable_colab_widgets


class View(Played):
    """Base class of the views; see the module docstring."""

    #: seconds the last widget update took (kernel side), for the curious and the benchmark
    last_update_s: float = 0.0

    def __init__(self, player: Player) -> None:
        self.player = player
        self._widget: Any = None
        self._figure_widget: Any = None
        self._unsubscribe = player.subscribe(self._index_moved)

    # ------------------------------------------------------------ to override
    def _build(self, fig: Any) -> None:
        """Add every trace this view will fill, empty, and the layout, to `fig`."""
        raise NotImplementedError

    def _draw(self, fig: Any, index: int) -> None:
        """Fill `fig` (a Figure or a FigureWidget) with frame `index`."""
        raise NotImplementedError

    def summary(self, index: int | None = None) -> str:
        """One line: what this view shows at `index` (default: the current step)."""
        raise NotImplementedError

    def text(self, index: int | None = None) -> str:
        """A longer text form, shown where nothing can draw (a terminal, a script)."""
        return self.summary(index)

    def _extra_controls(self) -> list[Any]:
        return []

    # ------------------------------------------------------------------ model
    def _at(self, index: int | None) -> int:
        if index is None:
            return self.index  # after the opening rule (`Played.index`)
        return self.player.resolve(index)

    def _step_label(self, index: int) -> str:
        return _("step {index}/{last}").format(index=index, last=self.player.last)

    def _step_text(self, index: int) -> str:
        """`_step_label` for the text forms: on the step a view opened on, it says why
        (the figure's title says it at length)."""
        if not self._opening_note(index):
            return self._step_label(index)
        return (_("step {index}/{last} (the busiest; the view opened here)")
                .format(index=index, last=self.player.last))

    def _opening_note(self, index: int) -> str:
        """Why the view opened on `index`, while it still shows it (else "")."""
        return self.player.opening_note if index == self.player.opened_at else ""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.summary()})"

    def __str__(self) -> str:
        return self.text()

    # ---------------------------------------------------------------- drawing
    def figure(self, index: int | None = None) -> Any:
        """A static plotly figure of step `index`: for export, or where widgets cannot show."""
        import plotly.graph_objects as go

        fig = go.Figure()
        self._build(fig)
        self._draw(fig, self._at(index))
        return fig

    @property
    def widget(self) -> Any:
        """The interactive widget: the figure and the controls (built on first use)."""
        if self._widget is None:
            import ipywidgets as w

            from .figure_widget import figure_widget

            # Build the whole figure, then wrap it: the constructor sends the
            # complete traces and layout to the browser in one piece.
            fig = figure_widget(self.figure(self.index))
            self._figure_widget = fig
            self._widget = w.VBox([scroll_box(fig), *self._extra_controls(),
                                   self.player.widget])
        return self._widget

    def _index_moved(self, index: int) -> None:
        if self._figure_widget is None:
            return
        start = time.perf_counter()
        _update(self._figure_widget, lambda: self._draw(self._figure_widget, index))
        self.last_update_s = time.perf_counter() - start

    def redraw(self) -> None:
        """Draw the current step again (after changing what the view selects)."""
        self._index_moved(self.player.index)

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        self._open()
        mode = display_mode()
        if mode == "widget":
            enable_colab_widgets()
            bundle = dict(self.widget._repr_mimebundle_(include=include, exclude=exclude))
        elif mode == "static":
            bundle = static_bundle(self.figure())
        else:
            return {"text/plain": self.text()}
        bundle["text/plain"] = repr(self)
        return bundle


#: The class of the box around each figure (the browser tests find the boxes by it).
SCROLL_CLASS = "pagedkit-scroll"


def scroll_box(figure: Any) -> Any:
    """`figure` in a box of its own that scrolls sideways where the output area is
    narrower than the figure, with the scrollbar right under it.

    A figure keeps its size: the block map's cells are square and fixed (16 columns:
    714 px), the comparison is 840 px. JupyterLab at 1024 px with its file browser open
    gives an output area of 592 px (issue #26): there the right of a figure was cut
    off, and the only scrollbar was at the foot of the whole dashboard, out of sight."""
    import ipywidgets as w

    box = w.VBox([figure], layout=w.Layout(overflow="auto hidden"))  # x: scroll; y: grow
    box.add_class(SCROLL_CLASS)
    return box


#: Titles sit below plotly's toolbar (the mode bar, ~30 px at the top right, shown on
#: hover) and are broken into lines by the views, never cut at the right edge.
MODEBAR_PX = 30
TITLE_LINE_PX = 18


def title_layout(size: int = 13) -> dict[str, Any]:
    """A layout's ``title``, left-aligned, starting below the toolbar (its text, wrapped
    by `wrap_title`, comes with each frame; `title_margin` leaves room for its lines)."""
    return dict(text="", font=dict(size=size), x=0, xanchor="left", xref="paper",
                y=1, yanchor="top", yref="container", pad=dict(t=MODEBAR_PX))


def wrap_title(parts: list[str], width_px: float, size: int = 13,
               sep: str = " · ") -> str:
    """`parts` joined by `sep` into lines that fit `width_px` (plotly never wraps a title:
    a long one is cut at the figure's edge). A part is never split."""
    import re

    fits = max(int(width_px / (0.6 * size)), 20)  # characters per line at this size

    def visible(text: str) -> int:  # a wide (Chinese) character takes two narrow ones' room
        return text_width(re.sub(r"<[^>]+>", "", text))

    lines: list[str] = []
    for part in filter(None, parts):
        if lines and visible(lines[-1] + sep + part) <= fits:
            lines[-1] += sep + part
        else:
            lines.append(part)
    return "<br>".join(lines)


def title_margin(lines: int, below: int = 12) -> int:
    """The top margin that holds the toolbar band and a title of `lines` lines."""
    return MODEBAR_PX + lines * TITLE_LINE_PX + below


_figure_ids = itertools.count()


def static_bundle(fig: Any) -> dict[str, Any]:
    """A plotly figure as display data: JSON for JupyterLab's plotly renderer, and
    HTML (plotly.js from its CDN) for exported pages. Ids count up, so a fresh
    kernel writes the same page every time."""
    import plotly.io as pio

    from .figure_widget import resolve_figure

    # the bars' color indices resolved to colors: plotly.js warns on numeric bar colors
    fig = resolve_figure(json.loads(pio.to_json(fig, validate=False, remove_uids=True)))
    return {
        "application/vnd.plotly.v1+json": fig,
        "text/html": pio.to_html(fig, include_plotlyjs="cdn", full_html=False, validate=False,
                                 div_id=f"pagedkit-figure-{next(_figure_ids)}"),
    }


def _update(fig: Any, draw: Any) -> None:
    """Run `draw` on a FigureWidget and send its edits to the browser.

    One plain ``batch_update`` over traces that changed *different* properties
    sends the placeholder "_undefined_" for the gaps (plotly 7.1); the
    browser stores it literally, drops x / y / base / colors, and syncs the
    loss back to the kernel. So the edits are sent grouped by the set of
    properties they change, and the widget's own copy is refreshed so that a
    reloaded page shows this step too. Where plotly's batch internals differ
    (another version), a plain batch update is the fallback.
    """
    if not all(hasattr(fig, a) for a in ("_batch_trace_edits", "_batch_layout_edits",
                                         "_widget_data", "_widget_layout")):
        with fig.batch_update():
            draw()
        return
    with fig.batch_update():
        draw()
        edits = {t: dict(props) for t, props in fig._batch_trace_edits.items()}
        layout = dict(fig._batch_layout_edits)
        fig._batch_trace_edits.clear()
        fig._batch_layout_edits.clear()
    groups: dict[frozenset, list[int]] = {}
    for trace, props in sorted(edits.items()):
        groups.setdefault(frozenset(props), []).append(trace)
    for keys, traces in groups.items():
        fig.plotly_update(restyle_data={k: [edits[t][k] for t in traces] for k in keys},
                          relayout_data=layout, trace_indexes=traces)
        layout = {}
    if layout:
        fig.plotly_update(relayout_data=layout)
    fig._widget_data = copy.deepcopy(fig._data)
    fig._widget_layout = copy.deepcopy(fig._layout_obj._props)
