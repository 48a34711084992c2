"""Lab 04c (optional): four graded Triton puzzles, run in Triton's interpreter.

The puzzles climb from moving data to the full algorithm:

1. ``store_kv``  — write new tokens' K/V into their slots (what the engine
   does before attention, every layer, every step);
2. ``gather``    — read a sequence's K/V back through its block table;
3. ``decode``    — paged decode attention with an online softmax, one program
   per query head (grouped-query heads included), writing the output and
   the log-sum-exp;
4. ``merge``     — the split-KV merge: partial results over disjoint key
   ranges, each with its log-sum-exp, into the result over all keys.

``check(name, kernel)`` runs a kernel on the puzzle's cases in a fresh
process (`_puzzle_runner`; Triton reads ``TRITON_INTERPRET`` when first
imported) with padded strides (no stride is the product of the sizes after
it; a case that is right only without the padding is said to use a size
for a stride), shuffled blocks, slots and padding that must stay untouched,
a block table and merge inputs that end where unreadable memory begins (an
unmasked load past them crashes the process, and the check names the case
and the likely cause), and compares with a float64 (or exact) reference. A
failure gives the first rung of the puzzle's hint ladder; ``hint(name,
level)`` climbs it.

``serve(...)`` then lets the learner's kernels serve ``LLM("tiny")``, each
in place of a piece of the engine: the decode kernel the decode attention
(`ops.use_decode_attention`), or the gather and merge kernels a split-KV
decode attention composed of them (lab 04b's split-KV: gather the K/V
through the block table, attend each split, merge the partial results); the
store kernel the ``store_kv`` op (`ops.override`). Every call is held to
pagedkit's own op on the same inputs (with contexts of one tile and of two,
and a first store asked again with a padding token, slot -1), so a wrong
kernel stops the run with its name; the tokens are compared with pagedkit's
own and with transformers' `generate`.

The reference kernels live in ``labs/solutions/lab04c_triton_puzzles.py``,
out of the student's copy, like every lab's solutions.
"""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Callable

from ..i18n import N_, _, join_names, ngettext
from . import NOT_WRITTEN, CheckResult
from ._interpreter import kernel_source, no_triton, run_in_interpreter, still_a_stub

__all__ = ["CHECKS", "HINTS", "PUZZLES", "check", "check_decode_kernel", "check_gather_kernel",
           "check_merge_kernel", "check_store_kv_kernel", "hint", "serve"]

BLOCK_N = 16  # tokens per tile in puzzles 2 and 3
TOLERANCE = 1e-4  # the largest difference from the reference a case may have

#: each puzzle's cases, as the runner takes them
PUZZLES: dict[str, tuple] = {
    # (num_tokens, block_size, heads, head_dim, num_blocks, seed)
    "store_kv": ((5, 4, 2, 16, 4, 0), (12, 1, 1, 16, 20, 1), (9, 16, 2, 16, 3, 2),
                 (16, 3, 2, 16, 8, 3)),
    # (num_tokens, block_size, heads, head_dim, seed, far); far: the blocks start
    # past 2^32 elements, as in lab 04's kernel check (`_kernel_runner.far_cache`)
    "gather": ((5, 4, 2, 16, 0, False), (37, 16, 2, 16, 1, False), (1, 8, 1, 16, 2, False),
               (33, 3, 2, 16, 3, False), (16, 16, 1, 16, 4, False), (9, 1, 2, 16, 5, False),
               (20, 8, 2, 16, 6, True)),
    # (context_len, block_size, q_heads, kv_heads, head_dim, seed, far)
    "decode": ((5, 4, 2, 2, 16, 0, False), (37, 16, 4, 2, 16, 1, False),
               (1, 8, 2, 1, 16, 2, False), (70, 4, 4, 4, 16, 3, False),
               (33, 3, 4, 1, 16, 4, False), (16, 16, 2, 2, 16, 5, False),
               (20, 8, 4, 2, 16, 6, True)),
    # (heads, splits, empty splits, score shift, head_dim, seed)
    "merge": ((2, 2, (), 0.0, 16, 0), (2, 3, (), 0.0, 16, 1), (1, 4, (1,), 0.0, 16, 2),
              (2, 3, (0,), 0.0, 16, 3), (2, 5, (), 900.0, 16, 4), (1, 2, (0, 1), 0.0, 16, 5),
              (2, 1, (), -500.0, 16, 6)),
}

