"""``python -m pagedkit demo``: the embedded model serving a batch, headless.

Prints each completion, then what the paged cache did: steps, tokens per
second, peak blocks in use and the KV usage (share of allocated slots that
held a token) averaged over steps.
"""

from __future__ import annotations

import argparse
import statistics
import time

PROMPTS = [
    "Once upon a time",
    "The little robot looked at the sky and",
    "In the garden there was",
    "Mia asked her brother",
    "The old man opened the door",
    "Every morning the baker",
    "Tom found a box under the bed",
    "The dragon was hungry, so",
]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="pagedkit demo", description=__doc__.splitlines()[0])
    p.add_argument("--model", default="tiny", help="'tiny' (embedded) or a model name/path")
    p.add_argument("--max-tokens", type=int, default=40)
    p.add_argument("--block-size", type=int, default=16)
    p.add_argument("--num-blocks", type=int, default=64)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("-n", type=int, default=1, help="completions per prompt (they share blocks)")
    args = p.parse_args(argv)

    from . import LLM, SamplingParams

    llm = LLM(args.model, block_size=args.block_size, num_blocks=args.num_blocks)
    params = SamplingParams(n=args.n, temperature=args.temperature, max_tokens=args.max_tokens,
                            seed=0)
    steps = []
    start = time.perf_counter()
    outputs = llm.generate(PROMPTS, params, use_tqdm=False, on_step=steps.append)
    seconds = time.perf_counter() - start
    for out in outputs:
        for c in out.outputs:
            print(f"{out.prompt!r} -> {c.text!r}  [{c.finish_reason}]")
    generated = sum(len(c.token_ids) for o in outputs for c in o.outputs)
    peak = max(s.memory["used_blocks"] for s in steps)
    usage = statistics.mean(s.memory["kv_usage"] for s in steps if s.memory["used_blocks"])
    print(f"\n{len(PROMPTS)} requests, {generated} tokens in {len(steps)} steps, "
          f"{seconds:.2f} s ({generated / seconds:.1f} tokens/s)")
    print(f"KV cache: {args.num_blocks} blocks x {args.block_size} slots; peak {peak} blocks "
          f"in use; KV usage {usage:.1%} (allocated slots holding a token); "
          f"{sum(len(s.preempted) for s in steps)} preemptions")
    return 0
