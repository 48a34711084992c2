"""The widgets in a real browser: JupyterLab (headless) runs every lab that shows a widget,
all cells, in one Chromium page (Debian's, driven by Playwright), and checks what the
learner would see:

* every plotly figure on the page holds traces (issue #11: a dashboard's block map once
  came up as empty axes — 0 traces in the page, 13 in the kernel — on a busy machine);
* no cell shows an error and no widget shows an error in place of its view;
* the console carries no plotly.js warning (numeric bar colors once logged thousands of
  ``WARN: Invalid color specifier``), no anywidget error and no page error;
* a dashboard follows its controls: step back, the slider, step forward and play each
  change all three of its figures;
* the block map notebook's map holds x, y and base for all 64 cells, after steps, play
  and a page reload (kernel alive).

The notebooks are copies in a temporary directory (the labs are never saved; autosave is
off). Skipped with a reason where Chromium or Playwright is missing, unless
PAGEDKIT_REQUIRE_BROWSER=1 (CI sets it): then it fails instead. Screenshots go to
test-artifacts/viz/. Waits are on page conditions, never on sleeps.
"""

import os
import re
import shutil
import time
from pathlib import Path

import pytest
from lab_browser import (
    FIGURES_JS,
    JupyterLab,
    LabPage,
    missing,
    open_browser,
    plotly_warnings,
)

ROOT = Path(__file__).resolve().parents[2]
LABS = ROOT / "labs"
NOTEBOOK = Path(__file__).with_name("block_map_notebook.ipynb")
ARTIFACTS = ROOT / "test-artifacts" / "viz"
#: every lab that shows a widget (a test below checks this list against the labs)
WIDGET_LABS = ("00_start_here", "02_contiguous_waste", "03_paging", "06_preemption",
               "07_sharing", "09_beyond")
DASHBOARD_LAB = "03_paging"
NUM_BLOCKS, ROWS = 64, 4  # what the block map notebook builds: 4 rows of 16
SHOWN_STEP, LAST_STEP = 4, 8


#: labs whose widgets draw a real vLLM: CI's main run has no vLLM, so they are not run
#: here (lab 10: nbval runs it in CI's vLLM step; its browser screenshots, docs/vllm.md)
VLLM_LABS = ("10_meet_vllm",)


def test_the_browser_test_covers_every_lab_with_a_widget():
    uses = {p.stem for p in LABS.glob("*.ipynb")
            if any(name in p.read_text() for name in
                   ("BlockMap(", "Dashboard(", "PageTable(", "Timeline(", "ContiguousVsPaged("))}
    assert uses == set(WIDGET_LABS) | set(VLLM_LABS)


@pytest.fixture(scope="module")
def browser_page(tmp_path_factory):
    """One JupyterLab over copies of the labs and the block map notebook, one page."""
    reason = missing()
    if reason:
        if os.environ.get("PAGEDKIT_REQUIRE_BROWSER") == "1":
            pytest.fail(f"PAGEDKIT_REQUIRE_BROWSER=1 but {reason}")
        pytest.skip(reason)
    from playwright.sync_api import sync_playwright

    work = tmp_path_factory.mktemp("jupyterlab")
    root = work / "root"
    shutil.copytree(LABS, root, ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    shutil.copy(NOTEBOOK, root / "block_map.ipynb")
    lab = JupyterLab(root, work)
    try:
        with sync_playwright() as p:
            browser = open_browser(p)
            try:
                page = LabPage(browser, lab)
                yield page
                page.close()
            finally:
                browser.close()
    finally:
        lab.close()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)


