"""plotly's FigureWidget with a front end that registers at once and loads plotly.js lazily.

Why this exists (the empty block map of issue #11). plotly 6+ builds its
``FigureWidget`` on anywidget: every figure's model carries plotly's whole
front end (plotly.js and the widget code, ~5 MB of JavaScript) as its ``_esm``,
and the browser evaluates that module afresh for every figure. anywidget
(0.9-0.11) gives a model 2 s from its creation to import its ``_esm`` and run
its ``initialize``; past that, its ``ready`` promise rejects, and every comm
message of that model is dropped from then on (each one awaits ``ready``),
silently. plotly opens the comm with an *empty* figure and sends the traces and
layout in the next two messages. So on a busy machine — three figures of a
dashboard evaluating three copies of plotly.js one after another on the page's
single thread — a figure whose module took more than 2 s rendered its empty
default (the "empty axes", 0 traces while the kernel held 13) and ignored every
later update: no button, slider or play could fill it, and nothing was logged.

The fix is to make the part inside anywidget's 2 s window trivial: this class's
``_esm`` is a few lines that export ``render`` only, so the model is ready at
once and receives every message. plotly's own module travels beside it, as the
synced string ``_plotly_esm``, and is imported on the first ``render``, where
no clock runs, once per page (cached on ``globalThis``, keyed by plotly's
version) instead of once per figure; then plotly's own ``initialize`` and
``render`` run unchanged on the model, which by then holds the real figure.
"""

from __future__ import annotations

import functools
from typing import Any

#: The front end. `render` runs plotly's widget (its model half, then its view) once
#: its module is loaded; an import that fails is forgotten, so the next view retries
#: it, and its error shows in the view (anywidget draws a render error in place).
_LOADER = """\
// pagedkit.viz.figure_widget: plotly's FigureWidget, loaded in render (see its docstring)
const KEY = Symbol.for("pagedkit.plotly-widget/" + %(version)r);

function plotlyWidget(model) {
  if (!globalThis[KEY]) {
    const source = model.get("_plotly_esm");
    const url = URL.createObjectURL(new Blob([source], { type: "text/javascript" }));
    globalThis[KEY] = import(url)
      .catch((error) => { delete globalThis[KEY]; throw error; })
      .finally(() => URL.revokeObjectURL(url));
  }
  return globalThis[KEY];
}

export default {
  async render({ model, el }) {
    const plotly = await plotlyWidget(model);
    const widget = plotly.default();   // plotly's { initialize, render }, one per view
    widget.initialize({ model });
    return widget.render({ model, el });
  },
};
"""


@functools.cache
def widget_class() -> type:
    """The FigureWidget subclass (built on first use: plotly and anywidget load lazily)."""
    from pathlib import Path

    import plotly
    import plotly.graph_objects as go
    import traitlets
    from plotly.basewidget import BaseFigureWidget

    esm = BaseFigureWidget._esm  # a path, or anywidget's FileContents of that path
    source = Path(esm).read_text() if isinstance(esm, Path) else str(esm)
    if "export" not in source:
        raise RuntimeError(
            f"plotly {plotly.__version__}'s FigureWidget front end was not found "
            f"(BaseFigureWidget._esm is {type(esm).__name__}); pagedkit.viz needs plotly>=6")

    class FigureWidget(go.FigureWidget):
        """A plotly FigureWidget whose front end survives a slow page; see the module."""

        _esm = _LOADER % {"version": plotly.__version__}
        _plotly_esm = traitlets.Unicode(source).tag(sync=True)

    return FigureWidget


def figure_widget(figure: Any) -> Any:
    """A live widget of `figure` (a ``go.Figure``) that draws even on a busy machine."""
    return widget_class()(figure)
