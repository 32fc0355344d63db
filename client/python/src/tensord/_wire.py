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
    CRC32_IMPLEMENTATION says which ("zlib-ng" or "zlib"). crc32_later(data)
    is a concurrent.futures.Future of crc32(data), computed on the one
    checker thread (both zlibs release the GIL for large buffers), so a
    fetch checks its chunks while the next ones arrive; `data` must not
    change until the future is done.
  * stream_command(seq, result, kind, request) -> a tensord.v1.Command
    (seq, result, and `request`, a message or its serialized bytes, as its
    oneof field `kind`: "create", "run"...), serialized and framed as one
    element of StreamRequest.commands: the bytes a StreamRequest carries
    for it. stream_request(opened, commands, received_through) -> the
    serialized StreamRequest of those framed commands (a list), `opened`
    a serialized StreamOpen or None, `received_through` left out when 0.
    parse_stream_command(framed) is the pb.Command back (for errors that
    name it). The command stream builds no protobuf object per command:
    the request is serialized once, the rest is concatenated.
  * encoder(message_class) -> encode(**fields): the serialized message of
    those fields, as protobuf writes it (a field at its default left out
    unless it has presence: a oneof member or a message; a message field
    takes a message or its serialized bytes; a repeated scalar is packed).
    A keyword that is not a field raises TypeError. Built for the few
    messages made per op (pyext protobuf takes microseconds per message,
    more per nested copy; this takes well under one). operand(handle) is
    the serialized Operand naming `handle` (cached).
  * run_request(kind, args, no_grad) -> a serialized RunRequest of the Op
    whose oneof field `kind` is `args` (a message or its bytes);
    releases(kind, handles) -> the `release` field of the request of
    Command kind `kind` holding `handles`, to append to its bytes.
    field_writer(field) writes one field (a FieldDescriptor) as encoder()
    does; length_key(field) and length_prefixed(data) are a length-delimited
    field's key and its value's framing.
Stateless but for the checker thread (started at the first crc32_later);
thread-safe.
"""
import concurrent.futures
import functools
import math
import struct
import threading
import zlib

from google.protobuf import descriptor

from tensord.v1 import tensord_pb2 as pb

try:
    from zlib_ng import zlib_ng as _fast_zlib
    crc32 = _fast_zlib.crc32
    CRC32_IMPLEMENTATION = "zlib-ng"
except ImportError:
    crc32 = zlib.crc32
    CRC32_IMPLEMENTATION = "zlib"

_checker = None
_checker_lock = threading.Lock()


def crc32_later(data):
    global _checker
    if _checker is None:
        with _checker_lock:
            if _checker is None:
                _checker = concurrent.futures.ThreadPoolExecutor(
                    max_workers=1, thread_name_prefix="tensord-crc32")
    return _checker.submit(crc32, data)


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


_SMALL_VARINTS = [bytes((value,)) for value in range(0x80)]


def _varint_bytes(value):
    if 0 <= value < 0x80:
        return _SMALL_VARINTS[value]
    if value < 0x4000:
        return bytes((value & 0x7F | 0x80, value >> 7))
    out = []
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_UPLOAD_HEADER_KEY = b"\x0a"  # field 1, length-delimited
_UPLOAD_DATA_KEY = b"\x12"    # field 2, length-delimited


def _key(field, wire):
    return _varint_bytes(field.number << 3 | wire)


_COMMAND = pb.Command.DESCRIPTOR.fields_by_name
_COMMAND_SEQ_KEY = _key(_COMMAND["seq"], _VARINT)
_COMMAND_RESULT_KEY = _key(_COMMAND["result"], _VARINT)
_COMMAND_KIND_KEYS = {field.name: _key(field, _LENGTH)
                      for field in pb.Command.DESCRIPTOR.oneofs_by_name["kind"].fields}
_STREAM = pb.StreamRequest.DESCRIPTOR.fields_by_name
_STREAM_OPEN_KEY = _key(_STREAM["open"], _LENGTH)
_STREAM_COMMAND_KEY = _key(_STREAM["commands"], _LENGTH)
_STREAM_RECEIVED_KEY = _key(_STREAM["received_through"], _VARINT)


# A tensor's handle is written as its result's, then as an operand, often
# many times: its varint is made once.
_handle_varint = functools.lru_cache(maxsize=8192)(_varint_bytes)


_FD = descriptor.FieldDescriptor
_VARINT_TYPES = frozenset((_FD.TYPE_INT32, _FD.TYPE_INT64, _FD.TYPE_UINT32, _FD.TYPE_UINT64,
                           _FD.TYPE_ENUM, _FD.TYPE_BOOL))
_FIXED = {_FD.TYPE_DOUBLE: ("<d", _FIXED64), _FD.TYPE_FLOAT: ("<f", _FIXED32)}


def _signed_varint(value):
    return _varint_bytes(value & 0xFFFFFFFFFFFFFFFF)  # negatives as 10 bytes


def length_key(field):
    """The key of length-delimited `field` (a FieldDescriptor)."""
    return _key(field, _LENGTH)


def length_prefixed(data):
    """`data` (bytes) after its length: a length-delimited field's value."""
    return _varint_bytes(len(data)) + data


