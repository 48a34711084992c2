"""pagedkit's cache events in vLLM's wire format.

pagedkit's memory reports every change to a block (`pagedkit.memory.Event`:
allocate, append, free, evict, ...); vLLM reports only what an outside
consumer needs to mirror its prefix cache (`wire.BlockStored` /
`BlockRemoved` / `AllBlocksCleared`). `WirePublisher` listens to a pagedkit
engine's event bus and writes the second from the first, so a KV-aware
router, a dashboard or `reader.CachedBlocks` built for vLLM reads pagedkit
unchanged.

The translation, event by event:

* a block that fills up is named and registered in the prefix cache
  (pagedkit's ``BlockTable`` does it right after the ``APPEND`` that filled it,
  or, for a recomputation spread over steps, once a step computes it, without
  an event of its own): it becomes part of a `BlockStored`. The
  blocks one sequence gets named in one allocation, chained parent to child,
  are one `BlockStored` (vLLM's ``cache_full_blocks`` emits one per request
  and step), after the `BlockRemoved` of the blocks that allocation evicted
  (vLLM takes all its new blocks first, then names them);
* ``EVICT`` (a cached block is reused for other content, or an admission
  rolled back forgets a block it never computed) is a `BlockRemoved` of the
  block's name;
* evictions that empty the cache while no block is in use
  (``reset_prefix_cache``) are one `AllBlocksCleared`, as in vLLM;
* allocate, free (cached or not), fork, copy-on-write, cache hits and swaps
  change no name, so they publish nothing — as in vLLM, where a hit or a
  freed block is silent too.

One `EventBatch` is published per engine step (at the scheduler's ``STEP``
event, or `flush`), only if the step changed a name, like vLLM's scheduler.
Listeners get each batch; with ``endpoint`` the batch also goes out on a
ZeroMQ PUB socket in vLLM's three frames (pyzmq needed then).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Hashable
from typing import Any

from ..memory import BlockAllocator, EventBus, EventKind
from .wire import (
    MEDIUM_GPU,
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    EventBatch,
    ExternalBlockHash,
    frames,
)

BatchListener = Callable[[EventBatch], None]


class WirePublisher:
    """Translate one pagedkit allocator's events into vLLM's KV events.

    ``WirePublisher(llm.llm_engine.kv.allocator)`` (or an `LLMEngine`, an
    `LLM`): attach before the engine runs, or pass ``snapshot=True`` to begin
    with a `BlockStored` per block already named. ``batches`` keeps every
    published batch unless ``keep=False``.
    """

    def __init__(self, source: Any, *, endpoint: str | None = None, topic: str = "",
                 medium: str | None = MEDIUM_GPU, group_idx: int | None = 0,
                 snapshot: bool = False, keep: bool = True,
                 int_hashes: bool | None = None) -> None:
        self.allocator: BlockAllocator = _allocator_of(source)
        # what vLLM's KV cache manager stamps on each BlockStored: the kind of
        # attention the blocks serve (pagedkit has one group, full or sliding)
        window = _release_window(source)
        self.spec_kind = "full_attention" if window is None else "sliding_window"
        self.sliding_window = window
        self.bus: EventBus = self.allocator.events
        self.block_size = self.allocator.block_size
        self.medium, self.group_idx, self.topic = medium, group_idx, topic
        self.batches: list[EventBatch] = []
        self.keep = keep
        self.int_hashes = int_hashes_default() if int_hashes is None else int_hashes
        self._listeners: list[BatchListener] = []
        self._events: list = []  # the current step's wire events
        self._named: dict[int, ExternalBlockHash] = {}  # block -> the name published for it
        self._filled: list[tuple[Hashable, int]] = []  # (seq, block) filled, name not read yet
        self._open: BlockStored | None = None  # the current allocation's stored blocks
        self._open_seq: Hashable | None = None
        self._evicted: list[int] = []  # EVICTs not yet known as allocation or reset
        self._seq_no = 0
        self._socket = None
        if endpoint is not None:
            import zmq

            self._socket = zmq.Context.instance().socket(zmq.PUB)
            self._socket.bind(endpoint)
            self.endpoint = self._socket.getsockopt_string(zmq.LAST_ENDPOINT)
        if snapshot:
            self._snapshot()
        self._unsubscribe = self.bus.subscribe(self._on_event)

    # ------------------------------------------------------------- consumers
    def subscribe(self, listener: BatchListener) -> Callable[[], None]:
        """Call `listener(batch)` for every batch published from now on."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener)

    def close(self) -> None:
        """Publish what is pending, stop listening, close the socket."""
        self.flush()
        self._unsubscribe()
        if self._socket is not None:
            self._socket.close(linger=0)
            self._socket = None

    def flush(self) -> EventBatch | None:
        """End the current step: publish its batch (None if no name changed)."""
        self._resolve()
        self._close_evictions()
        self._close_open()
        if not self._events:
            return None
        batch = EventBatch(time.time(), self._events, 0)
        self._events = []
        if self.keep:
            self.batches.append(batch)
        if self._socket is not None:
            self._socket.send_multipart(frames(batch, self._seq_no, self.topic))
        self._seq_no += 1
        for listener in list(self._listeners):
            listener(batch)
        return batch

    # ------------------------------------------------------------ translation
    def _on_event(self, event: Any) -> None:
        kind = event.kind
        self._resolve()  # a block filled by the previous event has its name now
        if kind == EventKind.EVICT:  # reuse, reset or rollback? the next event tells
            self._evicted.append(event.block)
            return
        if not isinstance(kind, EventKind):  # the scheduler's own records
            self._close_evictions()
            self._close_open()
            if kind == "step":
                self.flush()
            return
        seq = event.seq
        if self._open is not None and seq is not None and seq != self._open_seq:
            self._close_open()  # another sequence's allocation begins
        if kind == EventKind.ALLOCATE:  # a block still unnamed is now another's
            self._filled = [(s, b) for s, b in self._filled if b != event.block]
        if kind == EventKind.ALLOCATE and self._evicted and self._evicted[-1] == event.block:
            block = self._evicted.pop()  # evicted to be reused: vLLM's BlockRemoved
            self._removed([self._named.pop(block)] if block in self._named else [])
        self._close_evictions()
        if kind == EventKind.APPEND and event.num_tokens == self.block_size:
            self._filled.append((seq, event.block))

    def _resolve(self) -> None:
        """Read the names of the blocks that filled up (registered by now, or
        later: a recomputation names its blocks as the steps compute them)."""
        pending = []
        for seq, block in self._filled:
            key = self.allocator.block_key(block)
            if key is None and self.allocator.enable_prefix_caching:
                pending.append((seq, block))  # named once a step computes it
                continue
            if key is None or block in self._named:
                continue  # prefix caching is off, or the name is known already
            self._named[block] = name = self._external(key.hash)
            parent = None if key.parent is None else self._external(key.parent.hash)
            run = self._open
            if (run is not None and seq == self._open_seq
                    and run.block_hashes[-1] == parent):  # the chain goes on
                run.block_hashes.append(name)
                run.token_ids.extend(key.token_ids)
                run.extra_keys.append(event_extra_keys(key.extra_keys))
                continue
            self._close_open()
            self._open = self._stored([name], parent, list(key.token_ids),
                                      event_extra_keys(key.extra_keys))
            self._open_seq = seq
        self._filled = pending

    def _close_open(self) -> None:
        if self._open is not None:
            self._events.append(self._open)
            self._open = None
            self._open_seq = None

    def _close_evictions(self) -> None:
        """EVICTs not followed by the block's reuse: a reset (which empties
        the cache: one `AllBlocksCleared`, as vLLM reports it) or an
        admission rolled back (a `BlockRemoved` per forgotten block)."""
        if not self._evicted:
            return
        names = [self._named.pop(b) for b in self._evicted if b in self._named]
        self._evicted = []
        self._close_open()  # the blocks named before the reset or the rollback
        if names and not self._named:
            self._events.append(AllBlocksCleared())
        else:
            self._removed(names)

    def _removed(self, names: list[ExternalBlockHash]) -> None:
        self._events.extend(BlockRemoved([n], self.medium, self.group_idx) for n in names)

    def _external(self, name: bytes) -> ExternalBlockHash:
        return external_hash(name) if self.int_hashes else name

    def _stored(self, hashes: list[ExternalBlockHash], parent: ExternalBlockHash | None,
                tokens: list[int], extra_keys: Any) -> BlockStored:
        return BlockStored(hashes, parent, tokens, self.block_size, None, self.medium, None,
                           extra_keys=[extra_keys], group_idx=self.group_idx,
                           kv_cache_spec_kind=self.spec_kind,
                           kv_cache_spec_sliding_window=self.sliding_window)

    def _snapshot(self) -> None:
        """A `BlockStored` per block named before we listened (parents first)."""
        named = [(b, self.allocator.block_key(b)) for b in range(self.allocator.num_blocks)]
        named = [(b, k) for b, k in named if k is not None]
        depth = {}
        for b, k in named:
            d, p = 0, k.parent
            while p is not None:
                d, p = d + 1, p.parent
            depth[b] = d
        for b, key in sorted(named, key=lambda bk: depth[bk[0]]):
            self._named[b] = name = self._external(key.hash)
            parent = None if key.parent is None else self._external(key.parent.hash)
            self._events.append(self._stored([name], parent, list(key.token_ids),
                                             event_extra_keys(key.extra_keys)))
        self.flush()