def _run_lab(page: LabPage, name: str) -> list[dict]:
    """Open and run a notebook; check cells, widgets, figures and console; return figures."""
    mark = page.mark()
    page.open(f"{name}.ipynb")
    cells = page.run_all()
    assert not cells["errors"], (name, cells["errors"])
    assert not cells["widgetErrors"], (name, cells["widgetErrors"])
    figures = page.wait_all_drawn()
    empty = [f for f in figures if f["traces"] == 0]
    assert figures and not empty, (name, f"{len(empty)} of {len(figures)} figures hold no "
                                   "trace", [f["title"] for f in figures])
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    plots = page.current().locator(".js-plotly-plot")
    for i in range(plots.count()):  # each figure as the learner sees it
        plots.nth(i).screenshot(path=ARTIFACTS / f"{name}-figure{i}.png")
    warnings = plotly_warnings(page.since(mark))
    assert not warnings, (name, len(warnings), warnings[:5])
    return figures


@pytest.mark.parametrize("name", [n for n in WIDGET_LABS if n != DASHBOARD_LAB])
def test_lab_draws_every_figure_without_warnings(browser_page, name):
    _run_lab(browser_page, name)
    browser_page.close_notebook()


def _dashboard(page: LabPage):
    """The dashboard's box: the innermost widget box holding three figures and a slider."""
    found = page.current().evaluate("""(panel) => {
        const boxes = [...panel.querySelectorAll('.jp-OutputArea-output .widget-vbox')]
            .filter(b => b.querySelectorAll('.js-plotly-plot').length === 3
                         && b.querySelector('.widget-slider'));
        if (!boxes.length) return 0;
        boxes[boxes.length - 1].setAttribute('data-pagedkit-test', 'dashboard');
        return boxes.length; }""")
    assert found, "no widget box with three figures and a slider (the dashboard)"
    return page.current().locator("[data-pagedkit-test=dashboard]")


def _signatures(page: LabPage, box) -> list[str]:
    return [f["signature"] for f in box.evaluate(
        f"(el) => ({FIGURES_JS})(el)")]


def _wait_all_change(page: LabPage, box, before: list[str], what: str) -> list[str]:
    handle = box.element_handle()
    try:
        page.page.wait_for_function(
            f"([el, before]) => {{ const now = ({FIGURES_JS})(el);"
            " return now.length === before.length"
            " && now.every((f, i) => f.signature !== before[i]); }",
            arg=[handle, before], timeout=60_000, polling=250)
    except Exception:
        now = _signatures(page, box)
        changed = [a != b for a, b in zip(before, now, strict=True)]
        raise AssertionError(f"after {what}, figures changed: {changed} "
                             "(block map, page table, timeline)") from None
    return _signatures(page, box)


def test_dashboard_follows_its_controls(browser_page):
    page = browser_page
    mark = page.mark()
    _run_lab(page, DASHBOARD_LAB)
    box = _dashboard(page)
    box.scroll_into_view_if_needed()
    now = _signatures(page, box)
    box.get_by_role("button", name="◀").click()  # one step back (live mode ends on the last)
    now = _wait_all_change(page, box, now, "step back")
    # the slider: type a step into its readout, as a learner jumps to a step
    readout = box.locator(".widget-slider .widget-readout").first
    readout.click()
    page.page.keyboard.press("Control+A")
    page.page.keyboard.type("10")
    page.page.keyboard.press("Enter")
    now = _wait_all_change(page, box, now, "setting the slider")
    box.get_by_role("button", name="▶").click()  # one step forward
    now = _wait_all_change(page, box, now, "step forward")
    box.locator(".widget-play button").first.click()  # play
    _wait_all_change(page, box, now, "play")
    plots = box.locator(".js-plotly-plot")  # while it plays: a busy step; one by one, as
    for i in range(plots.count()):  # the box is taller than the notebook's visible area
        plots.nth(i).screenshot(path=ARTIFACTS / f"dashboard-figure{i}.png")
    box.locator(".widget-play button").nth(1).click()  # stop
    _check_fits(page, box, narrow=False)  # this page's 1400 x 1000: every figure whole
    wide = page.page.viewport_size
    page.page.set_viewport_size(NARROW)
    try:
        _check_fits(page, box, narrow=True)
    finally:
        page.page.set_viewport_size(wide)
    warnings = plotly_warnings(page.since(mark))
    assert not warnings, (len(warnings), warnings[:5])
    page.close_notebook()