_DESCRIBE = {
    "store_kv": lambda c: _("{n} new tokens into a cache of {blocks} blocks of {bs} ({kv} KV "
                            "heads, head_dim {d}; every 4th token's slot is -1)")
                          .format(n=c[0], blocks=c[4], bs=c[1], kv=c[2], d=c[3]),
    "gather": lambda c: _("{n} tokens in shuffled blocks of {bs} ({kv} KV heads, head_dim "
                          "{d}, tiles of {tile})")
                        .format(n=c[0], bs=c[1], kv=c[2], d=c[3], tile=BLOCK_N) + _far(c),
    "decode": lambda c: _("{n} tokens in shuffled blocks of {bs} ({q} query heads over {kv} "
                          "KV heads, head_dim {d}, tiles of {tile})")
                        .format(n=c[0], bs=c[1], q=c[2], kv=c[3], d=c[4], tile=BLOCK_N) + _far(c),
    "merge": lambda c: (_("{splits} for {heads}").format(
                            splits=ngettext("{n} split", "{n} splits", c[1]).format(n=c[1]),
                            heads=ngettext("{n} head", "{n} heads", c[0]).format(n=c[0]))
                        + (_(", splits {empty} empty").format(empty=list(c[2])) if c[2] else "")
                        + (_(", scores around {score:g}").format(score=c[3]) if c[3] else "")),
}

def _far(case: tuple) -> str:
    """The words a far gather or decode case adds to its description."""
    return _(", in a cache so big that its blocks start past 2^32 elements") if case[-1] else ""


#: The hint ladders: each rung gives away a little more.
HINTS: dict[str, tuple[str, ...]] = {
    "store_kv": (
        N_("A slot is block * BLOCK_SIZE + offset: the program's token goes to block "
        "slot // BLOCK_SIZE, position slot % BLOCK_SIZE inside it."),
        N_("Use the strides, never the sizes: the input's row of (token, head) starts at token * "
        "stride_in_token + head * stride_in_head, the cache's at block * stride_block + "
        "offset * stride_token + head * stride_head (both are padded here)."),
        N_("Load the slot, `.to(tl.int64)` it, and wrap the stores in `if slot >= 0:` — a padding "
        "token's slot is -1 and must write nothing; `d = tl.arange(0, HEAD_DIM)` addresses the "
        "vector."),
    ),
    "gather": (
        N_("Token n of the sequence sits in physical block block_table[n // BLOCK_SIZE], at "
        "position n % BLOCK_SIZE inside it."),
        N_("Lanes of the last tile past num_tokens must read and write nothing: build `mask = n < "
        "num_tokens` and pass it to every tl.load and tl.store (the table ends where "
        "unreadable memory begins here)."),
        N_("`block = tl.load(block_table_ptr + n // BLOCK_SIZE, mask=mask, other=0).to(tl.int64)`; "
        "the rows are `block * stride_block + (n % BLOCK_SIZE) * stride_token + head * "
        "stride_head`, a [BLOCK_N, HEAD_DIM] tile with `row[:, None] + d[None, :]`."),
    ),
    "decode": (
        N_("The scores are q . k * scale (scale = 1/sqrt(HEAD_DIM), an argument). Keep three "
        "running values per head — the largest score seen (row_max), the sum of "
        "exp(score - row_max) (row_sum) and the weighted sum of V rows (acc) — and fold one "
        "tile of BLOCK_N tokens in at a time (lab 04's online_softmax_update)."),
        N_("When a tile raises the maximum, rescale what you summed by alpha = exp(old_max - "
        "new_max) before adding the tile's p = exp(scores - new_max). Masked lanes (past "
        "context_len) get score -inf, so their p is 0. Query head h reads KV head h // GROUP."),
        N_("At the end out = acc / row_sum and lse = row_max + log(row_sum). Start from row_max = "
        "tl.full([1], float('-inf'), tl.float32), row_sum = tl.zeros([1], tl.float32), acc = "
        "tl.zeros([HEAD_DIM], tl.float32); load the lookup as in puzzle 2, with kv_head."),
    ),
    "merge": (
        N_("Split s holds the fraction exp(lse_s) / sum_t exp(lse_t) of the softmax mass: the "
        "merged output weighs each part_out[s] by it."),
        N_("Subtract the largest lse before exp (exp(900) overflows float32); splits past "
        "num_splits load as lse -inf (mask, other=-inf) and so weigh 0."),
        N_("If every split is empty the largest lse is -inf and -inf - -inf is NaN: use 0 in its "
        "place (`tl.where(top == float('-inf'), 0.0, top)`), write zeros, and lse = that + "
        "log(total weight), which is -inf."),
    ),
}



