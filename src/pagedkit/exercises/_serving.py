"""Lab 04c's kernels serve ``LLM("tiny")`` (`lab04c.serve`), in the interpreter
process `_puzzle_runner` starts.

Each kernel given replaces one piece of the engine while it generates:

* ``decode``: the decode attention in one pass (`ops.use_decode_attention`);
* ``store_kv``: the ``store_kv`` op (`ops.override`);
* ``gather`` and ``merge``: a split-KV decode attention composed here (lab
  04b): the gather kernel reads the sequence's K and V through its block
  table, pagedkit's torch code attends each of the `NUM_SPLITS` splits of the
  context (a split past its end is empty: zeros and lse -inf), and the merge
  kernel combines the partial results by their log-sum-exps. Either may be
  given alone: pagedkit's ``gather_kv``, or the attention over all keys,
  then does the other's part.

Every call is held to pagedkit's own answer on the same inputs (the cache its
``store_kv`` writes, the rows its ``gather_kv`` reads, the attention over all
keys and its lse), and the decode attention of each step's first call is
asked again with the query scaled by `LARGE_SCORES`: the tiny model's scores
are small, and a softmax or merge that overflows float32 would serve it
unnoticed. The engine never pads a batch, so the store kernel's first call is
asked again, on copies of the caches, with a padding token (slot -1) after
the others, as a padded batch has (vLLM pads its CUDA-graph batches so): it
must write nothing. The first difference stops the run with the kernel
named, before any token is compared. The kernels get a block table that ends where
unreadable memory begins (`guarded_table`), and each call is announced on
stdout before it runs, so a kernel that dies of a segmentation fault is named
too.
"""

from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"  # before torch/triton are imported, here and below

import contextlib
import json
import traceback

import torch

from ..kernels import reference
from ._kernel_runner import guarded_table
from ._puzzle_runner import SENTINEL, attend, kernel_from_source
from .track import LARGE_SCORES

#: The splits of a context in the gather/merge attention: a power of two, so
#: the merge kernel's MAX_SPLITS is this too.
NUM_SPLITS = 4
TOLERANCE = 1e-3  # as the build track holds the logits (tests compare the tokens exactly)


class Stopped(Exception):
    """A kernel's answer is not pagedkit's: what the parent names."""

    def __init__(self, kernel: str, where: dict, problem: str, diff: float = 0.0,
                 error: str = "") -> None:
        super().__init__(kernel, problem)
        self.report = {"stopped": kernel, **where, "problem": problem, "diff": diff,
                       "error": error}


class _Calls:
    """How many times each kernel ran, and which call this is."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self.attention = 0

    def run(self, kernel: str, where: dict, launch, *args, count: bool = True,
            **meta) -> None:
        """Announce the call (so a segmentation fault names it), then run it;
        an error it raises stops the run with the kernel named. A probe's call
        (not `count`) is not one of the engine's calls."""
        print(json.dumps({"calling": kernel, **where}), flush=True)
        try:
            launch(*args, **meta)
        except Exception as err:
            lines = traceback.format_exception_only(type(err), err)
            raise Stopped(kernel, where, "raised", error="".join(lines).strip()[-600:]) from err
        self.counts[kernel] = self.counts.get(kernel, 0) + count


def _held(kernel: str, where: dict, got: torch.Tensor, want: torch.Tensor,
          problem: str = "differs") -> None:
    """Stop, naming `kernel`, unless `got` is pagedkit's `want` (within `TOLERANCE`)."""
    if not torch.isfinite(got).all():
        raise Stopped(kernel, where, "nonfinite")
    diff = (got.double() - want.double()).abs().max().item() if got.numel() else 0.0
    if not torch.allclose(got.double(), want.double(), rtol=TOLERANCE, atol=TOLERANCE):
        raise Stopped(kernel, where, problem, diff=diff)


def _strides(cache: torch.Tensor) -> tuple[int, int, int]:
    return cache.stride(0), cache.stride(1), cache.stride(2)


# ------------------------------------------------------------------ store_kv
def store_kv(kernel, calls: _Calls):
    """The ``store_kv`` op by the learner's store kernel, held to pagedkit's
    ``store_kv`` on copies of the same caches."""
    def store(key, value, k_cache, v_cache, slot_mapping, check=True):
        where = {"call": calls.counts.get("store_kv_kernel", 0) + 1, "tokens": key.shape[0]}
        _stored(kernel, key, value, k_cache, v_cache, slot_mapping, calls, where)
        if where["call"] == 1:    # the same rows again, on copies: they write what is there
            _padding_probe(kernel, key, value, k_cache, v_cache, slot_mapping, calls,
                           {**where, "padded": True})
    return store


