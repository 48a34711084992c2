"""Where are we being displayed? A widget frontend, or only a static page or a terminal.

Widgets need a kernel *and* a browser-side widget manager (JupyterLab,
Notebook 7, VS Code, Colab with its custom widget manager on). The kernel
cannot see the browser, so the choice is made from what it can see:

* in a Jupyter kernel with ipywidgets and anywidget installed: widgets;
* in a kernel without them: a static plotly figure;
* anywhere else (a script, a terminal): a text summary;
* ``PAGEDKIT_VIZ=widget|static|text`` overrides all of this — set it to
  ``static`` before ``jupyter nbconvert --execute --to html`` so the exported
  page shows figures instead of empty widget placeholders.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

MODES = ("widget", "static", "text")
_ENV = "PAGEDKIT_VIZ"


def in_kernel() -> bool:
    """Is this code running inside a Jupyter kernel (not plain Python or a terminal)?"""
    if "IPython" not in sys.modules:
        return False
    from IPython import get_ipython

    shell = get_ipython()
    return shell is not None and getattr(shell, "kernel", None) is not None


def widgets_available() -> bool:
    try:
        import anywidget  # noqa: F401  (plotly's FigureWidget is built on it)
        import ipywidgets  # noqa: F401
    except ImportError:
        return False
    return True


def display_mode() -> str:
    """``"widget"``, ``"static"`` or ``"text"``: how views show themselves right now."""
    forced = os.environ.get(_ENV, "").strip().lower()
    if forced:
        if forced not in MODES:
            raise ValueError(f"{_ENV} must be one of {', '.join(MODES)}; got {forced!r}")
        if forced == "widget" and not widgets_available():
            return "static"
        return forced
    if not in_kernel():
        return "text"
    return "widget" if widgets_available() else "static"


_colab_enabled = False


def enable_colab_widgets() -> None:
    """Colab draws third-party widgets only with its custom widget manager on
    (``google.colab.output.enable_custom_widget_manager()``); do it once."""
    global _colab_enabled
    if _colab_enabled or "google.colab" not in sys.modules:
        return
    try:
        from google.colab import output

        output.enable_custom_widget_manager()
        _colab_enabled = True
    except Exception:  # an older Colab: the widget still works after a manual enable
        pass


def after_cell(callback: Callable[[], None]) -> bool:
    """Run `callback` once when the current notebook cell finishes.

    A throttled live view skips frames while the engine runs; this draws the
    last one even when nobody calls `flush()`. Returns False outside IPython.
    """
    if "IPython" not in sys.modules:
        return False
    from IPython import get_ipython

    shell = get_ipython()
    if shell is None:
        return False

    def once(*_: object) -> None:
        shell.events.unregister("post_execute", once)
        callback()

    shell.events.register("post_execute", once)
    return True