def hint(name: str, level: int = 1) -> str:
    """Rung `level` (1 = the gentlest) of puzzle `name`'s hint ladder."""
    if name not in HINTS:
        raise ValueError(f"no puzzle named {name!r}; one of {sorted(HINTS)}")
    ladder = HINTS[name]
    if not 1 <= level <= len(ladder):
        raise ValueError(f"puzzle {name!r} has hints 1 to {len(ladder)}, not {level}")
    return (_("Hint {level}/{n} for {name}: {ladder}")
             .format(level=level, n=len(ladder), name=name, ladder=_(ladder[level - 1])))


def _source(name: str, kernel) -> tuple[str, str] | CheckResult:
    return kernel_source(name, kernel, _unwritten)


def _unwritten(source: str) -> str | None:
    body = source.split(":", 1)[-1]
    if still_a_stub(body.split('"""')[-1]):
        if "NotImplementedError" in body:   # nbgrader's release: `raise NotImplementedError`
            return _(NOT_WRITTEN)
        return _("not written yet: replace the `...` with your code")
    return None


def check(name: str, kernel, *, timeout: float = 600.0) -> CheckResult:
    """Run puzzle `name`'s cases on `kernel` (a ``@triton.jit`` function) in
    Triton's interpreter, in a fresh process; the first failing case, with
    the first hint, or a pass."""
    if name not in PUZZLES:
        raise ValueError(f"no puzzle named {name!r}; one of {sorted(PUZZLES)}")
    missing = no_triton(name, _("the puzzles need"))  # first: without Triton, @jit is no jit
    if missing is not None:  # a CheckResult that failed is falsy
        return missing
    source = _source(name, kernel)
    if isinstance(source, CheckResult):
        return source
    spec = {"puzzle": name, "source": source[0], "name": source[1],
            "cases": PUZZLES[name], "block_n": BLOCK_N, "tolerance": TOLERANCE}
    try:
        results, code, stderr = run_in_interpreter("pagedkit.exercises._puzzle_runner", spec,
                                                   timeout)
    except subprocess.TimeoutExpired:
        return CheckResult(name, False, (_("your kernel ran for over {timeout:.0f} s in the "
                                          "interpreter: does a loop never end?")
                                          .format(timeout=timeout)))
    return _verdict(name, results, code, stderr)


