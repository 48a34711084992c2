"""Benchmarks: ``python -m pagedkit bench <name>`` (see `pagedkit.bench.__main__`).

Benchmarks measure; tests check. Nothing here runs during ``pytest`` except
a ``--quick`` smoke run that checks the shape of the JSON report.
"""

import os

#: what ``--no-progress`` says where a command prints no progress to leave out
NO_PROGRESS_HERE = ("taken by every bench and vllm command, so that a script can pass it to "
                    "any of them; this one prints no progress lines, so it changes nothing")


def add_no_progress(parser, leaves_out: str | None = None) -> None:
    """Give `parser` ``--no-progress``, by one rule for every benchmark and both
    ``vllm`` commands: `leaves_out` names what it leaves out of this command's
    output; None, that the command prints no progress (its lines are its
    results), and the option is accepted and changes nothing."""
    parser.add_argument("--no-progress", action="store_true",
                        help=f"leave out {leaves_out} (for logs and CI)" if leaves_out
                        else NO_PROGRESS_HERE)


def no_progress_after_name(argv: list[str]) -> list[str]:
    """`argv` with a ``--no-progress`` given before the command's name moved after
    it (``bench --no-progress study`` is ``bench study --no-progress``, ``vllm
    --no-progress compare`` is ``vllm compare --no-progress``), where the command's
    own parser takes it: every bench and vllm command takes it on either side of
    its name. Any other word before the name is left for the parser to judge."""
    lead = 0
    while lead < len(argv) and argv[lead] == "--no-progress":
        lead += 1
    if 0 < lead < len(argv) and not argv[lead].startswith("-"):
        return [argv[lead], *argv[:lead], *argv[lead + 1:]]
    return list(argv)


def load_average() -> list[float] | None:
    """The machine's 1/5/15-minute load averages, where the OS tells them."""
    try:
        return [round(v, 2) for v in os.getloadavg()]
    except (AttributeError, OSError):
        return None


def device_unavailable(device) -> str | None:
    """Why a benchmark cannot run on `device` (a torch.device or its name) here,
    or None: a usage error to give before any work, not an assertion deep in it."""
    import torch

    try:
        device = torch.device(device)
    except (RuntimeError, TypeError) as err:
        return f"not a device name ({err})"
    if device.type == "cpu":
        return None
    if device.type != "cuda":
        return f"the benchmarks run on cpu or cuda[:N], not {device.type}"
    if not torch.cuda.is_available():
        return "torch sees no CUDA device here (torch.cuda.is_available() is False)"
    count = torch.cuda.device_count()
    if device.index is not None and device.index >= count:
        return f"torch sees {count} CUDA device(s) here (cuda:0 to cuda:{count - 1})"
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
