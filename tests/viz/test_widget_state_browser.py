"""A reopened notebook shows its widgets (issue #26: "Loading widget..." until
re-run). `python -m pagedkit lab` gives JupyterLab the default that saves widget
state with a notebook (`pagedkit.lab.SETTINGS`, in overrides.d); here JupyterLab
reads that very file from its settings folder, a notebook with a dashboard (three
figures) runs and is saved, and opened again without running a cell its figures
are drawn from the saved state.

The saved state must carry plotly's front end once, in the kernel's library model,
not once per figure (issue #26: 15 MB for three views). Each reopening is in a
fresh page (no plotly.js cached in it), so the figures draw only if the front end
resolves their reference to the library; and with the library taken out of the
saved state, each figure says in its place that it cannot be drawn. Skipped like
the other browser test where Chromium or Playwright is missing, unless
PAGEDKIT_REQUIRE_BROWSER=1. Screenshots: test-artifacts/viz/reopened-*.png."""

import contextlib
import json
import os
from pathlib import Path

import nbformat
import pytest
from lab_browser import FIGURES_JS, JupyterLab, LabPage, missing, open_browser
from nbformat.sign import NotebookNotary

from pagedkit import lab

CELL = """from pagedkit import LLM, SamplingParams
from pagedkit.viz import Dashboard
llm = LLM("tiny", num_blocks=32, block_size=4)
dash = Dashboard(llm)
llm.generate(["Once upon a time"], SamplingParams(n=3, temperature=1.0, seed=0, max_tokens=12))
dash"""
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "viz"


def _saved_state(path: Path) -> dict:
    return json.loads(path.read_text())["metadata"]["widgets"][
        "application/vnd.jupyter.widget-state+json"]["state"]


def _check_plotly_saved_once(path: Path) -> str:
    """The saved state holds plotly's module once, in the library the figures name;
    return the library's model id."""
    state = _saved_state(path)
    big = {mid: s["model_name"] for mid, s in state.items()
           if any(isinstance(v, str) and len(v) > 1_000_000 for v in s["state"].values())}
    assert len(big) == 1 and list(big.values()) == ["WidgetModel"], big
    (library,) = big
    refs = [s["state"].get("_plotly_library") for s in state.values()
            if s["model_name"] == "AnyModel"]
    assert refs == [f"IPY_MODEL_{library}"] * 3, refs  # the dashboard's three figures
    print(f"saved: {path.stat().st_size:,} bytes, {len(state)} models")
    return library


def _three_drawn(page: LabPage) -> list[dict]:
    """The open notebook's figures once all three hold traces (or after 3 minutes: the
    caller asserts on what is there)."""
    with contextlib.suppress(Exception):
        page.page.wait_for_function(
            f"() => {{ const f = ({FIGURES_JS})(window.jupyterapp.shell.currentWidget.node);"
            " return f.length === 3 && f.every(g => g.traces > 0); }",
            timeout=180_000, polling=500)
    return page.figures()


def _close(page: LabPage) -> None:
    page.page.evaluate("""async () => { const w = window.jupyterapp.shell
        .currentWidget; await w.sessionContext.shutdown(); w.dispose(); }""")


def test_a_reopened_notebook_draws_its_dashboard_from_one_copy_of_plotly(tmp_path):
    reason = missing()
    if reason:
        if os.environ.get("PAGEDKIT_REQUIRE_BROWSER") == "1":
            pytest.fail(f"PAGEDKIT_REQUIRE_BROWSER=1 but {reason}")
        pytest.skip(reason)
    from playwright.sync_api import sync_playwright

    root = tmp_path / "root"
    root.mkdir()
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(CELL)])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    nbformat.write(nb, root / "reopen.ipynb")
    settings = tmp_path / "app_settings"
    assert lab.write_settings(settings / "overrides.d")
    server = JupyterLab(root, tmp_path, extra=(f"--LabApp.app_settings_dir={settings}",))
    try:
        with sync_playwright() as p:
            browser = open_browser(p)
            try:
                page = LabPage(browser, server)
                page.open("reopen.ipynb")
                page.run_all()
                assert [f["traces"] > 0 for f in _three_drawn(page)] == [True] * 3
                page.page.evaluate("async () => { await window.jupyterapp.commands"
                                   ".execute('docmanager:save'); }")
                _close(page)
                page.close()
                library = _check_plotly_saved_once(root / "reopen.ipynb")

                # a fresh page (nothing cached), a fresh kernel, no cell runs
                page = LabPage(browser, server)
                page.open("reopen.ipynb")
                figures = _three_drawn(page)
                assert len(figures) == 3 and all(f["traces"] > 0 for f in figures), figures
                shown = page.current().inner_text()
                assert "model not found" not in shown and "Loading widget" not in shown
                assert "cannot be drawn" not in shown
                ARTIFACTS.mkdir(parents=True, exist_ok=True)
                page.current().screenshot(path=ARTIFACTS / "reopened-dashboard.png")
                _close(page)
                page.close()

                # the same state without the library: each figure says why it is empty
                saved = nbformat.read(root / "reopen.ipynb", as_version=4)
                del saved.metadata["widgets"][
                    "application/vnd.jupyter.widget-state+json"]["state"][library]
                NotebookNotary().sign(saved)  # edited here: trusted, or no widget renders
                nbformat.write(saved, root / "reopen.ipynb")
                page = LabPage(browser, server)
                page.open("reopen.ipynb")
                page.page.wait_for_function(
                    "() => window.jupyterapp.shell.currentWidget.node"
                    ".querySelectorAll('.pagedkit-plotly-error').length === 3",
                    timeout=120_000, polling=500)
                notes = page.current().locator(".pagedkit-plotly-error").all_inner_texts()
                assert all("cannot be drawn" in n and library in n for n in notes), notes
                assert page.figures() == []  # no plot drawn empty in its place
                page.current().screenshot(path=ARTIFACTS / "reopened-without-library.png")
                page.close()
            finally:
                browser.close()
    finally:
        server.close()