#: issue #26: JupyterLab at 1024 x 768 with the file browser open, an output area of
#: ~580 px; the block map is 714 px wide (16 columns of square cells)
NARROW = {"width": 1024, "height": 768}

#: the dashboard's layout against its output area: what sticks out past the area's
#: right edge outside a figure's scroll box (`pagedkit.viz.view.scroll_box`), and each
#: box: its right edge, its overflow, its width and its content's, and whether its
#: figure's right end can be scrolled into view
_FITS_JS = """(box) => {
    const out = box.closest('.jp-OutputArea-output');
    const edge = out.getBoundingClientRect().right + 1;
    const shown = e => { const r = e.getBoundingClientRect(); return r.width > 0 && r.height > 0; };
    const name = e => e.tagName.toLowerCase() + '.' + String(e.className.baseVal ?? e.className)
        .trim().split(/\\s+/).slice(0, 3).join('.');
    const loose = [...box.querySelectorAll('*')].filter(e => shown(e)
        && e.getBoundingClientRect().right > edge && !e.closest('.pagedkit-scroll'))
        .map(e => name(e) + ' ends at ' + Math.round(e.getBoundingClientRect().right));
    const boxes = [...box.querySelectorAll('.pagedkit-scroll')].map(b => {
        const left = b.scrollLeft;
        b.scrollLeft = b.scrollWidth;  // to the far right, as a learner drags the scrollbar
        const svg = b.querySelector('svg.main-svg');
        const reached = !!svg
            && svg.getBoundingClientRect().right <= b.getBoundingClientRect().right + 1;
        b.scrollLeft = left;
        return {right: b.getBoundingClientRect().right, overflow: getComputedStyle(b).overflowX,
                scrolls: b.scrollWidth > b.clientWidth + 1, reached,
                width: b.clientWidth, content: b.scrollWidth}; });
    return {edge, loose, boxes, figures: box.querySelectorAll('.js-plotly-plot').length,
            dashboard: box.scrollWidth <= box.clientWidth + 1,
            output: out.scrollWidth <= out.clientWidth + 1,
            browser: !window.jupyterapp.shell.leftCollapsed};
}"""


def _fits(layout: dict, narrow: bool) -> bool:
    """Nothing past the output area's right edge outside a figure's scroll box, each box
    within the area with its figure's right end in reach, no scrollbar on the dashboard
    or the output area (it would sit out of sight, below the controls). Narrow: every
    figure in a box, and the block map's scrolls (else the check proves nothing); wide:
    no box needs to scroll."""
    boxes = layout["boxes"]
    whole = (not layout["loose"] and layout["dashboard"] and layout["output"]
             and layout["browser"]
             and all(b["right"] <= layout["edge"] and b["overflow"] in ("auto", "scroll")
                     and b["reached"] for b in boxes))
    if narrow:
        return whole and len(boxes) == layout["figures"] == 3 and boxes[0]["scrolls"]
    return whole and not any(b["scrolls"] for b in boxes)


def _check_fits(page: LabPage, box, *, narrow: bool) -> None:
    """Wait (on the page's layout, up to a minute: the window may just have been resized)
    until the dashboard fits its output area as `_fits` says, or fail with what sticks out."""
    label = "narrow" if narrow else "wide"
    page.page.evaluate("() => window.jupyterapp.shell.activateById('filebrowser')")
    deadline = time.monotonic() + 60
    layout = box.evaluate(_FITS_JS)
    while not _fits(layout, narrow) and time.monotonic() < deadline:
        page.page.wait_for_timeout(250)
        layout = box.evaluate(_FITS_JS)
    block_map = box.locator(".js-plotly-plot").first
    block_map.scroll_into_view_if_needed()
    page.page.screenshot(path=ARTIFACTS / f"dashboard-{label}.png")
    if narrow:  # its right end, scrolled into view (headless Chromium hides scrollbars)
        scroll = "(p, x) => { const b = p.closest('.pagedkit-scroll'); if (b) b.scrollLeft = x; }"
        block_map.evaluate(scroll, 10_000)
        page.page.screenshot(path=ARTIFACTS / "dashboard-narrow-scrolled.png")
        block_map.evaluate(scroll, 0)
    assert _fits(layout, narrow), (label, page.page.viewport_size, layout)


