"""_wire against protobuf's own encoding of FetchChunk and UploadRequest, of
the stream's commands and requests and of the encoder's messages, and its
CRC-32 against zlib's."""
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


def test_crc32_later_is_crc32():
    blob = os.urandom(3 << 20)
    futures = [_wire.crc32_later(memoryview(blob)[at:at + (1 << 20)])
               for at in range(0, len(blob), 1 << 20)]
    assert [f.result() for f in futures] == [zlib.crc32(blob[at:at + (1 << 20)])
                                             for at in range(0, len(blob), 1 << 20)]


HANDLE = (1 << 63) + 12345


@pytest.mark.parametrize("message", [
    pb.BinaryArgs(op=pb.MUL, lhs=pb.Operand(handle=HANDLE), rhs=pb.Operand(handle=HANDLE + 1)),
    pb.BinaryArgs(op=pb.SUB, lhs=pb.Operand(handle=1), scalar=pb.Scalar(int_value=0),
                  scalar_first=True),
    pb.BinaryArgs(op=pb.ADD, lhs=pb.Operand(handle=HANDLE), scalar=pb.Scalar(int_value=-7)),
    pb.BinaryArgs(op=pb.POW, lhs=pb.Operand(handle=HANDLE), scalar=pb.Scalar(float_value=0.0)),
    pb.BinaryArgs(lhs=pb.Operand(handle=0), rhs=pb.Operand()),  # defaults; empty messages
    pb.UnaryArgs(op=pb.NEG, x=pb.Operand(handle=HANDLE), args=[0.5, -1e300, 0.0]),
    pb.CreateRequest(device="cpu:1", dtype=pb.INT64, shape=[3, 0, -1, 1 << 40],
                     data=bytes(range(200)), tag="t\u00e9", release=[HANDLE, 5]),
    pb.CreateRequest(dtype=pb.FLOAT32, data=b""),  # an empty oneof member: present
    pb.ReadRequest(handle=HANDLE, if_small_on_host=True),
    pb.Scalar(float_value=-0.0),
    pb.OptimizerStepArgs(kind=pb.SGD, momentum=-0.0, dampening=0.0, weight_decay=1e-4, lr=0.0),
])
def test_the_encoder_writes_what_protobuf_writes(message):
    fields = {}
    for field, value in message.ListFields():
        if field.message_type is not None and field.label != field.LABEL_REPEATED:
            value = value.SerializeToString()  # a message field takes its bytes
        elif field.label == field.LABEL_REPEATED:
            value = list(value)
        fields[field.name] = value
    raw = _wire.encoder(type(message))(**fields)
    assert type(message).FromString(raw) == message
    assert raw == message.SerializeToString()


def test_the_encoder_takes_messages_and_refuses_unknown_fields():
    encode = _wire.encoder(pb.BinaryArgs)
    raw = encode(op=pb.MUL, lhs=pb.Operand(handle=3), rhs=_wire.operand(4))
    assert pb.BinaryArgs.FromString(raw) == pb.BinaryArgs(
        op=pb.MUL, lhs=pb.Operand(handle=3), rhs=pb.Operand(handle=4))
    with pytest.raises(TypeError, match="tensord.v1.BinaryArgs has no field 'bogus'"):
        encode(bogus=1)


def test_run_requests_commands_and_stream_requests_are_what_protobuf_writes():
    args = pb.BinaryArgs(op=pb.MUL, lhs=pb.Operand(handle=HANDLE), rhs=pb.Operand(handle=2))
    for no_grad, released in ((False, []), (True, [HANDLE, HANDLE + 9, 1])):
        raw = _wire.run_request("binary", args, no_grad) + _wire.releases("run", released)
        expected = pb.RunRequest(op=pb.Op(binary=args, no_grad=no_grad), release=released)
        assert pb.RunRequest.FromString(raw) == expected
        assert raw == expected.SerializeToString()
    # An op without fields still names its kind.
    assert pb.RunRequest.FromString(_wire.run_request("grad", b"", False)).op.HasField("grad")
    create = pb.CreateRequest(dtype=pb.INT64, shape=[3], data=b"x" * 24)
    commands = [_wire.stream_command(1, HANDLE, "create", create),
                _wire.stream_command(300, 0, "sync", b""),
                _wire.stream_command(1 << 40, 0, "read",
                                     pb.ReadRequest(handle=HANDLE).SerializeToString())]
    opened = pb.StreamOpen(session="abc", stream=HANDLE)
    for head, received in ((opened.SerializeToString(), 0), (None, 1 << 33)):
        raw = _wire.stream_request(head, commands, received)
        expected = pb.StreamRequest(received_through=received, commands=[
            pb.Command(seq=1, result=HANDLE, create=create),
            pb.Command(seq=300, sync=pb.Sync()),
            pb.Command(seq=1 << 40, read=pb.ReadRequest(handle=HANDLE))])
        if head is not None:
            expected.open.CopyFrom(opened)
        assert pb.StreamRequest.FromString(raw) == expected
        assert _wire.parse_stream_command(commands[0]) == expected.commands[0]


def test_a_number_field_refuses_what_is_not_a_number():
    with pytest.raises(TypeError, match="tensord.v1.OptimizerStepArgs.lr"):
        _wire.encoder(pb.OptimizerStepArgs)(lr="0.1")
