"""Run a learner's Triton kernel in Triton's interpreter, in a fresh process.

Triton reads ``TRITON_INTERPRET`` when it is first imported, so a notebook or
test process that imported it without the variable cannot interpret a
kernel any more. `lab04.check_paged_kernel` therefore sends the kernel's
source here, in a child process that sets the variable before anything
imports Triton, runs it on the check's cases and prints one JSON line per
case: the largest difference from the float64 reference, or the error.

    python -m pagedkit.exercises._kernel_runner SPEC.json
"""

from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"  # before torch/triton are imported, here and below

import json
import sys
import traceback

_GUARDED = []  # the mappings behind guarded tables stay alive for the whole run


def guarded_table(blocks):
    """The block ids as an int32 tensor that ends exactly where a page the
    process may not read begins (mprotect PROT_NONE): a kernel that loads a
    table entry past the sequence's last block dies of a segmentation fault
    instead of reading padding whose value nothing checks."""
    import ctypes
    import mmap

    import numpy as np
    import torch

    page, nbytes = mmap.PAGESIZE, 4 * len(blocks)
    size = -(-nbytes // page) * page
    buf = mmap.mmap(-1, size + page, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    address = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    if libc.mprotect(address + size, page, 0) != 0:  # 0 = PROT_NONE
        raise OSError(ctypes.get_errno(), "mprotect failed: cannot guard the block table")
    table = np.frombuffer(buf, dtype=np.int32, count=len(blocks), offset=size - nbytes)
    table[:] = [int(b) for b in blocks]
    _GUARDED.append(buf)
    return torch.from_numpy(table)


def paged_case(context_len: int, block_size: int, num_heads: int, head_dim: int, seed: int):
    """One sequence's K/V in shuffled blocks of a cache whose blocks are padded
    (one spare token row each, so a block's stride is not block_size x a
    token's), every slot outside the sequence NaN, a block table that ends at
    an unreadable page (`guarded_table`), and a query per head."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    key = torch.randn(context_len, num_heads, head_dim, generator=gen)
    value = torch.randn(context_len, num_heads, head_dim, generator=gen)
    query = torch.randn(num_heads, head_dim, generator=gen)
    used = -(-context_len // block_size)
    num_blocks = used + 3
    storage_k = torch.full((num_blocks, block_size + 1, num_heads, head_dim), float("nan"))
    storage_v = storage_k.clone()
    k_cache, v_cache = storage_k[:, :block_size], storage_v[:, :block_size]  # padded blocks
    blocks = torch.randperm(num_blocks, generator=gen)[:used]
    for i in range(context_len):
        k_cache[blocks[i // block_size], i % block_size] = key[i]
        v_cache[blocks[i // block_size], i % block_size] = value[i]
    table = guarded_table(blocks)  # no padding: reading past its end faults
    scores = torch.einsum("hd,thd->ht", query.double(), key.double()) / head_dim ** 0.5
    expected = torch.einsum("ht,thd->hd", scores.softmax(-1), value.double())
    return query, k_cache, v_cache, table, expected


def run(spec: dict) -> list[dict]:
    import torch
    import triton
    import triton.language as tl

    namespace = {"triton": triton, "tl": tl, "torch": torch}
    lines = spec["source"].splitlines()
    while lines and not lines[0].lstrip().startswith("def "):  # its decorators: @triton.jit,
        lines.pop(0)                                           # or an alias of it
    try:
        exec(compile("\n".join(lines), "<your kernel>", "exec"), namespace)
        kernel = triton.jit(namespace[spec["name"]])   # the interpreter needs no source file
    except Exception as err:  # the learner's syntax or name error
        return [{"error": f"{type(err).__name__}: {err}"}]
    results = []
    for context_len, block_size, num_heads, head_dim, seed in spec["cases"]:
        query, k_cache, v_cache, table, expected = paged_case(context_len, block_size,
                                                              num_heads, head_dim, seed)
        out = torch.full_like(query, float("nan"))
        try:
            kernel[(num_heads,)](query, k_cache, v_cache, table, out, context_len,
                                 head_dim ** -0.5, k_cache.stride(0), k_cache.stride(1),
                                 k_cache.stride(2), BLOCK_SIZE=block_size,
                                 BLOCK_N=spec["block_n"], HEAD_DIM=head_dim)
        except Exception as err:
            lines = traceback.format_exception_only(type(err), err)
            results.append({"error": "".join(lines).strip()[-600:]})
            break
        diff = (out.double() - expected).abs().max().item()
        results.append({"nan": bool(torch.isnan(out).any()), "max_diff": diff})
    return results


if __name__ == "__main__":
    with open(sys.argv[1]) as f:
        print(json.dumps(run(json.load(f))))
