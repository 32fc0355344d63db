"""Python stubs for tensord.v1, generated from our proto at test time.

The system protoc (3.21) with Debian's grpc_python_plugin: it understands
proto3 `optional`, which the protoc bundled in Debian 12's grpc_tools does
not. Returns the (messages, services) modules.
"""
import os
import subprocess
import sys
import tempfile

PROTO_ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "proto")


def load(proto_root=PROTO_ROOT):
    out = tempfile.mkdtemp(prefix="tensord-pystubs-")
    subprocess.run(["protoc", f"-I{proto_root}", f"--python_out={out}",
                    f"--grpc_out={out}",
                    "--plugin=protoc-gen-grpc=/usr/bin/grpc_python_plugin",
                    "tensord/v1/tensord.proto"], check=True)
    sys.path.insert(0, out)
    from tensord.v1 import tensord_pb2, tensord_pb2_grpc
    return tensord_pb2, tensord_pb2_grpc