def field_writer(field):
    """write(value) -> the bytes of `field` (a FieldDescriptor) holding
    `value` (b"" at a default without presence), as encoder()'s."""
    presence = field.containing_oneof is not None or field.type == _FD.TYPE_MESSAGE
    if field.type == _FD.TYPE_UINT64:  # handles, mostly: their varints are kept
        scalar, wire = _handle_varint, _VARINT
    elif field.type in _VARINT_TYPES:
        scalar, wire = _signed_varint, _VARINT
    elif field.type in _FIXED:
        fmt, wire = _FIXED[field.type]
        pack = struct.Struct(fmt).pack

        def scalar(value):
            try:
                return pack(value)
            except struct.error:
                raise TypeError(f"{value!r} has type {type(value).__name__}, but expected "
                                f"one of: int, float ({field.full_name})") from None
    elif field.type == _FD.TYPE_STRING:
        scalar, wire = str.encode, _LENGTH
    elif field.type in (_FD.TYPE_BYTES, _FD.TYPE_MESSAGE):
        scalar, wire = None, _LENGTH
    else:
        raise TypeError(f"{field.full_name}: a field type the encoder does not write")
    if field.label == _FD.LABEL_REPEATED:
        if wire != _LENGTH:  # packed
            key = _key(field, _LENGTH)

            def write_packed(values):
                if not len(values):
                    return b""
                body = b"".join([scalar(v) for v in values])
                return b"".join((key, _varint_bytes(len(body)), body))
            return write_packed
        key = _key(field, _LENGTH)

        def write_each(values):
            parts = []
            for v in values:
                v = _length_delimited(v, scalar)
                parts += [key, _varint_bytes(len(v)), v]
            return b"".join(parts)
        return write_each
    key = _key(field, wire)
    if wire == _LENGTH:
        def write_length(value):
            value = _length_delimited(value, scalar)
            if not value and not presence:
                return b""
            return b"".join((key, _varint_bytes(len(value)), value))
        return write_length

    if field.type in (_FD.TYPE_DOUBLE, _FD.TYPE_FLOAT) and not presence:
        def write_number(value):  # protobuf writes -0.0 (not all bits zero)
            if value is None or (value == 0 and math.copysign(1.0, value) > 0):
                return b""
            return key + scalar(value)
        return write_number

    def write_scalar(value):
        if not value and not presence:
            return b""
        return key + scalar(value)
    return write_scalar


def _length_delimited(value, scalar):
    if scalar is not None:
        return scalar(value)
    if isinstance(value, bytes):
        return value
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    return value.SerializePartialToString()


def encoder(message_class):
    writers = {f.name: field_writer(f) for f in message_class.DESCRIPTOR.fields}
    name = message_class.DESCRIPTOR.full_name

    def encode(**fields):
        try:
            return b"".join([writers[field](value) for field, value in fields.items()])
        except KeyError as e:
            raise TypeError(f"{name} has no field {e.args[0]!r}") from None
    encode.__name__ = f"encode_{message_class.DESCRIPTOR.name}"
    return encode


_OPERAND_HANDLE_KEY = _key(pb.Operand.DESCRIPTOR.fields_by_name["handle"], _VARINT)


def operand(handle):
    return _OPERAND_HANDLE_KEY + _handle_varint(handle)


_OP_KIND_KEYS = {field.name: _key(field, _LENGTH)
                 for field in pb.Op.DESCRIPTOR.oneofs_by_name["kind"].fields}
_OP_NO_GRAD = _key(pb.Op.DESCRIPTOR.fields_by_name["no_grad"], _VARINT) + b"\x01"
_RUN_OP_KEY = _key(pb.RunRequest.DESCRIPTOR.fields_by_name["op"], _LENGTH)


def run_request(kind, args, no_grad):
    body = args if isinstance(args, bytes) else args.SerializePartialToString()
    op = b"".join((_OP_KIND_KEYS[kind], _varint_bytes(len(body)), body,
                   _OP_NO_GRAD if no_grad else b""))
    return b"".join((_RUN_OP_KEY, _varint_bytes(len(op)), op))


_RELEASE_WRITERS = {
    field.name: field_writer(field.message_type.fields_by_name["release"])
    for field in pb.Command.DESCRIPTOR.oneofs_by_name["kind"].fields
    if "release" in field.message_type.fields_by_name}


def releases(kind, handles):
    return _RELEASE_WRITERS[kind](handles)


def stream_command(seq, result, kind, request):
    body = request if isinstance(request, bytes) else request.SerializePartialToString()
    command = b"".join((_COMMAND_SEQ_KEY, _varint_bytes(seq),
                        _COMMAND_RESULT_KEY + _handle_varint(result) if result else b"",
                        _COMMAND_KIND_KEYS[kind], _varint_bytes(len(body)), body))
    return b"".join((_STREAM_COMMAND_KEY, _varint_bytes(len(command)), command))


def stream_request(opened, commands, received_through):
    parts = [_STREAM_OPEN_KEY, _varint_bytes(len(opened)), opened] if opened is not None else []
    parts += commands
    if received_through:
        parts += [_STREAM_RECEIVED_KEY, _varint_bytes(received_through)]
    return b"".join(parts)


def parse_stream_command(framed):
    return pb.StreamRequest.FromString(framed).commands[0]


def upload_message(header, data):
    parts = []
    if header is not None:
        parts += [_UPLOAD_HEADER_KEY, _varint_bytes(len(header)), header]
    size = memoryview(data).nbytes
    if size:  # protobuf leaves an empty bytes field out
        parts += [_UPLOAD_DATA_KEY, _varint_bytes(size), data]
    return b"".join(parts)
