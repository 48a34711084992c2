"""The simulator's figures and report rows in Chinese say the glossary's terms
in Chinese (docs/glossary.md): English is left only in data names (managers,
datasets, models, trace names like ``sharegpt@2``) and in the words the zh
edition keeps (token, prompt, KV Cache). In English every label is as before."""

import re

import pytest

from pagedkit.i18n import _, speaking
from pagedkit.sim import experiments as ex
from pagedkit.sim import plots
from pagedkit.sim import report as rp
from pagedkit.sim.experiments import paper_trace

#: Names that stay as they are in every language, and the words the zh edition keeps.
KEPT = ("Orca (Max)", "Orca (Oracle)", "Orca (Pow2)", "vLLM", "OPT-13B", "OPT-66B",
        "OPT-175B", "sharegpt", "alpaca", "Kwon", "prompt", "token", "KV Cache", "KV", "Fig")
#: plotly's own markup in labels and hover templates
MARKUP = re.compile(r"%\{[^}]*\}|</?extra>|<br>")
#: The glossary terms of these outputs that were left in English (newcomer 19, finding 5).
ENGLISH_TERMS = ("parallel", "sampling", "beam", "search", "shared", "prefix", "tokens",
                 "output", "memory", "contiguous", "paged", "gain", "sample", "width",
                 "saturated", "saved", "batching")


def _english_left(text: str) -> list[str]:
    """The English words of `text` once data names, kept words and markup are out."""
    text = MARKUP.sub(" ", text)
    for name in KEPT:
        text = text.replace(name, " ")
    return re.findall(r"[A-Za-z]{2,}", text)


def _fig15():
    return ex.fig15_sharing_savings(paper_trace("alpaca", rate=10, num_requests=20))


def _shape():
    """`results_shape`'s rows for every scenario of the lab, with made-up rates."""
    rows = tuple({"scenario": sc.label, "dataset": sc.dataset, "model": sc.model.name,
                  "decoding": sc.sharing.label if sc.sharing else ex.ONE_SAMPLE,
                  "manager": m, "requests_per_s": rate}
                 for sc in ex.SHAPE_SCENARIOS
                 for m, rate in (("Orca (Oracle)", 1.0), ("vLLM", 2.0)))
    return ex.FigureData("§6.2-6.3", _("Requests per second each manager serves, saturated"),
                         rows)


def _two_by_two():
    rows = tuple({"batching": b, "memory": memory, "manager": manager, "requests_per_s": 1.0,
                  "mean_batch_size": 2.0}
                 for b in ("static", "iteration")
                 for memory, manager in (("contiguous", "Orca (Max)"), ("paged", "vLLM")))
    return ex.FigureData("2x2", _("Batching x memory: requests per second, saturated"), rows,
                         {"trace": ex.saturated_trace("sharegpt", 2).name})


FIGURES = {"fig15": _fig15, "shape": _shape, "2x2": _two_by_two}


def _texts(fig) -> list[str]:
    """Every text of a figure a reader sees: title, panel titles, legend, ticks, hover."""
    texts = [fig.layout.title.text or "", *(a.text for a in fig.layout.annotations)]
    for axis in (fig.layout.xaxis, fig.layout.yaxis):
        texts += [axis.title.text or "", *(axis.ticktext or ())]
    for trace in fig.data:
        texts += [trace.name or "", trace.hovertemplate or ""]
        texts += [str(v) for v in (trace.x or ()) if isinstance(v, str)]
        texts += [str(v) for v in (trace.customdata or ()) if isinstance(v, str)]
    return texts


@pytest.mark.parametrize("name", FIGURES)
def test_zh_figures_say_the_glossary_terms_in_chinese(name):
    with speaking("zh-CN"):
        texts = _texts(plots.plot(FIGURES[name]()))
    left = {t: _english_left(t) for t in texts if _english_left(t)}
    assert not left, left
    assert not any(term in t for t in texts for term in ENGLISH_TERMS)
    assert not any("内存" in t for t in texts)  # GPU memory: 显存


def _report_rows():
    report = rp.Report("test")
    rp._table1_and_fig11(report, paper_trace("sharegpt", num_requests=20),
                         paper_trace("alpaca", num_requests=20))
    rp._fig15(report, rp.Scale("test", 1, 1, 1, 20, 1), seed=0)
    return report.rows