def event_extra_keys(extra_keys: Any) -> tuple[Any, ...] | None:
    """A block's extra keys as vLLM's events carry them: its hash tags each key
    (``("cache_salt", "a")``, `memory.block_hash.salt_keys`), its events give
    the values alone (``("a",)``, vLLM's ``to_event_extra_keys``)."""
    return None if extra_keys is None else tuple(value for _, value in extra_keys)


def int_hashes_default() -> bool:
    """vLLM's choice: hashes go out as 64-bit ints unless
    ``VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0`` (then as the 32 SHA-256 bytes)."""
    return bool(int(os.environ.get("VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES", "1")))


def external_hash(name: bytes) -> int:
    """A block name as vLLM publishes it by default: its last 8 bytes, big-endian
    (``maybe_convert_block_hash``)."""
    return int.from_bytes(name, "big") & ((1 << 64) - 1)


def _release_window(source: Any) -> int | None:
    """The sliding window of an engine whose every layer slides (else None)."""
    engine = getattr(source, "llm_engine", source)
    return getattr(engine, "release_window", None)


def _allocator_of(source: Any) -> BlockAllocator:
    """The GPU allocator of an `LLM`, `LLMEngine`, `KVCacheManager` or allocator."""
    for path in ("llm_engine.kv.allocator", "kv.allocator", "allocator", ""):
        obj = source
        for attr in filter(None, path.split(".")):
            obj = getattr(obj, attr, None)
        if isinstance(obj, BlockAllocator):
            return obj
    raise TypeError(f"cannot find a pagedkit BlockAllocator in {source!r}: give an LLM, an "
                    "LLMEngine, a KVCacheManager or a BlockAllocator")
