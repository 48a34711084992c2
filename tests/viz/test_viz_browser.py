"""The block map in a real browser: JupyterLab (headless) runs a small notebook that
shows the map mid-run (step 4 of 8, blocks in use), and Chromium (Debian's, driven by
Playwright) checks what plotly.js holds and draws: one cell per block, each with its
x, y and base (widgets first shown mid-run once lost them in the browser), on every row
of the grid; then that "next step", "play" and a page reload change or keep it as they
should.

Skipped with a reason where Chromium or Playwright is missing, unless
PAGEDKIT_REQUIRE_BROWSER=1 (CI sets it): then it fails instead. Screenshots go to
test-artifacts/viz/.
"""

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = Path(__file__).with_name("block_map_notebook.ipynb")
ARTIFACTS = ROOT / "test-artifacts" / "viz"
CHROMIUM = "/usr/bin/chromium"
NUM_BLOCKS = 64  # what the notebook builds: 4 rows of 16
ROWS = 4
SHOWN_STEP = 4  # the step the notebook shows
LAST_STEP = 8


def _need(condition: bool, reason: str) -> None:
    if condition:
        return
    if os.environ.get("PAGEDKIT_REQUIRE_BROWSER") == "1":
        pytest.fail(f"PAGEDKIT_REQUIRE_BROWSER=1 but {reason}")
    pytest.skip(reason)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def lab(tmp_path):
    """A throwaway JupyterLab on a free port, serving a copy of the notebook."""
    _need(Path(CHROMIUM).exists() or shutil.which("chromium") is not None,
          f"chromium is not installed (apt-get install -y chromium); looked for {CHROMIUM}")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        _need(False, "playwright is not installed (pip install playwright)")
    root = tmp_path / "root"
    root.mkdir()
    shutil.copy(NOTEBOOK, root / "block_map.ipynb")
    env = dict(os.environ)
    for name in ("JUPYTER_CONFIG_DIR", "JUPYTER_RUNTIME_DIR", "JUPYTERLAB_SETTINGS_DIR",
                 "JUPYTERLAB_WORKSPACES_DIR", "IPYTHONDIR"):
        env[name] = str(tmp_path / name.lower())
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.pop("PAGEDKIT_VIZ", None)
    port = _free_port()
    log = open(tmp_path / "jupyter.log", "w")  # noqa: SIM115  (closed below)
    proc = subprocess.Popen(
        [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--allow-root",
         "--ip=127.0.0.1", f"--port={port}", "--IdentityProvider.token=",
         "--ServerApp.password=", "--LabApp.expose_app_in_browser=True",
         f"--ServerApp.root_dir={root}"],
        env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"{url}/api/status", timeout=2)
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    log.flush()
                    pytest.fail("JupyterLab did not start:\n"
                                + (tmp_path / "jupyter.log").read_text()[-3000:])
                time.sleep(0.5)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def _state(page):
    """What plotly.js holds for the cells (trace 0) and the token bars (trace 1), and
    what it drew: cell shapes and the rows they sit on."""
    return page.evaluate("""() => {
        const gd = document.querySelector('.js-plotly-plot');
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
            colors: numbers(cells.marker && cells.marker.color),
            fill: numbers(tokens.y).map(v => Math.round(v * 1000)),
            drawn: drawn.length, drawn_rows: tops.size,
            title: title ? title.textContent : ''};
    }""")


def _check_complete(state, label):
    """Every cell holds a number for x, y and base, and the grid has all its rows."""
    assert (state["x"], state["y"], state["base"]) == (NUM_BLOCKS,) * 3, (label, state)
    assert (state["rows"], state["columns"]) == (ROWS, NUM_BLOCKS // ROWS), (label, state)
    assert state["drawn"] == NUM_BLOCKS and state["drawn_rows"] == ROWS, (label, state)
    assert len(state["colors"]) == NUM_BLOCKS and len(state["fill"]) == NUM_BLOCKS, (label, state)


def _wait_title(page, text, timeout=30_000):
    page.wait_for_function(
        "(text) => { const t = document.querySelector('.js-plotly-plot .gtitle');"
        " return t && t.textContent.includes(text); }", arg=text, timeout=timeout)


def test_block_map_renders_and_steps_in_jupyterlab(lab):
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM if Path(CHROMIUM).exists() else shutil.which("chromium"),
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update"])
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 1000})
            page.goto(f"{lab}/lab/tree/block_map.ipynb", timeout=60_000)
            page.wait_for_function("window.jupyterapp && window.jupyterapp.shell"
                                   " && document.querySelector('.jp-Notebook')",
                                   timeout=60_000)
            accept = page.locator(".jp-Dialog .jp-mod-accept")
            page.wait_for_timeout(1500)
            if accept.count():  # "Select Kernel"
                accept.first.click()
            page.wait_for_function("""() => {
                const w = window.jupyterapp.shell.currentWidget;
                return w && w.sessionContext && w.sessionContext.session
                    && w.sessionContext.session.kernel; }""", timeout=60_000)
            page.evaluate("() => { window.jupyterapp.commands.execute("
                          "'notebook:run-all-cells'); }")
            page.wait_for_selector(".js-plotly-plot .barlayer .trace .point", timeout=90_000)
            _wait_title(page, f"step {SHOWN_STEP}/{LAST_STEP}")
            page.wait_for_timeout(500)
            shown = _state(page)
            _check_complete(shown, "shown mid-run")
            assert sum(c > 0 for c in shown["colors"]) > 0 and max(shown["fill"]) > 0, shown
            page.locator(".js-plotly-plot").first.screenshot(path=ARTIFACTS / "block_map.png")

            page.get_by_role("button", name="▶").click()  # next step
            _wait_title(page, f"step {SHOWN_STEP + 1}/")
            page.wait_for_timeout(500)
            one = _state(page)
            _check_complete(one, "after next step")
            assert (one["fill"], one["colors"]) != (shown["fill"], shown["colors"])

            page.locator(".widget-play button").first.click()  # play to the end
            _wait_title(page, f"step {LAST_STEP}/{LAST_STEP}", timeout=60_000)
            page.wait_for_timeout(500)
            end = _state(page)
            _check_complete(end, "after play")
            assert end["fill"] != one["fill"] and "shared" in end["title"]

            # Reload the page, kernel alive: the widget is rebuilt from the kernel's copy
            page.evaluate("() => window.jupyterapp.commands.execute('docmanager:save')")
            page.wait_for_timeout(1000)
            page.reload()
            page.wait_for_function("window.jupyterapp && window.jupyterapp.shell"
                                   " && document.querySelector('.jp-Notebook')",
                                   timeout=60_000)
            _wait_title(page, "step ", timeout=60_000)
            page.wait_for_timeout(1000)
            again = _state(page)
            assert f"step {LAST_STEP}/{LAST_STEP}" in again["title"], again["title"]
            _check_complete(again, "after a page reload")
            assert (again["fill"], again["colors"]) == (end["fill"], end["colors"])
            page.locator(".js-plotly-plot").first.screenshot(path=ARTIFACTS / "block_map_end.png")
            page.screenshot(path=ARTIFACTS / "jupyterlab.png", full_page=True)
        finally:
            browser.close()
