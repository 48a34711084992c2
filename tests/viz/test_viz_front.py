"""What the widgets send the browser, and how they open (issue #11), checked kernel-side.

The browser test (test_viz_browser.py) sees the same things in Chromium; these run
everywhere, fast, and each fails on the code before the fix:

* the module anywidget must import within its 2 s is a few lines, plotly's 5 MB rides
  beside it (a slow import made anywidget drop every message: the empty block map);
* plotly's 5 MB travel once per kernel, in one library model every figure names, so a
  saved state with three views holds them once, not three times (issue #26);
* bars reach the browser with color strings, never numeric indices (plotly.js warns
  ``Invalid color specifier`` for each numeric bar color), in the widget's traces, its
  updates and static figures alike;
* titles fit their figures, below plotly's toolbar, without repeating the step;
* a view shown after a run that ended with nothing in use opens on the busiest step and
  says so; one shown before or during a run, or moved by the learner, does not jump.
"""

import json
import re

import numpy as np
import pytest

pytest.importorskip("ipywidgets")
pytest.importorskip("anywidget")

from pagedkit.memory import KVCacheManager
from pagedkit.viz import BlockMap, ContiguousVsPaged, Dashboard, PageTable, Timeline
from pagedkit.viz import figure_widget as fw
from pagedkit.viz.view import MODEBAR_PX, static_bundle


def _run(kv: KVCacheManager, view) -> None:
    """Two requests, one forked (copy-on-write), then all freed: the end holds nothing."""
    rec = view.recorder
    kv.allocate_slots("A", list(range(9)))
    rec.cut()
    kv.fork("A", "A2")
    kv.allocate_slots("A2", [1])
    rec.cut()
    kv.allocate_slots("B", list(range(5)))
    kv.allocate_slots("A", [2])
    rec.cut()
    for seq in ("A", "A2", "B"):
        kv.free(seq)
    rec.cut()


def _views():
    kv = KVCacheManager(num_blocks=24, block_size=4)
    dash = Dashboard(kv)
    _run(kv, dash.block_map)
    dash.index = 2
    return dash


def test_the_module_anywidget_waits_for_is_tiny_and_plotly_rides_beside_it():
    w = _views().block_map
    _ = w.widget
    fig = w._figure_widget
    assert len(fig._esm) < 4_000, len(fig._esm)  # was plotly's whole bundle, ~5 MB
    # its default export has `render` only: no `initialize` for anywidget's clock to wait on
    assert re.search(r"export default \{\s*async render\(", fig._esm)
    assert not re.search(r"^\s*(async )?initialize\(", fig._esm, re.M)
    # plotly's module is not the figure's: it names the kernel's library, which holds it
    state = fig.get_state()
    assert not any(isinstance(v, str) and len(v) > 100_000 for v in state.values())
    library = fw.plotly_library()
    assert state["_plotly_library"] == f"IPY_MODEL_{library.model_id}"
    assert library.source == fw.plotly_source() and len(library.source) > 1_000_000
    # the figure itself is in the model's state before any view renders
    assert len(state["_widget_data"]) == len(fig.data) == 13


def _big_strings(state: dict) -> dict:
    """model id -> how many of its state's values are strings over 1 MB (plotly's module)."""
    return {mid: sum(isinstance(v, str) and len(v) > 1_000_000 for v in s["state"].values())
            for mid, s in state.items()}


@pytest.mark.parametrize("drop_defaults", [True, False])
def test_a_saved_state_carries_plotly_once_for_several_figures(drop_defaults):
    """Issue #26: each figure synced plotly's module, so a saved lab with three views held
    it three times (15 MB). The state of a dashboard (three figures), as embedding takes
    it (the widgets and what they reference), holds it once: in the library model."""
    from ipywidgets.embed import dependency_state

    dash = _views()
    state = dependency_state([dash.widget], drop_defaults=drop_defaults)
    figures = [v._figure_widget for v in dash.views]
    library = fw.plotly_library()
    assert {f._plotly_library for f in figures} == {library}
    assert library.model_id in state and all(f.model_id in state for f in figures)
    big = _big_strings(state)
    assert sum(big.values()) == 1 and big[library.model_id] == 1, big
    assert state[library.model_id]["state"]["source"] == fw.plotly_source()
    for f in figures:  # each names the library by reference
        assert state[f.model_id]["state"]["_plotly_library"] == f"IPY_MODEL_{library.model_id}"
    size = len(json.dumps(state))
    assert size < len(fw.plotly_source()) + 1_000_000, size  # was over three times it


