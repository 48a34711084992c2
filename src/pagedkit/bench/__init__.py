"""Benchmarks: ``python -m pagedkit.bench <name>`` (see `pagedkit.bench.__main__`).

Benchmarks measure; tests check. Nothing here runs during ``pytest`` except
a ``--quick`` smoke run that checks the shape of the JSON report.
"""

import os


def load_average() -> list[float] | None:
    """The machine's 1/5/15-minute load averages, where the OS tells them."""
    try:
        return [round(v, 2) for v in os.getloadavg()]
    except (AttributeError, OSError):
        return None


def check_choice(what: str, names, valid) -> tuple[str, ...]:
    """`names` as a tuple when each is one of `valid` and none repeats; else a
    ValueError naming the unknown ones (or the repeat) and the valid ones."""
    names = tuple(names)
    unknown = [n for n in names if n not in valid]
    if unknown or not names:
        raise ValueError(f"{f'unknown {what}(s) {unknown!r}' if unknown else f'no {what} named'}"
                         f"; choose from {', '.join(valid)}")
    if len(set(names)) != len(names):
        raise ValueError(f"a {what} is listed twice: {names!r}")
    return names
