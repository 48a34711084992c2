"""Which blocks are cached, read off a stream of vLLM KV-cache events.

`CachedBlocks` applies `wire` events one by one and keeps the model a
KV-aware router (or a widget) needs: every cached block by its hash, with
its parent's hash, its own tokens, the whole token prefix it stands for, and
how many physical copies hold it (vLLM and pagedkit may both cache one
content twice: a block computed by two requests at once, or a prompt's last
block recomputed). The events may come from vLLM (`ZmqEventStream`, over
its ZeroMQ publisher), from pagedkit (`publish.WirePublisher`), or from a
recording (`decode_batch` of saved payloads): the model cannot tell them apart.

A widget follows the cache live with ``model.subscribe(fn)``: ``fn(event,
model)`` after each event is applied.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from .wire import (
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    EventBatch,
    ExternalBlockHash,
    KVCacheEvent,
    decode_batch,
)


@dataclass
class CachedBlock:
    """One cached content: its name, its parent's, its tokens, its whole
    prefix (None where a parent was unknown when it was stored), and copies."""

    hash: ExternalBlockHash
    parent: ExternalBlockHash | None
    token_ids: tuple[int, ...]
    prefix: tuple[int, ...] | None
    copies: int = 1


Listener = Callable[[KVCacheEvent, "CachedBlocks"], None]


class CachedBlocks:
    """The prefix cache as an event stream describes it (hash -> `CachedBlock`)."""

    def __init__(self) -> None:
        self.blocks: dict[ExternalBlockHash, CachedBlock] = {}
        self.num_events = 0
        self.num_batches = 0
        #: Removals of names never stored here (the stream began late), and
        #: stores of a known name with other tokens (a hash collision, or two
        #: streams mixed): both should stay 0.
        self.unknown_removals = 0
        self.conflicts = 0
        self._listeners: list[Listener] = []

    # ---------------------------------------------------------------- reading
    def __len__(self) -> int:
        return len(self.blocks)

    def __contains__(self, block_hash: ExternalBlockHash) -> bool:
        return block_hash in self.blocks

    @property
    def num_copies(self) -> int:
        """Physical blocks holding a cached content (each copy counted)."""
        return sum(b.copies for b in self.blocks.values())

    def chains(self) -> dict[ExternalBlockHash, tuple[int, ...] | None]:
        """Each cached hash -> the tokens from the very first up to its block's last."""
        return {h: b.prefix for h, b in self.blocks.items()}

    def state(self) -> dict[ExternalBlockHash, tuple]:
        """Everything the model knows, as plain values to compare two models:
        hash -> (parent, tokens, prefix, copies)."""
        return {h: (b.parent, b.token_ids, b.prefix, b.copies) for h, b in self.blocks.items()}

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """Call `listener(event, self)` after each event is applied."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener)

    # --------------------------------------------------------------- applying
    def apply(self, event: KVCacheEvent) -> None:
        if isinstance(event, BlockStored):
            self._store(event)
        elif isinstance(event, BlockRemoved):
            for h in event.block_hashes:
                block = self.blocks.get(h)
                if block is None:
                    self.unknown_removals += 1
                elif block.copies > 1:
                    block.copies -= 1
                else:
                    del self.blocks[h]
        elif isinstance(event, AllBlocksCleared):
            self.blocks.clear()
        else:
            raise TypeError(f"not a KV cache event: {event!r}")
        self.num_events += 1
        for listener in list(self._listeners):
            listener(event, self)

    def apply_batch(self, batch: EventBatch | bytes) -> None:
        """Apply a batch (or its MessagePack payload) in order."""
        if isinstance(batch, (bytes, bytearray, memoryview)):
            batch = decode_batch(bytes(batch))
        for event in batch.events:
            self.apply(event)
        self.num_batches += 1

    def apply_all(self, batches: Iterable[EventBatch | bytes]) -> CachedBlocks:
        for batch in batches:
            self.apply_batch(batch)
        return self

    def _store(self, event: BlockStored) -> None:
        size = event.block_size
        if len(event.token_ids) != size * len(event.block_hashes):
            raise ValueError(f"BlockStored has {len(event.token_ids)} token ids for "
                             f"{len(event.block_hashes)} blocks of {size}")
        parent = event.parent_block_hash
        for i, h in enumerate(event.block_hashes):
            tokens = tuple(event.token_ids[i * size:(i + 1) * size])
            if parent is None:
                prefix: tuple[int, ...] | None = tokens
            else:
                known = self.blocks.get(parent)
                prefix = None if known is None or known.prefix is None else known.prefix + tokens
            block = self.blocks.get(h)
            if block is None:
                self.blocks[h] = CachedBlock(h, parent, tokens, prefix)
            elif (block.token_ids, block.parent) != (tokens, parent):
                self.conflicts += 1
            else:
                block.copies += 1
                if block.prefix is None:
                    block.prefix = prefix
            parent = h


def replay(batches: Iterable[EventBatch | bytes]) -> CachedBlocks:
    """The cache a whole recorded stream leaves."""
    return CachedBlocks().apply_all(batches)


class ZmqEventStream:
    """vLLM's KV events from its ZeroMQ publisher (pyzmq needed).

    vLLM binds its PUB socket when the endpoint is a wildcard, ``ipc://`` or
    ``inproc://``, and connects it otherwise. Use ``ipc://`` (a socket file:
    nothing leaves the machine), or ``inproc://`` with vLLM in this process
    (``VLLM_ENABLE_V1_MULTIPROCESSING=0``); this class connects to it. A
    subscriber misses what was published before it joined: give vLLM a
    ``replay_endpoint`` too and `replay` fetches every batch vLLM still buffers.
    """

    END_SEQ = -1

    def __init__(self, endpoint: str, *, replay_endpoint: str | None = None,
                 topic: str = "") -> None:
        import zmq

        self._zmq = zmq
        ctx = zmq.Context.instance()
        self.sub = ctx.socket(zmq.SUB)
        self.sub.setsockopt(zmq.SUBSCRIBE, topic.encode())
        self.sub.connect(endpoint)
        self.replay_endpoint = replay_endpoint
        self.next_seq = 0  # the sequence number expected next
        self.missed = 0  # batches skipped by a gap in the sequence numbers
        self.payloads: dict[int, bytes] = {}  # seq -> the bytes as received (a recording)

    def receive(self, timeout_ms: int = 100) -> list[tuple[int, EventBatch]]:
        """Every batch that arrives until none comes for `timeout_ms`."""
        out = []
        while self.sub.poll(timeout_ms):
            _topic, seq_bytes, payload = self.sub.recv_multipart()
            seq = int.from_bytes(seq_bytes, "big", signed=True)
            if seq > self.next_seq:
                self.missed += seq - self.next_seq
            self.next_seq = seq + 1
            self.payloads[seq] = payload
            out.append((seq, decode_batch(payload)))
        return out

    def replay(self, start: int = 0, timeout_ms: int = 5000) -> list[tuple[int, EventBatch]]:
        """Ask vLLM's replay socket for every buffered batch from `start` on."""
        if self.replay_endpoint is None:
            raise ValueError("no replay_endpoint: start vLLM with KVEventsConfig("
                             "replay_endpoint=...) and give the same one here")
        zmq = self._zmq
        sock = zmq.Context.instance().socket(zmq.DEALER)
        sock.connect(self.replay_endpoint)
        try:
            sock.send_multipart([b"", start.to_bytes(8, "big")])
            out = []
            while True:
                if not sock.poll(timeout_ms):
                    raise TimeoutError(f"vLLM's replay socket {self.replay_endpoint} did not "
                                       f"answer within {timeout_ms} ms")
                _empty, _topic, seq_bytes, payload = sock.recv_multipart()
                seq = int.from_bytes(seq_bytes, "big", signed=True)
                if seq == self.END_SEQ:
                    return out
                self.payloads[seq] = payload
                out.append((seq, decode_batch(payload)))
        finally:
            sock.close(linger=0)

    def close(self) -> None:
        self.sub.close(linger=0)
