"""Colors: one per request, the same in every view and at every step.

A block is colored by the request of its oldest owner, in that owner's shade:
the sequences of one request (parallel samples, beams) share a hue and each has
a shade of it (base, darker, lighter, darkest), so a learner sees one request's
prompt blocks in its first sequence's shade spread over several page tables,
and where each sample or beam went its own way (all beams in one color hid
that, issue #26). Colors are handed out in the order requests were first seen
in the recording, shades in the order a request's sequences were, so scrubbing
back and forth never repaints a block.

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

#: Shades of a request's color, one per sequence (the fifth takes the first's again).
SHADES = (("base", 0.0), ("darker", -0.3), ("lighter", 0.4), ("darkest", -0.5))

#: Color indices: free, cached, then each owner color in each shade, then unknown owner.
FREE_INDEX, CACHED_INDEX = 0, 1
UNKNOWN_INDEX = 2 + len(OWNER_COLORS) * len(SHADES)
NUM_INDICES = UNKNOWN_INDEX + 1


def shade(color: str, amount: float) -> str:
    """`color` moved toward white (`amount` > 0) or black (< 0) by that share."""
    r, g, b = (int(color[i:i + 2], 16) for i in (1, 3, 5))
    end = 255 if amount > 0 else 0
    mix = [round(c + (end - c) * abs(amount)) for c in (r, g, b)]
    return "#{:02X}{:02X}{:02X}".format(*mix)


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
SHADED_COLORS = [shade(c, amount) for c in OWNER_COLORS for _, amount in SHADES]
FILL_SCALE = colorscale([FREE_COLOR, CACHED_COLOR, *SHADED_COLORS, UNKNOWN_COLOR])
CELL_SCALE = colorscale([FREE_COLOR, tint(CACHED_COLOR), *map(tint, SHADED_COLORS),
                         tint(UNKNOWN_COLOR)])


def owner_key(frame: Frame, seq: Hashable) -> Hashable:
    """What a sequence is colored by: its request when known."""
    return frame.request(seq)


def shades_of(recorder: object) -> Mapping[Hashable, int]:
    """A recording's shade per sequence (`Recorder.shades`); a recording that
    keeps none (vLLM's pool, `pagedkit.vllm.pool_view`) draws every sequence in
    its request's base color."""
    return getattr(recorder, "shades", {})


def color_index(frame: Frame, block: BlockState, first_seen: Mapping[Hashable, int],
                shades: Mapping[Hashable, int] | None = None) -> int:
    """A block's color index: its oldest owner's request color in that owner's
    shade (`shades`: sequence -> its rank in its request, `Recorder.shades`)."""
    if block.status == FREE:
        return FREE_INDEX
    if block.status == CACHED:
        return CACHED_INDEX
    if not block.owners:
        return UNKNOWN_INDEX
    owner = block.owners[0]
    return owner_color_index(owner_key(frame, owner), first_seen,
                             (shades or {}).get(owner, 0))


def owner_color_index(key: Hashable, first_seen: Mapping[Hashable, int],
                      rank: int = 0) -> int:
    """The index of request `key`'s color, in the shade of its `rank`-th sequence."""
    order = first_seen.get(key)
    if order is None:
        return UNKNOWN_INDEX
    return 2 + (order % len(OWNER_COLORS)) * len(SHADES) + rank % len(SHADES)
