"""The one place where a failed gRPC call becomes a Python exception.

Contract: every error the server reports reaches the caller as
TensordError, a RuntimeError (PyTorch raises RuntimeError for the same
situations: devices that differ, shapes that do not broadcast, autograd
misuse), whose str() is exactly the server's message (so the same-device
error reads as PyTorch's) and which carries `.code` (a grpc.StatusCode) and
`.details` (the message). A command of the pipelined stream that failed
(_dispatch.py) is raised at the next sync point with the same str() and
code, and also `.command`, naming it ("command 12 (run binary, result
9223...)"), which its traceback shows as a note ("command 12 (...) failed:
<message>"). Stateless.
"""
import grpc


class TensordError(RuntimeError):
    """An error the server (or the transport) reported, with its gRPC code."""

    def __init__(self, code, details, command=None):
        super().__init__(details)
        self.code = code
        self.details = details
        self.command = command  # the stream command that failed, if one did
        if command is not None:
            note = (f"{command} failed: {details} (sent on the pipelined command "
                    "stream; raised at the first sync point after it)")
            if hasattr(self, "add_note"):  # Python 3.11+: the traceback shows it
                self.add_note(note)
            else:
                self.__notes__ = [note]


def from_rpc_error(error):
    """The TensordError for a grpc.RpcError raised by a call."""
    code = error.code() if hasattr(error, "code") else grpc.StatusCode.UNKNOWN
    details = error.details() if hasattr(error, "details") else str(error)
    if code == grpc.StatusCode.UNAVAILABLE and not details:
        details = "the tensord server is unreachable"
    return TensordError(code, details or code.name)
