"""``python -m pagedkit demo``: the embedded model serving a batch, headless.

Prints each completion, then what the paged cache did: steps, tokens per
second, the peak of blocks in use (the engine's own count, taken while a step
runs: read after a step, the finished requests have already given theirs back)
and the KV usage (share of allocated slots that held a token) averaged over
steps.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from ._validation import PROG, non_negative_float, num_blocks_option, plural, positive_int
from .i18n import _, english_error
from .i18n.terminal import HelpFormatter

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

#: What a run takes, measured with /usr/bin/time on 2 shared cores (2026-12-02): 6.1 s
#: at load 3 (4.8 s with --max-tokens 8), 0.35 s of it serving; a newcomer on a busier
#: machine waited about 20 s, most of it importing torch and transformers.
TIME_NOTE = ("5-20 s on 2 cores, by load (6 s at load 3), nearly all of it loading torch, "
             "transformers and the model; serving the 8 prompts takes under a second, so "
             "there is no quicker mode (--max-tokens N generates fewer tokens)")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=f"{PROG} demo",
        description="The embedded model serves a batch of 8 prompts through the paged engine; "
                    "prints the completions, tokens/s and what the KV cache did.",
        epilog=f"Time: {TIME_NOTE}.",
        formatter_class=HelpFormatter)
    p.add_argument("--model", default="tiny",
                   help="'tiny' (embedded, the default), a Hugging Face model name or a local "
                        "directory")
    p.add_argument("--max-tokens", type=positive_int, default=40, metavar="N",
                   help="tokens to generate per completion (default: 40)")
    p.add_argument("--block-size", type=positive_int, default=16, metavar="SLOTS",
                   help="token slots per KV block (default: 16)")
    p.add_argument("--num-blocks", type=positive_int, default=64, metavar="N",
                   help="KV cache size in blocks (default: 64); too few and requests are "
                        "preempted")
    p.add_argument("--temperature", type=non_negative_float, default=0.0, metavar="T",
                   help="0 is greedy (the default); higher samples (seeded)")
    p.add_argument("-n", type=positive_int, default=1, metavar="N",
                   help="completions per prompt, sharing the prompt's blocks (default: 1); "
                        "different ones need --temperature above 0")
    p.add_argument("--no-progress", action="store_true",
                   help="hide the progress bars (a model folder's loading bar too)")
    return p


def _check_samples(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Refuse more completions per prompt than one step computes, by the engine's
    own rule (`group_past_max_num_seqs`), before the model loads: the demo builds
    its engine with the scheduler's default max_num_seqs, vLLM's 256."""
    from .engine.llm_engine import group_past_max_num_seqs
    from .scheduler.scheduler import SchedulerConfig

    most = SchedulerConfig.max_num_seqs
    crowded = group_past_max_num_seqs("n", "completions", args.n, most)
    if crowded:
        english_error(parser, f"-n {args.n}: {crowded}; give -n {most} or less")


def _check_blocks(parser: argparse.ArgumentParser, args: argparse.Namespace,
                  tokenizer, max_model_len: int | None) -> None:
    """Refuse a KV cache too small for the demo's longest prompt to reach
    --max-tokens in every one of its -n completions (they run together,
    sharing the prompt's full blocks: the engine's own count,
    `pagedkit.memory.blocks_to_serve`); no sequence grows past the model's
    `max_model_len` (its position limit)."""
    from .engine.llm_engine import block_past_sequences
    from .memory import blocks_to_serve

    if max_model_len is not None and args.block_size > max_model_len:
        english_error(parser, _block_option(block_past_sequences(
                     args.block_size, max_model_len,
                     f"each of the --num-blocks {args.num_blocks} would keep "
                     f"{args.block_size - max_model_len} slots no token reaches"), args))
    longest = max(len(tokenizer(p)["input_ids"]) for p in PROMPTS)
    tokens = longest + args.max_tokens
    capped = max_model_len is not None and tokens > max_model_len
    end = max_model_len if capped else tokens
    # the demo leaves max_model_len unset: the cache's token count sets it
    needed = blocks_to_serve(longest, end, args.n, args.block_size,
                             cache_sets_max_model_len=True)
    if needed > args.num_blocks:
        # past max_model_len, generation stops there: the cache need hold no more
        grows = (f"+ --max-tokens {args.max_tokens} would pass the model's max_model_len of "
                 f"{max_model_len} tokens, where generation stops anyway (at most "
                 f"{max_model_len - longest} new tokens); grown to {max_model_len} tokens, it"
                 if capped else f"+ --max-tokens {args.max_tokens}")
        full = longest // args.block_size
        sharing = blocks_to_serve(longest, end, args.n, args.block_size)
        own = (sharing - full) // args.n  # each completion's blocks beside the shared ones
        shared = (f"its {full} full block{'s' * (full != 1)} of {args.block_size} shared by "
                  f"the -n {args.n} completions, each with {own} of its own: {needed} blocks"
                  if args.n > 1 and sharing == needed and full else
                  f"{own} blocks of {args.block_size} for each of the -n {args.n} completions: "
                  f"{needed} blocks" if args.n > 1 and sharing == needed else
                  f"{needed} blocks of {args.block_size}")
        def fits(m: int) -> bool:  # --max-tokens m in --num-blocks
            return blocks_to_serve(longest, min(longest + m, end), args.n, args.block_size,
                                   cache_sets_max_model_len=True) <= args.num_blocks

        low, high = 0, args.max_tokens  # the most new tokens that fit: fits(low) holds
        while low < high:
            mid = (low + high + 1) // 2
            low, high = (mid, high) if fits(mid) else (low, mid - 1)
        fewer = f", or --max-tokens {low} or fewer" if low >= 1 else ""
        english_error(parser, f"--num-blocks {args.num_blocks} is too small: the longest prompt "
                              f"({longest} tokens) {grows} takes {shared}; give --num-blocks "
                              f"{needed} or more{fewer}")


