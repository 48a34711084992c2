"""pagedkit beside the real vLLM (optional; docs/vllm.md).

Nothing here is needed by the rest of pagedkit, and ``import pagedkit`` never
imports it. Four pieces:

* `wire` — vLLM's KV-cache events (`BlockStored`, `BlockRemoved`,
  `AllBlocksCleared`) and their MessagePack bytes, without vLLM installed;
* `publish.WirePublisher` — pagedkit's own cache events in that format;
  `reader.CachedBlocks` — which blocks are cached, from either stream;
* `cache_view.PrefixCacheMap` — a prefix cache drawn from those events, live
  from a running vLLM (`cache_view.serve_live`) or from pagedkit;
* `compare.compare` (``from pagedkit.vllm.compare import compare``) — one
  workload on vLLM and on pagedkit, tokens and figures side by side (needs
  vLLM's CPU build: ``requirements-vllm.txt``).

``python -m pagedkit vllm compare`` runs the comparison from a terminal.
"""

from __future__ import annotations

import importlib

_LAZY = {
    "BlockStored": "wire", "BlockRemoved": "wire", "AllBlocksCleared": "wire",
    "EventBatch": "wire", "encode_batch": "wire", "decode_batch": "wire",
    "WirePublisher": "publish", "CachedBlocks": "reader", "ZmqEventStream": "reader",
    "Workload": "compare", "compare_all": "compare", "vllm_available": "compare",
    "CacheRecording": "cache_view", "PrefixCacheMap": "cache_view",
}

__all__ = list(_LAZY)


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
