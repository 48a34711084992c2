"""Timeline data: how memory and the scheduler's queues moved, step by step.

Each series has one value per frame, so a cursor at frame *i* lines up with
the block map at frame *i*. Preemptions spike exactly where the used-block
curve hits the pool size: that is the moment memory ran out (paper §4.5).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .frames import Frame


@dataclass(frozen=True)
class TimelineData:
    index: tuple[int, ...]  # frame index (the x axis)
    used: tuple[int, ...]  # at each step's end, after the finished requests freed theirs
    cached: tuple[int, ...]
    free: tuple[int, ...]
    swapped_blocks: tuple[int, ...]  # CPU blocks
    running: tuple[int, ...]
    waiting: tuple[int, ...]
    swapped: tuple[int, ...]  # requests
    preemptions: tuple[int, ...]
    num_blocks: int
    peak: tuple[int, ...] = ()  # the most in use at once during each frame's step

    def __len__(self) -> int:
        return len(self.index)

    @property
    def total_preemptions(self) -> int:
        return sum(self.preemptions)

    @property
    def peak_used(self) -> int:
        """The most blocks in use at once: each frame's own peak (while its step
        ran), not the largest of `used` (each step's end, after the finished
        requests freed theirs); a frame that cannot say (a view of vLLM's pool)
        counts its end."""
        return max(self.peak, default=0)


def timeline(frames: Sequence[Frame]) -> TimelineData:
    """Collect the timeline series from `frames` (one entry per frame)."""
    if not frames:
        raise ValueError("a timeline needs at least one frame; the recording is empty")
    m = [f.memory for f in frames]
    r = [f.requests for f in frames]
    return TimelineData(
        index=tuple(f.index for f in frames),
        used=tuple(x.used for x in m),
        cached=tuple(x.cached for x in m),
        free=tuple(x.free for x in m),
        swapped_blocks=tuple(x.swapped for x in m),
        running=tuple(x.running for x in r),
        waiting=tuple(x.waiting for x in r),
        swapped=tuple(x.swapped for x in r),
        preemptions=tuple(f.preemptions for f in frames),
        num_blocks=frames[0].num_blocks,
        peak=tuple(f.memory.used if f.peak_used is None else f.peak_used for f in frames),
    )
