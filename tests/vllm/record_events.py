"""Record vLLM's KV-cache events for the tests that run without vLLM.

Run in the vLLM venv (docs/vllm.md), from the repository root, with
PYTHONHASHSEED unset (both engines then root their hashes at vLLM's default
seed): ``python tests/vllm/record_events.py``. It serves each trace of
`TRACES` on vLLM and writes ``tests/vllm/data/<name>.json``: the trace, vLLM's
tokens and every event batch exactly as its ZeroMQ publisher sent it (hex).
`test_recorded.py` replays these against pagedkit.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

DATA = Path(__file__).parent / "data"

#: name -> (shared_prefix_workload arguments, KV blocks, hashes as 64-bit ints?)
TRACES = {
    "shared_prefix_64_blocks": (dict(num_requests=6, max_tokens=40), 64, True),
    "shared_prefix_10_blocks": (dict(num_requests=6, max_tokens=60), 10, False),
}


def record(name: str) -> dict:
    from pagedkit.vllm.compare import VllmEngine, shared_prefix_workload, tiny_model_dir

    kwargs, num_blocks, int_hashes = TRACES[name]
    os.environ["VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES"] = "1" if int_hashes else "0"
    work = shared_prefix_workload(**kwargs)
    engine = VllmEngine(tiny_model_dir(), num_blocks=num_blocks)
    try:
        engine.warm_up(work.prompts[0])
        run = engine.run(work)
        payloads = [engine.stream.payloads[seq] for seq in sorted(engine.stream.payloads)]
    finally:
        engine.close()
    import vllm

    return {"vllm": vllm.__version__, "workload": kwargs, "num_blocks": num_blocks,
            "int_hashes": int_hashes, "tokens": run.tokens, "blocks_used": run.blocks_used,
            "preemptions": run.preemptions, "cached_tokens": run.cached_tokens,
            "payloads": [p.hex() for p in payloads]}


def main() -> int:
    if "PYTHONHASHSEED" in os.environ:
        sys.exit("unset PYTHONHASHSEED: the recordings use vLLM's default root hash")
    DATA.mkdir(exist_ok=True)
    for name in TRACES:
        (DATA / f"{name}.json").write_text(json.dumps(record(name), indent=1) + "\n")
        print("wrote", DATA / f"{name}.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
