"""Paged KV-cache memory as pure bookkeeping over block ids (no torch).

The paging core of the lab (paper §4.2-4.5):

* `BlockAllocator` — the pool: free queue, ref counts, copy-on-write,
  hash-named prefix cache with LRU eviction;
* `BlockTable` — one sequence's logical-to-physical block mapping and its
  slot mapping;
* `KVCacheManager` — block tables for all sequences, all-or-nothing room for
  new tokens, sharing, and swapping to a CPU pool;
* `ContiguousAllocator` — the contiguous baselines (max / pow2 / oracle) the
  paper compares against;
* `EventBus` / `Event` — every change as a record, for widgets and tests.
"""

from .allocator import ROOT_HASH, BlockAllocator, MemoryStats, hash_block
from .block_table import BlockTable
from .contiguous import POLICIES, ContiguousAllocator, ContiguousStats, Reservation
from .errors import BlockStateError, OutOfBlocksError, PagedMemoryError
from .events import Event, EventBus, EventKind, EventLog
from .kv_cache_manager import BlockCopy, KVCacheManager

__all__ = [
    "POLICIES",
    "ROOT_HASH",
    "BlockAllocator",
    "BlockCopy",
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
    "hash_block",
]
