"""Element types, named as PyTorch names them (tensord.float32 prints torch.float32).

Contract: one `dtype` object per wire DType, module-level constants with
torch's names and aliases (float = float32, long = int64, ...); conversions
to and from the wire enum, numpy dtypes and torch dtypes. numpy has no
bfloat16: its host representation is uint16 bit patterns (numpy_storage),
and to_numpy_dtype raises PyTorch's TypeError for it. Stateless.
"""
import numpy as np

from tensord.v1 import tensord_pb2 as pb


class dtype:
    """A tensor element type (torch.dtype's counterpart)."""

    __slots__ = ("name", "wire", "itemsize", "is_floating_point", "_numpy")

    def __init__(self, name, wire, itemsize, is_floating_point, numpy_dtype):
        self.name = name
        self.wire = wire
        self.itemsize = itemsize
        self.is_floating_point = is_floating_point
        self._numpy = numpy_dtype

    def __repr__(self):
        return f"torch.{self.name}"

    def __reduce__(self):
        return (from_name, (self.name,))

    @property
    def numpy_storage(self):
        """The numpy dtype holding this type's little-endian bytes."""
        return np.dtype(self._numpy).newbyteorder("<")


float32 = dtype("float32", pb.FLOAT32, 4, True, np.float32)
float64 = dtype("float64", pb.FLOAT64, 8, True, np.float64)
float16 = dtype("float16", pb.FLOAT16, 2, True, np.float16)
bfloat16 = dtype("bfloat16", pb.BFLOAT16, 2, True, np.uint16)
int32 = dtype("int32", pb.INT32, 4, False, np.int32)
int64 = dtype("int64", pb.INT64, 8, False, np.int64)
bool_ = dtype("bool", pb.BOOL, 1, False, np.bool_)

ALL = (float32, float64, float16, bfloat16, int32, int64, bool_)
ALIASES = {"float": float32, "double": float64, "half": float16,
           "int": int32, "long": int64, "bool": bool_}
_BY_WIRE = {d.wire: d for d in ALL}
_BY_NAME = {d.name: d for d in ALL}
_FROM_NUMPY = {np.dtype(np.float32): float32, np.dtype(np.float64): float64,
               np.dtype(np.float16): float16, np.dtype(np.int32): int32,
               np.dtype(np.int64): int64, np.dtype(np.bool_): bool_}


def from_name(name):
    return _BY_NAME[name]


def from_wire(value):
    try:
        return _BY_WIRE[value]
    except KeyError:
        raise RuntimeError(f"the server sent dtype {value}, unknown to this "
                           "client (a newer server?)") from None


def from_numpy(numpy_dtype):
    """The dtype of a numpy array's elements; TypeError when tensord has none."""
    key = np.dtype(numpy_dtype).newbyteorder("=")
    if key in _FROM_NUMPY:
        return _FROM_NUMPY[key]
    raise TypeError(f"can't convert np.ndarray of type numpy.{key.name}. The "
                    "only supported types are: float64, float32, float16, "
                    "int64, int32, and bool.")


def to_numpy_dtype(d):
    """The numpy dtype a fetched tensor of `d` becomes (not for bfloat16)."""
    if d is bfloat16:
        raise TypeError("Got unsupported ScalarType BFloat16")
    return np.dtype(d._numpy)


def from_torch(torch_dtype):
    name = str(torch_dtype).replace("torch.", "")
    if name not in _BY_NAME:
        raise TypeError(f"tensord has no dtype for {torch_dtype}")
    return _BY_NAME[name]


def to_torch(d):
    import torch
    return getattr(torch, d.name)


def infer(data):
    """torch.tensor's dtype for Python data (a number or nested lists)."""
    kind = np.asarray(data).dtype.kind
    if kind == "b":
        return bool_
    if kind in "iu":
        return int64
    if kind == "f":
        return float32
    raise TypeError(f"Could not infer dtype of {type(data).__name__}")


def of_scalar(value):
    """The dtype torch.full gives a Python number."""
    if isinstance(value, (bool, np.bool_)):
        return bool_
    if isinstance(value, (int, np.integer)):
        return int64
    return float32


def host_array(array, dtype):
    """`array`'s values as a C-contiguous numpy array of `dtype`'s host
    representation (bfloat16: bit patterns), ready to send as bytes."""
    if dtype is bfloat16:
        array = _bfloat16_bits(array)
    else:
        array = np.asarray(array).astype(dtype.numpy_storage, copy=False)
    if not array.flags.c_contiguous:
        array = array.copy(order="C")  # (np.ascontiguousarray makes 0-d 1-d)
    return array


def _bfloat16_bits(values):
    """float32 values -> bfloat16 bit patterns, rounded to nearest even."""
    bits = np.asarray(values, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    nan = np.isnan(np.asarray(values, dtype=np.float32))
    return np.where(nan, 0x7FC0, rounded).astype(np.uint16)
