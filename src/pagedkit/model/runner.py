"""The model runner: turn a scheduled step into one forward pass.

A step's tokens — decode tokens of running sequences, prompt chunks of new
ones — are packed into a single unpadded row: no padding is ever computed.
Alongside go their positions, the physical slot of each new token
(``slot_mapping``), each sequence's block table and context length, and the
query boundaries ``cu_seqlens``. Before the forward, the block copies the
scheduler asked for (swap out, swap in, copy-on-write) are carried out.
On CPU the forward runs on the thread count measured fastest for steps of
its size (`pagedkit.model.threads`: a small step on two threads of a busy
machine ran 13x slower than on one, and ~15% faster on a quiet one).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import torch

from .. import ops
from ..memory import BlockCopy, KVCacheManager
from ..memory.block_table import KERNEL_NULL_BLOCK, NULL_BLOCK
from .attention import AttentionMetadata, forward_context, register
from .kv_cache import KVCacheSpec
from .support import check_config
from .threads import step_macs, step_threads


class ScheduledTokens(Protocol):
    """One sequence's share of a step: its tokens ``start .. start + num_tokens``."""

    seq: object  # has ``seq_id`` and ``token_ids``
    start: int
    num_tokens: int

    @property
    def computes_last_token(self) -> bool: ...  # does the step reach its last token?


class ScheduledStep(Protocol):
    """What the runner needs of a scheduled step. The scheduler's
    `SchedulerOutput` is one; the runner, a layer below, only names the shape
    (data flows down: docs/architecture.md)."""

    scheduled: Sequence[ScheduledTokens]  # decodes first
    block_copies: list[BlockCopy]  # copy-on-write, GPU -> GPU
    swap_out: list[BlockCopy]  # GPU -> CPU
    swap_in: list[BlockCopy]  # CPU -> GPU


