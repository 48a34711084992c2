"""Block copy: the copy in copy-on-write.

When a sequence that shares a partly filled block with another (parallel
sampling, beam search) is about to write into it, the allocator gives it a
fresh block and asks for the old one's contents to be copied there first
(paper §4.4). The kernel copies a whole batch of such (src, dst) pairs in
one launch: program (i, c) copies chunk c of block ``src_i`` to block
``dst_i``. A block of the cache is one contiguous run of
``block_size * num_kv_heads * head_dim`` values, so "copy a block" is a flat
copy; call it once for each cache tensor (K and V of every layer).

Reference: `pagedkit.kernels.reference.copy_blocks`.
"""

from __future__ import annotations

import torch

from . import checks
from .triton_support import interpreter_on, tl, triton

INTERPRETED = interpreter_on()  # fixed now, when the kernels below are decorated

CHUNK = 1024  # values copied per program


@triton.jit
def _copy_blocks_kernel(cache_ptr, pairs_ptr, block_numel, CHUNK: tl.constexpr):
    pair = tl.program_id(0)
    chunk = tl.program_id(1)
    src = tl.load(pairs_ptr + 2 * pair).to(tl.int64)
    dst = tl.load(pairs_ptr + 2 * pair + 1).to(tl.int64)
    offs = chunk * CHUNK + tl.arange(0, CHUNK)
    mask = offs < block_numel
    values = tl.load(cache_ptr + src * block_numel + offs, mask=mask)
    tl.store(cache_ptr + dst * block_numel + offs, values, mask=mask)


def copy_blocks(cache: torch.Tensor, block_pairs: torch.Tensor, *, check: bool = True) -> None:
    """Triton version of `reference.copy_blocks` (same arguments).

    ``check=False`` skips the argument checks (ids in range, no block both
    read and written: `pagedkit.kernels.checks`): the caller vouches for them.
    """
    if check:
        checks.check_copy_blocks(cache, block_pairs)
    num_pairs = block_pairs.shape[0]
    if num_pairs == 0:
        return
    block_numel = cache[0].numel()
    grid = (num_pairs, triton.cdiv(block_numel, CHUNK))
    _copy_blocks_kernel[grid](cache, block_pairs.contiguous(), block_numel, CHUNK=CHUNK)
