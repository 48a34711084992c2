"""Run lab 04c's Triton puzzles in Triton's interpreter, in a fresh process.

Like `_kernel_runner` (whose reasons apply: Triton reads ``TRITON_INTERPRET``
when first imported), `pagedkit.exercises.lab04c` sends a kernel's source
here; this process sets the variable before anything imports Triton, runs
the puzzle's cases and prints one JSON line per case as it finishes: the
largest difference from a float64 (or exact) reference, or the error. A
case whose values are wrong is run again on unpadded tensors, so the check
can say when a size was used where a stride belongs. A gather or decode
case marked far puts the sequence's blocks past 2^32 elements of a sparse
cache (`_kernel_runner.far_cache`, as lab 04's kernel check): a block offset
computed in 32 bits misses them.
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

from ._kernel_runner import far_cache, guarded, guarded_table

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


def _padded(shape, fill, gen=None, pad=True):
    """A tensor of `shape` inside a larger one: a spare entry before its first
    and after its last (a whole block of a cache, a token of an input), so a
    write just outside it lands where the check reads (`written_outside`);
    with `pad`, each dim after the first also one longer and the last three
    longer, so every stride differs from the product of the sizes after it
    (a size used for a stride misses). Filled with `fill`, or random if
    `gen`."""
    import torch

    inner = (*(size + 1 for size in shape[1:-1]), shape[-1] + 3) if pad else shape[1:]
    storage = (shape[0] + 2, *inner)
    storage = torch.randn(storage, generator=gen) if gen is not None else \
        torch.full(storage, float(fill))
    return storage[(slice(1, shape[0] + 1), *(slice(0, size) for size in shape[1:]))]


def written_outside(tensor, fill) -> bool:
    """Does the padding around `_padded` `tensor` hold anything but `fill`
    (the kernel wrote there)?"""
    padding = tensor._base.clone()
    padding.as_strided(tensor.shape, tensor.stride(), tensor.storage_offset()).fill_(fill)
    return bool((padding != fill).any())


# ------------------------------------------------------------------ puzzle 1
def store_kv(kernel, case, pad=True):
    import torch

    num_tokens, block_size, heads, head_dim, num_blocks, seed = case
    gen = torch.Generator().manual_seed(seed)
    key = _padded((num_tokens, heads, head_dim), 0.0, gen, pad=pad)
    value = _padded((num_tokens, heads, head_dim), 0.0, gen, pad=pad)
    k_cache = _padded((num_blocks, block_size, heads, head_dim), SENTINEL, pad=pad)
    v_cache = _padded((num_blocks, block_size, heads, head_dim), SENTINEL, pad=pad)
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
    return {"max_diff": diff, "nan": False,
            "outside": written_outside(k_cache, SENTINEL) or written_outside(v_cache, SENTINEL)}


# ------------------------------------------------------------------ puzzle 2
def _paged_caches(used, block_size, kv_heads, head_dim, gen, far, pad):
    """``(k_cache, v_cache, blocks)`` for the gather and decode puzzles: `used`
    blocks in a random order among 3 spare ones, every slot NaN until written;
    with `far`, lab 04's caches whose blocks start past 2^32 elements
    (`far_cache`, which raises OSError where they cannot be mapped)."""
    import torch

    if far:
        return far_cache(used, block_size, kv_heads, head_dim, gen)
    num_blocks = used + 3
    shape = (num_blocks, block_size, kv_heads, head_dim)
    return (_padded(shape, float("nan"), pad=pad), _padded(shape, float("nan"), pad=pad),
            torch.randperm(num_blocks, generator=gen)[:used])


def gather(kernel, case, block_n, pad=True):
    import torch

    num_tokens, block_size, heads, head_dim, seed, far = case
    gen = torch.Generator().manual_seed(seed)
    key = torch.randn(num_tokens, heads, head_dim, generator=gen)
    if far:
        key = key.half()
    try:
        cache, _, blocks = _paged_caches(-(-num_tokens // block_size), block_size, heads,
                                         head_dim, gen, far, pad)
    except OSError as err:  # no room to map a far cache here (a strict overcommit policy)
        return {"skipped": f"{type(err).__name__}: {err}"}
    for i in range(num_tokens):
        cache[blocks[i // block_size], i % block_size] = key[i]
    table = guarded_table(blocks)
    rows = -(-num_tokens // block_n) * block_n              # room for every lane of every tile
    out = _padded((rows, heads, head_dim), SENTINEL, pad=pad)
    kernel[(-(-num_tokens // block_n), heads)](cache, table, out, num_tokens, cache.stride(0),
                                               cache.stride(1), cache.stride(2), out.stride(0),
                                               out.stride(1), BLOCK_SIZE=block_size,
                                               BLOCK_N=block_n, HEAD_DIM=head_dim)
    tail_written = bool((out[num_tokens:] != SENTINEL).any())
    got = out[:num_tokens]
    return {"max_diff": (got - key).abs().max().item() if not torch.isnan(got).any() else 0.0,
            "nan": bool(torch.isnan(got).any()), "tail_written": tail_written,
            "outside": written_outside(out, SENTINEL)}


# ------------------------------------------------------------------ puzzle 3
def attend(query, keys, values, dtype=None, scale=None):
    """One query token's attention over contiguous `keys`/`values` ``[tokens,
    kv_heads, D]``, computed in float64: ``(out [heads, D], lse [heads])`` in
    `dtype` (the query's if None); no keys give zeros and lse -inf (an empty
    split). Query head h reads KV head h // (heads // kv_heads). The scores
    are scaled by `scale`, 1/sqrt(D) if None."""
    import torch

    heads, head_dim = query.shape
    dtype = dtype or query.dtype
    if keys.shape[0] == 0:
        return (torch.zeros(heads, head_dim, dtype=dtype),
                torch.full((heads,), float("-inf"), dtype=dtype))
    group = heads // keys.shape[1]
    k = keys.double().repeat_interleave(group, 1)
    v = values.double().repeat_interleave(group, 1)
    scale = head_dim ** -0.5 if scale is None else scale
    scores = torch.einsum("hd,thd->ht", query.double(), k) * scale
    out = torch.einsum("ht,thd->hd", scores.softmax(-1), v)
    return out.to(dtype), scores.logsumexp(-1).to(dtype)


def decode(kernel, case, block_n, pad=True):
    import torch

    context_len, block_size, q_heads, kv_heads, head_dim, seed, far = case
    gen = torch.Generator().manual_seed(seed)
    key = torch.randn(context_len, kv_heads, head_dim, generator=gen)
    value = torch.randn(context_len, kv_heads, head_dim, generator=gen)
    query = torch.randn(q_heads, head_dim, generator=gen)
    if far:
        key, value = key.half(), value.half()
    try:
        k_cache, v_cache, blocks = _paged_caches(-(-context_len // block_size), block_size,
                                                 kv_heads, head_dim, gen, far, pad)
    except OSError as err:  # no room to map a far cache here (a strict overcommit policy)
        return {"skipped": f"{type(err).__name__}: {err}"}
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
    diff = (out.double() - want).abs().max().item()
    unscaled = attend(query, key, value, torch.float64, scale=1.0)[0]  # the kernel forgot scale
    return {"nan": False, "max_diff": diff,
            "lse_diff": (lse.double() - want_lse).abs().max().item(),
            "unscaled_right": diff > 1e-4 and (out.double() - unscaled).abs().max().item() < 1e-4}


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
    kernel[(heads,)](guarded(part_out.float()), guarded(part_lse.float()), out, lse,  # a load
                     splits, MAX_SPLITS=max_splits, HEAD_DIM=head_dim)  # past num_splits faults
    if torch.isnan(out).any() or torch.isnan(lse).any():
        return {"nan": True, "max_diff": 0.0}
    same_inf = bool(torch.equal(torch.isinf(lse), torch.isinf(want_lse)))
    finite = ~torch.isinf(want_lse)
    lse_diff = (lse.double()[finite] - want_lse[finite]).abs().max().item() if finite.any() \
        else 0.0
    return {"nan": False, "max_diff": (out.double() - want).abs().max().item(),
            "lse_diff": lse_diff if same_inf else float("inf")}


#: how each puzzle runs a case; `pad` False leaves out the padding between rows
#: (the merge's inputs are contiguous by its kernel's signature: never padded)
CASES_RUN = {"store_kv": lambda k, c, spec, pad: store_kv(k, c, pad),
             "gather": lambda k, c, spec, pad: gather(k, c, spec["block_n"], pad),
             "decode": lambda k, c, spec, pad: decode(k, c, spec["block_n"], pad),
             "merge": lambda k, c, spec, pad: merge(k, c)}


def wrong(result: dict, tolerance: float) -> bool:
    """Did the kernel get the case wrong (other than by raising)?"""
    return bool(result.get("outside") or result.get("nan") or result.get("tail_written")
                or result.get("max_diff", 0.0) > tolerance
                or result.get("lse_diff", 0.0) > tolerance)


def is_far(puzzle: str, case) -> bool:
    """Is `case` of `puzzle` a far one (its blocks past 2^32 elements)?"""
    return puzzle in ("gather", "decode") and bool(case[-1])


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
            result = CASES_RUN[spec["puzzle"]](kernel, case, spec, True)
            if spec["puzzle"] != "merge" and not is_far(spec["puzzle"], case) \
                    and wrong(result, spec["tolerance"]):  # (pad leaves a far cache as it is)
                again = CASES_RUN[spec["puzzle"]](kernel, case, spec, False)
                result["unpadded_right"] = not wrong(again, spec["tolerance"])
            _report(result)
        except Exception as err:
            lines = traceback.format_exception_only(type(err), err)
            _report({"error": "".join(lines).strip()[-600:]})
            return


def _report(result: dict) -> None:
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    with open(sys.argv[1]) as f:
        run(json.load(f))