def test_zh_report_rows_say_the_glossary_terms_in_chinese():
    rows = _report_rows()
    assert {r.figure for r in rows} == {"Table 1", "Fig. 11", "Fig. 15", "§6.4"}
    with speaking("zh-CN"):
        labels = [r.label() for r in rows]
    left = {t: _english_left(t) for t in labels if _english_left(t)}
    assert not left, left
    assert not any("内存" in t for t in labels)  # GPU memory: 显存
    assert "节省的显存，并行采样 n=2" in labels and "类 sharegpt 的平均输出长度" in labels


def test_english_labels_are_as_before():
    quantities = [r.quantity for r in _report_rows()]
    assert quantities[1:5] == ["sharegpt-like mean prompt length",
                               "sharegpt-like mean output length",
                               "alpaca-like mean prompt length", "alpaca-like mean output length"]
    assert quantities[5:] == ["memory saved, parallel 2", "memory saved, parallel 4",
                              "memory saved, parallel 6", "memory saved, beam 2",
                              "memory saved, beam 4", "memory saved, beam 6",
                              "memory saved, shared prefix 80 tokens",
                              "memory saved, shared prefix 341 tokens"]
    fig15 = plots.plot(_fig15())
    assert [t.name for t in fig15.data] == ["parallel", "beam", "prefix", "paper (Kwon et al.)"]
    assert list(fig15.layout.xaxis.ticktext) == [
        "parallel sampling n=2", "parallel sampling n=4", "parallel sampling n=6",
        "beam search width=2", "beam search width=4", "beam search width=6",
        "shared prefix 80 tokens", "shared prefix 341 tokens"]
    shape = plots.plot(_shape())
    assert shape.data[0].name == "gain"
    assert list(shape.layout.xaxis.ticktext) == [sc.label for sc in ex.SHAPE_SCENARIOS]
    assert list(shape.layout.xaxis.ticktext)[:2] == ["sharegpt, OPT-13B, one sample",
                                                     "alpaca, OPT-13B, one sample"]
    two = plots.plot(_two_by_two())
    assert list(two.data[0].x) == ["contiguous<br>(Orca (Max))", "paged<br>(vLLM)"]
    assert two.layout.title.text == ("Batching x memory: requests per second, saturated "
                                     "(sharegpt saturated)")


def test_zh_progress_bar_names_each_step_in_chinese(capsys):
    """`simulate`'s progress bar names the step it is in (`COMPARE_STEPS`), in
    the language of the moment (a tiny scale: only the bar is looked at)."""
    with speaking("zh-CN"):
        rp.compare(rp.Scale("tiny", 20, 2, 5, 10, 5, rate_points=2), progress=True)
        steps = [_(step) for step in rp.COMPARE_STEPS]
    err = capsys.readouterr().err
    assert all(step in err for step in steps)
    kept = ("trace", "ShareGPT", "Alpaca")  # the zh edition keeps "trace"; datasets are names
    left = {t: _english_left(t) for t in steps
            if _english_left(re.sub("|".join(kept), " ", t))}
    assert not left, left
    assert not any(step in err for step in rp.COMPARE_STEPS)
    assert "步" in err and "step" not in err


def test_rows_display_their_scenario_in_the_language_of_the_moment():
    """Issue #26: labs 07 and 08 printed fig15's ``label`` and a `Scenario`'s ``label``,
    English in the zh labs too, since they are the rows' keys. Each row (and scenario)
    has a ``display`` in the language it was made in; the keys stay English."""
    scenarios = ex.SHAPE_SCENARIOS
    with speaking("zh-CN"):
        rows = _fig15().rows
        shown = [r["display"] for r in rows] + [sc.display for sc in scenarios]
    left = {t: _english_left(t) for t in shown if _english_left(t)}
    assert not left, left
    assert not any(term in t for t in shown for term in ENGLISH_TERMS)
    assert shown[0] == "并行采样 n=2" and shown[-1] == "alpaca，OPT-13B，宽度为 4 的束搜索"
    assert [r["label"] for r in rows] == [s.label for s in ex.SHARING_SCENARIOS]
    assert [r["display"] for r in _fig15().rows] == [r["label"] for r in rows]  # English
    assert [sc.display for sc in scenarios] == [sc.label for sc in scenarios]
