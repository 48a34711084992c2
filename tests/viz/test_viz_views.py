"""Views and controls, driven headless by setting the step index (Play never ticks
in a kernel): what the figures hold, the text forms, and the static fallbacks."""

import json
import time

import numpy as np
import pytest
from viz_helpers import admit, emit, step

from pagedkit.memory import KVCacheManager
from pagedkit.scheduler import SchedulerEventKind
from pagedkit.sim import TraceRequest
from pagedkit.viz import (
    BlockMap,
    ContiguousVsPaged,
    Dashboard,
    PageTable,
    Player,
    Recorder,
    Throttle,
    Timeline,
    display_mode,
    replay,
)
from pagedkit.viz.controls import SPEEDS


def three_steps():
    """Step 1: A (9 tokens) and B (6) start; step 2: B forks into B2, which copies
    B's partial last block on write; step 3: A finishes, its full blocks stay cached."""
    kv = KVCacheManager(16, 4, enable_prefix_caching=True, num_swap_blocks=4)
    rec = Recorder.attach(kv)
    admit(kv, "A", "r1", list(range(9)))
    admit(kv, "B", "r2", [50, 51, 52, 53, 54, 55])
    step(kv, 0)
    kv.fork("B", "B2")
    emit(kv, SchedulerEventKind.ADMIT, "B2", "r2")  # a sample of r2, as the engine says
    kv.allocate_slots("B2", [60])
    step(kv, 1)
    kv.free("A")
    emit(kv, SchedulerEventKind.FINISH, "A", "stop")
    step(kv, 2)
    return kv, rec


def test_block_map_widget_follows_the_step_index():
    _, rec = three_steps()
    view = BlockMap(rec)
    assert view.index == 3  # a live recording opens at its newest frame
    view.widget  # noqa: B018
    fig = view._figure_widget
    cells, tokens = fig.data[0], fig.data[1]
    assert len(cells.x) == 16
    view.index = 1
    assert np.allclose(tokens.y[:5], [0.9, 0.9, 0.225, 0.9, 0.45])
    assert len(fig.data[3].x) == 0 and "step 1/3" in fig.layout.title.text
    view.index = 2
    assert list(fig.data[3].text) == ["×2"]  # B's first block, shared with B2
    assert list(fig.data[5].x) == [4, 5] and list(fig.data[5].y) == [0.45, 0.45]  # cow 4->5
    view.index = 3
    assert list(np.asarray(cells.marker.color)[:3]) == [1, 1, 0]  # A's full blocks: cached
    assert view.last_update_s > 0
    with pytest.raises(IndexError, match="step index 4 is outside the recording"):
        view.index = 4


def test_play_is_linked_to_the_slider_and_buttons_step():
    _, rec = three_steps()
    view = BlockMap(rec)
    view.index = 0
    controls = view.player._controls or (view.widget and view.player._controls)
    assert controls.play.max == controls.slider.max == 3
    controls.forward.click()
    assert view.index == 1 and controls.slider.value == 1
    controls.slider.value = 3  # what the browser's Play does through the link
    assert view.index == 3
    controls.back.click()
    assert view.index == 2
    view.player.last_draw_s = 0.0  # a machine that draws at once
    controls.speed.value = "4×"
    assert controls.play.interval == 100


def test_play_goes_no_faster_than_the_views_draw():
    """Issue #26: at 8x the slider (linked to Play in the browser) ran ahead of
    the drawing: "step 27" shown while it said 36. Play's interval is the
    speed's, or the last step's drawing time when that is longer."""
    _, rec = three_steps()
    view = BlockMap(rec)
    view.index = 0
    controls = view.player._controls or (view.widget and view.player._controls)
    controls.speed.value = "8×"
    view.player.subscribe(lambda i: time.sleep(0.3))  # a slow machine's drawing
    controls.slider.value = 1  # a tick of Play, through the slider
    assert view.player.last_draw_s >= 0.3
    assert controls.play.interval >= 300 > SPEEDS["8×"]
    view.player.last_draw_s = 0.01  # drawing got fast again: the speed asked for
    controls.speed.value = "1×"
    assert controls.play.interval == SPEEDS["1×"]


def test_live_mode_follows_new_frames_through_a_throttle():
    kv = KVCacheManager(8, 2)
    rec = Recorder.attach(kv)
    now = [0.0]
    player = Player(rec, min_interval=1.0, clock=lambda: now[0])
    view = BlockMap(rec, player=player)
    view.widget  # noqa: B018  (displayed: the throttle now matters)
    step(kv, 0)
    assert view.index == 1
    now[0] = 0.5
    step(kv, 1)
    assert view.index == 1  # too soon: skipped, pending
    player.flush()
    assert view.index == 2
    now[0] = 5.0
    with player.live():
        step(kv, 2)
        now[0] = 5.1
        step(kv, 3)
    assert view.index == 4  # the context manager draws the last frame on exit
    view.index = 1  # looking back stops following
    step(kv, 4)
    assert view.index == 1 and not player.follow
    now[0] = 10.0
    player.on_step(object())  # an LLM.generate on_step callback turns following back on
    assert player.follow and view.index == 5