def test_the_library_opens_before_the_first_figure_and_is_rebuilt_once_closed(monkeypatch):
    """The front end resolves a figure's reference when the figure's comm opens: the
    library's comm must already be open (the manager then knows its id)."""
    import plotly.graph_objects as go
    from ipywidgets.widgets import widget as widget_module

    library = fw.plotly_library()
    library.close()  # as Widget.close_all() would: the next figure gets a new one
    opened = []
    create = widget_module.comm.create_comm

    def record(**args):
        opened.append(args["data"]["state"]["_model_name"])
        return create(**args)

    monkeypatch.setattr(widget_module.comm, "create_comm", record)
    fig = fw.figure_widget(go.Figure(go.Bar(y=[1, 2])))
    second = fw.figure_widget(go.Figure(go.Bar(y=[3])))
    assert opened == ["WidgetModel", "AnyModel", "AnyModel"], opened
    assert fig._plotly_library is second._plotly_library is fw.plotly_library()
    assert fw.plotly_library() is not library and fw.plotly_library().comm is not None


def _bar_colors(traces) -> list:
    out = []
    for t in traces:
        if t.get("type") == "bar":
            c = (t.get("marker") or {}).get("color")
            if isinstance(c, (list, tuple)):
                out.append(list(c))
    return out


def _is_color(c) -> bool:
    return isinstance(c, str) and re.fullmatch(r"#[0-9A-Fa-f]{6}|white|rgb.*", c) is not None


@pytest.mark.parametrize("which", ["block_map", "page_table", "timeline"])
def test_widget_traces_and_updates_carry_colors_not_indices(which):
    dash = _views()
    view = getattr(dash, which)
    _ = view.widget
    fig = view._figure_widget
    to_json = fig.traits()["_widget_data"].metadata["to_json"]
    sent = to_json(fig._widget_data, fig)
    colors = _bar_colors(sent)
    assert all(_is_color(c) for cs in colors for c in cs), colors
    assert which == "timeline" or any(colors), "the view draws colored bars"
    messages = []
    fig.observe(lambda ch: messages.append(ch["new"]), names=["_py2js_update"])
    dash.index = 1  # a step: the update message the browser gets
    updates = [fig.traits()["_py2js_update"].metadata["to_json"](m, fig)
               for m in messages if m]
    assert updates
    for u in updates:
        for key in ("marker.color",):
            for value in u["style_data"].get(key, []):
                assert isinstance(value, list) and all(_is_color(c) for c in value), value


def test_static_figures_carry_colors_not_indices():
    dash = _views()
    for view in dash.views:
        fig = static_bundle(view.figure())["application/vnd.plotly.v1+json"]
        assert all(_is_color(c) for cs in _bar_colors(fig["data"]) for c in cs)
    assert "Int16Array" not in json.dumps(fig)


def test_colors_resolve_only_through_an_index_scale():
    scale = [[0.0, "#000000"], [0.5, "#111111"], [1.0, "#222222"]]
    trace = {"type": "bar", "marker": {"color": np.array([2, 0, 1], dtype=np.int16),
                                       "colorscale": scale, "cmin": 0, "cmax": 2}}
    assert list(fw.resolve_trace(trace)["marker"]["color"]) == ["#222222", "#000000", "#111111"]
    continuous = {**trace, "marker": {**trace["marker"], "cmax": 10}}  # not an index scale
    assert fw.resolve_trace(continuous) is continuous
    named = {"type": "bar", "marker": {"color": ["red", "blue"], "colorscale": scale,
                                       "cmin": 0, "cmax": 2}}
    assert list(fw.resolve_trace(named)["marker"]["color"]) == ["red", "blue"]


