"""The dashboard: block map, page table and timeline under one set of controls.

All three views share one `Player`, so scrubbing the slider moves the block
map, the selected sequence's page table and the timeline cursor together.
"""

from __future__ import annotations

from typing import Any

from ..i18n import join_clauses
from .block_map import BlockMap, as_recorder
from .controls import Played, Player
from .frontend import display_mode, enable_colab_widgets
from .page_table_view import PageTable
from .timeline_view import Timeline
from .view import open_on_busiest


class Dashboard(Played):
    """``Dashboard(llm)`` (or a recorder, engine, simulator, KVCacheManager)."""

    def __init__(self, source: Any, *, columns: int | None = None,
                 min_interval: float = 0.15) -> None:
        self.recorder = as_recorder(source)
        self.player = Player(self.recorder, min_interval=min_interval)
        self.block_map = BlockMap(self.recorder, player=self.player, columns=columns)
        self.page_table = PageTable(self.recorder, player=self.player)
        self.timeline = Timeline(self.recorder, player=self.player)
        self._widget: Any = None

    @property
    def views(self) -> tuple[BlockMap, PageTable, Timeline]:
        return self.block_map, self.page_table, self.timeline

    def __repr__(self) -> str:
        """One line, labelled (a saved notebook shows it in the widget's place):
        the block map's counts at the step, then whose page table and where
        its blocks lie."""
        return f"Dashboard({self.summary()})"

    def __str__(self) -> str:
        return self.text()

    def summary(self, index: int | None = None) -> str:
        """One line, as the repr says it: the block map's counts at step `index`
        (default: the one shown), and the page table there."""
        return join_clauses([self.block_map.summary(index), self.page_table.describe(
            self.block_map._at(index))])

    def text(self, index: int | None = None) -> str:
        """Every view's text form at step `index` (default: the one shown)."""
        return "\n".join(v.text(index) for v in self.views)

    @property
    def widget(self) -> Any:
        if self._widget is None:
            import ipywidgets as w

            parts = [v.widget.children[:-1] for v in self.views]  # each minus its controls
            self._widget = w.VBox([*(c for p in parts for c in p), self.player.widget])
        return self._widget

    def _ipython_display_(self) -> None:
        from IPython.display import display

        open_on_busiest(self.player, self.recorder)
        mode = display_mode()
        if mode == "widget":
            enable_colab_widgets()
            bundle = dict(self.widget._repr_mimebundle_())
            bundle["text/plain"] = repr(self)
            display(bundle, raw=True)
        else:
            for view in self.views:
                display(view)
