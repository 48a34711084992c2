"""A reopened notebook shows its widgets (issue #26: "Loading widget..." until
re-run). `python -m pagedkit lab` gives JupyterLab the default that saves widget
state with a notebook (`pagedkit.lab.SETTINGS`, in overrides.d); here JupyterLab
reads that very file from its settings folder, a notebook with a block map runs
and is saved, and opened again without running a cell its block map is drawn
from the saved state. Skipped like the other browser test where Chromium or
Playwright is missing, unless PAGEDKIT_REQUIRE_BROWSER=1."""

import json
import os

import nbformat
import pytest
from lab_browser import JupyterLab, LabPage, missing, open_browser

from pagedkit import lab

CELL = """from pagedkit import LLM, SamplingParams
from pagedkit.viz import BlockMap
llm = LLM("tiny", num_blocks=32, block_size=4)
view = BlockMap(llm)
llm.generate(["Once upon a time"], SamplingParams(n=3, temperature=1.0, seed=0, max_tokens=12))
view"""


def test_a_reopened_notebook_shows_its_block_map(tmp_path):
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
                assert [f["traces"] > 0 for f in page.wait_all_drawn()] == [True]
                page.page.evaluate("async () => { await window.jupyterapp.commands"
                                   ".execute('docmanager:save'); }")
                page.page.evaluate("""async () => { const w = window.jupyterapp.shell
                    .currentWidget; await w.sessionContext.shutdown(); w.dispose(); }""")
                saved = json.loads((root / "reopen.ipynb").read_text())
                assert "widgets" in saved["metadata"]  # the state went into the file
                page.open("reopen.ipynb")  # a fresh kernel; no cell runs
                figures = page.wait_all_drawn()
                assert figures and all(f["traces"] > 0 for f in figures), figures
                shown = page.current().inner_text()
                assert "model not found" not in shown and "Loading widget" not in shown
                page.close()
            finally:
                browser.close()
    finally:
        server.close()