def test_throttle_and_player_validate_their_arguments():
    t = Throttle(0.5, clock=iter([0.0, 0.1, 0.6]).__next__)
    assert [t.ready(), t.ready(), t.ready()] == [True, False, True]
    with pytest.raises(ValueError, match="min_interval"):
        Throttle(-1)
    with pytest.raises(TypeError, match="integer"):
        Player([1, 2]).index = "1"


def test_page_table_view_draws_released_blocks_in_their_place():
    kv = KVCacheManager(16, 4)
    rec = Recorder.attach(kv)
    admit(kv, "A", "r1", list(range(14)))  # blocks 0..3
    kv.release_outside_window("A", 14, 5)  # blocks 0 and 1 go
    step(kv, 0)
    view = PageTable(rec, seq="A")
    assert view.summary() == ("step 1/1, page table of sequence A (request r1): logical blocks "
                              "0-1 released by the sliding window; logical blocks 2-3 are "
                              "physical blocks 2, 3")
    fig = view.figure()
    assert list(fig.data[4].text) == ["L0", "L1", "L2", "L3"]  # every logical block, in place
    assert [float(x) for x in fig.data[5].x] == [2.0, 3.0]  # arrows only from the live ones
    assert fig.data[2].hovertext[0].startswith("logical block 0: released")
    assert fig.data[2].hovertext[2] == "logical block 2 → physical block 2: 4/4 tokens"
    assert "logical blocks 0-1 released (sliding window)" in fig.layout.title.text
    assert "6 tokens in 2 blocks, 2 slots unfilled" in fig.layout.title.text


def test_page_table_view_shows_the_chosen_sequence():
    _, rec = three_steps()
    view = PageTable(rec, seq="A")
    assert repr(view) == "PageTable(step 3/3, sequence 'A' holds no blocks)"
    view.index = 1
    assert repr(view) == ("PageTable(step 1/3, page table of sequence A (request r1): logical "
                          "blocks 0-2 are physical blocks 0, 1, 2)")
    fig = view.figure()
    assert [float(x) for x in fig.data[5].x] == [0.0, 1.0, 2.0]  # arrows end at blocks 0, 1, 2
    assert list(fig.data[4].text) == ["L0", "L1", "L2"]
    view.seq = None  # the oldest sequence
    view.index = 2
    assert view.summary().endswith("sequence A (request r1): logical blocks 0-2 are physical "
                                   "blocks 0, 1, 2")
    view.seq = "B2"
    assert view.summary() == ("step 2/3, page table of sequence B2 (request r2): logical "
                              "blocks 0-1 are physical blocks 3, 5")
    view.widget  # noqa: B018
    assert ("B2", "B2") in view._chooser.options
    view._chooser.value = "B"
    assert view.seq == "B" and "B: 3 -> 4" in view._figure_widget.layout.title.text


def test_timeline_view_moves_only_its_cursor():
    _, rec = three_steps()
    view = Timeline(rec)
    view.widget  # noqa: B018
    fig = view._figure_widget
    assert list(fig.data[0].y) == [0, 5, 6, 3]  # used blocks
    assert list(fig.data[1].y) == [0, 0, 0, 2]  # cached
    view.index = 1
    assert list(fig.data[8].x) == [1, 1]
    assert "2 running / 0 waiting / 0 swapped" in view.summary()


def test_contiguous_vs_paged_view_draws_regions_holes_and_blocks():
    trace = [TraceRequest("a", 0, 5, 3), TraceRequest("b", 0, 9, 3),
             TraceRequest("c", 1, 20, 4)]
    view = ContiguousVsPaged(replay(trace, num_blocks=12, block_size=4, policy="pow2"))
    assert view.index == 2  # the busiest step: the replay ends with nothing in use
    view.index = 1
    fig = view.figure()
    tokens, ahead, never = fig.data[:3]
    # pow2 reserves prompt + the output rounded up: a 5 + 4, b 9 + 4; each holds
    # its prompt (the token its prefill produced is stored the next iteration)
    assert list(tokens.base) == [0, 9] and list(tokens.x) == [5, 9]
    assert list(ahead.x) == [3, 3] and list(never.x) == [1, 1]  # 8 of 9, 12 of 13
    assert list(fig.data[5].base) == [22] and list(fig.data[5].x) == [26]  # the free rest
    assert list(fig.data[5].hovertext) == ["free hole of 26 slots at 22"]  # nobody waits
    assert list(fig.data[3].x) == [4, 1, 4, 4, 1]  # paged: a in 2 blocks, b in 3
    w = view.figures()
    assert w["contiguous_wasted_share"] == pytest.approx((6 + 2) / 48)
    assert w["paged_unfilled"] == 3 + 3
    assert view.summary().startswith("pow2 vs paged, step 1/")
    assert "stranded in holes" in view.text()


