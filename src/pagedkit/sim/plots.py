"""Plotly figures for the data of `pagedkit.sim.experiments`.

Each function takes a `FigureData` and returns a ``plotly.graph_objects.Figure``;
nothing here simulates. Where the paper gives numbers, they are drawn as
hollow diamonds on the right edge of our bars, clear of the value labels,
under one legend entry (``paper=False`` leaves them out).
"""

from __future__ import annotations

import plotly.graph_objects as go

from ..i18n import N_, _
from . import paper as ref
from .experiments import FigureData
from .sharing import said

_PARTS = (("token_states", N_("Token states"), "#2b8a3e"),
          ("reservation", N_("Reservation"), "#f08c00"),
          ("internal_fragmentation", N_("Internal fragmentation"), "#c92a2a"),
          ("external_fragmentation", N_("External fragmentation"), "#5f3dc4"))
_PAPER_MARKER = {"symbol": "diamond-open", "size": 12, "color": "black", "line": {"width": 2}}
_PAPER_NAME = N_("paper (Kwon et al.)")
#: Fig. 15's legend: each kind of sharing (`experiments.fig15_sharing_savings`'s ``scenario``).
_KINDS = {"parallel": N_("parallel"), "beam": N_("beam"), "prefix": N_("prefix")}
#: A 2x2 bar's label: its memory (``contiguous`` or ``paged``) and manager.
_MEMORY = {"contiguous": N_("contiguous<br>({policy})"), "paged": N_("paged<br>({policy})")}
_BAR_WIDTH = 0.7
# The paper's values sit on the right edge of each bar, clear of the value
# labels, which are centred in the bars.
_PAPER_OFFSET = _BAR_WIDTH / 2


def _heading(data: FigureData) -> str:
    """``Fig. 2: KV cache usage by memory manager``: the paper's figure and our title."""
    figure = data.figure
    if figure.startswith("Fig. "):
        figure = _("Fig. {number}").format(number=figure.removeprefix("Fig. "))
    return _("{figure}: {title}").format(figure=figure, title=data.title)


def _dataset(trace_name: str) -> str:
    return trace_name.split("@")[0]


def trace_label(trace_name: str) -> str:
    """A synthetic trace's name as a reader reads it: ``sharegpt@2`` is the ShareGPT
    shape at 2 requests per second (`pagedkit.sim.trace` names them ``shape@rate``),
    ``sharegpt saturated`` the one of `experiments.saturated_trace`."""
    shape, at, rate = trace_name.partition("@")
    if at:
        return _("{shape} at {rate} req/s").format(shape=shape, rate=rate)
    shape, saturated, rest = trace_name.partition(" saturated")
    if saturated and not rest:
        return _("{shape} saturated").format(shape=shape)
    return trace_name


def _categories(fig: go.Figure, labels: list[str], **axis) -> None:
    """Bars at x = 0, 1, ...: a numeric axis labelled with `labels`, so the
    paper's markers can sit beside a bar instead of on its label."""
    fig.update_xaxes(tickvals=list(range(len(labels))), ticktext=labels,
                     range=[-0.6, len(labels) - 0.4], **axis)


def plot_fig2(data: FigureData, paper: bool = True) -> go.Figure:
    """Stacked bars: where each manager's KV memory goes (paper Fig. 2)."""
    managers = data.column("manager")
    x = list(range(len(managers)))
    fig = go.Figure()
    for key, name, color in _PARTS:
        name = _(name)
        values = data.column(key)
        fig.add_bar(x=x, y=values, name=name, marker_color=color, width=_BAR_WIDTH,
                    customdata=managers, hovertemplate=(_("%{{customdata}}: {lower} "
                                                         "%{{y:.1f}}%<extra></extra>")
                                                         .format(lower=name.lower())),
                    text=[f"{v:.1f}%" if v >= 3 else "" for v in values],
                    textposition="inside", insidetextanchor="middle")
    if paper:
        known = [(i, m) for i, m in enumerate(managers) if m in ref.FIG2_BREAKDOWN]
        fig.add_scatter(x=[i + _PAPER_OFFSET for i, _m in known],
                        y=[ref.FIG2_BREAKDOWN[m]["token_states"] for _i, m in known],
                        customdata=[m for _i, m in known], mode="markers",
                        marker=_PAPER_MARKER,
                        name=_("{paper}: token states").format(paper=_(_PAPER_NAME)),
                        hovertemplate=_("%{customdata}: the paper's token states "
                        "%{y:.1f}%<extra></extra>"))
    fig.update_layout(barmode="stack", title=_heading(data),
                      yaxis_title=_("share of KV memory<br>used or wasted (%)"),
                      yaxis_range=[0, 100])
    _categories(fig, managers)
    return fig


