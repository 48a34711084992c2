"""How many of pagedkit's named functions one decode step calls.

A learner who steps through `LLMEngine.step()` in a debugger meets every
function it calls; the fewer there are, the shorter that walk. This counts
them: a `sys.setprofile` hook records each distinct (file, function) pair
whose code lives in the package (``src/pagedkit/``, its kernels included) during one step that
decodes two sequences of the tiny model, after a few warm-up steps (the
first steps of a shape plan and measure things a steady step does not).
The step is `LLM.generate`'s, ``step(outputs=False)``: it builds no
per-step RequestOutputs (a streaming ``step()`` does, in 5 functions more).
Comprehensions, lambdas and generator expressions (``<listcomp>``, ...) are
not named functions and are left out. docs/architecture.md, "How many
functions a decode step calls", records the count.

    python -m pagedkit bench calls             # the count, by file
    python -m pagedkit bench calls --names     # and every function's name
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

import torch

from .._validation import PROG, positive_int
from ..i18n.terminal import HelpFormatter
from . import add_no_progress

#: the folders whose functions are counted: the package and its kernels
ROOTS = (Path(__file__).resolve().parents[1],)
PROMPTS = ("Once upon a time", "The little dog ran")


def _owner(filename: str) -> str | None:
    """``pagedkit/...`` for a file under `ROOTS`, else None."""
    path = Path(filename)
    for root in ROOTS:
        if path.is_relative_to(root):
            return f"{root.name}/{path.relative_to(root).as_posix()}"
    return None


def decode_step_calls(warmup_steps: int = 3, threads: int = 1) -> set[tuple[str, str]]:
    """The (file, function) pairs one `LLMEngine.step(outputs=False)` (as
    `LLM.generate` steps) calls while it decodes two sequences of the tiny
    model on CPU, on `threads` torch threads."""
    from ..engine import LLMEngine
    from ..sampling_params import SamplingParams

    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        engine = LLMEngine("tiny", block_size=16, num_blocks=64)
        params = SamplingParams(temperature=0, max_tokens=warmup_steps + 8, ignore_eos=True)
        for i, prompt in enumerate(PROMPTS):
            engine.add_request(str(i), prompt, params)
        for _ in range(warmup_steps):  # the prefill, then decodes
            engine.step(outputs=False)
        seen: set[tuple[str, str]] = set()
        files: dict[str, str | None] = {}

        def hook(frame, event, arg):
            if event != "call":
                return
            code = frame.f_code
            if code.co_filename not in files:
                files[code.co_filename] = _owner(code.co_filename)
            owner = files[code.co_filename]
            if owner is not None and not code.co_name.startswith("<"):
                seen.add((owner, code.co_qualname))

        sys.setprofile(hook)
        try:
            engine.step(outputs=False)
        finally:
            sys.setprofile(None)
        return seen
    finally:
        torch.set_num_threads(previous)


def format_counts(calls: set[tuple[str, str]], names: bool = False) -> str:
    by_file = Counter(owner for owner, _ in calls)
    lines = [f"{len(calls)} named pagedkit functions in {len(by_file)} files, one decode "
             f"step of two sequences (tiny model, CPU):"]
    for owner, n in sorted(by_file.items(), key=lambda kv: (-kv[1], kv[0])):
        lines.append(f"  {n:>3}  {owner}")
        if names:
            lines += [f"         {name}" for o, name in sorted(calls) if o == owner]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog=f"{PROG} bench calls",
                                description="Count the named pagedkit functions one decode "
                                            "step of two sequences calls, by file.",
                                formatter_class=HelpFormatter)
    p.add_argument("--names", action="store_true", help="list every function, by file")
    p.add_argument("--threads", type=positive_int, default=1,
                   help="torch threads for the step (default 1: with more, the thread "
                        "chooser's own functions run too)")
    add_no_progress(p)
    args = p.parse_args(argv)
    print(format_counts(decode_step_calls(threads=args.threads), names=args.names))
    return 0


if __name__ == "__main__":
    sys.exit(main())