def _title_lines(text: str) -> list[str]:
    return [re.sub(r"<[^>]+>", "", line) for line in text.split("<br>")]


def test_titles_fit_below_the_toolbar_and_say_the_step_once():
    dash = _views()
    for view in dash.views:
        fig = view.figure(2)
        title = fig.layout.title
        assert title.yref == "container" and title.pad.t >= MODEBAR_PX
        lines = _title_lines(title.text)
        assert sum(line.count("step 2/4") for line in lines) == 1, lines
        assert fig.layout.margin.t >= MODEBAR_PX + 18 * len(lines), (type(view), lines)
        width = fig.layout.width or 850
        assert all(len(line) * 0.6 * 13 <= width for line in lines), (type(view), lines)


def test_a_view_shown_after_a_run_that_ended_empty_opens_on_the_busiest_step():
    kv = KVCacheManager(num_blocks=24, block_size=4)
    view = BlockMap(kv)
    assert view.player.follow
    _run(kv, view)
    assert view.player.index == 4  # followed to the empty end, until looked at
    busiest = max(range(5), key=lambda i: (view.recorder[i].memory.used, i))
    bundle = view._repr_mimebundle_()
    assert view.index == busiest and not view.player.follow
    assert f"step {busiest}/4" in bundle["text/plain"]
    note = view.figure().layout.title.text
    assert "busiest step" in note and "step 4, the end, holds none" in note
    view.index = 0  # the learner moves: the note goes, and showing again does not jump
    assert "busiest" not in view.figure().layout.title.text
    view._repr_mimebundle_()
    assert view.index == 0


def test_a_view_shown_before_its_run_or_moved_by_the_learner_keeps_its_step():
    kv = KVCacheManager(num_blocks=24, block_size=4)
    before = BlockMap(kv)
    before._repr_mimebundle_()  # shown before the run: follows it to the end
    _run(kv, before)
    assert before.index == 4
    kv2 = KVCacheManager(num_blocks=24, block_size=4)
    moved = PageTable(kv2)
    _run(kv2, moved)
    moved.index = 3
    moved._repr_mimebundle_()
    assert moved.index == 3
    busy_end = Timeline(KVCacheManager(num_blocks=8, block_size=4))
    busy_end._repr_mimebundle_()
    assert busy_end.index == 0


def test_contiguous_vs_paged_legend_names_the_holes_with_the_lab_s_words():
    from pagedkit.sim.trace import TraceRequest
    from pagedkit.viz import replay

    trace = [TraceRequest("a", 0, 5, 3), TraceRequest("b", 0, 9, 3),
             TraceRequest("c", 1, 20, 4)]
    view = ContiguousVsPaged(replay(trace, num_blocks=12, block_size=4, policy="pow2"))
    names = [t.name for t in view.figure().data]
    assert any(n.startswith("free hole: stranded") and "external fragmentation" in n
               for n in names), names


def test_trace_names_say_the_number_is_a_request_rate():
    from pagedkit.sim.plots import trace_label

    assert trace_label("sharegpt@2") == "sharegpt at 2 req/s"
    assert trace_label("alpaca@30") == "alpaca at 30 req/s"
    assert trace_label("mine") == "mine"


def test_a_block_map_title_counts_the_steps_once_with_an_engine():
    """Issue #26: the title said "step 2/4 (after engine step 3)", two counters
    for one step. An engine's recording numbers its steps too; the title keeps
    the slider's."""
    from pagedkit import LLM, SamplingParams

    llm = LLM("tiny", num_blocks=32, block_size=4)
    view = BlockMap(llm)
    llm.generate(["Once upon a time"], SamplingParams(temperature=0, max_tokens=3))
    assert any(frame.step is not None for frame in view.recorder)
    for i in range(len(view.recorder)):
        text = " ".join(_title_lines(view.figure(i).layout.title.text))
        assert len(re.findall(r"\bstep\b", text)) == 1 and f"step {i}/" in text, text


