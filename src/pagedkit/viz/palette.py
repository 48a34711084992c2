"""Colors: one per request, the same in every view and at every step.

A block is colored by the request of its oldest owner, so the samples of one
request (forked sequences sharing a prompt) share a color and a learner sees
sharing as one color spread over several page tables. Colors are handed out
in the order requests were first seen in the recording, so scrubbing back
and forth never repaints a request.

Views draw with numeric color indices into one discrete colorscale: plotly
checks a numeric array far faster than thousands of color strings, which is
what keeps a 4,096-block map quick to update.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping

from .frames import CACHED, FREE, BlockState, Frame

OWNER_COLORS = (
    "#1F77B4", "#FF7F0E", "#2CA02C", "#D62728", "#9467BD", "#8C564B",
    "#E377C2", "#BCBD22", "#17BECF", "#393B79", "#AD494A", "#8CA252",
)
FREE_COLOR = "#F2F2F2"
CACHED_COLOR = "#7B8BA3"  # slate: holds tokens, owned by no one
UNKNOWN_COLOR = "#5F5F5F"  # in use before the recorder listened
COW_COLOR = "#FFB000"
SWAP_COLOR = "#4D4D4D"

#: Color indices: free, cached, then one per owner color, then unknown owner.
FREE_INDEX, CACHED_INDEX = 0, 1
UNKNOWN_INDEX = 2 + len(OWNER_COLORS)
NUM_INDICES = UNKNOWN_INDEX + 1


def tint(color: str, strength: float = 0.28) -> str:
    """`color` mixed with white: the empty part of a block keeps its owner's hue."""
    r, g, b = (int(color[i:i + 2], 16) for i in (1, 3, 5))
    mix = [round(c * strength + 255 * (1 - strength)) for c in (r, g, b)]
    return "#{:02X}{:02X}{:02X}".format(*mix)


def colorscale(colors: list[str]) -> list[list[float | str]]:
    """A colorscale on which the value *i* is exactly ``colors[i]`` (cmin 0, cmax n-1)."""
    n = len(colors) - 1
    return [[i / n, c] for i, c in enumerate(colors)]


#: What a block's filled part is drawn in, and what its empty part is drawn in.
FILL_SCALE = colorscale([FREE_COLOR, CACHED_COLOR, *OWNER_COLORS, UNKNOWN_COLOR])
CELL_SCALE = colorscale([FREE_COLOR, tint(CACHED_COLOR), *map(tint, OWNER_COLORS),
                         tint(UNKNOWN_COLOR)])


def owner_key(frame: Frame, seq: Hashable) -> Hashable:
    """What a sequence is colored by: its request when known."""
    return frame.request(seq)


def color_index(frame: Frame, block: BlockState, first_seen: Mapping[Hashable, int]) -> int:
    if block.status == FREE:
        return FREE_INDEX
    if block.status == CACHED:
        return CACHED_INDEX
    if not block.owners:
        return UNKNOWN_INDEX
    return owner_color_index(owner_key(frame, block.owners[0]), first_seen)


def owner_color_index(key: Hashable, first_seen: Mapping[Hashable, int]) -> int:
    order = first_seen.get(key)
    return UNKNOWN_INDEX if order is None else 2 + order % len(OWNER_COLORS)
