"""Launch configurations: tile sizes, warps and pipeline stages, chosen per GPU target.

A Triton kernel's tiles live in registers and shared memory, and how much of
each there is depends on the GPU: a T4 (sm_75) has 64 KiB of shared memory
per block and no tensor-core path in Triton (``tl.dot`` becomes FMAs, which
hold the whole product in registers); an A10/L4/RTX 30xx-40xx (sm_86/sm_89)
has 99 KiB; an A100 (sm_80) 163 KiB; an H100 (sm_90) 227 KiB. Triton's
defaults (4 warps, 3 stages) overflow some of them: the prefill kernel at
head dim 256 asks for more shared memory than sm_86 has, fp32 tiles spill
registers. So every launch takes its configuration from here, one small
rule per kernel, and ``tests/kernels/test_compile.py`` compiles every kernel
with it for every target and fails if one does not fit or spills
(docs/kernels.md has the table the rule came from).

A configuration never changes results, only speed: the tests run the kernels
in Triton's interpreter with the configuration of the default target.

`Launch` is one kernel call, spelled out (kernel, grid, arguments, launch
options). The wrappers in `paged_decode` / `paged_prefill` build their
launches with a ``*_launches`` function and run them; the compile test builds
the same launches and compiles them for each target without a GPU.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

# Shared memory one block may use (the opt-in maximum, bytes), from the CUDA
# programming guide's table of compute capabilities. Triton asks for the
# opt-in maximum itself when a kernel needs more than 48 KiB.
SHARED_MEMORY_PER_BLOCK = {
    75: 64 * 1024,    # T4, RTX 20xx
    80: 163 * 1024,   # A100, A30
    86: 99 * 1024,    # A10, A40, RTX 30xx
    87: 163 * 1024,   # Jetson Orin
    89: 99 * 1024,    # L4, L40, RTX 40xx
    90: 227 * 1024,   # H100, H200
}
TARGETS = (75, 80, 86, 89, 90)  # the compile test's targets: every Colab / cloud GPU
DEFAULT_ARCH = 80  # the configuration the interpreter (and any unknown target) uses
MAX_SPILL_BYTES = 0  # the compile test's budget: no kernel may spill on any target


@dataclass(frozen=True)
class Config:
    """Tile sizes and launch options of one kernel call."""

    block_m: int = 0      # query rows per program (prefill only)
    block_n: int = 64     # key tokens per tile
    num_warps: int = 4
    num_stages: int = 1


@dataclass
class Launch:
    """One kernel launch: ``kernel[grid](*args, **constexprs, num_warps=..., num_stages=...)``."""

    kernel: Any
    grid: tuple[int, ...]
    args: tuple
    constexprs: dict[str, Any]
    config: Config
    name: str = field(default="")

    def run(self) -> None:
        self.kernel[self.grid](*self.args, **self.constexprs, num_warps=self.config.num_warps,
                               num_stages=self.config.num_stages)


def run_all(launches: list[Launch]) -> None:
    for launch in launches:
        launch.run()


def arch_of(device: torch.device) -> int:
    """Compute capability as one number (8.6 -> 86); `DEFAULT_ARCH` off CUDA."""
    if device.type != "cuda":
        return DEFAULT_ARCH
    major, minor = torch.cuda.get_device_capability(device)
    return 10 * major + minor


def _family(arch: int) -> int:
    """The row of the rules below a target falls under: newer GPUs than sm_90
    get the sm_86 rule (the smallest shared memory of Ampere and later)."""
    if arch < 80:
        return 75
    if arch in (80, 87, 90):
        return arch if arch != 87 else 80
    return 86


def decode_config(arch: int, head_dim: int, itemsize: int) -> Config:
    """Decode streams ``block_n`` keys and values per step through registers.

    A K and a V tile are ``block_n x head_dim``; 64 tokens at head dim 128 in
    fp16 are 16 KiB each. Past that (fp16 at 256) the tile halves; fp32 at
    head dim 128 or more also doubles the warps (at 4 warps its split variant
    spilled on sm_90). On sm_75, where ``tl.dot`` is computed with FMAs in
    registers, tiles are smaller still.
    """
    padded = max(16, 1 << (head_dim - 1).bit_length())
    if _family(arch) == 75:
        return Config(block_n=32 if padded * itemsize <= 256 else 16, num_warps=4, num_stages=1)
    if 64 * padded * itemsize <= 16 * 1024:
        return Config(block_n=64, num_warps=4, num_stages=2)
    return Config(block_n=32, num_warps=8 if itemsize >= 4 else 4, num_stages=2)


def prefill_config(arch: int, head_dim: int, itemsize: int) -> Config:
    """Prefill keeps a ``block_m x head_dim`` query tile and its float32
    accumulator resident and streams K/V tiles of ``block_n`` tokens;
    pipelining them (stages) costs shared memory. The rule keeps the tiles
    inside every target's shared memory and the accumulator inside 255
    registers a thread: fp32 tiles take 16 rows and 8 warps (32 rows spilled
    on sm_86/89/90), head dim 256 drops the pipelining (the default 3 stages
    needed 104 KiB, over sm_86/89's 99 KiB). See docs/kernels.md for the
    measured table.
    """
    padded = max(16, 1 << (head_dim - 1).bit_length())
    if _family(arch) == 75:
        return Config(block_m=16 if padded >= 128 else 32, block_n=16, num_warps=4,
                      num_stages=1)
    if itemsize >= 4:
        return Config(block_m=16, block_n=32, num_warps=8, num_stages=2 if padded <= 128 else 1)
    if padded <= 64:
        return Config(block_m=64, block_n=64, num_warps=4, num_stages=2)
    if padded <= 128:
        return Config(block_m=64, block_n=32, num_warps=4, num_stages=2)
    return Config(block_m=32, block_n=32, num_warps=4, num_stages=1)