def _block_option(message: str, args: argparse.Namespace) -> str:
    """The engine's refusal of a block longer than any sequence, said in the
    command line's terms (--block-size; the max_model_len is the model's)."""
    return message.replace("block_size=", "--block-size ").replace(
        "max_model_len is", f"the longest sequence --model {args.model!r} takes (its "
                            "max_model_len) is")


def _position_limit(config) -> int | None:
    """A model config's max_model_len (its position limit), if it states one."""
    text_config = config.get_text_config() if hasattr(config, "get_text_config") else config
    return getattr(text_config, "max_position_embeddings", None)


def _load(parser: argparse.ArgumentParser, args: argparse.Namespace):
    """The `LLM`, with the options checked before the model loads where the
    tokenizer comes apart from it (the embedded model's does)."""
    tokenizer = None
    if args.model == "tiny":
        from transformers import AutoConfig

        from .models import TINY_DIR, load_tiny_tokenizer

        tokenizer = load_tiny_tokenizer()
        _check_blocks(parser, args, tokenizer, _position_limit(AutoConfig.from_pretrained(
            TINY_DIR, local_files_only=True)))
    from . import LLM
    from .model import support
    from .model.loader import INSTEAD, NO_TOKENIZER_INSTEAD, resolve_device

    try:  # the engine's check of PAGEDKIT_KERNELS, before the model loads: not --model's
        support.check_kernel_setting(resolve_device("auto"))
    except support.KERNEL_SETTING_ERRORS as e:
        parser.exit(2, f"{PROG} demo: {e}\n")
    try:
        llm = LLM(args.model, tokenizer, block_size=args.block_size, num_blocks=args.num_blocks,
                  use_tqdm_on_load=not args.no_progress)
    except (OSError, ValueError, TypeError) as e:  # said in the command line's terms
        if str(e).startswith(f"block_size={args.block_size} is longer than any sequence"):
            english_error(parser, _block_option(str(e), args))
        if num_blocks_option(str(e), args.num_blocks):
            english_error(parser, num_blocks_option(str(e), args.num_blocks))
        english_error(parser, f"--model {args.model!r}: " + str(e).replace(
            INSTEAD, "--model tiny (the embedded default) or a local directory").replace(
            NO_TOKENIZER_INSTEAD, "the demo's prompts are text: copy the model's tokenizer "
                                  "files into it, or use --model tiny"))
    if llm.llm_engine.tokenizer is None:
        english_error(parser, f"--model {args.model!r} comes without a tokenizer; the demo's "
                              "prompts are text: use --model tiny, or a model folder that holds "
                              "its tokenizer")
    if tokenizer is None:
        _check_blocks(parser, args, llm.llm_engine.tokenizer,
                      _position_limit(llm.llm_engine.runner.model.config))
    return llm


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    _check_samples(parser, args)
    # importing torch and transformers took 16 s at load 1.5 on 2 cores: say so first
    # the options that need the tokenizer (the cache's size) are checked after this line
    print(f"demo: loading torch and transformers (10-20 s on a busy machine), which the "
          f"cache-size options' check needs, then {args.model!r} ...", file=sys.stderr,
          flush=True)
    llm = _load(parser, args)

    from tqdm.auto import tqdm

    from . import SamplingParams

    params = SamplingParams(n=args.n, temperature=args.temperature, max_tokens=args.max_tokens,
                            seed=0)
    steps = []
    # progress in tokens: requests all finish near the end, so a bar of requests would stall
    bar = tqdm(total=len(PROMPTS) * args.n * args.max_tokens, unit=_("tok"), desc=_("demo"),
               disable=args.no_progress, file=sys.stderr)

    def on_step(step):
        steps.append(step)
        bar.update(len(step.new_tokens))

    start = time.perf_counter()
    with bar:
        outputs = llm.generate(PROMPTS, params, use_tqdm=False, on_step=on_step)
        bar.total = bar.n  # some completions stopped early (an end-of-sequence token)
        bar.refresh()
    seconds = time.perf_counter() - start
    for out in outputs:
        for c in out.outputs:
            print(f"{out.prompt!r} -> {c.text!r}  [{c.finish_reason}]")
    if args.n > 1 and args.temperature == 0:
        print(f"(temperature 0 is greedy: a prompt's {args.n} completions are the same; give "
              "--temperature 0.8 to sample different ones)")
    generated = sum(len(c.token_ids) for o in outputs for c in o.outputs)
    # the engine counts while a step runs; each step's own memory reading comes after the
    # finished requests gave their blocks back, so the largest of those can fall short
    peak = llm.llm_engine.memory_stats()["peak_used_blocks"]
    # read after each step: one that ended every request it held has none to average
    held = [s.memory["kv_usage"] for s in steps if s.memory["used_blocks"]]
    usage = (f"KV usage {statistics.mean(held):.1%} (allocated slots holding a token, mean "
             "over the steps)" if held else
             "KV usage not measured (it is read after each step, and every request had "
             "ended by then)")
    print(f"\n{len(PROMPTS)} requests, {plural(generated, 'token')} in "
          f"{plural(len(steps), 'step')}, "
          f"{seconds:.2f} s ({generated / seconds:.1f} tokens/s)")
    print(f"KV cache: {plural(args.num_blocks, 'block')} x {plural(args.block_size, 'slot')}; "
          f"peak {plural(peak, 'block')} "
          f"in use; {usage}; "
          f"{plural(sum(len(s.preempted) for s in steps), 'preemption')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