def _verdict(name: str, results: list[dict], code: int, stderr: str) -> CheckResult:
    """The check's result from what the runner printed (a line per case it
    finished), its exit code and its stderr: the first case that failed,
    else how the process died, else a pass."""
    cases = PUZZLES[name]
    more = (_("  (The puzzle's general hint, not drawn from this failure — {hint}  Stuck? "
              "lab04c.hint({name!r}, 2).)").format(hint=hint(name), name=name))
    for case, result in zip(cases, results, strict=False):
        problem = _problem(name, case, result)
        if problem:
            return CheckResult(name, False, (_("on {value}: {problem}.{more}")
                                              .format(value=_DESCRIBE[name](case), problem=problem,
                                                      more=more)))
    death = _death(code, stderr)
    if death:
        case = cases[min(len(results), len(cases) - 1)]  # the case it was running
        return CheckResult(name, False, (_("on {value} the interpreter process died ({death}): "
                                          "your kernel read or wrote memory outside its "
                                          "tensors. {cause}.{more}")
                                          .format(value=_DESCRIBE[name](case), death=death,
                                                  cause=_(_CRASHES[name]), more=more)))
    if not results:
        return CheckResult(name, False, _("the interpreter process failed: ")
                                        + (stderr.strip()[-600:] or _("no output")))
    if len(results) < len(cases) or code != 0:
        return CheckResult(name, False, (_("the interpreter stopped early (exit {code}): ")
                                         .format(code=code))
                                        + (stderr.strip()[-600:] or _("no output")))
    skipped = [result["skipped"] for result in results if "skipped" in result]
    far = (_(" (the cache past 2^32 elements could not be mapped here, so 64-bit offsets went "
             "unchecked: {skipped})").format(skipped=skipped[0]) if skipped
           else _(", a cache past 2^32 elements") if name in ("gather", "decode") else "")
    if name == "merge":  # contiguous inputs, no blocks: what its cases vary instead
        return CheckResult(name, True, _("all {n} cases match the reference (Triton's "
                                         "interpreter; empty splits, scores around 900 and "
                                         "-500, inputs that end where unreadable memory "
                                         "begins)").format(n=len(results)))
    return CheckResult(name, True, _("all {n} cases match the reference (Triton's interpreter; "
                                     "padded strides, shuffled blocks{far})")
                                   .format(n=len(results) - len(skipped), far=far))


#: what the C library prints when it finds its heap corrupted (then aborts)
_HEAP_CORRUPTED = ("munmap_chunk()", "free()", "malloc()", "double free", "corrupted")
#: the signals of a process that touched memory it must not, in words
_MEMORY_SIGNALS = {signal.SIGSEGV: N_("a segmentation fault, SIGSEGV"),
                   signal.SIGBUS: N_("a bus error, SIGBUS"),
                   signal.SIGABRT: N_("an abort, SIGABRT")}


def _death(code: int, stderr: str) -> str:
    """How the runner process died of touching memory it must not, in
    words: killed by SIGSEGV, SIGBUS or SIGABRT (as -N, or 128 + N from a
    shell), or an exit whose stderr ends in the C library's report of a
    corrupted heap (then with that report); "" for any other ending."""
    last = stderr.strip().splitlines()[-1].strip() if stderr.strip() else ""
    corrupted = any(words in last for words in _HEAP_CORRUPTED)
    for number, words in _MEMORY_SIGNALS.items():
        if code in (-number, 128 + number):
            return _(words) + (f": {last}" if corrupted else "")
    return last if code != 0 and corrupted else ""


#: why a puzzle's kernel most likely touched memory it must not (no final stop:
#: the messages that quote it add one)
_CRASHES = {
    "store_kv": N_("A padding token's slot is -1: wrap the stores in `if slot >= 0:` so it "
                   "writes nothing, and address the cache by its strides"),
    "gather": N_("Lanes past num_tokens must load nothing: pass `mask=n < num_tokens` to the "
                 "block table's tl.load (the table ends where unreadable memory begins here), "
                 "and compute offsets in 64 bits (`.to(tl.int64)`)"),
    "decode": N_("Lanes past context_len must load nothing: pass `mask=n < context_len` to the "
                 "block table's tl.load (the table ends where unreadable memory begins here), "
                 "and compute offsets in 64 bits (`.to(tl.int64)`)"),
    "merge": N_("Splits past num_splits must load nothing: pass `mask=s < num_splits` to the "
                "tl.load of part_lse and of part_out (both end where unreadable memory begins "
                "here)"),
}


