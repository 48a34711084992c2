"""How long one iteration takes: a roofline model of a decoder step.

The simulator never runs a model, so it needs a model of time to turn
iterations into seconds (and so normalized latency, paper §6.1, Fig. 12).
One step of a decoder-only model, batched over every running sequence:

* reads every weight once (``weight_bytes``), whatever the batch size;
* reads each sequence's cached keys and values once for attention
  (``kv_bytes_per_token`` per token of context);
* does ``2 * num_params`` floating-point operations per token it
  processes (a prompt token or a newly generated one).

A step is bound by whichever is slower, memory traffic or arithmetic
(the roofline), plus a fixed per-step overhead (scheduling, sampling,
launching kernels):

    t = overhead + max((weights + kv_read / attention_efficiency) / (bandwidth * mem_eff),
                       2 * params * tokens / (peak_flops * flop_eff))

Paged KV reads are slower than contiguous ones because every block is a
separate gather; the paper measures its PagedAttention kernel 20-26%
slower than FasterTransformer's (§7.1, Fig. 18a). We model the attention
efficiency of block size ``B`` as ``B / (B + block_overhead_tokens)``:
with the default 4 tokens, block size 16 reads KV 25% slower, and tiny
blocks are much slower, which is why the paper's Fig. 18b curve rises at
the left. Contiguous managers read at full efficiency.

Swapping (``preemption="swap"``) moves a preempted request's blocks to CPU
memory and later back over the CPU-GPU link, which computes nothing but
takes time: `swap_time` charges ``blocks * block_bytes / link_bandwidth``
each way (so ``2 x blocks x block_bytes / link_bandwidth`` out and back,
lab 06's cost model), with each GPU moving its share of every block over
its own link, at ``link_bandwidth`` = 25 GB/s (PCIe 4.0 x16, lab 06's
figure), and the iteration that swaps waits for it. Only the bandwidth is
counted: not the cost of each copy, which makes many small blocks slower
still (the paper's Fig. 19).

Left out on purpose: the quadratic attention FLOPs of long prompts,
tensor-parallel communication, and kernel-launch details. Numbers are
physical datasheet values; the efficiencies and overhead are documented
assumptions, not fits to the paper's measurements.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .._validation import check_number, choice_name

GiB = 1 << 30


@dataclass(frozen=True)
class ModelPreset:
    """A model on its GPUs: sizes (paper Table 1) and hardware speeds."""

    name: str
    num_params: float  # parameters
    weight_bytes: float  # all GPUs together (fp16)
    num_layers: int
    hidden_size: int
    kv_cache_bytes: float  # memory left for the KV cache (Table 1)
    num_gpus: int
    gpu: str
    bandwidth: float  # bytes/s per GPU (HBM)
    peak_flops: float  # FLOP/s per GPU (fp16 tensor cores)
    max_seq_len: int = 2048
    link_bandwidth: float = 25e9  # bytes/s per GPU, CPU<->GPU each way (PCIe 4.0 x16)

    @property
    def kv_bytes_per_token(self) -> int:
        """Keys and values of one token in every layer: ``2 * layers * hidden * 2 bytes``."""
        return 2 * self.num_layers * self.hidden_size * 2

    @property
    def kv_slots(self) -> int:
        """Token slots the KV cache holds: Table 1's "max # KV cache slots"."""
        return int(self.kv_cache_bytes // self.kv_bytes_per_token)

    def slots_for_bytes(self, num_bytes: float) -> int:
        return int(num_bytes // self.kv_bytes_per_token)


_A100_BW, _A100_FLOPS = 1.555e12, 312e12  # A100-40GB: HBM2 bandwidth, fp16 tensor peak
_A100_80_BW = 2.039e12  # A100-80GB (SXM) HBM2e bandwidth

#: OPT-13B on one A100-40GB (Table 1: 26 GB of weights, 12 GB of KV cache, 15.7K slots).
OPT_13B = ModelPreset("OPT-13B", 13e9, 26e9, 40, 5120, 12 * GiB, 1, "A100-40GB",
                      _A100_BW, _A100_FLOPS)
#: OPT-66B on four A100-40GB (Table 1: 132 GB, 21 GB of KV cache, 9.7K slots).
OPT_66B = ModelPreset("OPT-66B", 66e9, 132e9, 64, 9216, 21 * GiB, 4, "A100-40GB",
                      _A100_BW, _A100_FLOPS)
#: OPT-175B on eight A100-80GB (Table 1: 346 GB, 264 GB of KV cache, 60.1K slots).
OPT_175B = ModelPreset("OPT-175B", 175e9, 346e9, 96, 12288, 264 * GiB, 8, "A100-80GB",
                       _A100_80_BW, _A100_FLOPS)

PRESETS = {p.name.lower(): p for p in (OPT_13B, OPT_66B, OPT_175B)}


@dataclass(frozen=True)
class LatencyModel:
    """Seconds per iteration for `preset` (see the module docstring)."""

    preset: ModelPreset = OPT_13B
    mem_efficiency: float = 0.8  # share of peak bandwidth a decode step achieves
    flop_efficiency: float = 0.5  # share of peak FLOP/s a large batch achieves
    overhead: float = 0.005  # seconds per step outside the GPU kernels
    block_overhead_tokens: float = 4.0  # paged gather cost, in tokens per block

    def __post_init__(self) -> None:
        preset = self.preset
        if isinstance(preset, str):  # a preset's name, as Simulator(model=...) takes it
            found = PRESETS.get(choice_name(preset))
            if found is None:
                raise ValueError(f"preset {preset!r} is not a preset: give one of "
                                 f"{', '.join(map(repr, PRESETS))} (pagedkit.sim.PRESETS) or a "
                                 "ModelPreset (pagedkit.sim.OPT_13B)")
            object.__setattr__(self, "preset", found)
        elif not isinstance(preset, ModelPreset):
            raise TypeError(f"preset must be a ModelPreset (pagedkit.sim.OPT_13B) or a preset's "
                            f"name ({', '.join(map(repr, PRESETS))}), got {preset!r}")
        for name in ("mem_efficiency", "flop_efficiency"):  # shares of a peak: (0, 1]
            if getattr(self, name) == math.inf:  # that roof left out (lab 01's roofline)
                continue
            value = check_number(name, getattr(self, name), positive=True)
            if value > 1:
                raise ValueError(f"{name} is a share of the GPU's peak, in (0, 1], got {value!r}")
        check_number("overhead", self.overhead, minimum=0)
        check_number("block_overhead_tokens", self.block_overhead_tokens, minimum=0)

    def attention_efficiency(self, block_size: int | None) -> float:
        """Relative speed of KV reads: 1 for contiguous, ``B / (B + overhead)`` for paged."""
        if block_size is None:
            return 1.0
        return block_size / (block_size + self.block_overhead_tokens)

    def step_time(self, num_tokens: int, context_tokens: int,
                  block_size: int | None = None) -> float:
        """One iteration processing `num_tokens` new tokens (prompt tokens plus
        one per decoding sequence) that attend over `context_tokens` cached tokens."""
        return self.overhead + max(self.memory_time(context_tokens, block_size),
                                   self.compute_time(num_tokens))

    def memory_time(self, context_tokens: int, block_size: int | None = None) -> float:
        """Seconds to read the weights and `context_tokens` cached tokens' K/V once
        (a step's memory side, without the overhead)."""
        p = self.preset
        kv_bytes = context_tokens * p.kv_bytes_per_token / self.attention_efficiency(block_size)
        return (p.weight_bytes + kv_bytes) / (p.bandwidth * p.num_gpus * self.mem_efficiency)

    def compute_time(self, num_tokens: int) -> float:
        """Seconds of arithmetic for `num_tokens` new tokens (a step's compute
        side, without the overhead)."""
        p = self.preset
        return 2 * p.num_params * num_tokens / (p.peak_flops * p.num_gpus * self.flop_efficiency)

    def swap_time(self, num_blocks: int, block_size: int) -> float:
        """Seconds to move `num_blocks` KV blocks of `block_size` tokens one way
        between GPU and CPU memory (swap out, or back in): each GPU moves its
        share of every block over its own link (see the module docstring)."""
        p = self.preset
        return num_blocks * block_size * p.kv_bytes_per_token / (p.link_bandwidth * p.num_gpus)


@dataclass(frozen=True, init=False)
class StepClock(LatencyModel):
    """Every iteration lasts `seconds` (1 by default), whatever it computes or
    swaps: a clock that counts iterations. For toy traces whose arrivals are
    given in steps (`pagedkit.viz.replay`), where the roofline's
    milliseconds would only obscure the order of events. `seconds` comes
    first (``StepClock(0.5)``); `preset` only sets the KV capacity."""

    seconds: float = 1.0

    def __init__(self, seconds: float = 1.0, preset: ModelPreset | str = OPT_13B,
                 **fields) -> None:  # `fields`: LatencyModel's (dataclasses.replace gives them)
        seconds = check_number("seconds", seconds)
        if not seconds > 0:
            raise ValueError(f"an iteration must last > 0 seconds, got {seconds!r}")
        object.__setattr__(self, "seconds", seconds)
        super().__init__(preset, **fields)

    def step_time(self, num_tokens: int, context_tokens: int,
                  block_size: int | None = None) -> float:
        return self.seconds

    def swap_time(self, num_blocks: int, block_size: int) -> float:
        return 0.0  # an iteration lasts `seconds`, swapping or not