def test_hole_notes_name_the_region_the_waiting_request_needs():
    trace = [TraceRequest("a", 0, 8, 8), TraceRequest("b", 0, 8, 8), TraceRequest("c", 0, 8, 8),
             TraceRequest("d", 0, 4, 30)]
    cmp = replay(trace, num_blocks=14, block_size=4, policy="oracle")  # 56 slots
    view = ContiguousVsPaged(cmp)
    i = next(i for i, c in enumerate(cmp.contiguous) if c.next_size and c.holes)
    view.index = i
    c = cmp.contiguous[i]
    notes = list(view.figure().data[5].hovertext)
    assert c.holes and all(size < c.next_size for _, size in c.holes)  # d must wait
    assert c.external_fragmentation > 0
    assert notes == [f"free hole of {size} slots at {start} (too small for the next request's "
                     f"{c.next_size}-slot region): stranded" for start, size in c.holes]
    assert c.external_fragmentation == c.stats.free > 0
    # a, b and c finish together: d's region fits the empty space, admitted next step
    j = next(j for j, c in enumerate(cmp.contiguous) if c.next_size and not c.regions)
    view.index = j
    assert list(view.figure().data[5].hovertext) == [
        "free hole of 56 slots at 0 (the next request's 34-slot region fits)"]
    assert cmp.contiguous[j + 1].regions[0].request == "d"


def test_reprs_are_stable_and_informative():
    _, rec = three_steps()
    view = BlockMap(rec)
    assert repr(view) == "BlockMap(16 blocks, step 3/3: 3 used, 1 shared, 2 cached)"
    view.widget  # noqa: B018  (building the widget must not change the text)
    assert repr(view) == "BlockMap(16 blocks, step 3/3: 3 used, 1 shared, 2 cached)"
    assert str(view).splitlines()[1] == "    0 ~~.2bb.........."  # B2 inherits r2's letter
    assert str(view).splitlines()[-1] == "      B=r2"
    dash = Dashboard(rec)
    assert repr(dash) == ("Dashboard(16 blocks, step 3/3: 3 used, 1 shared, 2 cached; page table "
                          "of sequence B (request r2): logical blocks 0-1 are physical blocks "
                          "3, 4)")
    assert repr(dash).count("step") == 1  # N9: it said the step twice, the table unlabelled
    assert len(dash.widget.children) == 5  # three figures, the sequence chooser, the controls
    dash.index = 1  # one player moves all three views
    assert dash.timeline._figure_widget.data[8].x == (1, 1)
    assert "step 1/3" in dash.page_table._figure_widget.layout.title.text


def test_text_map_names_every_request_apart_past_26():
    """A .. Z, then AA, AB: letters never wrap onto another request; ``+`` is a
    ref count of ten or more and ``?`` a block whose owner was never seen."""
    from pagedkit.viz.block_map import request_name

    assert [request_name(i) for i in (0, 25, 26, 27, 51, 52, 701, 702)] == \
        ["A", "Z", "AA", "AB", "AZ", "BA", "ZZ", "AAA"]
    kv = KVCacheManager(40, 2)
    kv.allocator.allocate()  # held outside any page table: owner unknown
    rec = Recorder.attach(kv)
    for i in range(28):
        admit(kv, f"s{i}", f"r{i}", [i, i])
    for i in range(10):
        kv.fork("s0", f"f{i}")  # s0's block shared by 11
    step(kv, 0)
    lines = BlockMap(rec).text().splitlines()
    cells = lines[1][6:]
    assert cells[:2] == "? " and cells[2:4] == "+ " and cells[4:6] == "B "
    assert "AB" in lines[2] and "A " not in lines[2][6:].replace("AA", "").replace("AB", "")
    legend = lines[-1]
    assert legend.strip().startswith("A=r0, B=r1") and "AA=r26, AB=r27" in legend
    assert legend.count("A=") == legend.count("A=r")  # one name per request


