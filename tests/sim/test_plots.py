"""The paper's figures as plotly figures: the paper's values sit beside our
bars, never on their value labels, under one legend entry."""

from pagedkit.sim import paper as ref
from pagedkit.sim.experiments import FigureData
from pagedkit.sim.plots import plot

FIG15 = FigureData("Fig. 15", "Memory saved by sharing KV blocks", tuple(
    {"scenario": kind, "size": size, "label": f"{kind} {size}", "saving": saving}
    for kind, size, saving in (("parallel", 2, 4.0), ("parallel", 4, 6.7), ("beam", 2, 39.3),
                               ("beam", 4, 58.2), ("prefix", 80, 47.3))))
PARTS = ("token_states", "reservation", "internal_fragmentation", "external_fragmentation")
FIG2 = FigureData("Fig. 2", "KV cache usage by memory manager", tuple(
    {"manager": m, **dict(zip(PARTS, values, strict=True))}
    for m, values in (("Orca (Max)", (19.6, 12.9, 58.7, 8.8)),
                      ("Orca (Oracle)", (51.4, 34.0, 0.0, 14.6)),
                      ("vLLM", (98.3, 0.0, 1.7, 0.0)))))


def _paper(fig):
    return [t for t in fig.data if t.type == "scatter"]


def test_fig15_marks_the_paper_once_beside_the_bars():
    fig = plot(FIG15)
    (paper,) = _paper(fig)  # one trace, one legend entry, for every scenario the paper has
    assert paper.name == "paper (Kwon et al.)"
    assert list(paper.y) == [ref.FIG15_SAVING["parallel"][2], ref.FIG15_SAVING["parallel"][4],
                             ref.FIG15_SAVING["beam"][2], ref.FIG15_SAVING["beam"][4]]
    bars = [t for t in fig.data if t.type == "bar"]
    assert [t.name for t in bars] == ["parallel", "beam", "prefix"]
    centres = [x for t in bars for x in t.x]
    assert centres == [0, 1, 2, 3, 4]
    assert list(fig.layout.xaxis.ticktext) == [r["label"] for r in FIG15.rows]
    width = bars[0].width
    for x, centre in zip(paper.x, centres, strict=False):  # on the bar's edge, off its label
        assert abs(x - centre) >= width / 2 - 1e-9
    assert all(t.textposition == "outside" for t in bars)


def test_fig2_keeps_the_paper_markers_off_the_value_labels():
    fig = plot(FIG2)
    (paper,) = _paper(fig)
    assert paper.name.startswith("paper (Kwon et al.)")
    assert list(paper.y) == [ref.FIG2_BREAKDOWN[m]["token_states"]
                             for m in ("Orca (Max)", "Orca (Oracle)", "vLLM")]
    bars = [t for t in fig.data if t.type == "bar"]
    assert [t.insidetextanchor for t in bars] == ["middle"] * 4
    assert all(abs(x - c) >= bars[0].width / 2 - 1e-9
               for x, c in zip(paper.x, bars[0].x, strict=True))
    assert list(fig.layout.xaxis.ticktext) == ["Orca (Max)", "Orca (Oracle)", "vLLM"]


def test_paper_false_draws_ours_only():
    from pagedkit.sim.plots import plot_fig2, plot_fig15

    assert not _paper(plot_fig15(FIG15, paper=False))
    assert not _paper(plot_fig2(FIG2, paper=False))
