"""Timers wrapped around methods, for the profiles of `bench engine --profile`."""

from __future__ import annotations

import time
from collections import defaultdict


class PartTimers:
    """Seconds per part, from timers wrapped around methods (of an object, a
    class or a module); `restore` puts every method back as it was."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self._wrapped: list[tuple[object, str, object, bool]] = []

    def wrap(self, owner: object, attr: str, part: str) -> None:
        original = getattr(owner, attr, None)
        if original is None:
            name = getattr(owner, "__name__", type(owner).__name__)
            raise AttributeError(f"the profile times {name}.{attr}, which no longer exists: "
                                 "update the profile (pagedkit.bench)")
        own = attr in vars(owner)  # else the attribute comes from the class
        seconds = self.seconds

        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                seconds[part] += time.perf_counter() - start

        self._wrapped.append((owner, attr, original, own))
        setattr(owner, attr, timed)

    def restore(self) -> None:
        for owner, attr, original, own in reversed(self._wrapped):
            if own:
                setattr(owner, attr, original)
            else:
                delattr(owner, attr)  # back to the class's
        self._wrapped.clear()
