"""vLLM's block pool, read in this process, as pagedkit's frames (vLLM 0.32 only).

vLLM's KV events (`cache_view`) describe the cache's contents, not its pool:
no block ids, no per-request tables, no blocks in use. Where vLLM runs in
this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``), its pool can be read
directly after each step, and pagedkit's `BlockMap`, `Timeline` and
`PageTable` draw it as they draw pagedkit's. The reading uses vLLM's
internals — ``BlockPool.blocks`` (each `KVCacheBlock`'s id, ``ref_cnt`` and
hash), the single-type manager's ``req_to_blocks`` (each request's blocks in
order) and the scheduler's ``requests``, ``running`` and ``waiting`` — which
are not a public interface: `VllmPoolRecorder` checks the version and refuses
any it was not checked against (`KNOWN_VERSIONS`).

Block ids: vLLM's block 0 is its null block (never handed out); block *i*
is drawn as pagedkit's block *i - 1*, so the map shows exactly the usable
pool. A block is *used* while some request holds it (``ref_cnt > 0``; its
owners are the requests whose block lists hold it, its fill what the first
of them has computed), *cached* when free but still named (a prefix-cache
entry), free otherwise. vLLM has no swap space: nothing is drawn on CPU.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Hashable
from typing import Any

from ..memory.block_table import NULL_BLOCK
from ..viz.frames import (
    CACHED,
    EMPTY_BLOCK,
    RUNNING,
    USED,
    BlockState,
    Frame,
    MemoryCounts,
    RequestCounts,
)
from ..viz.recorder import Recorder

#: vLLM versions whose internals this reading was checked against (tests/vllm)
KNOWN_VERSIONS = ("0.32.",)


def check_version(version: str) -> None:
    """Refuse a vLLM whose internals this reading was not checked against."""
    if not version.startswith(KNOWN_VERSIONS):
        raise RuntimeError(
            f"VllmPoolRecorder reads vLLM's internals (BlockPool.blocks, req_to_blocks, the "
            f"scheduler's queues) as vLLM {', '.join(v + 'x' for v in KNOWN_VERSIONS)} lays "
            f"them out; this is vLLM {version}, where that reading is not known to be right. "
            "Watch its prefix cache through its public KV events instead "
            "(pagedkit.vllm.cache_view.PrefixCacheMap).")


def external_id(request_id: str) -> str:
    """The id a request was added with: vLLM 0.32 appends ``-`` and 8 random
    hex digits to make its internal id unique."""
    return request_id[:-9] if re.fullmatch(r".+-[0-9a-f]{8}", request_id) else request_id


class VllmPoolRecorder(Recorder):
    """A `Recorder` whose frames are read from an in-process vLLM's block pool.

    ``VllmPoolRecorder(vllm_llm)``; call `cut` after each engine step (e.g.
    ``cache_view.serve_live(..., on_step=recorder.cut)``); draw it with
    ``BlockMap(recorder)``, ``Timeline(recorder)`` or ``Dashboard(recorder)``.
    """

    def __init__(self, llm: Any, *, version: str | None = None) -> None:
        # (no Recorder.__init__: there is no pagedkit KVCacheManager to listen to)
        if version is None:
            import vllm

            version = vllm.__version__
        check_version(version)
        try:
            scheduler = llm.llm_engine.engine_core.engine_core.scheduler
        except AttributeError as err:
            raise RuntimeError("vLLM's engine core runs in another process: its pool can be "
                               "read only in this one (VLLM_ENABLE_V1_MULTIPROCESSING=0 before "
                               "building the LLM)") from err
        managers = scheduler.kv_cache_manager.coordinator.single_type_managers
        if len(managers) != 1:
            raise RuntimeError(f"this vLLM has {len(managers)} KV cache groups (a hybrid "
                               "model): one block map of one pool is all this draws")
        self.vllm_scheduler, self.manager = scheduler, managers[0]
        self.pool = scheduler.kv_cache_manager.block_pool
        self.num_blocks, self.block_size = self.pool.num_gpu_blocks - 1, self.manager.block_size
        self.frames: list[Frame] = []
        self.first_seen: dict[Hashable, int] = {}
        self.cpu_blocks_seen = 0
        self._listeners = []
        self._unsubscribe = lambda: None  # "listening" until close(): views follow new frames
        self._preempted: dict[str, int] = {}  # request -> its preemptions at the last cut
        self.cut()

    def __repr__(self) -> str:
        return (f"VllmPoolRecorder({self.num_blocks} blocks of {self.block_size} tokens, "
                f"{len(self.frames)} frames)")

    def cut(self, step: int | None = None) -> Frame:
        """Read vLLM's pool and queues now as a new frame."""
        tables, owners, fill = self._read_tables()
        blocks = tuple(self._state(blk, owners, fill) for blk in self.pool.blocks[1:])
        used = sum(b.status == USED for b in blocks)
        cached = sum(b.status == CACHED for b in blocks)
        memory = MemoryCounts(used=used, cached=cached, free=len(blocks) - used - cached,
                              shared=sum(b.is_shared for b in blocks),
                              tokens=sum(b.num_tokens for b in blocks if b.status == USED))
        sched = self.vllm_scheduler
        request_of = {rid: external_id(rid) for rid in tables}
        for name in request_of.values():
            if name not in self.first_seen:
                self.first_seen[name] = len(self.first_seen)
        frame = Frame(index=len(self.frames), step=step, block_size=self.block_size,
                      blocks=blocks, memory=memory,
                      requests=RequestCounts(running=len(sched.running),
                                             waiting=len(sched.waiting)),
                      tables=tables, request_of=request_of,
                      seq_status=dict.fromkeys(tables, RUNNING),
                      preemptions=self._new_preemptions())
        self.frames.append(frame)
        for listener in list(self._listeners):
            listener(frame)
        return frame

    def _read_tables(self) -> tuple[dict, dict, dict]:
        """Each request's blocks (pagedkit ids), each block's owners and fill."""
        bs = self.block_size
        tables: dict[str, tuple[int, ...]] = {}
        owners: dict[int, list[str]] = defaultdict(list)
        fill: dict[int, int] = {}
        for rid, blocks in self.manager.req_to_blocks.items():
            if not blocks:
                continue
            request = self.vllm_scheduler.requests.get(rid)
            computed = request.num_computed_tokens if request is not None else 0
            tables[rid] = tuple(NULL_BLOCK if b.is_null else b.block_id - 1 for b in blocks)
            for j, b in enumerate(blocks):
                if not b.is_null:
                    owners[b.block_id].append(rid)
                    fill.setdefault(b.block_id, min(bs, max(0, computed - j * bs)))
        return tables, owners, fill

    def _state(self, blk: Any, owners: dict, fill: dict) -> BlockState:
        if blk.ref_cnt > 0:
            return BlockState(USED, tuple(owners.get(blk.block_id, ())), blk.ref_cnt,
                              fill.get(blk.block_id, 0))
        if blk.block_hash is not None:
            return BlockState(CACHED, (), 0, self.block_size)
        return EMPTY_BLOCK

    def _new_preemptions(self) -> int:
        """Requests preempted since the last cut (vLLM counts them per request)."""
        new = 0
        for rid, request in self.vllm_scheduler.requests.items():
            n = request.num_preemptions
            new += n - self._preempted.get(rid, 0)
            self._preempted[rid] = n
        return new
