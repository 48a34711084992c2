"""Run a learner's Triton kernel in Triton's interpreter, in a fresh process.

Triton reads ``TRITON_INTERPRET`` when it is first imported, so a notebook or
test process that imported it without the variable cannot interpret a
kernel any more. `lab04.check_paged_kernel` therefore sends the kernel's
source here, in a child process that sets the variable before anything
imports Triton, runs it on the check's cases and prints one JSON line per
case as it finishes: the largest difference from the float64 reference, or
the error (a segmentation fault prints nothing more: the lines before it say
which case it struck).

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
    process may not read begins (`guarded`): a kernel that loads a table
    entry past the sequence's last block dies of a segmentation fault
    instead of reading padding whose value nothing checks."""
    import torch

    return guarded(torch.tensor([int(b) for b in blocks], dtype=torch.int32))


def guarded(values):
    """A copy of tensor `values`, contiguous, that ends exactly where a page
    the process may not read begins (mprotect PROT_NONE): a load past its
    last element dies of a segmentation fault."""
    import ctypes
    import mmap

    import numpy as np
    import torch

    flat = values.detach().contiguous().view(-1).numpy()
    page, nbytes = mmap.PAGESIZE, flat.nbytes
    size = -(-nbytes // page) * page
    buf = mmap.mmap(-1, size + page, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    address = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    if libc.mprotect(address + size, page, 0) != 0:  # 0 = PROT_NONE
        raise OSError(ctypes.get_errno(), "mprotect failed: cannot guard the tensor's end")
    copy = np.frombuffer(buf, dtype=flat.dtype, count=flat.size, offset=size - nbytes)
    copy[:] = flat
    _GUARDED.append(buf)
    return torch.from_numpy(copy).view(values.shape)


def sparse_cache(num_blocks: int, block_size: int, num_heads: int, head_dim: int,
                 block_stride: int, head_stride: int):
    """K and V caches, each ``[num_blocks, block_size, num_heads, head_dim]`` in
    fp16 with the given strides, as views of one shared mapping of a sparse
    temporary file of ``num_blocks * block_stride`` elements: only the pages
    written take memory or disk, and a file's shared mapping is not charged to
    the process's committed memory, so it maps under a strict overcommit policy
    too (an anonymous mapping of that size did not, and the case was skipped).
    K and V are interleaved, each token's row holding K's heads and then V's,
    so both have the same strides."""
    import mmap
    import tempfile

    import torch

    row_stride = 2 * num_heads * head_stride
    if block_size * row_stride > block_stride or head_dim > head_stride:
        raise ValueError("sparse_cache: the strides overlap")
    size = 2 * num_blocks * block_stride
    with tempfile.TemporaryFile(prefix="pagedkit_far_cache_") as f:
        f.truncate(size)                         # a hole: no block of the file is written
        buf = mmap.mmap(f.fileno(), size, flags=mmap.MAP_SHARED)
    _GUARDED.append(buf)
    flat = torch.frombuffer(buf, dtype=torch.float16)
    shape = (num_blocks, block_size, num_heads, head_dim)
    strides = (block_stride, row_stride, head_stride, 1)
    return (flat.as_strided(shape, strides, 0),
            flat.as_strided(shape, strides, num_heads * head_stride))


FAR_BLOCKS = 2**32  # elements: the far case's blocks start past this (past 2^31 and 2^32)


def far_cache(used: int, block_size: int, num_heads: int, head_dim: int, gen):
    """K and V caches (`sparse_cache`, fp16, heads padded) so big that each of
    `used` shuffled blocks, the ones returned for a sequence, starts past
    `FAR_BLOCKS` elements: block * stride_block overflows 32 bits, signed or
    not, and only an offset computed in 64 bits finds them. Lab 04's kernel
    check and lab 04c's gather and decode puzzles take their far case from
    here. ``(k_cache, v_cache, blocks)``; OSError where it cannot be mapped."""
    import torch

    block_stride = 2**26 + 1                      # a block every 64 Mi elements
    first = -(-FAR_BLOCKS // block_stride)       # the first block past 2^32 elements
    k_cache, v_cache = sparse_cache(first + used + 2, block_size, num_heads, head_dim,
                                    block_stride, head_dim + 3)
    return k_cache, v_cache, first + torch.randperm(used + 2, generator=gen)[:used]


def paged_case(context_len: int, block_size: int, num_heads: int, head_dim: int, seed: int,
               far: bool = False):
    """One sequence's K/V in shuffled blocks of a cache whose blocks and heads are
    padded (a spare token row per block and spare elements per head, so no stride
    is the product of the sizes after it), every slot outside the sequence NaN, a
    block table that ends at an unreadable page (`guarded_table`), and a query
    per head. With `far`, the cache is `far_cache`'s: fp16, and so big that every
    block of the sequence starts past 2^32 elements."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    key = torch.randn(context_len, num_heads, head_dim, generator=gen)
    value = torch.randn(context_len, num_heads, head_dim, generator=gen)
    query = torch.randn(num_heads, head_dim, generator=gen)
    used = -(-context_len // block_size)
    if far:
        key, value = key.half(), value.half()
        k_cache, v_cache, blocks = far_cache(used, block_size, num_heads, head_dim, gen)
    else:
        num_blocks = used + 3
        storage_k = torch.full((num_blocks, block_size + 1, num_heads, head_dim + 3),
                               float("nan"))
        storage_v = storage_k.clone()
        k_cache = storage_k[:, :block_size, :, :head_dim]     # padded blocks and heads
        v_cache = storage_v[:, :block_size, :, :head_dim]
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
        _report({"error": f"{type(err).__name__}: {err}"})
        return [{"error": f"{type(err).__name__}: {err}"}]
    results = []
    for context_len, block_size, num_heads, head_dim, seed, far in spec["cases"]:
        try:
            query, k_cache, v_cache, table, expected = paged_case(
                context_len, block_size, num_heads, head_dim, seed, far)
        except OSError as err:  # no room to map a far cache here (a strict overcommit policy)
            if not far:
                raise
            results.append({"skipped": f"{type(err).__name__}: {err}"})
            _report(results[-1])
            continue
        out = torch.full_like(query, float("nan"))
        try:
            kernel[(num_heads,)](query, k_cache, v_cache, table, out, context_len,
                                 head_dim ** -0.5, k_cache.stride(0), k_cache.stride(1),
                                 k_cache.stride(2), BLOCK_SIZE=block_size,
                                 BLOCK_N=spec["block_n"], HEAD_DIM=head_dim)
        except Exception as err:
            lines = traceback.format_exception_only(type(err), err)
            results.append({"error": "".join(lines).strip()[-600:]})
            _report(results[-1])
            break
        diff = (out.double() - expected).abs().max().item()
        results.append({"nan": bool(torch.isnan(out).any()), "max_diff": diff})
        _report(results[-1])
    return results


def _report(result: dict) -> None:
    """One JSON line per case as soon as it is done: if the process then dies (a
    read outside memory), the lines printed say which case killed it."""
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    with open(sys.argv[1]) as f:
        run(json.load(f))
