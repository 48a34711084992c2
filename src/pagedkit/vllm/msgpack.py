"""A minimal MessagePack codec: the bytes vLLM's KV-cache events travel in.

vLLM encodes its event batches with ``msgspec.msgpack``; this module writes
exactly the same bytes for the values an event holds (None, booleans, ints,
floats, strings, bytes, lists/tuples, dicts with string keys) and reads any
of them back, so pagedkit can speak the format without msgspec or vLLM
installed (``tests/vllm`` compares the bytes with msgspec's where vLLM is).

The rules are the MessagePack spec's, with msgspec's choices where the spec
leaves one: an int in the fewest bytes, a float always as float64.
"""

from __future__ import annotations

import struct
from typing import Any


def packb(obj: Any) -> bytes:
    """`obj` as MessagePack bytes (the encoding msgspec produces)."""
    out = bytearray()
    _pack(obj, out)
    return bytes(out)


def _pack(obj: Any, out: bytearray) -> None:
    if obj is None:
        out.append(0xC0)
    elif obj is True or obj is False:
        out.append(0xC3 if obj else 0xC2)
    elif isinstance(obj, int):
        _pack_int(obj, out)
    elif isinstance(obj, float):
        out += b"\xcb" + struct.pack(">d", obj)
    elif isinstance(obj, str):
        data = obj.encode()
        _head(out, len(data), fix=(0xA0, 32), sized=((0xD9, 1), (0xDA, 2), (0xDB, 4)))
        out += data
    elif isinstance(obj, (bytes, bytearray, memoryview)):
        data = bytes(obj)
        _head(out, len(data), fix=None, sized=((0xC4, 1), (0xC5, 2), (0xC6, 4)))
        out += data
    elif isinstance(obj, (list, tuple)):
        _head(out, len(obj), fix=(0x90, 16), sized=((0xDC, 2), (0xDD, 4)))
        for item in obj:
            _pack(item, out)
    elif isinstance(obj, dict):
        _head(out, len(obj), fix=(0x80, 16), sized=((0xDE, 2), (0xDF, 4)))
        for key, value in obj.items():
            _pack(key, out)
            _pack(value, out)
    else:
        raise TypeError(f"cannot MessagePack-encode {type(obj).__name__} {obj!r}: use None, "
                        "bool, int, float, str, bytes, lists, tuples and dicts of them")


def _pack_int(n: int, out: bytearray) -> None:
    if 0 <= n < 128:
        out.append(n)
    elif -32 <= n < 0:
        out.append(n & 0xFF)
    elif n >= 0:
        for code, fmt in ((0xCC, ">B"), (0xCD, ">H"), (0xCE, ">I"), (0xCF, ">Q")):
            if n < 1 << (8 * struct.calcsize(fmt)):
                out += bytes([code]) + struct.pack(fmt, n)
                return
        raise OverflowError(f"integer {n} does not fit MessagePack's 64 bits")
    else:
        for code, fmt in ((0xD0, ">b"), (0xD1, ">h"), (0xD2, ">i"), (0xD3, ">q")):
            if n >= -(1 << (8 * struct.calcsize(fmt) - 1)):
                out += bytes([code]) + struct.pack(fmt, n)
                return
        raise OverflowError(f"integer {n} does not fit MessagePack's 64 bits")


def _head(out: bytearray, n: int, *, fix: tuple[int, int] | None,
          sized: tuple[tuple[int, int], ...]) -> None:
    """A length header: the fix form below its limit, else the smallest sized one."""
    if fix is not None and n < fix[1]:
        out.append(fix[0] | n)
        return
    for code, size in sized:
        if n < 1 << (8 * size):
            out += bytes([code]) + n.to_bytes(size, "big")
            return
    raise OverflowError(f"length {n} does not fit MessagePack's 32 bits")


def unpackb(data: bytes) -> Any:
    """The value MessagePack `data` holds (arrays as lists, maps as dicts)."""
    value, end = _unpack(memoryview(data), 0)
    if end != len(data):
        raise ValueError(f"{len(data) - end} bytes left over after a MessagePack value")
    return value


_FIXED = {0xCC: ">B", 0xCD: ">H", 0xCE: ">I", 0xCF: ">Q",
          0xD0: ">b", 0xD1: ">h", 0xD2: ">i", 0xD3: ">q", 0xCA: ">f", 0xCB: ">d"}
_LENGTH = {0xD9: (1, "str"), 0xDA: (2, "str"), 0xDB: (4, "str"),
           0xC4: (1, "bin"), 0xC5: (2, "bin"), 0xC6: (4, "bin"),
           0xDC: (2, "array"), 0xDD: (4, "array"), 0xDE: (2, "map"), 0xDF: (4, "map")}


def _unpack(buf: memoryview, pos: int) -> tuple[Any, int]:
    if pos >= len(buf):
        raise ValueError("truncated MessagePack data")
    code = buf[pos]
    pos += 1
    if code < 0x80:
        return code, pos
    if code >= 0xE0:
        return code - 0x100, pos
    if 0x80 <= code <= 0x8F:
        return _items(buf, pos, code & 0x0F, "map")
    if 0x90 <= code <= 0x9F:
        return _items(buf, pos, code & 0x0F, "array")
    if 0xA0 <= code <= 0xBF:
        return _items(buf, pos, code & 0x1F, "str")
    if code == 0xC0:
        return None, pos
    if code in (0xC2, 0xC3):
        return code == 0xC3, pos
    if code in _FIXED:
        fmt = _FIXED[code]
        end = pos + struct.calcsize(fmt)
        _need(buf, end)
        return struct.unpack(fmt, buf[pos:end])[0], end
    if code in _LENGTH:
        size, what = _LENGTH[code]
        _need(buf, pos + size)
        n = int.from_bytes(buf[pos:pos + size], "big")
        return _items(buf, pos + size, n, what)
    raise ValueError(f"unsupported MessagePack type byte 0x{code:02x} (extensions are not used "
                     "by vLLM's KV events)")


def _items(buf: memoryview, pos: int, n: int, what: str) -> tuple[Any, int]:
    if what in ("str", "bin"):
        _need(buf, pos + n)
        raw = bytes(buf[pos:pos + n])
        return (raw.decode() if what == "str" else raw), pos + n
    if what == "array":
        items = []
        for _ in range(n):
            item, pos = _unpack(buf, pos)
            items.append(item)
        return items, pos
    mapping = {}
    for _ in range(n):
        key, pos = _unpack(buf, pos)
        value, pos = _unpack(buf, pos)
        mapping[key] = value
    return mapping, pos


def _need(buf: memoryview, end: int) -> None:
    if end > len(buf):
        raise ValueError("truncated MessagePack data")
