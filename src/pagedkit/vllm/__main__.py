"""``python -m pagedkit vllm <compare|events>`` (also ``python -m pagedkit.vllm``).

* ``compare`` — one workload on vLLM and on pagedkit: tokens per request,
  throughput, latency, KV blocks, preemptions, prefix-cache hits, events;
* ``events`` — follow a running vLLM's KV-cache events (its ZeroMQ
  publisher) and print the cached blocks they describe, batch by batch
  (``--tree``: and the prefix tree `cache_view.PrefixCacheMap` draws).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from .._validation import (
    PROG,
    choice_name,
    num_blocks_option,
    positive_float,
    positive_int,
    writable_file,
)
from ..i18n import english_error
from ..i18n.terminal import HelpFormatter


def _parser(prog: str = f"{PROG} vllm") -> argparse.ArgumentParser:
    from ..bench import add_no_progress

    p = argparse.ArgumentParser(
        prog=prog, description="pagedkit beside the real vLLM (its CPU build; docs/vllm.md).",
        formatter_class=HelpFormatter)
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND",
                           help="compare: one workload on vLLM and on pagedkit, side by side; "
                           "events: follow a vLLM's KV-cache events")
    c = sub.add_parser("compare", help="one workload on vLLM and on pagedkit, side by side",
                       description="One workload on vLLM and on pagedkit: tokens per request, "
                       "throughput, latency, KV blocks, preemptions, prefix-cache hits, events.",
                       formatter_class=HelpFormatter)
    c.add_argument("--model", default="tiny",
                   help="'tiny' (the embedded model) or a transformers model folder")
    c.add_argument("--workload", type=choice_name, choices=("shared_prefix", "sharegpt", "alpaca"),
                   default="shared_prefix", help="requests sharing a prompt prefix (default), "
                   "or the bench's ShareGPT- or Alpaca-shaped ones")
    c.add_argument("--requests", type=positive_int, default=8, help="how many requests (default 8)")
    c.add_argument("--num-blocks", type=positive_int, default=256,
                   help="KV blocks of 32 tokens, both")
    c.add_argument("--max-num-batched-tokens", type=positive_int, default=2048,
                   help="the token budget of a step, both engines (default 2048)")
    c.add_argument("--systems", default="vllm,pagedkit",
                   help="comma-separated, from vllm, pagedkit (default both)")
    c.add_argument("--json", metavar="PATH", type=writable_file, help="write the comparison here")
    add_no_progress(c, "the progress bars while each system's weights load")
    c.set_defaults(parser=c)  # its own usage errors print its usage, not vllm's
    e = sub.add_parser("events", help="print the cache a vLLM's KV events describe",
                       description="Follow a vLLM's KV-cache events (its ZeroMQ publisher) and "
                       "print the cached blocks they describe, batch by batch.",
                       formatter_class=HelpFormatter)
    e.add_argument("endpoint", help="vLLM's KVEventsConfig endpoint, e.g. ipc:///tmp/kv")
    e.add_argument("--replay", help="its replay_endpoint: start from every buffered batch")
    e.add_argument("--seconds", type=positive_float, default=60.0,
                   help="stop after this long (default 60); if no batch arrived by then, it "
                   "says so and what to check, exit status 1")
    e.add_argument("--tree", action="store_true",
                   help="after each batch, the cache as a prefix tree in characters")
    add_no_progress(e)
    e.set_defaults(parser=e)
    return p


def main(argv: list[str] | None = None, prog: str = f"{PROG} vllm") -> int:
    from ..bench import no_progress_after_name

    p = _parser(prog)
    args = p.parse_args(no_progress_after_name(sys.argv[1:] if argv is None else argv))
    # vLLM logs to stdout unless told otherwise: its lines go to stderr, beside the
    # progress, so stdout is the table alone (newcomer 36 piped ~60 log lines into it)
    os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")
    if args.command == "compare":
        return _compare(args, args.parser)
    return _events(args)


def _compare(args, parser) -> int:
    from ..bench import check_choice
    from ..memory import blocks_to_serve
    from . import compare as cmp

    try:  # the check compare_all makes, said before anything loads
        systems = check_choice("system", (choice_name(s) for s in args.systems.split(",")
                                          if s.strip()), cmp.SYSTEMS)
    except ValueError as e:
        english_error(parser, f"--systems {args.systems!r}: {e}")
    model = None if args.model == "tiny" else args.model
    if model is not None and not (Path(model) / "config.json").is_file():
        english_error(parser, f"--model {model!r} is neither 'tiny' nor a transformers model "
                              "folder (a folder with a config.json)")
    if "vllm" in systems and not cmp.vllm_available():
        parser.exit(1, f"vLLM is not installed here: {cmp.INSTALL_HINT}\n")
    if args.workload == "shared_prefix":
        work = cmp.shared_prefix_workload(args.requests)
    else:
        work = cmp.bench_workload(args.requests, dataset=args.workload)
    needed, prompt, out = max((blocks_to_serve(len(p), len(p) + m, 1, cmp.BLOCK_SIZE,
                                               cache_sets_max_model_len=True), len(p), m)
                              for p, m in zip(work.prompts, work.max_tokens, strict=True))
    if args.num_blocks < needed:
        english_error(parser, f"--num-blocks {args.num_blocks} is too small: the longest request "
                              f"({prompt} prompt tokens + {out} to generate) takes {needed} "
                              f"blocks of {cmp.BLOCK_SIZE} tokens; give --num-blocks {needed} "
                              "or more")
    try:  # pagedkit's engine is built first: a cache larger than memory is refused there
        result = cmp.compare(work, model, num_blocks=args.num_blocks,
                             max_num_batched_tokens=args.max_num_batched_tokens,
                             systems=systems, progress=not args.no_progress)
    except ValueError as e:
        if not num_blocks_option(str(e), args.num_blocks):
            raise
        english_error(parser, num_blocks_option(str(e), args.num_blocks))
    print(result.table())
    if args.json:
        cmp.save_json(result, args.json)
    return 0 if len(result.runs) < 2 or all(result.equal) else 1


def describe_batch(recording, seq: int, batch, tree: bool = False) -> str:
    """Feed `batch` to `recording` (a `cache_view.CacheRecording`); what
    ``events`` prints for it: its events and the cache after it (and the tree)."""
    from .cache_view import PrefixCacheMap

    recording.feed(batch, seq)
    cache = recording.cache
    kinds = ", ".join(type(ev).__name__ for ev in batch.events)
    line = f"batch {seq}: {kinds} -> {len(cache)} cached blocks ({cache.num_copies} copies)"
    if not tree:
        return line
    rows = PrefixCacheMap(recording).text(len(recording) - 1).splitlines()[1:]
    return "\n".join([line, *rows])


def _events(args) -> int:
    from .cache_view import CacheRecording
    from .reader import ZmqEventStream

    stream = ZmqEventStream(args.endpoint, replay_endpoint=args.replay)
    recording = CacheRecording()
    if args.replay:
        for seq, batch in stream.replay(0):
            recording.feed(batch, seq)
            stream.next_seq = seq + 1
    start = time.monotonic()
    waited = args.seconds
    try:
        while time.monotonic() < start + args.seconds:
            for seq, batch in stream.receive(200):
                print(describe_batch(recording, seq, batch, args.tree), flush=True)
    except KeyboardInterrupt:
        waited = time.monotonic() - start
    finally:
        stream.close()
    if stream.missed:
        print(f"missed {stream.missed} batches (give --replay)", file=sys.stderr)
    if not recording.batches:
        print(nothing_arrived(args.endpoint, waited), file=sys.stderr)
        return 1
    return 0


def nothing_arrived(endpoint: str, seconds: float) -> str:
    """What ``events`` says when no batch came (it printed nothing else)."""
    return (f"no KV event batches arrived from {endpoint} in {seconds:.3g} s: is a vLLM "
            "publishing there (--kv-events-config with enable_kv_cache_events true and "
            "publisher zmq, its endpoint this one), and has it cached or evicted a full block "
            "since? Give --seconds longer, or --replay its replay_endpoint for what it sent "
            "before")


if __name__ == "__main__":
    sys.exit(main(prog="python -m pagedkit.vllm"))
