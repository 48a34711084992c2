"""vLLM's event format without vLLM: the MessagePack codec and the records."""

import math

import pytest

from pagedkit.vllm import msgpack
from pagedkit.vllm.wire import (
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    EventBatch,
    decode_batch,
    encode_batch,
    event_from_wire,
    frames,
)

#: msgspec.msgpack.encode of vLLM 0.32's KVEventBatch(ts=1.5, events=[
#: BlockStored(block_hashes=[b"\x01" * 32], parent_block_hash=None, token_ids=[1, 2, 300],
#: block_size=32, lora_id=None, medium="GPU", lora_name=None, group_idx=0),
#: BlockRemoved(block_hashes=[b"\x02" * 32], medium="GPU", group_idx=0), AllBlocksCleared()],
#: data_parallel_rank=0), written by vLLM itself (tests/vllm/test_beside_vllm.py checks it live).
VLLM_BYTES = bytes.fromhex(
    "93cb3ff80000000000009389a474797065ab426c6f636b53746f726564ac626c6f636b5f686173686573"
    "91c4200101010101010101010101010101010101010101010101010101010101010101b1706172656e74"
    "5f626c6f636b5f68617368c0a9746f6b656e5f696473930102cd012caa626c6f636b5f73697a6520a76c"
    "6f72615f6964c0a66d656469756da3475055a96c6f72615f6e616d65c0a967726f75705f696478008"
    "4a474797065ac426c6f636b52656d6f766564ac626c6f636b5f68617368657391c420020202020202020"
    "2020202020202020202020202020202020202020202020202a66d656469756da3475055a967726f7570"
    "5f6964780081a474797065b0416c6c426c6f636b73436c656172656400")

SAMPLE = EventBatch(1.5, [BlockStored([b"\x01" * 32], None, [1, 2, 300], 32, group_idx=0),
                          BlockRemoved([b"\x02" * 32], group_idx=0), AllBlocksCleared()], 0)


def test_encode_writes_vllms_bytes():
    assert encode_batch(SAMPLE) == VLLM_BYTES


def test_decode_reads_vllms_bytes():
    assert decode_batch(VLLM_BYTES) == SAMPLE


@pytest.mark.parametrize("value", [
    None, True, False, 0, 1, 127, 128, 255, 256, 65535, 65536, 2**32 - 1, 2**32, 2**64 - 1,
    -1, -32, -33, -128, -129, -32768, -32769, -2**31, -2**31 - 1, -2**63,
    0.0, -2.5, 1e300, "", "a" * 31, "a" * 32, "é" * 200, "x" * 70000,
    b"", b"\x00" * 255, b"\x01" * 256, b"\x02" * 70000,
    [], list(range(15)), list(range(16)), list(range(70000)),
    {}, {str(i): i for i in range(15)}, {str(i): i for i in range(16)},
    [[1, [2, [3]]], {"k": [None, b"v"]}],
])
def test_msgpack_round_trip(value):
    assert msgpack.unpackb(msgpack.packb(value)) == value


@pytest.mark.parametrize("value, hexbytes", [
    (127, "7f"), (128, "cc80"), (-32, "e0"), (-33, "d0df"), (300, "cd012c"),
    (2**32, "cf0000000100000000"), ("ab", "a26162"), (b"ab", "c4026162"),
    ((1, 2), "920102"), (1.0, "cb3ff0000000000000"),
])
def test_msgpack_picks_the_shortest_form(value, hexbytes):
    assert msgpack.packb(value).hex() == hexbytes


def test_msgpack_reads_float32_and_refuses_junk():
    assert math.isclose(msgpack.unpackb(bytes.fromhex("ca3fc00000")), 1.5)
    with pytest.raises(ValueError, match="truncated"):
        msgpack.unpackb(b"\xcd\x01")
    with pytest.raises(ValueError, match="left over"):
        msgpack.unpackb(b"\x01\x02")
    with pytest.raises(ValueError, match="0xc7"):
        msgpack.unpackb(b"\xc7\x01\x00\x00")  # an extension type
    with pytest.raises(TypeError, match="set"):
        msgpack.packb({1, 2})
    with pytest.raises(OverflowError):
        msgpack.packb(2**64)


def test_optional_fields_travel_only_when_set():
    stored = BlockStored([7], 6, [1] * 4, 4, extra_keys=[("salt",)], session_id="s")
    back = decode_batch(encode_batch(EventBatch(2.0, [stored], None)))
    assert back.events == [stored] and back.data_parallel_rank is None
    wire = msgpack.unpackb(encode_batch(EventBatch(2.0, [BlockStored([7], None, [1], 1)])))
    assert list(wire[1][0]) == ["type", "block_hashes", "parent_block_hash", "token_ids",
                                "block_size", "lora_id", "medium", "lora_name"]


def test_a_newer_vllms_fields_are_ignored_and_a_missing_one_is_named():
    assert event_from_wire({"type": "AllBlocksCleared", "new_field": 1}) == AllBlocksCleared()
    with pytest.raises(ValueError, match="medium"):
        event_from_wire({"type": "BlockRemoved", "block_hashes": [1]})
    with pytest.raises(ValueError, match="BlockEvicted"):
        event_from_wire({"type": "BlockEvicted"})
    with pytest.raises(ValueError, match="ts, events"):
        decode_batch(msgpack.packb({"ts": 1}))


def test_frames_are_topic_sequence_payload():
    topic, seq, payload = frames(SAMPLE, 5, topic="kv")
    assert (topic, int.from_bytes(seq, "big"), payload) == (b"kv", 5, VLLM_BYTES)
