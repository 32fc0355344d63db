"""The one place where a failed gRPC call becomes a Python exception.

Contract: every error the server reports reaches the caller as a
TensordError, a RuntimeError whose str() is exactly the server's message
(PyTorch's words) and which carries `.code` (a grpc.StatusCode) and
`.details` (the message). Where torch raises another class for the same
error — IndexError for a dimension or index out of range, ValueError or
TypeError for some arguments — the server says so (proto ErrorKind: the
`tensord-error-kind` trailer of a unary call, CommandReply.error_kind on the
stream) and the error is also an instance of that class
(TensordIndexError, TensordValueError, TensordTypeError), so `except
IndexError` catches what it catches with torch. The class is chosen from
what the server sent, never from the message. A command of the pipelined stream that failed
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


class TensordIndexError(TensordError, IndexError):
    """An error torch raises as IndexError (a dimension or index out of range)."""


class TensordValueError(TensordError, ValueError):
    """An error torch raises as ValueError."""


class TensordTypeError(TensordError, TypeError):
    """An error torch raises as TypeError."""


# By the wire's ErrorKind number and by the name the trailer carries.
_CLASSES = {1: TensordIndexError, 2: TensordValueError, 3: TensordTypeError,
            "IndexError": TensordIndexError, "ValueError": TensordValueError,
            "TypeError": TensordTypeError}
ERROR_KIND_METADATA = "tensord-error-kind"


def make_error(code, details, kind=0, command=None):
    """The TensordError (of torch's class for `kind`: the wire's ErrorKind
    number or its name, e.g. "IndexError") for a failure the server reported."""
    return _CLASSES.get(kind, TensordError)(code, details, command)


def from_rpc_error(error):
    """The TensordError for a grpc.RpcError raised by a call."""
    code = error.code() if hasattr(error, "code") else grpc.StatusCode.UNKNOWN
    details = error.details() if hasattr(error, "details") else str(error)
    if code == grpc.StatusCode.UNAVAILABLE and not details:
        details = "the tensord server is unreachable"
    kind = 0
    trailers = error.trailing_metadata() if hasattr(error, "trailing_metadata") else None
    for key, value in trailers or ():
        if key == ERROR_KIND_METADATA:
            kind = value
    return make_error(code, details or code.name, kind)