def _problem(name: str, case: tuple, result: dict) -> str:
    """What is wrong with one `case`'s result, in words; "" if nothing."""
    if "skipped" in result:
        return ""
    if "error" in result:
        return f"raised {result['error']}"
    if result.get("unpadded_right"):
        return (_("wrong on the check's padded tensors, right on the same case without the "
                  "padding: a size is used where a stride belongs ({strides})")
                .format(strides=_STRIDES[name]))
    if result.get("outside"):
        return _("wrote outside the tensor's rows (into the padding before, after or between "
                 "them): {cause}").format(cause=_(_CRASHES[name]))
    if result.get("nan"):
        return _("returned NaN: {cause}").format(cause=_nan_cause(name, case))
    if result.get("tail_written"):
        return _("wrote rows past num_tokens: mask the stores of lanes past the sequence")
    if result.get("unscaled_right"):
        return (_("is off by up to {result:.3g} from the reference, and matches the attention "
                  "over unscaled scores: multiply q . k by scale (1/sqrt(HEAD_DIM), the "
                  "kernel's argument) before the softmax")
                .format(result=result["max_diff"]))
    if result["max_diff"] > TOLERANCE:
        off = (_("is off by up to {result:.3g} from the reference")
               .format(result=result['max_diff']))
        return off + (": " + _(_FAR_HINT) if name in ("gather", "decode") and case[-1] else "")
    if result.get("lse_diff", 0.0) > TOLERANCE:
        return _("writes an lse off by up to {result:.3g}").format(result=result['lse_diff'])
    return ""


#: why a far case's lookup misses its blocks (lab 04's words for the same case)
_FAR_HINT = N_("block * stride_block is past 2^32 here, as in any big cache: 32-bit "
               "arithmetic (int32 or uint32) wraps around to a wrong offset. Cast the block ids "
               "to tl.int64 before multiplying")


def _nan_cause(name: str, case: tuple) -> str:
    """What most likely made a NaN in puzzle `name`'s `case`: a read of the
    NaN the gather and decode caches hold outside the sequence (or, in the
    decode, the online softmax's arithmetic), or, in the merge, an exp that
    overflowed or underflowed, or all splits empty."""
    if name == "gather":
        return _("every slot outside the sequence is NaN here (a padding element of a block or "
                 "a head too), so your kernel read one")
    if name == "decode":
        return _("either your kernel read one — every slot outside the sequence is NaN here, "
                 "a padding element of a block or a head too: a token past context_len, a block "
                 "the table does not list, or a KV head past the cache's (query head h reads KV "
                 "head h // GROUP) — or its online softmax made one, as inf - inf or 0 * inf "
                 "(alpha = exp(row_max - new_max) is exp(-inf) = 0 on the first tile, never "
                 "inf)")
    splits, empty, shift = case[1:4]
    if len(empty) == splits:
        return _("every split is empty here, so the largest lse is -inf and lse - (-inf) is "
                 "NaN: use 0 in place of the largest lse when it is -inf (every weight is then "
                 "0: write zeros, and lse -inf)")
    if shift > 0:
        return _("exp(lse) overflows float32 past ~88 (the lse are around {score:g} here) and "
                 "inf / inf is NaN: subtract the largest lse before exp").format(score=shift)
    if shift < 0:
        return _("exp(lse) underflows to 0 (the lse are around {score:g} here) and 0 / 0 is "
                 "NaN: subtract the largest lse before exp").format(score=shift)
    return _("0 / 0 or inf / inf in the weights: subtract the largest lse before exp, and "
             "give splits past num_splits lse -inf (mask, other=float('-inf')) so they weigh 0")


#: how each padded puzzle's kernel addresses its tensors (by strides, not sizes)
_STRIDES = {
    "store_kv": "block * stride_block + offset * stride_token + head * stride_head, "
                "token * stride_in_token + head * stride_in_head",
    "gather": "block * stride_block + offset * stride_token + head * stride_head, "
              "n * stride_out_token + head * stride_out_head",
    "decode": "block * stride_block + offset * stride_token + kv_head * stride_head",
}