# ------------------------------------------------- the block map notebook: cells and reload
def _state(page: LabPage):
    """What plotly.js holds for the cells (trace 0) and the token bars (trace 1), and
    what it drew: cell shapes and the rows they sit on."""
    return page.page.evaluate("""() => {
        const gd = window.jupyterapp.shell.currentWidget.node.querySelector('.js-plotly-plot');
        const list = v => (v && typeof v === 'object' && v.length !== undefined)
            ? Array.from(v) : [];
        const numbers = v => list(v).filter(n => typeof n === 'number' && isFinite(n));
        const [cells, tokens] = gd.data;
        const drawn = [...gd.querySelectorAll('.barlayer .trace')][0]
            .querySelectorAll('.point path');
        const tops = new Set([...drawn].map(p => {
            const m = /^M[^,]+,([-0-9.]+)/.exec(p.getAttribute('d') || '');
            return m ? Math.round(parseFloat(m[1])) : null; }).filter(y => y !== null));
        const title = gd.querySelector('.gtitle');
        return {
            x: numbers(cells.x).length, y: numbers(cells.y).length,
            base: numbers(cells.base).length,
            rows: new Set(numbers(cells.base)).size, columns: new Set(numbers(cells.x)).size,
            colors: list(cells.marker && cells.marker.color),
            fill: numbers(tokens.y).map(v => Math.round(v * 1000)),
            drawn: drawn.length, drawn_rows: tops.size,
            title: title ? title.textContent : ''};
    }""")


