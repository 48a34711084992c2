"""The figure's front end (figure_widget._LOADER) run in Node with a fake widget manager:
how it finds plotly's module through the figure's reference to the kernel's library
model (issue #26), once per page, and what a view says when it cannot.

The browser test (test_widget_state_browser.py) does this for real in JupyterLab; this
runs in a second wherever ``node`` is installed (skipped where it is not), and covers
the paths a JupyterLab page does not take: no library on the page, a library without
the module, a manager that exposes no ``get_model`` (anywidget's ``host.getModel``).
"""

import json
import shutil
import subprocess

import pytest

pytest.importorskip("plotly")

from pagedkit.viz import figure_widget as fw

NODE = shutil.which("node")

#: Node has no DOM and cannot import a blob: URL: a document that makes notes, and blob
#: URLs as data: URLs. plotly's module is a stand-in whose view marks its element drawn.
HARNESS = r"""
globalThis.document = { createElement: (tag) => ({ tag, style: {} }) };
globalThis.Blob = class { constructor(parts) { this.source = parts.join(""); } };
URL.createObjectURL = (b) => "data:text/javascript;base64,"
  + Buffer.from(b.source).toString("base64");
URL.revokeObjectURL = () => {};
const errors = [];
console.error = (...args) => errors.push(args.map(String).join(" "));
const loader = (await import(process.argv[2])).default;
const PLOTLY = "export default () => ({ initialize({ model }) { model.ready = true; },"
  + " render({ model, el }) { el.drawn = model.ready; } });";
const asked = [];
const manager = (models) => ({ get_model: async (id) => {
  asked.push(id);
  if (!(id in models)) throw new Error("widget model not found");
  return models[id]; } });
const figure = (ref, models) => ({ get: (k) => (k === "_plotly_library" ? ref : undefined),
                                   widget_manager: models && manager(models) });
const library = (source) => ({ get: (k) => (k === "source" ? source : undefined) });
async function view(model, host) {
  const el = { replaceChildren(node) { this.note = node.textContent; } };
  await loader.render({ model, el, host });
  return { drawn: !!el.drawn, note: el.note || null };
}
const out = {};
out.noLibrary = await view(figure("IPY_MODEL_gone", {}));
out.noModule = await view(figure("IPY_MODEL_lib", { lib: library("") }));
out.noReference = await view(figure(null, {}));
out.noLookup = await view(figure("IPY_MODEL_lib", null));  // no manager, no host
out.asked = asked.splice(0);
const host = { getModel: async (ref) => { asked.push(ref); return library(PLOTLY); } };
out.throughHost = await view(figure("IPY_MODEL_lib", null), host);
out.askedHost = asked.splice(0);
out.again = await view(figure("IPY_MODEL_other", {}));  // the module is cached: nobody asked
out.askedAgain = asked.splice(0);
out.errors = errors.length;
console.log(JSON.stringify(out));
"""


@pytest.fixture(scope="module")
def loader_run(tmp_path_factory):
    if NODE is None:
        pytest.skip("node is not installed: the loader runs in the browser test only")
    import plotly

    work = tmp_path_factory.mktemp("loader")
    module = work / "loader.mjs"
    module.write_text(fw._LOADER % {"version": plotly.__version__})
    harness = work / "harness.mjs"
    harness.write_text(HARNESS)
    done = subprocess.run([NODE, str(harness), module.as_uri()], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_view_without_its_library_says_so_instead_of_drawing_nothing(loader_run):
    for case, words in (("noLibrary", "widget model gone) is not on this page"),
                        ("noModule", "widget model lib holds no plotly module"),
                        ("noReference", "names no plotly library"),
                        ("noLookup", "cannot look widget model lib up")):
        shown = loader_run[case]
        assert not shown["drawn"] and shown["note"], (case, shown)
        assert "cannot be drawn" in shown["note"] and words in shown["note"], shown
        assert "Run its cell again" in shown["note"]
    assert loader_run["errors"] == 4  # each also logged, for the console
    # a failed load is not cached: each view asked again
    assert loader_run["asked"] == ["gone", "lib"]


def test_the_reference_resolves_through_anywidget_s_host_where_no_manager_is_exposed(
        loader_run):
    assert loader_run["throughHost"] == {"drawn": True, "note": None}
    assert loader_run["askedHost"] == ["anywidget:lib"]


def test_plotly_s_module_is_loaded_once_per_page(loader_run):
    assert loader_run["again"] == {"drawn": True, "note": None}
    assert loader_run["askedAgain"] == []