class ModelRunner:
    """Owns the model and its paged KV cache tensors."""

    def __init__(self, model: torch.nn.Module, *, block_size: int, device: torch.device,
                 dtype: torch.dtype) -> None:
        check_config(model)  # the engine runs the full check_supported once the model is placed
        self.model = model.to(device=device, dtype=dtype).eval()
        self.model.set_attn_implementation(register())
        #: what a step calls: the model, or a compiled forward of it (model/compiled.py)
        self.forward = self.model
        self.device = device
        self.block_size = block_size
        self.spec = KVCacheSpec.from_config(model.config, dtype)
        self.vocab_size = model.get_output_embeddings().weight.shape[0]
        self.kv_caches: list[tuple[torch.Tensor, torch.Tensor]] = []
        self.swap_caches: list[tuple[torch.Tensor, torch.Tensor]] = []
        # `step_macs` by token count: a function of the config alone, which takes
        # tens of microseconds to read (transformers' config attribute lookups)
        self._step_macs: dict[int, int] = {}

    def allocate_cache(self, num_blocks: int, num_swap_blocks: int = 0) -> None:
        """The GPU cache, and the CPU swap space (pinned on CUDA for fast copies)."""
        self.kv_caches = self.spec.allocate(num_blocks, self.block_size, self.device)
        self.swap_caches = self.spec.allocate(
            num_swap_blocks, self.block_size, "cpu", pin_memory=self.device.type == "cuda"
        ) if num_swap_blocks else []

    @torch.inference_mode()
    def profile(self, num_tokens: int) -> int:
        """Peak CUDA memory (bytes) of a forward over `num_tokens` tokens: what the
        model needs besides the KV cache, which gets the rest (vLLM does the same)."""
        blocks = -(-num_tokens // self.block_size)
        caches = self.spec.allocate(blocks, self.block_size, self.device)
        torch.cuda.reset_peak_memory_stats(self.device)
        ids = torch.zeros(1, num_tokens, dtype=torch.long, device=self.device)
        positions = torch.arange(num_tokens, device=self.device)[None]
        meta = AttentionMetadata(
            slot_mapping=torch.arange(num_tokens, device=self.device),
            block_tables=torch.arange(blocks, dtype=torch.int32, device=self.device)[None],
            context_lens=torch.tensor([num_tokens], dtype=torch.int32, device=self.device),
            cu_seqlens_q=torch.tensor([0, num_tokens], dtype=torch.int32, device=self.device),
            num_decodes=0, kv_caches=caches)
        with forward_context(meta):
            self.model(input_ids=ids, position_ids=positions, use_cache=False, logits_to_keep=1)
        peak = torch.cuda.max_memory_allocated(self.device) - sum(
            k.nbytes + v.nbytes for k, v in caches)
        del caches
        torch.cuda.empty_cache()
        return peak

    @torch.inference_mode()
    def execute(self, step: ScheduledStep, kv: KVCacheManager,
                all_logits: bool = False) -> torch.Tensor | None:
        """Run one step; returns float32 logits for the sequences that sample,
        in scheduled order (None if nothing was scheduled); with `all_logits`,
        those of every scheduled token (what prompt logprobs read)."""
        if step.swap_out:
            self._swap(step.swap_out, self.kv_caches, self.swap_caches)
        if step.swap_in:
            self._swap(step.swap_in, self.swap_caches, self.kv_caches)
        if step.block_copies:
            pairs = torch.tensor(step.block_copies, dtype=torch.long, device=self.device)
            check = self.device.type != "cuda"
            for k_cache, v_cache in self.kv_caches:
                ops.copy_blocks(k_cache, pairs, check=check)
                ops.copy_blocks(v_cache, pairs, check=check)
        if not step.scheduled:
            return None
        input_ids, positions, meta, logits_indices = pack_step(step, kv, self.device,
                                                               self.kv_caches)
        # On CPU, the thread count measured fastest for steps of this size (threads.py)
        num_tokens = input_ids.numel()
        macs = self._step_macs.get(num_tokens)
        if macs is None:
            macs = self._step_macs[num_tokens] = step_macs(self.model.config, num_tokens)
        # every row samples (decodes only): keep them all (0), without gathering them
        keep = 0 if all_logits or logits_indices.numel() == num_tokens else logits_indices
        with forward_context(meta), step_threads(macs, key=id(self.model), device=self.device):
            out = self.forward(input_ids=input_ids[None], position_ids=positions[None],
                             use_cache=False, logits_to_keep=keep)
        logits = out.logits[0]
        return logits if logits.dtype == torch.float32 else logits.float()

    def _swap(self, copies: list[BlockCopy], src_caches, dst_caches) -> None:
        """Copy whole blocks between the GPU cache and the CPU swap space."""
        src = torch.tensor([s for s, _ in copies], dtype=torch.long)
        dst = torch.tensor([d for _, d in copies], dtype=torch.long)
        for (src_k, src_v), (dst_k, dst_v) in zip(src_caches, dst_caches, strict=True):
            for a, b in ((src_k, dst_k), (src_v, dst_v)):
                b[dst.to(b.device)] = a[src.to(a.device)].to(b.device)


def pack_step(step: ScheduledStep, kv: KVCacheManager, device: torch.device | str = "cpu",
              kv_caches: list[tuple[torch.Tensor, torch.Tensor]] | None = None):
    """Pack a scheduled step into one unpadded row.

    Returns ``(input_ids, positions, metadata, logits_indices)``: the tokens
    and positions of every scheduled sequence one after another, the
    `AttentionMetadata` (each new token's slot, block tables, context lengths,
    query boundaries ``cu_seqlens``), and the rows whose logits are needed —
    the last token of each sequence that samples this step.

    The metadata is right as built, so it says ``check=False`` (the step
    skips `checks.check_step`): every slot comes from `BlockTable.slot_mapping`,
    which refuses a position its table does not hold, so each table covers
    its context length; every block id comes from the pool, which hands out
    none outside it, and the cache has the pool's blocks; the tensors' types
    are set here. tests/model/test_attention_step.py checks what it packs
    in engine runs of every kind of step.
    """
    ids: list[int] = []
    positions: list[int] = []
    slots: list[int] = []
    cu_seqlens = [0]
    context_lens: list[int] = []
    tables: list[list[int]] = []
    logits_indices: list[int] = []
    num_decodes = 0  # the leading sequences of one token each
    for i, s in enumerate(step.scheduled):
        if s.num_tokens == 1 and num_decodes == i:
            num_decodes += 1
        start = s.start
        end = start + s.num_tokens
        seq = s.seq
        # a swapped-out table holds CPU block ids: never packed as GPU ones
        table = kv.gpu_table(seq.seq_id)
        ids += seq.token_ids[start:end]
        positions += range(start, end)
        slots += table.slot_mapping(start, end)
        cu_seqlens.append(cu_seqlens[-1] + s.num_tokens)
        context_lens.append(end)
        tables.append(table.blocks)
        if s.computes_last_token:
            logits_indices.append(cu_seqlens[-1] - 1)
    width = max(map(len, tables))
    padded: list[int] = []  # the tables row after row, each padded to `width`
    for t in tables:
        padded += t
        if len(t) < width:
            padded += [KERNEL_NULL_BLOCK] * (width - len(t))

    long, int32 = dict(dtype=torch.long, device=device), dict(dtype=torch.int32, device=device)
    block_tables = torch.tensor(padded, **int32).view(len(tables), width)
    # The kernels read no entry past a sequence's blocks or wholly before its
    # window, but every entry must be a valid id: the padding and a released
    # block (`NULL_BLOCK`, before a sliding window) show `KERNEL_NULL_BLOCK`
    block_tables.masked_fill_(block_tables == NULL_BLOCK, KERNEL_NULL_BLOCK)
    meta = AttentionMetadata(
        slot_mapping=torch.tensor(slots, **long),
        block_tables=block_tables,
        context_lens=torch.tensor(context_lens, **int32),
        cu_seqlens_q=torch.tensor(cu_seqlens, **int32),
        num_decodes=num_decodes,
        kv_caches=kv_caches if kv_caches is not None else [],
        check=False,
    )
    return (torch.tensor(ids, **long), torch.tensor(positions, **long), meta,
            torch.tensor(logits_indices, **long))