def plot_fig13(data: FigureData, paper: bool = True) -> go.Figure:
    """Average batched requests per manager, grouped by trace; the paper's beside ours."""
    traces = data.column("trace")
    x = [[trace_label(t) for t in traces], data.column("manager")]
    ours = data.column("mean_batch_size")
    fig = go.Figure()
    fig.add_bar(x=x, y=ours, name=_("simulated"), text=[f"{v:.1f}" for v in ours],
                textposition="outside")
    if paper:
        values = [ref.FIG13_BATCH.get(_dataset(t), {}).get(m)
                  for t, m in zip(traces, x[1], strict=True)]
        fig.add_bar(x=x, y=values, name=_("paper"), marker_color="lightgray",
                    text=[f"{v:.1f}" if v is not None else "" for v in values],
                    textposition="outside")
    else:
        values = []
    top = max([v for v in (*ours, *values) if v is not None] + [1.0])
    # two short lines: one long one was taller than the plot
    fig.update_layout(barmode="group", title=_heading(data), height=450,
                      yaxis_title=_("requests in the running<br>batch (time average)"),
                      yaxis_range=[0, top * 1.12], legend_title_text=_("mean batch"))
    return fig


def plot_fig12(data: FigureData) -> go.Figure:
    """Normalized latency against request rate, one line per manager."""
    fig = go.Figure()
    for manager in dict.fromkeys(data.column("manager")):
        rows = data.select(manager=manager)
        fig.add_scatter(x=[r["rate"] for r in rows], y=[r["normalized_latency"] for r in rows],
                        mode="lines+markers", name=manager)
    fig.update_layout(title=_heading(data), xaxis_title=_("request rate (req/s)"),
                      yaxis_title=_("normalized latency (s/token)"),
                      yaxis_range=[0, data.settings.get("cutoff", 1.0)])
    return fig


def plot_fig15(data: FigureData, paper: bool = True) -> go.Figure:
    """Bars of memory saved by sharing, one color per scenario kind; the paper's
    values, where it gives them, as diamonds on the bars' right edges."""
    rows = data.rows
    labels = [said(r["label"]) for r in rows]
    fig = go.Figure()
    for kind in dict.fromkeys(data.column("scenario")):
        mine = [(i, r) for i, r in enumerate(rows) if r["scenario"] == kind]
        fig.add_bar(x=[i for i, _r in mine], y=[r["saving"] for _i, r in mine],
                    name=_(_KINDS[kind]) if kind in _KINDS else kind,
                    width=_BAR_WIDTH, customdata=[labels[i] for i, _r in mine],
                    hovertemplate=_("%{{customdata}}: {value} saved<extra></extra>")
                    .format(value="%{y:.1f}%"),
                    text=[f"{r['saving']:.1f}%" for _i, r in mine], textposition="outside")
    if paper:
        known = [(i, r) for i, r in enumerate(rows)
                 if r["size"] in ref.FIG15_SAVING.get(r["scenario"], {})]
        if known:
            fig.add_scatter(x=[i + _PAPER_OFFSET for i, _m in known],
                            y=[ref.FIG15_SAVING[r["scenario"]][r["size"]] for _i, r in known],
                            customdata=[labels[i] for i, _r in known], mode="markers",
                            marker=_PAPER_MARKER, name=_(_PAPER_NAME),
                            hovertemplate=_("%{customdata}: the paper's %{y:.1f}%"
                            "<extra></extra>"))
    top = max([r["saving"] for r in rows] + [0.0])
    fig.update_layout(title=_heading(data), barmode="overlay",
                      yaxis_title=_("KV blocks saved by sharing (%)"),
                      yaxis_range=[0, max(10.0, top * 1.15)])
    _categories(fig, labels, tickangle=30)
    return fig


