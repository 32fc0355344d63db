"""Bulk messages (a streamed fetch's chunks, an upload's) in their wire bytes.

Why: protobuf's Python API copies a bytes field on every read, and parsing
or building a message copies it again, so a FetchChunk's 1 MiB of data
crossed memory three times before the client copied it into the tensor's
buffer, and an upload chunk three times before grpcio had it. Read from
the message grpcio hands over (its bytes, undeserialized), the data is a
memoryview of them; written, the data is copied once, into the message.

Contract:
  * upload_message(header, data) -> the serialized tensord.v1.UploadRequest
    with `header` (a serialized UploadRequest.Header, or None for the
    messages after the first) and `data` (any bytes-like object), as
    protobuf would write it (fields in number order).
  * parse_fetch_chunk(raw) -> FetchChunkView for the serialized
    tensord.v1.FetchChunk `raw` (bytes): .offset and .crc32 (ints, 0 when
    absent, as protobuf's defaults), .data (a memoryview of `raw`; empty
    when absent) and .tensor (the first chunk's TensorInfo, parsed on
    demand; an empty one when absent). A field given twice counts its last
    value, as protobuf's parser does; unknown fields are skipped. Raises
    ValueError for bytes that are not a FetchChunk (a truncated field, a
    varint over 10 bytes, a wire type protobuf does not define, a known
    field of the wrong wire type).
  * FetchChunkView's fields may be assigned (tests corrupt a crc32).
  * crc32(data) is zlib's CRC-32 of a bytes-like object (the checksum of
    every fetched chunk), through zlib-ng's SIMD version when the optional
    zlib-ng package is installed (pip install "tensord[fast]": about ten
    times zlib's speed, which otherwise bounds a large fetch), else zlib's.
    CRC32_IMPLEMENTATION says which ("zlib-ng" or "zlib").
Stateless; thread-safe.
"""
import zlib

from tensord.v1 import tensord_pb2 as pb

try:
    from zlib_ng import zlib_ng as _fast_zlib
    crc32 = _fast_zlib.crc32
    CRC32_IMPLEMENTATION = "zlib-ng"
except ImportError:
    crc32 = zlib.crc32
    CRC32_IMPLEMENTATION = "zlib"

# FetchChunk's field numbers (tensord.proto).
_TENSOR, _OFFSET, _DATA, _CRC32 = 1, 2, 3, 4
_VARINT, _FIXED64, _LENGTH, _FIXED32 = 0, 1, 2, 5


class FetchChunkView:
    __slots__ = ("offset", "crc32", "data", "_tensor")

    def __init__(self, offset, crc32, data, tensor):
        self.offset = offset
        self.crc32 = crc32
        self.data = data
        self._tensor = tensor

    @property
    def tensor(self):
        return pb.TensorInfo.FromString(self._tensor)


def _varint(raw, at, end):
    value, shift = 0, 0
    while True:
        if at >= end or shift > 63:
            raise ValueError("a FetchChunk with a truncated or overlong varint")
        byte = raw[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, at
        shift += 7


def parse_fetch_chunk(raw):
    view = memoryview(raw)
    end = len(raw)
    offset = crc32 = 0
    data = view[0:0]
    tensor = b""
    at = 0
    while at < end:
        key, at = _varint(raw, at, end)
        field, wire = key >> 3, key & 7
        if wire == _VARINT:
            value, at = _varint(raw, at, end)
            if field == _OFFSET:
                offset = value & 0xFFFFFFFFFFFFFFFF
            elif field == _CRC32:
                crc32 = value & 0xFFFFFFFF
            elif field in (_TENSOR, _DATA):
                raise ValueError(f"FetchChunk field {field} as a varint")
        elif wire == _LENGTH:
            length, at = _varint(raw, at, end)
            if at + length > end:
                raise ValueError("a FetchChunk with a truncated field")
            if field == _DATA:
                data = view[at:at + length]
            elif field == _TENSOR:
                tensor = raw[at:at + length]
            elif field in (_OFFSET, _CRC32):
                raise ValueError(f"FetchChunk field {field} as bytes")
            at += length
        elif wire in (_FIXED64, _FIXED32):
            if field in (_TENSOR, _OFFSET, _DATA, _CRC32):
                raise ValueError(f"FetchChunk field {field} as a fixed-size value")
            at += 8 if wire == _FIXED64 else 4
            if at > end:
                raise ValueError("a FetchChunk with a truncated field")
        else:
            raise ValueError(f"a FetchChunk with wire type {wire}")
    return FetchChunkView(offset, crc32, data, tensor)


def _varint_bytes(value):
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_UPLOAD_HEADER_KEY = b"\x0a"  # field 1, length-delimited
_UPLOAD_DATA_KEY = b"\x12"    # field 2, length-delimited


def upload_message(header, data):
    parts = []
    if header is not None:
        parts += [_UPLOAD_HEADER_KEY, _varint_bytes(len(header)), header]
    size = memoryview(data).nbytes
    if size:  # protobuf leaves an empty bytes field out
        parts += [_UPLOAD_DATA_KEY, _varint_bytes(size), data]
    return b"".join(parts)
