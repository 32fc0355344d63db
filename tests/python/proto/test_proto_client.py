"""The proto is the cross-language contract: a Python program using stubs
generated from tensord.proto (Debian's protoc + grpc_python_plugin, run with
python3-grpcio and python3-protobuf) runs the
create -> mul -> fetch loop, a matmul checked against numpy, and sees the
same-device rule, against a real tensord daemon.

  tests/python/run_pytest.py --env TENSORD_BINARY=BUILD/server/tensord \
      tests/python/proto/test_proto_client.py
"""
import os
import zlib

import grpc
import numpy as np
import pytest

import tensord_stubs  # beside this file

TENSORD = os.environ.get("TENSORD_BINARY") or pytest.skip(
    "no tensord binary: set TENSORD_BINARY", allow_module_level=True)
pb, pb_grpc = tensord_stubs.load()

DTYPES = {pb.INT64: np.int64, pb.FLOAT32: np.float32, pb.FLOAT64: np.float64}


class ProtoClientTest(tensord_stubs.SessionTestCase):
    daemon_flags = ("--host-devices", "2")
    client_name = "py"

    def create(self, array, device="cpu:0", dtype=pb.INT64):
        array = np.ascontiguousarray(array, dtype=DTYPES[dtype])
        return self.stub.Create(pb.CreateRequest(
            session=self.session, device=device, dtype=dtype,
            shape=list(array.shape), data=array.tobytes())).tensor

    def fetch(self, info):
        data = b""
        for chunk in self.stub.Fetch(pb.FetchRequest(session=self.session, handle=info.handle)):
            self.assertEqual(chunk.offset, len(data))
            self.assertEqual(chunk.crc32, zlib.crc32(chunk.data))
            data += chunk.data
        return np.frombuffer(data, dtype=DTYPES[info.dtype]).reshape(list(info.shape))

    def test_create_mul_fetch(self):
        x = self.create([1, 2, 3])
        y = self.create([5, 8, 1])
        z = self.stub.Binary(pb.BinaryRequest(session=self.session, op=pb.MUL,
                                              lhs=x.handle, rhs=y.handle)).tensor
        np.testing.assert_array_equal(self.fetch(z), np.array([5, 16, 3]))

    def test_matmul_matches_numpy(self):
        rng = np.random.default_rng(7)
        a = rng.standard_normal((17, 33)).astype(np.float32)
        b = rng.standard_normal((33, 9)).astype(np.float32)
        ta, tb = self.create(a, dtype=pb.FLOAT32), self.create(b, dtype=pb.FLOAT32)
        c = self.stub.MatMul(pb.MatMulRequest(session=self.session, lhs=ta.handle,
                                              rhs=tb.handle)).tensor
        self.assertEqual(list(c.shape), [17, 9])
        np.testing.assert_allclose(self.fetch(c), a @ b, rtol=1e-4, atol=1e-4)

    def test_same_device_rule(self):
        x = self.create([1, 2, 3], "cpu:0")
        y = self.create([5, 8, 1], "cpu:1")
        with self.assertRaises(grpc.RpcError) as err:
            self.stub.Binary(pb.BinaryRequest(session=self.session, op=pb.MUL,
                                              lhs=x.handle, rhs=y.handle))
        self.assertEqual(err.exception.code(), grpc.StatusCode.FAILED_PRECONDITION)
        self.assertEqual(err.exception.details(),
                         "Expected all tensors to be on the same device, but found "
                         "at least two devices, cpu:0 and cpu:1!")
        moved = self.stub.To(pb.ToRequest(session=self.session, handle=x.handle,
                                          device="cpu:1")).tensor
        z = self.stub.Binary(pb.BinaryRequest(session=self.session, op=pb.MUL,
                                              lhs=moved.handle, rhs=y.handle)).tensor
        self.assertEqual(z.device, "cpu:1")
        np.testing.assert_array_equal(self.fetch(z), np.array([5, 16, 3]))

    def test_bad_size_is_invalid_argument(self):
        with self.assertRaises(grpc.RpcError) as err:
            self.stub.Create(pb.CreateRequest(session=self.session, dtype=pb.FLOAT32,
                                              shape=[4], data=b"\0" * 15))
        self.assertEqual(err.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)

