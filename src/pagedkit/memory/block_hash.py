"""How a full KV block is named for the prefix cache, and what a name must guarantee.

A block's keys and values depend on its own tokens *and on every token
before it* (attention saw them all). So a full block is named by a hash
chained over its parent's name and its own token ids, ``name_i =
H(name_{i-1}, tokens_i, extra_keys)``, starting from a fixed root: two
requests with equal prefixes get equal names, block for block.

The name is an index, and the cache is shared by every request the engine
serves. If two different prefixes could be given one name, a request could
be served K/V that another request computed — in a server with several
users, another tenant's prompt leaking into your answer. Python's built-in
``hash`` is no good here: ``hash(-1) == hash(-2)``, and collisions are easy to
construct on purpose. vLLM learnt this the hard way (CVE-2025-25183) and names
blocks with SHA-256; pagedkit uses the same functions, seeded the same way,
so the same tokens get the same names in both.

pagedkit goes one step further and does not trust the name alone: a cached
block also keeps its `BlockKey` — its tokens and a link to its parent's key,
i.e. its whole prefix — and a lookup only hits when the keys are equal. The
name finds candidates fast; the key confirms them. So even a deliberately
weak hash (the tests inject one) can cost a miss, never a wrong block.
"""

from __future__ import annotations

import hashlib
import os
import pickle
from collections.abc import Callable, Sequence
from typing import Any

#: A block's name: 32 bytes of SHA-256, as in vLLM.
BlockHash = bytes
HashFunction = Callable[[Any], bytes]

#: The seed of the root name when PYTHONHASHSEED is unset (vLLM's default for
#: cryptographic hashes), so names are reproducible across processes and
#: equal to a vLLM's started the same way.
DEFAULT_ROOT_SEED = "vllm-none-hash"


def sha256(obj: Any) -> BlockHash:
    """SHA-256 of the object's pickle: vLLM's default ``prefix_caching_hash_algo``."""
    return hashlib.sha256(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)).digest()


def sha256_cbor(obj: Any) -> BlockHash:
    """SHA-256 of the object's canonical CBOR encoding (vLLM's ``sha256_cbor``):
    the same bytes in any language, for names shared beyond Python."""
    return hashlib.sha256(cbor_encode(obj)).digest()


#: The hash functions a prefix cache can name blocks with, by vLLM's names.
HASH_FUNCTIONS: dict[str, HashFunction] = {"sha256": sha256, "sha256_cbor": sha256_cbor}


def root_hash(hash_fn: HashFunction = sha256) -> BlockHash:
    """The parent name of a sequence's first block (vLLM's ``NONE_HASH``):
    the hash of PYTHONHASHSEED if set, else of `DEFAULT_ROOT_SEED`."""
    return hash_fn(os.environ.get("PYTHONHASHSEED", DEFAULT_ROOT_SEED))


#: The root name under the default hash function.
ROOT_HASH: BlockHash = root_hash()


def hash_block(parent_hash: BlockHash, token_ids: Sequence[int], extra_keys: Any = None,
               hash_fn: HashFunction = sha256) -> BlockHash:
    """Name a full block by its tokens and everything before it (through
    `parent_hash`), plus any `extra_keys` that change its K/V (vLLM's
    ``hash_block_tokens``: the hash of ``(parent, tuple(tokens), extra_keys)``).

    >>> hash_block(ROOT_HASH, [1, 2]) == hash_block(ROOT_HASH, (1, 2))
    True
    >>> hash_block(ROOT_HASH, [1, 2]) == hash_block(hash_block(ROOT_HASH, [9, 9]), [1, 2])
    False
    """
    return hash_fn((parent_hash, tuple(token_ids), extra_keys))


def salt_keys(cache_salt: str | None) -> tuple[tuple[str, str], ...] | None:
    """The extra keys of a sequence's first block: its request's cache salt
    (vLLM's ``cache_salt``), tagged as vLLM tags it, ``(("cache_salt", salt),)``;
    None without a salt. Only the first block carries it, and every later
    name chains from the first, so requests with equal salts share cached
    prefixes and requests with other salts (or none) never do."""
    return (("cache_salt", cache_salt),) if cache_salt else None


class BlockKey:
    """Exactly what a full block holds: its tokens (and extra keys) after its
    parent's content, plus its name.

    Keys form a linked list back to the root, so comparing two keys compares
    whole prefixes — and stops early at a parent the two share (the common
    case: a sequence that adopted a cached block links to that block's key).
    """

    __slots__ = ("extra_keys", "hash", "parent", "token_ids")

    def __init__(self, parent: BlockKey | None, token_ids: Sequence[int], extra_keys: Any = None,
                 *, root: BlockHash = ROOT_HASH, hash_fn: HashFunction = sha256) -> None:
        self.parent = parent
        self.token_ids = tuple(token_ids)
        self.extra_keys = extra_keys
        self.hash = hash_block(root if parent is None else parent.hash, self.token_ids,
                               extra_keys, hash_fn)

    def same_content(self, other: BlockKey) -> bool:
        """Do both keys stand for the same tokens from the very first one?"""
        a: BlockKey | None = self
        b: BlockKey | None = other
        while a is not b:
            if (a is None or b is None or a.hash != b.hash or a.token_ids != b.token_ids
                    or a.extra_keys != b.extra_keys):
                return False
            a, b = a.parent, b.parent
        return True

    def __repr__(self) -> str:
        return f"BlockKey({short_hash(self.hash)}, token_ids={list(self.token_ids)})"


def short_hash(name: BlockHash) -> str:
    """A block name as people read it: its first 12 hex digits and "…" (32 raw
    bytes print as unreadable escapes; 48 bits tell names apart in practice)."""
    return f"{name.hex()[:12]}…"


# --------------------------------------------------------------- CBOR, minimal
def cbor_encode(obj: Any) -> bytes:
    """Canonical CBOR (RFC 8949 §4.2) of ints, bytes, strings, None, booleans
    and tuples/lists of them — the types a block's hash input holds. The
    bytes equal ``cbor2.dumps(obj, canonical=True)`` (tests/memory checks it)."""
    if obj is None:
        return b"\xf6"
    if obj is True or obj is False:
        return b"\xf5" if obj else b"\xf4"
    if isinstance(obj, int):
        return _head(0, obj) if obj >= 0 else _head(1, -1 - obj)
    if isinstance(obj, bytes):
        return _head(2, len(obj)) + obj
    if isinstance(obj, str):
        data = obj.encode()
        return _head(3, len(data)) + data
    if isinstance(obj, (tuple, list)):
        return _head(4, len(obj)) + b"".join(cbor_encode(item) for item in obj)
    raise TypeError(f"cannot CBOR-encode {type(obj).__name__} {obj!r} in a block hash: use "
                    "ints, bytes, str, None, booleans and tuples of them")


def _head(major: int, value: int) -> bytes:
    """A CBOR item head: the major type and its argument in the fewest bytes."""
    if value < 24:
        return bytes([major << 5 | value])
    for extra, size in ((24, 1), (25, 2), (26, 4), (27, 8)):
        if value < 1 << (8 * size):
            return bytes([major << 5 | extra]) + value.to_bytes(size, "big")
    raise ValueError(f"integer {value} does not fit CBOR's 64-bit argument")
