"""What the proto tests share: Python stubs for tensord.v1, generated from our proto at test time, and a session on a daemon of the test class's own.

load(): the system protoc (3.21) with Debian's grpc_python_plugin (it
understands proto3 `optional`, which the protoc bundled in Debian 12's
grpc_tools does not); returns the (messages, services) modules, generated
once per process. SessionTestCase: a unittest class whose tests share one
`tensord` (tests/python/daemon.py, $TENSORD_BINARY), a channel, a stub and
an open session, closed and stopped cleanly (exit 0) after them.
"""
import functools
import os
import subprocess
import sys
import tempfile
import unittest

import grpc

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
