"""Run lab 04c's Triton puzzles in Triton's interpreter, in a fresh process.

Like `_kernel_runner` (whose reasons apply: Triton reads ``TRITON_INTERPRET``
when first imported), `pagedkit.exercises.lab04c` sends a kernel's source
here; this process sets the variable before anything imports Triton, runs
the puzzle's cases and prints one JSON line per case as it finishes: the
largest difference from a float64 (or exact) reference, or the error.
``serve`` mode instead has the learner's kernels serve a real `LLM("tiny")`
(`_serving`) and prints how its calls and tokens compare with pagedkit's.

    python -m pagedkit.exercises._puzzle_runner SPEC.json
"""

from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"  # before torch/triton are imported, here and below

import json
import sys
import traceback

from ._kernel_runner import guarded_table

SENTINEL = 7.25  # what a slot nothing may write holds: a write there shows


def kernel_from_source(source: str, name: str):
    """The learner's kernel `name`, made from its `source` here (Triton's
    interpreter needs no source file)."""
    import torch
    import triton
    import triton.language as tl

    namespace = {"triton": triton, "tl": tl, "torch": torch}
    lines = source.splitlines()
    while lines and not lines[0].lstrip().startswith("def "):  # its decorators
        lines.pop(0)
    exec(compile("\n".join(lines), f"<your {name}>", "exec"), namespace)
    return triton.jit(namespace[name])


def _padded(shape, fill, gen=None):
    """A tensor of `shape` whose last two dims are padded in memory (a spare
    row per block and spare elements per head), so no stride is the product
    of the sizes after it; filled with `fill`, or random if `gen`."""
    import torch

    *lead, rows, last = shape
    storage = torch.full((*lead, rows + 1, last + 3), float(fill))
    if gen is not None:
        storage = torch.randn(storage.shape, generator=gen)
    return storage[..., :rows, :last]


