"""Paged KV-cache memory as pure bookkeeping over block ids (no torch).

The paging core of the lab (paper §4.2-4.5):

* `BlockAllocator` — the pool: free queue, ref counts, copy-on-write,
  prefix cache of SHA-256-named blocks (`block_hash`), blank blocks reused
  before cached ones, cached ones evicted LRU;
* `BlockTable` — one sequence's logical-to-physical block mapping and its
  slot mapping;
* `KVCacheManager` — block tables for all sequences, all-or-nothing room for
  new tokens, sharing, and swapping to a CPU pool;
* `ContiguousAllocator` — the contiguous baselines (max / pow2 / oracle) the
  paper compares against;
* `EventBus` / `Event` — every change as a record, for widgets and tests.
"""

from .allocator import BlockAllocator, MemoryStats
from .block_hash import (
    HASH_FUNCTIONS,
    ROOT_HASH,
    BlockHash,
    BlockKey,
    hash_block,
    sha256,
    sha256_cbor,
)
from .block_table import BlockTable, blocks_to_serve
from .contiguous import POLICIES, ContiguousAllocator, ContiguousStats, Reservation
from .errors import BlockStateError, OutOfBlocksError, PagedMemoryError
from .events import Event, EventBus, EventKind, EventLog
from .kv_cache_manager import BlockCopy, KVCacheManager

__all__ = [
    "HASH_FUNCTIONS",
    "POLICIES",
    "ROOT_HASH",
    "BlockAllocator",
    "BlockCopy",
    "BlockHash",
    "BlockKey",
    "BlockStateError",
    "BlockTable",
    "ContiguousAllocator",
    "ContiguousStats",
    "Event",
    "EventBus",
    "EventKind",
    "EventLog",
    "KVCacheManager",
    "MemoryStats",
    "OutOfBlocksError",
    "PagedMemoryError",
    "Reservation",
    "blocks_to_serve",
    "hash_block",
    "sha256",
    "sha256_cbor",
]
