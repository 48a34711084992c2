"""The block map in a real browser: JupyterLab (headless) runs a small notebook,
Chromium (Debian's, driven by Playwright) checks that the widget drew one cell per
block and that pressing "next step" and "play" changes the drawing.

Skipped with a reason where Chromium or Playwright is missing, unless
PAGEDKIT_REQUIRE_BROWSER=1 (CI sets it): then it fails instead. A screenshot
goes to test-artifacts/viz/.
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
NUM_BLOCKS = 64  # what the notebook builds
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


def _cells(page):
    """The heights of the token bars (trace 2) and the count of cells (trace 1)."""
    return page.evaluate("""() => {
        const plot = document.querySelector('.js-plotly-plot');
        const traces = plot.querySelectorAll('.barlayer .trace');
        const cells = traces[0].querySelectorAll('.point');
        const tokens = [...traces[1].querySelectorAll('.point path')].map(p => p.getAttribute('d'));
        return {cells: cells.length, tokens: tokens.join('|'), title: plot.querySelector('.gtitle')
                ? plot.querySelector('.gtitle').textContent : ''};
    }""")


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
            page.wait_for_function("document.querySelector('.js-plotly-plot .gtitle')"
                                   " && document.querySelector('.js-plotly-plot .gtitle')"
                                   ".textContent.includes('step 0/')", timeout=30_000)
            start = _cells(page)
            assert start["cells"] == NUM_BLOCKS, start
            assert f"step 0/{LAST_STEP}" in start["title"]

            page.get_by_role("button", name="▶").click()  # next step
            page.wait_for_function("document.querySelector('.js-plotly-plot .gtitle')"
                                   ".textContent.includes('step 1/')", timeout=30_000)
            one = _cells(page)
            assert one["cells"] == NUM_BLOCKS and one["tokens"] != start["tokens"]

            page.locator(".widget-play button").first.click()  # play to the end
            page.wait_for_function(
                "document.querySelector('.js-plotly-plot .gtitle')"
                f".textContent.includes('step {LAST_STEP}/{LAST_STEP}')", timeout=60_000)
            page.wait_for_timeout(500)
            end = _cells(page)
            assert end["cells"] == NUM_BLOCKS and end["tokens"] != one["tokens"]
            assert "1 shared" in end["title"] or "shared" in end["title"]
            page.locator(".js-plotly-plot").first.screenshot(path=ARTIFACTS / "block_map.png")
            page.screenshot(path=ARTIFACTS / "jupyterlab.png", full_page=True)
        finally:
            browser.close()