def _stored(kernel, key, value, k_cache, v_cache, slot_mapping, calls: _Calls,
            where: dict, count: bool = True) -> None:
    """One call of the store kernel, held to pagedkit's ``store_kv`` on copies."""
    want_k, want_v = k_cache.clone(), v_cache.clone()
    reference.store_kv(key, value, want_k, want_v, slot_mapping)
    tokens, heads, head_dim = key.shape
    calls.run("store_kv_kernel", where, kernel[(tokens, heads)], key, value, k_cache,
              v_cache, slot_mapping, key.stride(0), key.stride(1), *_strides(k_cache),
              count=count, BLOCK_SIZE=k_cache.shape[1], HEAD_DIM=head_dim)
    for got, want in ((k_cache, want_k), (v_cache, want_v)):
        if not torch.allclose(got, want, rtol=0.0, atol=0.0, equal_nan=True):
            diff = (got - want).abs().nan_to_num(float("inf")).max().item()
            raise Stopped("store_kv_kernel", where, "differs", diff=diff)


def _padding_probe(kernel, key, value, k_cache, v_cache, slot_mapping, calls: _Calls,
                   where: dict) -> None:
    """The call again on copies of the caches, each with a spare block before
    and after it, and a padding token (slot -1) after the new ones: held to
    ``store_kv``, which skips it, and nothing may land in the spare blocks (a
    slot -1 stored anyway lands just before the cache)."""
    padded_key = torch.cat([key, torch.full_like(key[:1], 1.0)])
    padded_value = torch.cat([value, torch.full_like(value[:1], 1.0)])
    slots = torch.cat([slot_mapping, slot_mapping.new_full((1,), -1)])
    spares = [torch.full((cache.shape[0] + 2, *cache.shape[1:]), SENTINEL, dtype=cache.dtype)
              for cache in (k_cache, v_cache)]
    for spare, cache in zip(spares, (k_cache, v_cache), strict=True):
        spare[1:-1] = cache
    _stored(kernel, padded_key, padded_value, *(spare[1:-1] for spare in spares), slots, calls,
            where, count=False)
    if any((spare[[0, -1]] != SENTINEL).any() for spare in spares):
        raise Stopped("store_kv_kernel", where, "padding")