def check_store_kv_kernel(kernel, **kw) -> CheckResult:
    """Puzzle 1: `store_kv_kernel` (see `PUZZLES`, `HINTS`)."""
    return check("store_kv", kernel, **kw)


def check_gather_kernel(kernel, **kw) -> CheckResult:
    """Puzzle 2: `gather_kernel`."""
    return check("gather", kernel, **kw)


def check_decode_kernel(kernel, **kw) -> CheckResult:
    """Puzzle 3: `decode_kernel`."""
    return check("decode", kernel, **kw)


def check_merge_kernel(kernel, **kw) -> CheckResult:
    """Puzzle 4: `merge_kernel`."""
    return check("merge", kernel, **kw)


#: the checks by the name of the kernel each takes (as labs/solutions/ defines it)
CHECKS: dict[str, Callable] = {
    "store_kv_kernel": check_store_kv_kernel,
    "gather_kernel": check_gather_kernel,
    "decode_kernel": check_decode_kernel,
    "merge_kernel": check_merge_kernel,
}


def serve(decode_kernel=None, store_kv_kernel=None, *, gather_kernel=None, merge_kernel=None,
          prompts=("Once upon a time", "There once was a shy mouse named Sam who lived in a "
                                       "little house by the river."),
          max_tokens: int = 6, block_size: int = 4, timeout: float = 600.0) -> CheckResult:
    """Your kernels serve ``LLM("tiny")``: greedy generation of `prompts` in a
    fresh interpreter process, compared token for token with pagedkit's own
    run and with transformers' `generate`.

    The decode attention is your puzzle-3 kernel (`ops.use_decode_attention`),
    or a split-KV decode (lab 04b) composed of your puzzle-2 and puzzle-4
    kernels: your gather reads each sequence's K and V through its block
    table, pagedkit attends each of the context's splits, your merge combines
    the partial results (either alone: pagedkit does the other's part). Your
    puzzle-1 kernel, if given, stores the new K/V (`ops.override`). Every call
    is held to pagedkit's own op on the same inputs, each step's first decode
    attention again with the query scaled by 64, and the first store again
    with a padding token (slot -1) added: the first difference stops the run,
    naming your kernel (`_serving`). The default prompts have 5 and 22 tokens,
    so the decode attention's contexts take one tile of `BLOCK_N` tokens and
    two."""
    name = "serve"
    given = {"decode": decode_kernel, "store_kv": store_kv_kernel, "gather": gather_kernel,
             "merge": merge_kernel}
    given = {puzzle: kernel for puzzle, kernel in given.items() if kernel is not None}
    if not given:
        raise ValueError("serve needs a kernel: decode_kernel, store_kv_kernel, gather_kernel "
                         "or merge_kernel")
    if "decode" in given and ("gather" in given or "merge" in given):
        raise ValueError("serve's decode attention is either your decode_kernel (one pass) or "
                         "your gather_kernel and merge_kernel (split-KV), not both: give one")
    missing = no_triton(name, _("the puzzles need"))  # first: without Triton, @jit is no jit
    if missing is not None:  # a CheckResult that failed is falsy
        return missing
    sources = {}
    for puzzle, kernel in given.items():
        source = _source(puzzle, kernel)
        if isinstance(source, CheckResult):
            return source
        sources[puzzle] = source
    spec = {"puzzle": "serve", "kernels": sources, "prompts": list(prompts),
            "max_tokens": max_tokens, "block_size": block_size, "block_n": BLOCK_N}
    try:
        lines, code, stderr = run_in_interpreter("pagedkit.exercises._puzzle_runner", spec,
                                                 timeout)
    except subprocess.TimeoutExpired:
        return CheckResult(name, False, (_("serving took over {timeout:.0f} s")
                                          .format(timeout=timeout)))
    return _served(name, sources, lines, code, stderr, len(prompts), max_tokens)


