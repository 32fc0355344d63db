"""What the proto tests share: Python stubs for tensord.v1, generated from our proto at test time, and a session on a daemon of the test class's own.

load(): the system protoc (3.21) with Debian's grpc_python_plugin (it
understands proto3 `optional`, which the protoc bundled in Debian 12's
grpc_tools does not); returns the (messages, services) modules, generated
once per process. SessionTestCase: a unittest class whose tests share one
`tensord` (tests/python/daemon.py, $TENSORD_BINARY), a channel, a stub and
an open session, closed and stopped cleanly (exit 0) after them, with the
calls the tests make through it (create from a numpy array, fetch into one,
run an op); h(info) is an info's handle as an operand.
"""
import functools
import os
import subprocess
import sys
import tempfile
import unittest

import grpc
import numpy as np

from daemon import Daemon  # tests/python/daemon.py

PROTO_ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "proto")


@functools.lru_cache(maxsize=None)
def load(proto_root=PROTO_ROOT):
    out = tempfile.mkdtemp(prefix="tensord-pystubs-")
    subprocess.run(["protoc", f"-I{proto_root}", f"--python_out={out}",
                    f"--grpc_out={out}",
                    "--plugin=protoc-gen-grpc=/usr/bin/grpc_python_plugin",
                    "tensord/v1/tensord.proto"], check=True)
    sys.path.insert(0, out)
    from tensord.v1 import tensord_pb2, tensord_pb2_grpc
    return tensord_pb2, tensord_pb2_grpc


def _numpy_dtypes():
    pb, _ = load()
    return {pb.FLOAT32: np.float32, pb.FLOAT64: np.float64, pb.INT32: np.int32,
            pb.INT64: np.int64, pb.BOOL: np.bool_}


def h(info):
    """The tensor `info` names, as an op's operand."""
    pb, _ = load()
    return pb.Operand(handle=info.handle)


class SessionTestCase(unittest.TestCase):
    """Subclasses set `daemon_flags` and `client_name`; cls.stub, cls.session."""

    daemon_flags = ()
    client_name = "py"

    @classmethod
    def setUpClass(cls):
        pb, pb_grpc = load()
        cls.daemon = Daemon(os.environ["TENSORD_BINARY"], *cls.daemon_flags)
        cls.channel = grpc.insecure_channel(cls.daemon.address)
        cls.stub = pb_grpc.TensorServiceStub(cls.channel)
        cls.session = cls.stub.OpenSession(
            pb.OpenSessionRequest(client_name=cls.client_name)).session

    @classmethod
    def tearDownClass(cls):
        pb, _ = load()
        cls.stub.CloseSession(pb.CloseSessionRequest(session=cls.session))
        cls.channel.close()
        code, log = cls.daemon.stop()
        cls.daemon.close()
        assert code == 0, log

    def create(self, array, device="cpu:0"):
        """A tensor of the session holding `array` (its numpy dtype's)."""
        pb, _ = load()
        array = np.asarray(array).copy(order="C")  # keeps 0-d (ascontiguousarray would not)
        dtypes = {np.dtype(v): k for k, v in _numpy_dtypes().items()}
        return self.stub.Create(pb.CreateRequest(
            session=self.session, device=device, dtype=dtypes[array.dtype],
            shape=list(array.shape), data=array.tobytes())).tensor

    def fetch(self, info):
        """The tensor's values, as a numpy array of its shape."""
        pb, _ = load()
        data = b"".join(c.data for c in self.stub.Fetch(
            pb.FetchRequest(session=self.session, handle=info.handle)))
        return np.frombuffer(data, dtype=_numpy_dtypes()[info.dtype]).reshape(list(info.shape))

    def run_op(self, **kind):
        """Runs pb.Op(**kind); its result's TensorInfo."""
        pb, _ = load()
        return self.stub.Run(pb.RunRequest(session=self.session, op=pb.Op(**kind))).tensor