@pytest.mark.parametrize("tokens, expected", [
    (3, "3 tokens in 1 block, 1 slot unfilled"),
    (4, "4 tokens in 1 block, 0 slots unfilled"),
    (5, "5 tokens in 2 blocks, 3 slots unfilled"),
    (1, "1 token in 1 block, 3 slots unfilled"),
])
def test_counts_and_nouns_agree(tokens, expected):
    """Issue #26: "1 slots unfilled". Counts in titles and hovers go through
    `plural`."""
    from pagedkit._validation import plural

    assert [plural(n, "slot") for n in (0, 1, 2)] == ["0 slots", "1 slot", "2 slots"]
    kv = KVCacheManager(num_blocks=8, block_size=4)
    view = PageTable(kv)
    kv.allocate_slots("A", list(range(tokens)))
    view.recorder.cut()
    view.index = view.player.last
    assert expected in " ".join(_title_lines(view.figure().layout.title.text))
    hover = " ".join(view.figure().data[0].hovertext or [])
    assert "1 tokens" not in hover and "1 slots" not in hover


def _step_in(text: str) -> int:
    return int(re.search(r"step (\d+)/\d+", text).group(1))


#: every way of looking at a view: what step each shows
LOOKS = {
    "index": lambda v: v.index,
    "repr": lambda v: _step_in(repr(v)),
    "print": lambda v: _step_in(str(v)),
    "text": lambda v: _step_in(v.text()),
    "summary": lambda v: _step_in(v.summary()),
    "figure": lambda v: _step_in(v.figure().layout.title.text),
    "display": lambda v: _step_in(v._repr_mimebundle_()["text/plain"]),
}


@pytest.mark.parametrize("first", list(LOOKS))
@pytest.mark.parametrize("kind", [BlockMap, PageTable, Timeline])
def test_every_way_of_looking_shows_the_same_step_whichever_comes_first(kind, first):
    """Issue #26 N7: `print(view)` after a run showed the last (empty) step,
    while displaying it showed the busiest and moved `view.index` there. One
    rule now (`open_on_busiest`, applied by every look): each way shows the
    busiest step, in any order, and looking again moves nothing."""
    kv = KVCacheManager(num_blocks=24, block_size=4)
    view = kind(kv)
    _run(kv, view)
    busiest = max(range(5), key=lambda i: (view.recorder[i].memory.used, i))
    assert busiest != 4
    seen = [LOOKS[first](view)] + [look(view) for look in LOOKS.values()]
    assert seen == [busiest] * len(seen), seen
    assert [look(view) for look in LOOKS.values()] == [busiest] * len(LOOKS)


@pytest.mark.parametrize("look", list(LOOKS))
def test_a_step_the_learner_set_even_the_last_is_kept_by_every_look(look):
    kv = KVCacheManager(num_blocks=24, block_size=4)
    view = BlockMap(kv)
    _run(kv, view)
    view.index = 4  # the learner asks for the empty end
    assert LOOKS[look](view) == 4 and view.index == 4
    assert "busiest" not in view.figure().layout.title.text


def test_a_dashboards_text_and_display_show_the_same_step():
    kv = KVCacheManager(num_blocks=24, block_size=4)
    dash = Dashboard(kv)
    _run(kv, dash.block_map)
    text = str(dash)
    assert dash.index == 3 and "step 3/4" in text and "step 3/4" in repr(dash)


@pytest.mark.parametrize("look", list(LOOKS))
def test_a_view_first_looked_at_before_its_run_follows_it_to_the_end(look):
    kv = KVCacheManager(num_blocks=24, block_size=4)
    view = BlockMap(kv)
    LOOKS[look](view)
    _run(kv, view)
    assert [one(view) for one in LOOKS.values()] == [4] * len(LOOKS)
