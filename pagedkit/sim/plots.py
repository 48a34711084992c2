"""Plotly figures for the data of `pagedkit.sim.experiments`.

Each function takes a `FigureData` and returns a ``plotly.graph_objects.Figure``;
nothing here simulates. Where the paper gives numbers, they are drawn as
hollow diamonds beside ours (``paper=False`` leaves them out).
"""

from __future__ import annotations

import plotly.graph_objects as go

from . import paper as ref
from .experiments import FigureData

_PARTS = (("token_states", "Token states", "#2b8a3e"), ("reservation", "Reservation", "#f08c00"),
          ("internal_fragmentation", "Internal fragmentation", "#c92a2a"),
          ("external_fragmentation", "External fragmentation", "#5f3dc4"))
_PAPER_MARKER = {"symbol": "diamond-open", "size": 12, "color": "black", "line": {"width": 2}}


def _dataset(trace_name: str) -> str:
    return trace_name.split("@")[0]


def plot_fig2(data: FigureData, paper: bool = True) -> go.Figure:
    """Stacked bars: where each manager's KV memory goes (paper Fig. 2)."""
    managers = data.column("manager")
    fig = go.Figure()
    for key, name, color in _PARTS:
        values = data.column(key)
        fig.add_bar(x=managers, y=values, name=name, marker_color=color,
                    text=[f"{v:.1f}%" if v >= 3 else "" for v in values], textposition="inside")
    if paper:
        known = [m for m in managers if m in ref.FIG2_BREAKDOWN]
        fig.add_scatter(x=known, y=[ref.FIG2_BREAKDOWN[m]["token_states"] for m in known],
                        mode="markers", marker=_PAPER_MARKER, name="paper: token states")
    fig.update_layout(barmode="stack", title=f"{data.figure}: {data.title}",
                      yaxis_title="share of KV memory used or wasted (%)", yaxis_range=[0, 100])
    return fig


def plot_fig13(data: FigureData, paper: bool = True) -> go.Figure:
    """Average batched requests per manager, grouped by trace; the paper's beside ours."""
    x = [data.column("trace"), data.column("manager")]
    ours = data.column("mean_batch_size")
    fig = go.Figure()
    fig.add_bar(x=x, y=ours, name="simulated", text=[f"{v:.1f}" for v in ours])
    if paper:
        values = [ref.FIG13_BATCH.get(_dataset(t), {}).get(m) for t, m in zip(*x, strict=True)]
        fig.add_bar(x=x, y=values, name="paper", marker_color="lightgray",
                    text=[f"{v:.1f}" if v is not None else "" for v in values])
    fig.update_layout(barmode="group", title=f"{data.figure}: {data.title}",
                      yaxis_title="requests in the running batch (time average)")
    return fig


def plot_fig12(data: FigureData) -> go.Figure:
    """Normalized latency against request rate, one line per manager."""
    fig = go.Figure()
    for manager in dict.fromkeys(data.column("manager")):
        rows = data.select(manager=manager)
        fig.add_scatter(x=[r["rate"] for r in rows], y=[r["normalized_latency"] for r in rows],
                        mode="lines+markers", name=manager)
    fig.update_layout(title=f"{data.figure}: {data.title}", xaxis_title="request rate (req/s)",
                      yaxis_title="normalized latency (s/token)",
                      yaxis_range=[0, data.settings.get("cutoff", 1.0)])
    return fig


def plot_fig15(data: FigureData, paper: bool = True) -> go.Figure:
    """Bars of memory saved by sharing, one group per scenario kind."""
    fig = go.Figure()
    for kind in dict.fromkeys(data.column("scenario")):
        rows = data.select(scenario=kind)
        fig.add_bar(x=[r["label"] for r in rows], y=[r["saving"] for r in rows], name=kind,
                    text=[f"{r['saving']:.1f}%" for r in rows])
        if paper and kind in ref.FIG15_SAVING:
            known = [r for r in rows if r["size"] in ref.FIG15_SAVING[kind]]
            fig.add_scatter(x=[r["label"] for r in known],
                            y=[ref.FIG15_SAVING[kind][r["size"]] for r in known],
                            mode="markers", marker=_PAPER_MARKER, name=f"paper: {kind}")
    fig.update_layout(title=f"{data.figure}: {data.title}",
                      yaxis_title="KV blocks saved by sharing (%)")
    return fig


def plot_fig18b(data: FigureData) -> go.Figure:
    """Normalized latency against block size, one line per trace."""
    fig = go.Figure()
    for trace in dict.fromkeys(data.column("trace")):
        rows = data.select(trace=trace)
        fig.add_scatter(x=[r["block_size"] for r in rows],
                        y=[r["normalized_latency"] for r in rows], mode="lines+markers",
                        name=trace)
    fig.update_layout(title=f"{data.figure}: {data.title}", xaxis_title="block size (tokens)",
                      xaxis_type="log", yaxis_title="normalized latency (s/token)")
    fig.update_xaxes(tickvals=sorted(set(data.column("block_size"))))
    return fig


_PLOTTERS = {"Fig. 2": plot_fig2, "Fig. 12": plot_fig12, "Fig. 13": plot_fig13,
             "Fig. 15": plot_fig15, "Fig. 18b": plot_fig18b}


def plot(data: FigureData) -> go.Figure:
    """The right figure for any `FigureData`."""
    try:
        return _PLOTTERS[data.figure](data)
    except KeyError:
        raise ValueError(f"no plot for {data.figure!r}; known: {', '.join(_PLOTTERS)}") from None