# ------------------------------------------------------------------ puzzle 1
def store_kv(kernel, case):
    import torch

    num_tokens, block_size, heads, head_dim, num_blocks, seed = case
    gen = torch.Generator().manual_seed(seed)
    key = _padded((num_tokens, heads, head_dim), 0.0, gen)
    value = _padded((num_tokens, heads, head_dim), 0.0, gen)
    k_cache = _padded((num_blocks, block_size, heads, head_dim), SENTINEL)
    v_cache = _padded((num_blocks, block_size, heads, head_dim), SENTINEL)
    slots = torch.randperm(num_blocks * block_size, generator=gen)[:num_tokens]
    slots[torch.arange(num_tokens) % 4 == 3] = -1            # padding tokens: skipped
    slot_mapping = slots.to(torch.int64)
    want_k, want_v = k_cache.clone(), v_cache.clone()
    for t, s in enumerate(slot_mapping.tolist()):
        if s >= 0:
            want_k[s // block_size, s % block_size] = key[t]
            want_v[s // block_size, s % block_size] = value[t]
    kernel[(num_tokens, heads)](key, value, k_cache, v_cache, slot_mapping,
                                key.stride(0), key.stride(1), k_cache.stride(0),
                                k_cache.stride(1), k_cache.stride(2),
                                BLOCK_SIZE=block_size, HEAD_DIM=head_dim)
    diff = max((k_cache - want_k).abs().max().item(), (v_cache - want_v).abs().max().item())
    return {"max_diff": diff, "nan": False}


# ------------------------------------------------------------------ puzzle 2
def gather(kernel, case, block_n):
    import torch

    num_tokens, block_size, heads, head_dim, seed = case
    gen = torch.Generator().manual_seed(seed)
    key = torch.randn(num_tokens, heads, head_dim, generator=gen)
    used = -(-num_tokens // block_size)
    num_blocks = used + 3
    cache = _padded((num_blocks, block_size, heads, head_dim), float("nan"))
    blocks = torch.randperm(num_blocks, generator=gen)[:used]
    for i in range(num_tokens):
        cache[blocks[i // block_size], i % block_size] = key[i]
    table = guarded_table(blocks)
    rows = -(-num_tokens // block_n) * block_n              # room for every lane of every tile
    out = torch.full((rows, heads, head_dim), SENTINEL)
    kernel[(-(-num_tokens // block_n), heads)](cache, table, out, num_tokens, cache.stride(0),
                                               cache.stride(1), cache.stride(2), out.stride(0),
                                               out.stride(1), BLOCK_SIZE=block_size,
                                               BLOCK_N=block_n, HEAD_DIM=head_dim)
    tail_written = bool((out[num_tokens:] != SENTINEL).any())
    got = out[:num_tokens]
    return {"max_diff": (got - key).abs().max().item() if not torch.isnan(got).any() else 0.0,
            "nan": bool(torch.isnan(got).any()), "tail_written": tail_written}


# ------------------------------------------------------------------ puzzle 3
def attend(query, keys, values, dtype=None):
    """One query token's attention over contiguous `keys`/`values` ``[tokens,
    kv_heads, D]``, computed in float64: ``(out [heads, D], lse [heads])`` in
    `dtype` (the query's if None); no keys give zeros and lse -inf (an empty
    split). Query head h reads KV head h // (heads // kv_heads)."""
    import torch

    heads, head_dim = query.shape
    dtype = dtype or query.dtype
    if keys.shape[0] == 0:
        return (torch.zeros(heads, head_dim, dtype=dtype),
                torch.full((heads,), float("-inf"), dtype=dtype))
    group = heads // keys.shape[1]
    k = keys.double().repeat_interleave(group, 1)
    v = values.double().repeat_interleave(group, 1)
    scores = torch.einsum("hd,thd->ht", query.double(), k) * head_dim ** -0.5
    out = torch.einsum("ht,thd->hd", scores.softmax(-1), v)
    return out.to(dtype), scores.logsumexp(-1).to(dtype)


def decode(kernel, case, block_n):
    import torch

    context_len, block_size, q_heads, kv_heads, head_dim, seed = case
    gen = torch.Generator().manual_seed(seed)
    key = torch.randn(context_len, kv_heads, head_dim, generator=gen)
    value = torch.randn(context_len, kv_heads, head_dim, generator=gen)
    query = torch.randn(q_heads, head_dim, generator=gen)
    used = -(-context_len // block_size)
    num_blocks = used + 3
    k_cache = _padded((num_blocks, block_size, kv_heads, head_dim), float("nan"))
    v_cache = _padded((num_blocks, block_size, kv_heads, head_dim), float("nan"))
    blocks = torch.randperm(num_blocks, generator=gen)[:used]
    for i in range(context_len):
        k_cache[blocks[i // block_size], i % block_size] = key[i]
        v_cache[blocks[i // block_size], i % block_size] = value[i]
    table = guarded_table(blocks)
    out = torch.full((q_heads, head_dim), float("nan"))
    lse = torch.full((q_heads,), float("nan"))
    kernel[(q_heads,)](query, k_cache, v_cache, table, out, lse, context_len, head_dim ** -0.5,
                       k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
                       GROUP=q_heads // kv_heads, BLOCK_SIZE=block_size, BLOCK_N=block_n,
                       HEAD_DIM=head_dim)
    want, want_lse = attend(query, key, value, torch.float64)
    nan = bool(torch.isnan(out).any() or torch.isnan(lse).any())
    if nan:
        return {"nan": True, "max_diff": 0.0}
    return {"nan": False, "max_diff": (out.double() - want).abs().max().item(),
            "lse_diff": (lse.double() - want_lse).abs().max().item()}


# ------------------------------------------------------------------ puzzle 4
def merge(kernel, case):
    import torch

    heads, splits, empty, shift, head_dim, seed = case
    gen = torch.Generator().manual_seed(seed)
    per = 5
    scores = torch.randn(heads, splits * per, generator=gen, dtype=torch.float64) * 3 + shift
    for s in empty:                                  # an empty split: every key masked
        scores[:, s * per:(s + 1) * per] = float("-inf")
    v = torch.randn(splits * per, head_dim, generator=gen, dtype=torch.float64)
    part_out = torch.zeros(heads, splits, head_dim, dtype=torch.float64)
    part_lse = torch.full((heads, splits), float("-inf"), dtype=torch.float64)
    for s in range(splits):
        if s in empty:
            continue
        chunk = scores[:, s * per:(s + 1) * per]
        part_lse[:, s] = chunk.logsumexp(-1)
        part_out[:, s] = chunk.softmax(-1) @ v[s * per:(s + 1) * per]
    all_empty = len(empty) == splits
    want_lse = torch.full((heads,), float("-inf"), dtype=torch.float64) if all_empty \
        else scores.logsumexp(-1)
    want = torch.zeros(heads, head_dim, dtype=torch.float64) if all_empty \
        else scores.softmax(-1) @ v
    out = torch.full((heads, head_dim), float("nan"))
    lse = torch.full((heads,), float("nan"))
    max_splits = 1 << max(0, (splits - 1).bit_length())
    kernel[(heads,)](part_out.float().contiguous(), part_lse.float().contiguous(), out, lse,
                     splits, MAX_SPLITS=max_splits, HEAD_DIM=head_dim)
    if torch.isnan(out).any() or torch.isnan(lse).any():
        return {"nan": True, "max_diff": 0.0}
    same_inf = bool(torch.equal(torch.isinf(lse), torch.isinf(want_lse)))
    finite = ~torch.isinf(want_lse)
    lse_diff = (lse.double()[finite] - want_lse[finite]).abs().max().item() if finite.any() \
        else 0.0
    return {"nan": False, "max_diff": (out.double() - want).abs().max().item(),
            "lse_diff": lse_diff if same_inf else float("inf")}


CASES_RUN = {"store_kv": lambda k, c, spec: store_kv(k, c),
             "gather": lambda k, c, spec: gather(k, c, spec["block_n"]),
             "decode": lambda k, c, spec: decode(k, c, spec["block_n"]),
             "merge": lambda k, c, spec: merge(k, c)}


def run(spec: dict) -> None:
    if spec["puzzle"] == "serve":
        try:
            from ._serving import serve

            _report(serve(spec))
        except Exception as err:
            _report({"error": "".join(traceback.format_exception_only(type(err), err)).strip()})
        return
    try:
        kernel = kernel_from_source(spec["source"], spec["name"])
    except Exception as err:  # the learner's syntax or name error
        _report({"error": f"{type(err).__name__}: {err}"})
        return
    for case in spec["cases"]:
        try:
            _report(CASES_RUN[spec["puzzle"]](kernel, case, spec))
        except Exception as err:
            lines = traceback.format_exception_only(type(err), err)
            _report({"error": "".join(lines).strip()[-600:]})
            return


def _report(result: dict) -> None:
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    with open(sys.argv[1]) as f:
        run(json.load(f))