def plot_fig18b(data: FigureData) -> go.Figure:
    """Normalized latency against block size, one line per trace."""
    fig = go.Figure()
    for trace in dict.fromkeys(data.column("trace")):
        rows = data.select(trace=trace)
        fig.add_scatter(x=[r["block_size"] for r in rows],
                        y=[r["normalized_latency"] for r in rows], mode="lines+markers",
                        name=trace_label(trace))
    fig.update_layout(title=_heading(data), xaxis_title=_("block size (tokens)"),
                      xaxis_type="log", yaxis_title=_("normalized latency (s/token)"))
    fig.update_xaxes(tickvals=sorted(set(data.column("block_size"))))
    return fig


def plot_shape(data: FigureData, baseline: str = "Orca (Oracle)",
               system: str = "vLLM") -> go.Figure:
    """Bars of `system`'s capacity over `baseline`'s, one per scenario
    (`experiments.results_shape`), with a dashed line at 1: no gain."""
    scenarios = list(dict.fromkeys(data.column("scenario")))
    gains = [data.value("requests_per_s", scenario=s, manager=system)
             / data.value("requests_per_s", scenario=s, manager=baseline) for s in scenarios]
    labels = [_scenario_label(data.select(scenario=s)[0]) for s in scenarios]
    fig = go.Figure()
    fig.add_bar(x=list(range(len(scenarios))), y=gains, width=_BAR_WIDTH, customdata=labels,
                text=[f"{g:.2f}x" for g in gains], textposition="outside",
                hovertemplate=_("%{customdata}: %{y:.2f}x<extra></extra>"), name=_("gain"))
    fig.add_hline(y=1, line_dash="dash", line_color="gray")
    fig.update_layout(title=(_("{system} over {baseline}: requests per second, saturated")
                              .format(system=system, baseline=baseline)),
                      yaxis_title=f"{system} / {baseline}", showlegend=False,
                      yaxis_range=[0, max([*gains, 1.0]) * 1.2], height=450)
    _categories(fig, labels, tickangle=20)
    return fig


def _scenario_label(row: dict) -> str:
    """A `results_shape` row's scenario (``sharegpt, OPT-13B, one sample``) in the
    language of the moment: the dataset and the model are names, the decoding is said."""
    return _("{dataset}, {model}, {decoding}").format(dataset=row["dataset"], model=row["model"],
                                                       decoding=said(row["decoding"]))


def plot_2x2(data: FigureData) -> go.Figure:
    """Two panels side by side: requests per second and the mean batch, one bar
    per batching, grouped by memory (`experiments.batching_and_memory`)."""
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=2, subplot_titles=(_("requests per second"),
                                                        _("mean running batch (requests)")))
    level = {"static": _("static-level batching"), "iteration": _("iteration-level batching")}
    for batching, color in (("static", "#adb5bd"), ("iteration", "#1c7ed6")):
        rows = data.select(batching=batching)
        x = [_(_MEMORY[r["memory"]]).format(policy=r["manager"]) for r in rows]
        for col, key, fmt in ((1, "requests_per_s", ".2f"), (2, "mean_batch_size", ".1f")):
            values = [r[key] for r in rows]
            fig.add_bar(x=x, y=values, name=level[batching], marker_color=color,
                        legendgroup=batching, showlegend=col == 1, row=1, col=col,
                        text=[format(v, fmt) for v in values], textposition="outside")
    fig.update_layout(barmode="group", title=_("{title} ({trace})").format(
                          title=data.title, trace=trace_label(data.settings.get("trace", ""))),
                      height=420)
    return fig


_PLOTTERS = {"2x2": plot_2x2, "Fig. 2": plot_fig2, "Fig. 12": plot_fig12, "Fig. 13": plot_fig13,
             "Fig. 15": plot_fig15, "Fig. 18b": plot_fig18b, "§6.2-6.3": plot_shape}


def plot(data: FigureData) -> go.Figure:
    """The right figure for any `FigureData`."""
    try:
        return _PLOTTERS[data.figure](data)
    except KeyError:
        raise ValueError(f"no plot for {data.figure!r}; known: {', '.join(_PLOTTERS)}") from None