def _served(name: str, sources: dict, lines: list[dict], code: int, stderr: str,
            n: int, max_tokens: int) -> CheckResult:
    """The verdict on a serving run, from the lines its process printed."""
    calling = [line for line in lines if "calling" in line]
    results = [line for line in lines if "calling" not in line]
    if code in (-signal.SIGSEGV, 128 + signal.SIGSEGV) and calling:
        return CheckResult(name, False, _stopped({**calling[-1], "stopped":
                                                  calling[-1]["calling"],
                                                  "problem": "segfault"}))
    if not results:
        return CheckResult(name, False, (_("the interpreter process failed (exit {code}): ")
                                          .format(code=code))
                                        + (stderr.strip()[-600:] or _("no output")))
    result = results[-1]
    if "stopped" in result:
        return CheckResult(name, False, _stopped(result))
    if "error" in result:
        return CheckResult(name, False, _("serving raised {result}").format(result=result['error']))
    kernels = _("your {kernels}").format(kernels=join_names(f"{p}_kernel" for p in sources))
    if result["mine"] != result["transformers"] or result["mine"] != result["own"]:
        return CheckResult(name, False, (_("with {kernels} the engine generated {result}; "
                                          "transformers generates {result2} (pagedkit's own: "
                                          "{result3})")
                                          .format(kernels=kernels, result=result['mine'],
                                                  result2=result['transformers'],
                                                  result3=result['own'])))
    calls = result["calls"]
    idle = [f"{p}_kernel" for p in sources if not calls.get(f"{p}_kernel")]
    if idle:
        return CheckResult(name, False, (_("{kernels} never ran ({calls})")
                                          .format(kernels=join_names(idle), calls=calls)))
    return CheckResult(name, True, (_("{kernels} served LLM('tiny'): {n} prompts x {max_tokens} "
                                     "greedy tokens equal transformers' generate and pagedkit's "
                                     "own, every call equal to pagedkit's (calls: {calls})")
                                     .format(kernels=kernels, n=n, max_tokens=max_tokens,
                                             calls=join_names(f"{k} {v}"
                                                              for k, v in calls.items()))))


#: what a serving run found wrong with a kernel's call (`_serving.Stopped`)
_PROBLEMS = {
    "differs": N_("its result is off by up to {diff:.3g} from pagedkit's on the same inputs"),
    "lse": N_("the lse it writes is off by up to {diff:.3g} from pagedkit's"),
    "nonfinite": N_("it gave inf or NaN where pagedkit's result is finite"),
    "tail": N_("it wrote rows past num_tokens (the last tile's lanes past the sequence)"),
    "padding": N_("the padding token's slot -1 wrote into the memory just before the cache: "
                  "wrap the stores in `if slot >= 0:`"),
    "raised": N_("it raised {error}"),
    "segfault": N_("the process died of a segmentation fault in it, most likely a load "
                   "without a mask past the end of the block table (which here ends where "
                   "unreadable memory begins)"),
}


def _stopped(stop: dict) -> str:
    """Which of your kernels stopped the run, at which call, and what it did."""
    kernel = stop["stopped"]
    if kernel == "store_kv_kernel":
        where = _("at K/V store {call} ({n} new tokens)").format(call=stop["call"],
                                                                 n=stop["tokens"])
        if stop.get("padded"):
            where += _(", asked again with a padding token (slot -1) after them, as a padded "
                       "batch has")
    else:
        where = _("at decode-attention call {call} (a context of {n} tokens)").format(
            call=stop["call"], n=stop["tokens"])
        if stop.get("scaled"):          # the factor the query was scaled by
            where += _(", asked again with the query scaled by {scale:g} (scores in the "
                       "hundreds)").format(scale=stop["scaled"])
    problem = _(_PROBLEMS[stop["problem"]]).format(diff=stop.get("diff", 0.0),
                                                   error=stop.get("error", ""))
    puzzle = kernel.removesuffix("_kernel")
    return (_("your {kernel} stopped serving {where}: {problem}. Its puzzle's check, "
              "lab04c.check_{puzzle}_kernel({kernel}), runs it on the puzzle's cases, with a "
              "hint")
            .format(kernel=kernel, where=where, problem=problem, puzzle=puzzle))
