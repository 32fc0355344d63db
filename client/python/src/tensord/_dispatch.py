"""Where tensor work leaves the process: the one dispatch point of creates, moves, ops and fetches.

Contract: a Dispatcher turns the client's requests into RPCs of its Session
and returns the server's TensorInfo (or bytes, for fetch). In this stage
each is one unary call (Upload and Fetch streams for large data); the
pipelined Stream RPC can replace this class without touching the tensor
code above it.
  * create_data(dtype, shape, data, device, tag): inline Create up to
    INLINE_CREATE_BYTES (and the server's max_inline_bytes), else Upload in
    UPLOAD_CHUNK_BYTES chunks.
  * create_fill(dtype, shape, fill, device): a Create from a pb.Fill.
  * to(handle, device, copy), run(op) and execute(ops, keep): the tensor the
    server made or named (run marks the op no_grad inside tensord.no_grad()).
  * recorder: None, or while client.capture() runs a step, the
    _capture.Recorder that run() reports each op and its result to; to()
    and fetch() refuse then (RuntimeError).
  * fetch(info): all bytes of the tensor (bytes from a unary Read when it
    fits one reply, else a bytearray of the tensor's size filled by the
    Fetch stream, the caller's to keep and write); each chunk's offset must continue the
    bytes so far and its CRC-32 must match, else DATA_LOSS.
Thread-safety: as the Session's.
"""
import zlib

import grpc

from tensord import _grad_mode
from tensord._errors import TensordError
from tensord.v1 import tensord_pb2 as pb

INLINE_CREATE_BYTES = 64 << 10
UPLOAD_CHUNK_BYTES = 1 << 20


class Dispatcher:
    def __init__(self, session):
        self.session = session
        self.recorder = None  # a _capture.Recorder while a step is captured

    def create_data(self, dtype, shape, data, device, tag=""):
        limits = self.session.limits
        inline_cap = INLINE_CREATE_BYTES
        if limits.max_inline_bytes:
            inline_cap = min(inline_cap, limits.max_inline_bytes)
        if len(data) <= inline_cap:
            return self.session.call("Create", pb.CreateRequest(
                device=device, dtype=dtype.wire, shape=list(shape), data=bytes(data),
                tag=tag), mutating=True).tensor
        header = pb.UploadRequest.Header(device=device, dtype=dtype.wire,
                                         shape=list(shape), tag=tag)
        return self.session.upload(header, data, UPLOAD_CHUNK_BYTES).tensor

    def _refuse_while_capturing(self, what):
        if self.recorder is not None:
            self.recorder.refuse(what)

    def create_fill(self, dtype, shape, fill, device):
        return self.session.call("Create", pb.CreateRequest(
            device=device, dtype=dtype.wire, shape=list(shape), fill=fill),
            mutating=True).tensor

    def to(self, handle, device, copy=False):
        self._refuse_while_capturing("a move between devices (to/cuda/cpu)")
        return self.session.call("To", pb.ToRequest(
            handle=handle, device=device, copy=copy), mutating=True).tensor

    def run(self, op):
        if _grad_mode.no_grad_active():
            op.no_grad = True
        result = self.session.call("Run", pb.RunRequest(op=op), mutating=True).tensor
        if self.recorder is not None:
            self.recorder.record(op, result)
        return result

    def execute(self, ops, keep):
        if _grad_mode.no_grad_active():
            for op in ops:
                op.no_grad = True
        return list(self.session.call("Execute", pb.ExecuteRequest(
            ops=ops, keep=keep), mutating=True).kept)

    def fetch(self, info):
        self._refuse_while_capturing("a fetch (numpy, item, repr, bool)")
        nbytes = info.nbytes
        if nbytes == 0:
            return b""
        if nbytes <= self.session.limits.max_read_bytes:
            chunk = self.session.call("Read", pb.ReadRequest(handle=info.handle))
            _check_chunk(info.handle, chunk, 0)
            if len(chunk.data) != nbytes:
                raise TensordError(grpc.StatusCode.DATA_LOSS,
                                   f"tensor {info.handle}: read {len(chunk.data)} "
                                   f"of {nbytes} bytes")
            return chunk.data
        # One buffer of the tensor's size, each chunk copied into it once.
        out = bytearray(nbytes)
        view = memoryview(out)
        received = 0
        for chunk in self.session.fetch(info.handle):
            _check_chunk(info.handle, chunk, received)
            end = received + len(chunk.data)
            if end <= nbytes:
                view[received:end] = chunk.data
            received = end
        if received != nbytes:
            raise TensordError(grpc.StatusCode.DATA_LOSS,
                               f"tensor {info.handle}: fetched {received} of {nbytes} bytes")
        return out


def _check_chunk(handle, chunk, expected_offset):
    if chunk.offset != expected_offset or zlib.crc32(chunk.data) != chunk.crc32:
        raise TensordError(grpc.StatusCode.DATA_LOSS,
                           f"tensor {handle}: a corrupt chunk at offset {chunk.offset} "
                           f"(expected offset {expected_offset}, CRC-32 "
                           f"{zlib.crc32(chunk.data):08x}, sent {chunk.crc32:08x})")
