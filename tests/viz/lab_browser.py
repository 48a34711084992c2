"""Drive notebooks in a real JupyterLab with Debian's Chromium (Playwright), for the browser tests.

`JupyterLab` starts a throwaway server on a free port over a *copy* of the notebooks (so
nothing the page does, autosave included, can write to the repository), with its own
config, settings (autosave off) and runtime dirs. `open_browser` launches Chromium with
the flags CI uses. `Notebook` opens one notebook, runs all its cells, waits on page
conditions (never on sleeps) and reads what plotly.js holds for every figure on the page.

Needs chromium and playwright; without them the callers skip (or fail under
PAGEDKIT_REQUIRE_BROWSER=1).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update"]


def chromium_path() -> str | None:
    return CHROMIUM if Path(CHROMIUM).exists() else shutil.which("chromium")


def missing() -> str | None:
    """Why the browser tests cannot run here, or None."""
    if chromium_path() is None:
        return f"chromium is not installed (apt-get install -y chromium); looked for {CHROMIUM}"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed (pip install playwright)"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class JupyterLab:
    """A JupyterLab server over `root` (a directory of copied notebooks)."""

    def __init__(self, root: Path, work: Path, *, code: Path = ROOT / "src",
                 extra: tuple[str, ...] = ()) -> None:
        self.root = root
        env = dict(os.environ)
        for name in ("JUPYTER_CONFIG_DIR", "JUPYTER_RUNTIME_DIR", "JUPYTERLAB_SETTINGS_DIR",
                     "JUPYTERLAB_WORKSPACES_DIR", "IPYTHONDIR"):
            env[name] = str(work / name.lower())
        settings = work / "jupyterlab_settings_dir"
        settings.mkdir(parents=True, exist_ok=True)
        # read-only use: no autosave, no "save before closing?" dialogs; no "get notified
        # about Jupyter news?" toast, which sits over the page's lower right
        (settings / "overrides.json").write_text(json.dumps({
            "@jupyterlab/docmanager-extension:plugin": {"autosave": False},
            "@jupyterlab/apputils-extension:notification": {"fetchNews": "false"}}))
        for plugin, values in (("docmanager-extension/plugin", {"autosave": False}),
                               ("apputils-extension/notification", {"fetchNews": "false"})):
            user = settings / "@jupyterlab" / f"{plugin}.jupyterlab-settings"  # as a user's
            user.parent.mkdir(parents=True, exist_ok=True)
            user.write_text(json.dumps(values))
        env["JUPYTERLAB_SETTINGS_DIR"] = str(settings)
        # the kernels import pagedkit from `code` (this checkout unless told otherwise)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(code), env.get("PYTHONPATH")]))
        env.setdefault("OMP_NUM_THREADS", "1")
        env.setdefault("HF_HUB_OFFLINE", "1")
        env.pop("PAGEDKIT_VIZ", None)
        self.log_path = work / "jupyter.log"
        self._log = open(self.log_path, "w")  # noqa: SIM115  (closed in close())
        port = _free_port()
        self.url = f"http://127.0.0.1:{port}"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--allow-root",
             "--ip=127.0.0.1", f"--port={port}", "--IdentityProvider.token=",
             "--ServerApp.password=", "--LabApp.expose_app_in_browser=True",
             "--LabApp.news_url=", "--LabApp.check_for_updates_class="
             "jupyterlab.NeverCheckForUpdate", f"--ServerApp.root_dir={root}", *extra],
            env=env, stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 90
        while True:
            try:
                urllib.request.urlopen(f"{self.url}/api/status", timeout=2)
                return
            except OSError as error:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    log = self.log()
                    self.close()
                    raise RuntimeError("JupyterLab did not start:\n" + log[-3000:]) from error
                time.sleep(0.5)

    def log(self) -> str:
        self._log.flush()
        return self.log_path.read_text()

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self._log.close()


def open_browser(playwright):
    return playwright.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_ARGS)


#: what plotly.js holds for every figure in `root`: traces, points, title, a signature
FIGURES_JS = """(root) => [...root.querySelectorAll('.js-plotly-plot')].map((gd, i) => {
    const arr = v => (v && typeof v === 'object' && v.length !== undefined) ? Array.from(v) : v;
    const data = (gd.data || []).map(t => ({
        type: t.type, name: t.name, x: arr(t.x), y: arr(t.y), z: arr(t.z), base: arr(t.base),
        text: arr(t.text), color: arr(t.marker && t.marker.color)}));
    const t = gd.querySelector('.gtitle');
    const title = t ? t.textContent : '';
    return {index: i, traces: data.length, title: title,
            signature: JSON.stringify([data, title, (gd.layout && gd.layout.shapes) || []])};
})"""

#: the open notebook: cells queued or running, unrun, kernel status, errors on the page
CELLS_JS = """() => {
    const w = window.jupyterapp.shell.currentWidget;
    const cells = w.content.widgets.filter(c => c.model.type === 'code');
    const busy = cells.filter(c => c.promptNode && c.promptNode.textContent.includes('*'));
    const unrun = cells.filter(c => c.model.sharedModel.source.trim()
                                  && c.model.executionCount === null);
    const kernel = w.sessionContext.session && w.sessionContext.session.kernel;
    const errors = [...w.node.querySelectorAll(
        '.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.error"]')]
        .map(e => e.textContent.slice(0, 800));
    const widgetErrors = [...w.node.querySelectorAll('.jp-OutputArea-output')]
        .map(e => e.textContent)
        .filter(t => /Error displaying widget|\\[anywidget\\]|Failed to (load|initialize)/
                     .test(t)).map(t => t.slice(0, 400));
    return {name: w.context.path, cells: cells.length, busy: busy.length, unrun: unrun.length,
            status: kernel ? kernel.status : 'none', errors, widgetErrors};
}"""

_KERNEL_IDLE_JS = """(name) => { const w = window.jupyterapp.shell.currentWidget;
    if (!w || !w.context || w.context.path !== name || !w.sessionContext) return false;
    const k = w.sessionContext.session && w.sessionContext.session.kernel;
    return !!k && k.status === 'idle'; }"""


# True once JupyterLab has restored its layout. Polled, with the flag set by the
# promise's callback (armed again if the page reloaded): awaiting the promise inside
# one evaluate() failed now and then with "Resulting promise was garbage collected".
_RESTORED_JS = """() => { const app = window.jupyterapp;
    if (!app) return false;
    if (window.__pagedkitRestored === undefined) {
        window.__pagedkitRestored = false;
        app.restored.then(() => { window.__pagedkitRestored = true; }); }
    return window.__pagedkitRestored === true; }"""


class LabPage:
    """One JupyterLab page; notebooks open in it one after another (JupyterLab loads once).
    `console` collects the page's messages; `mark()` / `since(mark)` slice them."""

    def __init__(self, browser, lab: JupyterLab, *, cpu_throttle: float = 0) -> None:
        self.page = browser.new_page(viewport={"width": 1400, "height": 1000})
        self.console: list[str] = []
        self.page.on("console", lambda m: self.console.append(f"{m.type}: {m.text}"))
        self.page.on("pageerror", lambda e: self.console.append(f"pageerror: {e}"))
        if cpu_throttle > 1:  # a slow machine, on purpose (the experiments)
            cdp = self.page.context.new_cdp_session(self.page)
            cdp.send("Emulation.setCPUThrottlingRate", {"rate": cpu_throttle})
        # ?reset: an empty layout, not the one an earlier page of this server left (a
        # notebook reopened by the restore, behind whatever this page opens)
        self.page.goto(f"{lab.url}/lab?reset", timeout=180_000)
        self.page.wait_for_function("() => window.jupyterapp && window.jupyterapp.shell"
                                    " && window.jupyterapp.commands.hasCommand("
                                    "'notebook:run-all-cells')", timeout=180_000)
        # the restored layout (a launcher) must not replace the notebook opened next
        self.page.wait_for_function(_RESTORED_JS, timeout=180_000, polling=250)

    def open(self, name: str, timeout_s: float = 420) -> None:
        """Open notebook `name` (relative to the server's root) and wait for its idle kernel."""
        self.page.evaluate("(path) => { window.jupyterapp.commands.execute("
                           "'docmanager:open', {path, factory: 'Notebook'}); }", name)
        deadline = time.monotonic() + timeout_s
        asked = time.monotonic()
        while not self.page.evaluate(_KERNEL_IDLE_JS, name):
            if time.monotonic() - asked > 30 and self.page.evaluate(
                    "(path) => { const w = window.jupyterapp.shell.currentWidget;"
                    " return !(w && w.context && w.context.path === path); }", name):
                # another panel is in front: open (activate) the notebook again, idempotent
                self.page.evaluate("(path) => { window.jupyterapp.commands.execute("
                                   "'docmanager:open', {path, factory: 'Notebook'}); }", name)
                asked = time.monotonic()
            accept = self.page.locator(".jp-Dialog .jp-mod-accept")
            if accept.count():  # "Select Kernel"
                accept.first.click()
            if time.monotonic() > deadline:
                state = self.page.evaluate("""() => { const w = window.jupyterapp.shell
                    .currentWidget; const s = w && w.sessionContext;
                    return {path: w && w.context && w.context.path, kernel: s && s.session
                    && s.session.kernel && s.session.kernel.status,
                    dialog: [...document.querySelectorAll('.jp-Dialog')].map(
                        d => d.textContent.slice(0, 200))}; }""")
                raise AssertionError(f"{name}: no idle kernel after {timeout_s} s: {state}")
            self.page.wait_for_timeout(250)

    def run_all(self, timeout_s: float = 900) -> dict:
        """Run every cell; return the cell state once nothing is queued or running."""
        self.page.evaluate("() => window.jupyterapp.commands.execute('notebook:run-all-cells')")
        self.page.wait_for_function(f"""() => {{ const s = ({CELLS_JS})();
            return s.busy === 0 && s.unrun === 0 && s.status === 'idle'; }}""",
                                    timeout=timeout_s * 1000, polling=500)
        return self.cells()

    def cells(self) -> dict:
        return self.page.evaluate(CELLS_JS)

    def figures(self, root: str = "currentWidget") -> list[dict]:
        """What plotly.js holds for each figure of the open notebook (or of an element)."""
        if root == "currentWidget":
            return self.page.evaluate(
                f"() => ({FIGURES_JS})(window.jupyterapp.shell.currentWidget.node)")
        return self.page.locator(root).evaluate(FIGURES_JS)

    def wait_all_drawn(self, timeout_s: float = 60) -> list[dict]:
        """Wait until every figure of the open notebook holds a trace, or the timeout
        passes (the caller then asserts on what is there, with the details)."""
        with contextlib.suppress(Exception):
            self.page.wait_for_function(
                f"() => {{ const f = ({FIGURES_JS})(window.jupyterapp.shell.currentWidget.node);"
                " return f.length > 0 && f.every(g => g.traces > 0); }",
                timeout=timeout_s * 1000, polling=500)
        return self.figures()

    def mark(self) -> int:
        return len(self.console)

    def since(self, mark: int) -> list[str]:
        return self.console[mark:]

    def current(self):
        """A locator of the open notebook's panel (other panels stay in the page)."""
        panel = self.page.evaluate("() => window.jupyterapp.shell.currentWidget.id")
        return self.page.locator(f"[id='{panel}']")

    def close_notebook(self) -> None:
        """Shut the open notebook's kernel down and close it, unsaved (read-only use)."""
        self.page.evaluate("""async () => { const w = window.jupyterapp.shell.currentWidget;
            await w.sessionContext.shutdown(); w.context.model.dirty = false; w.dispose(); }""")

    def close(self) -> None:
        self.page.close()


def plotly_warnings(messages: list[str]) -> list[str]:
    """The messages of plotly.js (its WARN: lines), anywidget, or any page error."""
    slow = re.compile(r"Plugin .* (took [0-9.]+ ?ms to activate|is taking too long)")
    return [m for m in messages if not slow.search(m) and (
        "WARN:" in m or "Invalid color" in m or "anywidget" in m.lower()
        or "plotly" in m.lower() or m.startswith("pageerror"))]