# ------------------------------------------------------------ decode attention
def _table(block_table: torch.Tensor, context_len: int, block_size: int) -> torch.Tensor:
    """The sequence's blocks, in a table that ends where unreadable memory begins."""
    return guarded_table(block_table[:-(-context_len // block_size)].tolist())


def one_pass(decode, block_n: int, calls: _Calls):
    """Decode attention by the learner's decode kernel: its output and its lse
    held to the attention over the sequence's keys."""
    def attention(where, query, k_cache, v_cache, block_table, context_len):
        q_heads, head_dim = query.shape
        out = torch.full((q_heads, head_dim), float("nan"))
        lse = torch.full((q_heads,), float("nan"))
        calls.run("decode_kernel", where, decode[(q_heads,)], query.float().contiguous(),
                  k_cache, v_cache, _table(block_table, context_len, k_cache.shape[1]), out,
                  lse, context_len, head_dim ** -0.5, *_strides(k_cache),
                  GROUP=q_heads // k_cache.shape[2], BLOCK_SIZE=k_cache.shape[1],
                  BLOCK_N=block_n, HEAD_DIM=head_dim)
        want, want_lse = attend(query, reference.gather_kv(k_cache, block_table, context_len),
                                reference.gather_kv(v_cache, block_table, context_len))
        _held("decode_kernel", where, out, want)
        _held("decode_kernel", where, lse, want_lse, "lse")
        return out
    return attention


def _gathered(gather, cache, block_table, context_len: int, block_n: int, calls: _Calls,
              where: dict) -> torch.Tensor:
    """The sequence's rows of `cache`, read by the learner's gather kernel (or
    pagedkit's ``gather_kv``), held to ``gather_kv``; the rows of the last tile
    past the sequence must stay as they were."""
    want = reference.gather_kv(cache, block_table, context_len)
    if gather is None:
        return want
    tiles, heads, head_dim = -(-context_len // block_n), cache.shape[2], cache.shape[3]
    out = torch.full((tiles * block_n, heads, head_dim), SENTINEL)
    calls.run("gather_kernel", where, gather[(tiles, heads)], cache,
              _table(block_table, context_len, cache.shape[1]), out, context_len,
              *_strides(cache), out.stride(0), out.stride(1), BLOCK_SIZE=cache.shape[1],
              BLOCK_N=block_n, HEAD_DIM=head_dim)
    if (out[context_len:] != SENTINEL).any():
        raise Stopped("gather_kernel", where, "tail")
    _held("gather_kernel", where, out[:context_len], want)
    return out[:context_len]


def splits(context_len: int) -> list[tuple[int, int]]:
    """`NUM_SPLITS` ranges of ``ceil(context_len / NUM_SPLITS)`` keys each; the
    last ones are empty when the context runs out first (lab 04b)."""
    size = -(-context_len // NUM_SPLITS)
    return [(min(s * size, context_len), min((s + 1) * size, context_len))
            for s in range(NUM_SPLITS)]


def split_kv(gather, merge, block_n: int, calls: _Calls):
    """Decode attention composed of the learner's gather and merge kernels:
    the K/V rows gathered, each split attended (pagedkit's torch code), the
    partial results merged; the merge held to the attention over all keys."""
    def attention(where, query, k_cache, v_cache, block_table, context_len):
        keys = _gathered(gather, k_cache, block_table, context_len, block_n, calls, where)
        values = _gathered(gather, v_cache, block_table, context_len, block_n, calls, where)
        want, want_lse = attend(query, keys, values)
        if merge is None:
            return want
        parts = [attend(query, keys[a:b], values[a:b], torch.float32)    # the merge's input
                 for a, b in splits(context_len)]
        part_out = torch.stack([o for o, _ in parts], 1).contiguous()  # [heads, splits, D]
        part_lse = torch.stack([lse for _, lse in parts], 1).contiguous()  # [heads, splits]
        heads, head_dim = query.shape
        out = torch.full((heads, head_dim), float("nan"))
        lse = torch.full((heads,), float("nan"))
        calls.run("merge_kernel", where, merge[(heads,)], part_out, part_lse, out, lse,
                  NUM_SPLITS, MAX_SPLITS=NUM_SPLITS, HEAD_DIM=head_dim)
        _held("merge_kernel", where, out, want)
        _held("merge_kernel", where, lse, want_lse, "lse")
        return out
    return attention


def probed(attention, calls: _Calls, due: list[bool]):
    """The engine's decode attention: `attention` on each call, and once a step
    (when `due`) again with the query scaled by `LARGE_SCORES`."""
    def served(query, k_cache, v_cache, block_table, context_len):
        calls.attention += 1
        where = {"call": calls.attention, "tokens": context_len, "scaled": False}
        out = attention(where, query, k_cache, v_cache, block_table, context_len)
        if due[0]:
            due[0] = False
            attention({**where, "scaled": LARGE_SCORES}, query * LARGE_SCORES, k_cache, v_cache,
                      block_table, context_len)
        return out
    return served


# ------------------------------------------------------------------- serving
def _transformers(prompts: list[str], max_tokens: int) -> list[list[int]]:
    from pagedkit.models import load_tiny

    model, tokenizer = load_tiny()
    expected = []
    with torch.inference_mode():
        for prompt in prompts:
            ids = tokenizer(prompt, return_tensors="pt")
            out = model.generate(**ids, max_new_tokens=max_tokens, min_new_tokens=max_tokens,
                                 do_sample=False)
            expected.append(out[0, ids["input_ids"].shape[1]:].tolist())
    return expected


def _plugged(llm, kernels: dict, block_n: int, calls: _Calls) -> contextlib.ExitStack:
    """`llm` with the learner's kernels in place of pagedkit's pieces (exit to undo)."""
    from pagedkit import ops

    stack = contextlib.ExitStack()
    if "store_kv" in kernels:
        stack.enter_context(ops.override("store_kv", store_kv(kernels["store_kv"], calls)))
    if "decode" in kernels:
        attention = one_pass(kernels["decode"], block_n, calls)
    elif "gather" in kernels or "merge" in kernels:
        attention = split_kv(kernels.get("gather"), kernels.get("merge"), block_n, calls)
    else:
        return stack
    due = [False]
    engine = llm.llm_engine
    step = engine.step

    def step_then_probe(**how):  # how: step's own keywords (LLM.generate's outputs=False)
        due[0] = True
        return step(**how)
    engine.step = step_then_probe                  # this engine only, for this run
    stack.callback(engine.__dict__.pop, "step", None)
    stack.enter_context(ops.use_decode_attention(probed(attention, calls, due)))
    return stack


def serve(spec: dict) -> dict:
    """The learner's kernels serve LLM('tiny') greedy generation, every call held
    to pagedkit's (the first wrong one ends the run: nothing else is needed);
    then the same engine runs with pagedkit's own pieces, and transformers'
    `generate`, for the tokens to compare."""
    from pagedkit import LLM, SamplingParams

    kernels = {puzzle: kernel_from_source(source, name)
               for puzzle, (source, name) in spec["kernels"].items()}
    calls = _Calls()
    prompts, max_tokens = spec["prompts"], spec["max_tokens"]
    params = SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True)
    llm = LLM("tiny", block_size=spec["block_size"], num_blocks=64)
    try:
        with _plugged(llm, kernels, spec["block_n"], calls):
            mine = [o.outputs[0].token_ids for o in llm.generate(prompts, params,
                                                                 use_tqdm=False)]
    except Stopped as stop:
        return stop.report
    own = [o.outputs[0].token_ids for o in llm.generate(prompts, params, use_tqdm=False)]
    return {"mine": mine, "own": own, "transformers": _transformers(prompts, max_tokens),
            "calls": calls.counts}
