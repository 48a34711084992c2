"""vLLM's KV-cache events as plain records, and their bytes on the wire.

vLLM V1 reports its prefix cache to the outside world
(``vllm/distributed/kv_events.py``): each engine step whose cache changed
publishes one `EventBatch` of

* `BlockStored` — full blocks became findable by their hashes: the hashes in
  order, the hash of the block before the first (None: the first block of a
  request), their token ids, the block size;
* `BlockRemoved` — blocks lost their names (evicted for reuse);
* `AllBlocksCleared` — the whole prefix cache was reset.

A batch is encoded with msgspec's MessagePack as ``[ts, [event, ...],
data_parallel_rank]``; an event as a map whose first key ``"type"`` names its
class, then its fields in declaration order, the trailing optional ones only
when set. Over ZeroMQ a batch travels as three frames: topic, an 8-byte
big-endian sequence number, the payload. The records here have vLLM's
fields, in vLLM's order, and `encode_batch` writes the bytes vLLM writes
(tests/vllm checks both against vLLM 0.32), so a consumer of vLLM's stream
reads pagedkit's unchanged.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar

from . import msgpack

#: vLLM's default medium for blocks in accelerator memory (``MEDIUM_GPU``).
MEDIUM_GPU = "GPU"

#: A block hash as vLLM publishes it: 32 bytes of SHA-256, or a 64-bit int
#: when vLLM runs with ``VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=1``.
ExternalBlockHash = bytes | int


@dataclass
class BlockStored:
    """Full blocks became cached: ``block_hashes[i]`` holds
    ``token_ids[i * block_size:(i + 1) * block_size]`` after the block named
    ``parent_block_hash`` (or after nothing, when None) and its predecessors here."""

    block_hashes: list[ExternalBlockHash]
    parent_block_hash: ExternalBlockHash | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None = None
    medium: str | None = MEDIUM_GPU
    lora_name: str | None = None
    # optional in vLLM too: left out of the bytes while None
    extra_keys: list[tuple[Any, ...] | None] | None = None
    group_idx: int | None = None
    kv_cache_spec_kind: str | None = None
    kv_cache_spec_sliding_window: int | None = None
    locality: str | None = None
    ownership: str | None = None
    session_id: str | None = None

    REQUIRED: ClassVar[int] = 7  # the fields vLLM always writes (they have no default there)


@dataclass
class BlockRemoved:
    """Blocks lost their names: a lookup no longer finds them."""

    block_hashes: list[ExternalBlockHash]
    medium: str | None = MEDIUM_GPU
    group_idx: int | None = None
    locality: str | None = None
    ownership: str | None = None

    REQUIRED: ClassVar[int] = 2


@dataclass
class AllBlocksCleared:
    """The prefix cache was reset: nothing is cached any more."""

    REQUIRED: ClassVar[int] = 0


KVCacheEvent = BlockStored | BlockRemoved | AllBlocksCleared
EVENT_TYPES: dict[str, type] = {cls.__name__: cls
                                for cls in (BlockStored, BlockRemoved, AllBlocksCleared)}


@dataclass
class EventBatch:
    """The events of one engine step, stamped with wall time (``time.time()``)."""

    ts: float
    events: list[KVCacheEvent] = field(default_factory=list)
    data_parallel_rank: int | None = 0


def event_to_wire(event: KVCacheEvent) -> dict[str, Any]:
    """An event as the map vLLM writes: ``type`` first, then its fields in
    order, the optional ones only when not None."""
    wire: dict[str, Any] = {"type": type(event).__name__}
    for i, f in enumerate(dataclasses.fields(event)):
        value = getattr(event, f.name)
        if i < event.REQUIRED or value is not None:
            wire[f.name] = value
    return wire


def event_from_wire(wire: dict[str, Any]) -> KVCacheEvent:
    """The record of a decoded event map. Fields this version does not know
    (a newer vLLM's) are ignored; a missing required one is an error."""
    if not isinstance(wire, dict) or "type" not in wire:
        raise ValueError(f"a KV event is a map with a 'type', got {wire!r}")
    cls = EVENT_TYPES.get(wire["type"])
    if cls is None:
        raise ValueError(f"unknown KV event type {wire['type']!r}; known: {sorted(EVENT_TYPES)}")
    names = [f.name for f in dataclasses.fields(cls)]
    missing = [n for n in names[:cls.REQUIRED] if n not in wire]
    if missing:
        raise ValueError(f"{wire['type']} event lacks {missing}")
    values = {n: wire[n] for n in names if n in wire}
    if values.get("extra_keys") is not None:  # MessagePack has no tuples
        values["extra_keys"] = [None if k is None else tuple(k) for k in values["extra_keys"]]
    return cls(**values)


def encode_batch(batch: EventBatch) -> bytes:
    """The MessagePack payload vLLM's publisher sends for `batch`."""
    return msgpack.packb([float(batch.ts), [event_to_wire(e) for e in batch.events],
                          batch.data_parallel_rank])


def decode_batch(payload: bytes) -> EventBatch:
    """The batch in a payload from vLLM's publisher (or from `encode_batch`)."""
    value = msgpack.unpackb(payload)
    if not isinstance(value, list) or not 2 <= len(value) <= 3:
        raise ValueError(f"a KV event batch is [ts, events, data_parallel_rank], got {value!r}")
    rank = value[2] if len(value) == 3 else None
    return EventBatch(float(value[0]), [event_from_wire(e) for e in value[1]], rank)


def frames(batch: EventBatch, seq: int, topic: str = "") -> list[bytes]:
    """The three ZeroMQ frames of a batch: topic, sequence number, payload."""
    return [topic.encode(), seq.to_bytes(8, "big", signed=True), encode_batch(batch)]
