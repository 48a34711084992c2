"""Live widgets: watch blocks being allocated, shared, copied and evicted.

The model and the view are kept apart. A `Recorder` reads the real
`KVCacheManager` (and the scheduler's queues) at the end of every step into
a `Frame`, plain data, with the step's events as its log. Views draw frames:

* `BlockMap` — every physical block, colored by its request, filled by its
  tokens, with ref-count badges, copy-on-write flashes, cached and swapped
  blocks;
* `PageTable` — one sequence's logical blocks linked to its physical ones;
* `Timeline` — used / cached / free blocks and running / waiting / swapped
  requests over the steps, with preemptions;
* `ContiguousVsPaged` — one trace through a contiguous cache and a paged one
  (`replay`: two `pagedkit.sim.Simulator`s stepped together), side by side,
  with the waste figures;
* `Dashboard` — the first three under one set of controls.

::

    from pagedkit.viz import Dashboard
    dash = Dashboard(llm)                 # attach before generating
    dash                                  # display it
    llm.generate(prompts, params, on_step=dash.on_step)

Views never change the engine: they only listen. See docs/widgets.md.
"""

from .block_grid import BlockMapData, Grid, block_map_data, grid_for
from .block_map import BlockMap
from .compare_view import ContiguousVsPaged
from .controls import Player, Throttle
from .dashboard import Dashboard
from .frames import BlockState, Frame, MemoryCounts, RequestCounts, SwappedBlock
from .frontend import display_mode
from .page_table import PageTableData, PageTableRow, page_table
from .page_table_view import PageTable
from .recorder import Recorder
from .replay import Comparison, ContiguousFrame, PagedWaste, paged_waste, replay
from .timeline import TimelineData, timeline
from .timeline_view import Timeline

__all__ = [
    "BlockMap",
    "BlockMapData",
    "BlockState",
    "Comparison",
    "ContiguousFrame",
    "ContiguousVsPaged",
    "Dashboard",
    "Frame",
    "Grid",
    "MemoryCounts",
    "PageTable",
    "PageTableData",
    "PageTableRow",
    "PagedWaste",
    "Player",
    "Recorder",
    "RequestCounts",
    "SwappedBlock",
    "Throttle",
    "Timeline",
    "TimelineData",
    "block_map_data",
    "display_mode",
    "grid_for",
    "page_table",
    "paged_waste",
    "replay",
    "timeline",
]
