"""The one place where a failed gRPC call becomes a Python exception.

Contract: every error the server reports reaches the caller as
TensordError, a RuntimeError (PyTorch raises RuntimeError for the same
situations: devices that differ, shapes that do not broadcast, autograd
misuse), whose str() is exactly the server's message (so the same-device
error reads as PyTorch's) and which carries `.code` (a grpc.StatusCode) and
`.details` (the message). Stateless.
"""
import grpc


class TensordError(RuntimeError):
    """An error the server (or the transport) reported, with its gRPC code."""

    def __init__(self, code, details):
        super().__init__(details)
        self.code = code
        self.details = details


def from_rpc_error(error):
    """The TensordError for a grpc.RpcError raised by a call."""
    code = error.code() if hasattr(error, "code") else grpc.StatusCode.UNKNOWN
    details = error.details() if hasattr(error, "details") else str(error)
    if code == grpc.StatusCode.UNAVAILABLE and not details:
        details = "the tensord server is unreachable"
    return TensordError(code, details or code.name)
