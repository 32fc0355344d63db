"""_wire against protobuf's own encoding of FetchChunk and UploadRequest, and
its CRC-32 against zlib's."""
import os
import zlib

import pytest

from tensord import _wire
from tensord.v1 import tensord_pb2 as pb


def test_every_field_as_protobuf_writes_it():
    info = pb.TensorInfo(handle=7, dtype=pb.FLOAT32, shape=[2, 3], nbytes=24)
    for chunk in (pb.FetchChunk(tensor=info, offset=0, data=b"\x01\x02\x03", crc32=0xFFFFFFFF),
                  pb.FetchChunk(offset=(1 << 40) + 5, data=bytes(range(256)) * 4100,
                                crc32=12345),
                  pb.FetchChunk()):  # every field absent: protobuf's defaults
        raw = chunk.SerializeToString()
        view = _wire.parse_fetch_chunk(raw)
        assert view.offset == chunk.offset and view.crc32 == chunk.crc32
        assert bytes(view.data) == chunk.data
        assert view.tensor == chunk.tensor
        if chunk.data:
            assert view.data.obj is raw  # a view of the message, not a copy


def test_unknown_fields_are_skipped_and_the_last_value_counts():
    raw = (pb.FetchChunk(offset=1, data=b"old").SerializeToString()
           + b"\x28\x96\x01"          # field 5, varint 150
           + b"\x31" + b"\0" * 8      # field 6, fixed64
           + b"\x3a\x02hi"            # field 7, bytes
           + b"\x45" + b"\0" * 4      # field 8, fixed32
           + pb.FetchChunk(offset=9, data=b"new", crc32=3).SerializeToString())
    view = _wire.parse_fetch_chunk(raw)
    assert (view.offset, bytes(view.data), view.crc32) == (9, b"new", 3)


@pytest.mark.parametrize("raw", [
    b"\x1a\x05abc",          # data says 5 bytes, has 3
    b"\x10" + b"\xff" * 11,  # an overlong varint
    b"\x10",                 # a varint cut off
    b"\x1b",                 # wire type 3 (a group)
    b"\x18\x01",             # data as a varint
    b"\x12\x01a",            # offset as bytes
    b"\x21" + b"\0" * 8,     # crc32... field 4 as fixed64
    b"\x45\0\0",             # a fixed32 cut off
])
def test_what_is_not_a_fetch_chunk_is_refused(raw):
    with pytest.raises(ValueError):
        _wire.parse_fetch_chunk(raw)


def test_upload_messages_are_what_protobuf_writes():
    header = pb.UploadRequest.Header(session="s" * 200, device="cpu:1", dtype=pb.INT64,
                                     shape=[3, 1 << 20], tag="t")
    data = bytes(range(256)) * 300
    for head, chunk in ((header, data), (None, memoryview(data)[5:70000]), (header, b""),
                        (None, b"x")):
        raw = _wire.upload_message(None if head is None else head.SerializeToString(), chunk)
        expected = pb.UploadRequest(data=bytes(chunk))
        if head is not None:
            expected.header.CopyFrom(head)
        assert raw == expected.SerializeToString()
        assert pb.UploadRequest.FromString(raw) == expected


def test_crc32_is_zlibs_whichever_implementation_runs():
    assert _wire.CRC32_IMPLEMENTATION in ("zlib-ng", "zlib")
    blob = os.urandom((1 << 20) + 13)
    for data in (b"", b"a", blob, memoryview(blob)[7:70007], bytearray(blob[:4096])):
        assert _wire.crc32(data) == zlib.crc32(data)