def test_a_contiguous_simulator_is_refused_with_what_to_use_instead():
    from pagedkit.sim import Simulator, Trace
    from pagedkit.sim import TraceRequest as Request

    trace = Trace("t", (Request(0, 0.0, 4, 4),))
    with pytest.raises(TypeError, match=r"Orca \(Pow2\) Simulator .* no blocks to draw.*"
                                        r"ContiguousVsPaged\(replay"):
        BlockMap(Simulator(trace, "pow2"))
    paged = Simulator(trace, "paged")
    view = BlockMap(paged)
    paged.run()
    assert view.recorder[-1].memory.used == 0 and len(view.recorder) > 1


def test_widget_mode_bundle_has_the_widget_and_the_text(monkeypatch):
    monkeypatch.setenv("PAGEDKIT_VIZ", "widget")
    _, rec = three_steps()
    bundle = BlockMap(rec)._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle
    assert bundle["text/plain"].startswith("BlockMap(16 blocks")


def test_static_fallback_is_a_plotly_figure_with_the_same_text(monkeypatch):
    monkeypatch.setenv("PAGEDKIT_VIZ", "static")
    _, rec = three_steps()
    for view in (BlockMap(rec), PageTable(rec), Timeline(rec)):
        bundle = view._repr_mimebundle_()
        fig = bundle["application/vnd.plotly.v1+json"]
        assert fig["data"] and json.dumps(fig)  # plain JSON, no widget
        assert "uid" not in fig["data"][0]
        assert "<div" in bundle["text/html"] and "pagedkit-figure-" in bundle["text/html"]
        assert bundle["text/plain"] == repr(view)


def test_without_a_kernel_views_show_text(monkeypatch):
    monkeypatch.delenv("PAGEDKIT_VIZ", raising=False)
    assert display_mode() == "text"  # pytest is no Jupyter kernel
    _, rec = three_steps()
    assert BlockMap(rec)._repr_mimebundle_() == {"text/plain": BlockMap(rec).text()}
    monkeypatch.setenv("PAGEDKIT_VIZ", "fancy")
    with pytest.raises(ValueError, match="PAGEDKIT_VIZ must be one of widget, static, text"):
        display_mode()


@pytest.mark.parametrize("num_blocks, legend_rows", [(8, 4), (12, 4), (64, 3), (4096, 3)])
def test_block_map_sizes_itself_to_fit_its_legend(num_blocks, legend_rows):
    """The legend's rows fit under the cells (plotly scrolls a legend taller than
    its maxheight, by default half the figure), and the CPU entry is drawn like
    the CPU cells: hatched, in a request's color."""
    from pagedkit.viz.palette import OWNER_COLORS

    fig = BlockMap(KVCacheManager(num_blocks=num_blocks, block_size=4)).figure()
    layout = fig.layout
    entries = [t for t in fig.data if t.showlegend is not False]
    assert len(entries) == 7
    per_row = -(-len(entries) // legend_rows)
    plot_w = layout.width - layout.margin.l - layout.margin.r
    entry = layout.legend.entrywidth + 40 + 5  # plotly: swatch and gaps, then 5 px apart
    assert per_row * entry - 5 < plot_w < (per_row + 1) * entry - 5
    legend_h = legend_rows * 21 + 10
    assert layout.margin.b >= legend_h and layout.legend.maxheight >= legend_h
    assert layout.width <= 840
    cpu = next(t for t in entries if t.name == "swapped out to CPU")
    assert cpu.type == "bar" and cpu.marker.pattern.shape == "/"
    assert cpu.marker.color == OWNER_COLORS[0]


def test_contiguous_vs_paged_fits_a_notebook_output_area():
    trace = [TraceRequest("A", 0, 4, 4)]
    view = ContiguousVsPaged(replay(trace, num_blocks=4, block_size=4))
    assert view.figure().layout.width <= 840


def test_views_speak_one_language():
    """In Chinese, a page table's summary and the comparison's axis are Chinese through and
    through (they read "没有序列 at 第 0/0 步" and "paged" / "contiguous" before)."""
    from pagedkit.i18n import get_language, set_language

    _, rec = three_steps()
    trace = [TraceRequest("a", 0, 5, 3), TraceRequest("b", 0, 9, 3)]
    before = get_language()
    set_language("zh-CN")
    try:
        view = PageTable(rec, seq="A")
        view.index = 1
        summary, none = view.summary(), PageTable(rec).summary(0)
        axis = ContiguousVsPaged(replay(trace, num_blocks=12, block_size=4,
                                       policy="pow2")).figure().layout.yaxis.ticktext
    finally:
        set_language(before)
    assert summary == "第 1/3 步，序列 A（请求 r1）的页表：逻辑页块 0-2 依次位于物理页块 0、1、2"
    assert none == "第 0/3 步，没有序列持有页块"
    assert list(axis) == ["分页式", "连续<br>（pow2）"]
