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
once and receives every message. plotly's own module is imported on the first
``render``, where no clock runs, once per page (cached on ``globalThis``, keyed
by plotly's version) instead of once per figure; then plotly's own
``initialize`` and ``render`` run unchanged on the model, which by then holds
the real figure.

plotly's module travels once per kernel (issue #26: a saved lab with three
views was 15 MB). JupyterLab's "save widget state" stores every live model's
synced traits, so a source synced by each figure was saved once per figure. It
lives instead in one `plotly_library` model per kernel: a plain ipywidgets
``Widget`` (``@jupyter-widgets/base``'s ``WidgetModel``, which every widget
manager has, with no view), created before the first figure, whose ``source``
trait holds the module. Each figure names it in ``_plotly_library``, a widget
reference (``"IPY_MODEL_<id>"``, ipywidgets' ``widget_serialization``, so
``ipywidgets.embed.dependency_state`` takes the library along with a figure).
The loader resolves it in ``render``, not in the 2 s window, with the widget
manager's ``get_model``: the call that resolves ipywidgets' own references (a
box's children), so every manager that draws a ``VBox`` of widgets has it
(JupyterLab, tested; Notebook 7, VS Code, Colab, the HTML manager by that
reasoning); anywidget's ``host.getModel`` where a manager is not exposed. A saved state holds the
library whenever it holds a figure (JupyterLab saves every live model), and
restoring creates all models at once, so the figure finds it. Where the
reference cannot be resolved (a state saved without the library, a manager
without ``get_model``), the view says so in words instead of drawing nothing.

Colors (the console flood of issue #11). The views color bars by *index* into
a discrete colorscale (`palette.colorscale`): plotly's Python side checks a
numeric array in microseconds, 4,096 color strings in a third of a second.
But plotly.js (3.8) bars call ``Color.opacity`` on each bar's raw value to pick
a pixel rounding, so every numeric bar color logs ``WARN: Invalid color
specifier: number k`` (and the whole array for index 0), every draw. So the
figure keeps its indices kernel-side, and what goes to the browser — the
widget's traces, its restyles and updates, a static figure's JSON — carries
the colors themselves: `resolve_trace` looks each index up in its trace's
index colorscale (and leaves every other color alone).
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

#: The front end. `render` loads plotly's module from the kernel's library model (once
#: per page), then runs plotly's widget (its model half, then its view). An import that
#: fails is forgotten, so the next view retries it; a view that cannot load it says why
#: in its place (anywidget 0.11 only logs a render error: the view would stay empty).
_LOADER = """\
// pagedkit.viz.figure_widget: plotly's FigureWidget, loaded in render (see its docstring)
const KEY = Symbol.for("pagedkit.plotly-widget/" + %(version)r);
const PREFIX = "IPY_MODEL_";

// plotly's module, from the library model this figure names (one per kernel)
async function librarySource(model, host) {
  const ref = model.get("_plotly_library");
  const id = typeof ref === "string" && ref.startsWith(PREFIX) ? ref.slice(PREFIX.length) : "";
  if (!id) throw new Error("the figure names no plotly library (" + JSON.stringify(ref) + ")");
  const manager = model.widget_manager;
  const byManager = manager && typeof manager.get_model === "function";
  if (!byManager && !(host && typeof host.getModel === "function")) {
    throw new Error("this page's widget manager cannot look widget model " + id + " up");
  }
  let library;
  try {
    library = byManager ? await manager.get_model(id)
                        : await host.getModel("anywidget:" + id);  // anywidget's own way
  } catch (error) {
    throw new Error("its plotly library (widget model " + id + ") is not on this page: "
                    + (error && error.message || error));
  }
  const source = library && library.get("source");
  if (typeof source !== "string" || !source.includes("export")) {
    throw new Error("widget model " + id + " holds no plotly module");
  }
  return source;
}

function plotlyWidget(model, host) {
  if (!globalThis[KEY]) {
    globalThis[KEY] = librarySource(model, host).then((source) => {
      const url = URL.createObjectURL(new Blob([source], { type: "text/javascript" }));
      return import(url).finally(() => URL.revokeObjectURL(url));
    }).catch((error) => { delete globalThis[KEY]; throw error; });
  }
  return globalThis[KEY];
}

function explain(el, error) {
  const note = document.createElement("pre");
  note.className = "pagedkit-plotly-error";
  note.style.whiteSpace = "pre-wrap";
  note.textContent = "pagedkit: this figure cannot be drawn: " + (error && error.message || error)
    + ".\\nRun its cell again (the kernel sends plotly's module with the new figure).";
  el.replaceChildren(note);
  console.error("[pagedkit] a figure cannot be drawn", error);
}

export default {
  async render({ model, el, host }) {
    let plotly;
    try {
      plotly = await plotlyWidget(model, host);
    } catch (error) {
      explain(el, error);
      return;
    }
    const widget = plotly.default();   // plotly's { initialize, render }, one per view
    widget.initialize({ model });
    return widget.render({ model, el });
  },
};
"""


def index_scale(marker: Any) -> list[str] | None:
    """The colors of `marker`'s colorscale if it is an index scale (value *i* is exactly
    ``colors[i]``: stops at i / (n - 1), cmin 0, cmax n - 1), else None."""
    if not isinstance(marker, dict):
        return None
    scale = marker.get("colorscale")
    if not isinstance(scale, (list, tuple)) or len(scale) < 2:
        return None
    n = len(scale) - 1
    stops_ok = all(abs(float(stop) - i / n) < 1e-9 for i, (stop, _) in enumerate(scale))
    if not stops_ok or marker.get("cmin") != 0 or marker.get("cmax") != n:
        return None
    return [str(color) for _, color in scale]


def resolve_colors(values: Any, colors: list[str]) -> Any:
    """Numeric color indices as the color strings they stand for; anything else unchanged."""
    if isinstance(values, dict) and "bdata" in values:  # plotly's typed-array JSON
        import base64

        values = np.frombuffer(base64.b64decode(values["bdata"]), dtype=values["dtype"])
    if isinstance(values, (list, tuple)) and values and all(
            isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        values = np.asarray(values)
    if isinstance(values, np.ndarray) and values.dtype.kind in "iuf":
        index = np.clip(np.rint(values), 0, len(colors) - 1).astype(np.intp)
        # an array, not a list: plotly's serializer sends an array's .tolist() in one go
        # but walks a list element by element (~10x slower for 4,096 colors)
        return np.asarray(colors)[index]
    return values


def resolve_trace(trace: dict, marker: Any = None) -> dict:
    """`trace` (a plotly JSON trace, or a restyle's edits of one) with its bars' index
    colors resolved; `marker` is the trace's full marker where `trace` holds only edits."""
    marker = marker if marker is not None else trace.get("marker")
    colors = index_scale(marker)
    if colors is None:
        return trace
    out = dict(trace)
    if "marker.color" in out:
        out["marker.color"] = resolve_colors(out["marker.color"], colors)
    if isinstance(out.get("marker"), dict) and "color" in out["marker"]:
        out["marker"] = {**out["marker"], "color": resolve_colors(out["marker"]["color"],
                                                                  colors)}
    return out


def resolve_figure(fig: dict) -> dict:
    """A figure's JSON dict with every bar's index colors resolved (for static figures:
    plain lists, JSON as it is)."""
    def plain(trace: dict) -> dict:
        out = resolve_trace(trace)
        marker = out.get("marker")
        if isinstance(marker, dict) and isinstance(marker.get("color"), np.ndarray):
            out["marker"] = {**marker, "color": marker["color"].tolist()}
        return out

    return {**fig, "data": [plain(t) if t.get("type") == "bar" else t
                            for t in fig.get("data", [])]}


def _resolve_message(message: Any, widget: Any, data_key: str, traces_key: str) -> Any:
    """A restyle / update message with the index colors of its bar traces resolved."""
    if not isinstance(message, dict) or not isinstance(message.get(data_key), dict):
        return message
    traces = message.get(traces_key)
    traces = list(range(len(widget._data))) if traces is None else (
        traces if isinstance(traces, (list, tuple)) else [traces])
    style = dict(message[data_key])
    for key in ("marker.color", "marker"):
        if key not in style or not isinstance(style[key], (list, tuple)):
            continue
        values = list(style[key])
        for j, t in enumerate(traces[:len(values)]):
            full = widget._data[t]
            if full.get("type") == "bar":
                values[j] = resolve_trace({key: values[j]}, full.get("marker"))[key]
        style[key] = values
    return {**message, data_key: style}


def plotly_source() -> str:
    """plotly's FigureWidget front end (its anywidget module, ~5 MB), as text."""
    from pathlib import Path

    import plotly
    from plotly.basewidget import BaseFigureWidget

    esm = BaseFigureWidget._esm  # a path, or anywidget's FileContents of that path
    source = Path(esm).read_text() if isinstance(esm, Path) else str(esm)
    if "export" not in source:
        raise RuntimeError(
            f"plotly {plotly.__version__}'s FigureWidget front end was not found "
            f"(BaseFigureWidget._esm is {type(esm).__name__}); pagedkit.viz needs plotly>=6")
    return source


@functools.cache
def library_class() -> type:
    """The model class that holds plotly's module for the page (see the module)."""
    import ipywidgets
    import traitlets

    class PlotlyLibrary(ipywidgets.Widget):
        """plotly's front end, sent once per kernel; figures name it (no view of its own).
        The source is set when built, never a trait default: a state that drops defaults
        (``drop_defaults=True``) must keep it."""

        source = traitlets.Unicode().tag(sync=True)
        plotly_version = traitlets.Unicode().tag(sync=True)

    return PlotlyLibrary


_library: Any = None


def plotly_library() -> Any:
    """This kernel's one `PlotlyLibrary` (built on first use, again if it was closed)."""
    global _library
    if _library is None or _library.comm is None:
        import plotly

        _library = library_class()(source=plotly_source(), plotly_version=plotly.__version__)
    return _library


@functools.cache
def widget_class() -> type:
    """The FigureWidget subclass (built on first use: plotly and anywidget load lazily)."""
    import ipywidgets
    import plotly
    import plotly.graph_objects as go
    import traitlets
    from plotly.serializers import _js_to_py, _py_to_js

    plotly_source()  # refuse a plotly without the front end before any figure is built

    def serializer(resolve: Any) -> dict:
        return {"from_json": _js_to_py,
                "to_json": lambda value, widget: _py_to_js(resolve(value, widget), widget)}

    def traces(value: Any, widget: Any) -> Any:
        return [resolve_trace(t) if isinstance(t, dict) and t.get("type") == "bar" else t
                for t in value] if isinstance(value, (list, tuple)) else value

    class FigureWidget(go.FigureWidget):
        """A plotly FigureWidget whose front end survives a slow page, loads plotly's
        module from the kernel's one library model, and sends the browser colors, not
        color indices; see the module."""

        _esm = _LOADER % {"version": plotly.__version__}
        _plotly_library = traitlets.Instance(ipywidgets.Widget).tag(
            sync=True, **ipywidgets.widget_serialization)
        _widget_data = traitlets.List().tag(sync=True, **serializer(traces))
        _py2js_addTraces = traitlets.Dict(allow_none=True).tag(sync=True, **serializer(
            lambda m, w: {**m, "trace_data": traces(m["trace_data"], w)} if m else m))
        _py2js_restyle = traitlets.Dict(allow_none=True).tag(sync=True, **serializer(
            lambda m, w: _resolve_message(m, w, "restyle_data", "restyle_traces")))
        _py2js_update = traitlets.Dict(allow_none=True).tag(sync=True, **serializer(
            lambda m, w: _resolve_message(m, w, "style_data", "style_traces")))

        @traitlets.default("_plotly_library")
        def _library_default(self) -> Any:
            # read when the figure's comm opens (its first state): the library's comm,
            # opened here if it is the first, goes out before the figure's
            return plotly_library()

    return FigureWidget


def figure_widget(figure: Any) -> Any:
    """A live widget of `figure` (a ``go.Figure``) that draws even on a busy machine."""
    return widget_class()(figure)