def _check_complete(state, label):
    """Every cell holds a number for x, y and base, and a color; the grid has all its rows."""
    assert (state["x"], state["y"], state["base"]) == (NUM_BLOCKS,) * 3, (label, state)
    assert (state["rows"], state["columns"]) == (ROWS, NUM_BLOCKS // ROWS), (label, state)
    assert state["drawn"] == NUM_BLOCKS and state["drawn_rows"] == ROWS, (label, state)
    assert len(state["colors"]) == NUM_BLOCKS and len(state["fill"]) == NUM_BLOCKS, (label, state)
    assert all(isinstance(c, str) and c.startswith("#") for c in state["colors"]), (label, state)


def _settled_state(page: LabPage, expected, seconds: float = 60.0):
    """`_state` once the plot shows `expected` (fill, colors), or after `seconds`:
    on a loaded machine the title can be drawn before the cells' new data."""
    deadline = time.monotonic() + seconds
    state = _state(page)
    while (state["fill"], state["colors"]) != expected and time.monotonic() < deadline:
        page.page.wait_for_timeout(250)
        state = _state(page)
    return state


def _wait_title(page: LabPage, text, timeout=60_000):
    page.page.wait_for_function(
        "(text) => { const t = window.jupyterapp.shell.currentWidget.node"
        ".querySelector('.js-plotly-plot .gtitle');"
        " return t && t.textContent.includes(text); }", arg=text, timeout=timeout)


def test_block_map_steps_plays_and_survives_a_reload(browser_page):
    page = browser_page
    mark = page.mark()
    page.open("block_map.ipynb")
    page.run_all()
    _wait_title(page, f"step {SHOWN_STEP}/{LAST_STEP}")
    shown = _state(page)
    _check_complete(shown, "shown mid-run")
    assert len(set(shown["colors"])) > 1 and max(shown["fill"]) > 0, shown

    page.current().get_by_role("button", name="▶").click()  # next step
    _wait_title(page, f"step {SHOWN_STEP + 1}/")
    one = _state(page)
    _check_complete(one, "after next step")
    assert (one["fill"], one["colors"]) != (shown["fill"], shown["colors"])

    page.current().locator(".widget-play button").first.click()  # play to the end
    _wait_title(page, f"step {LAST_STEP}/{LAST_STEP}")
    end = _state(page)
    _check_complete(end, "after play")
    assert end["fill"] != one["fill"] and "shared" in end["title"]

    # Reload the page, kernel alive: the widget is rebuilt from the kernel's copy (this
    # saves the temporary copy of this test notebook only: the state lives in the file)
    page.page.evaluate("() => window.jupyterapp.commands.execute('docmanager:save')")
    page.page.wait_for_function("() => !window.jupyterapp.shell.currentWidget.context.model"
                                ".dirty", timeout=30_000)
    page.page.reload()
    page.page.wait_for_function("() => window.jupyterapp && window.jupyterapp.shell"
                                " && window.jupyterapp.shell.currentWidget"
                                " && window.jupyterapp.shell.currentWidget.node"
                                ".querySelector('.js-plotly-plot .gtitle')", timeout=180_000)
    _wait_title(page, f"step {LAST_STEP}/{LAST_STEP}", timeout=120_000)
    again = _settled_state(page, (end["fill"], end["colors"]))
    _check_complete(again, "after a page reload")
    assert (again["fill"], again["colors"]) == (end["fill"], end["colors"])
    page.current().locator(".js-plotly-plot").first.screenshot(path=ARTIFACTS / "block_map_end.png")
    warnings = plotly_warnings(page.since(mark))
    assert not warnings, (len(warnings), warnings[:5])


# ------------------------------------------------- the Chinese edition (issue #29)
#: two Chinese labs with a widget and an exercise check (labs/zh-CN/, python -m pagedkit.i18n)
ZH_LABS = {"00_start_here": "页块图", "03_paging": "页表"}
CJK = re.compile(r"[\u4e00-\u9fff]")


@pytest.mark.parametrize("name", list(ZH_LABS))
def test_a_chinese_lab_shows_its_text_widgets_and_checks_in_chinese(browser_page, name):
    """The generated Chinese lab runs in the browser like its English original, and what
    the learner reads is Chinese: the markdown, the widget's title and legend (pagedkit's
    messages after set_language("zh-CN")), and an exercise check's verdict."""
    page = browser_page
    (ARTIFACTS / "zh-CN").mkdir(parents=True, exist_ok=True)
    figures = _run_lab(page, f"zh-CN/{name}")  # every figure drawn, no error, no warning
    panel = page.current()
    markdown = " ".join(panel.locator(".jp-MarkdownOutput").all_inner_texts())
    assert ZH_LABS[name] in markdown, markdown[:500]
    titles = [f["title"] for f in figures]
    assert any(CJK.search(t) for t in titles), titles
    legends = panel.locator(".js-plotly-plot .legendtext").all_text_contents()
    assert any(CJK.search(t) for t in legends), legends
    outputs = panel.locator(".jp-OutputArea-output")
    texts = outputs.all_text_contents()
    checks = [i for i, t in enumerate(texts) if ("❌" in t or "✘" in t) and "尚未编写" in t]
    assert checks, ("no exercise check said ❌ ... 尚未编写 (not written yet) in Chinese",
                    [t for t in texts if "❌" in t or "✘" in t][:3])
    check = outputs.nth(checks[0])
    check.scroll_into_view_if_needed()
    check.screenshot(path=ARTIFACTS / "zh-CN" / f"{name}-check.png")
    plot = panel.locator(".js-plotly-plot").first
    plot.scroll_into_view_if_needed()
    page.page.screenshot(path=ARTIFACTS / "zh-CN" / f"{name}-page.png")
    page.close_notebook()
