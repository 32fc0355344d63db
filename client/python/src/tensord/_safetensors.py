"""tensord.save / tensord.load: named tensors in the safetensors format, the file torch reads.

Contract:
  * save(tensors, path, metadata=None) writes `tensors` (a mapping of names,
    e.g. a module's state_dict() with PyTorch's keys "conv1.weight",
    "fc3.bias", to tensord Tensors on any device) to `path` as safetensors:
    an 8-byte little-endian header length, a JSON header naming each
    tensor's dtype ("F32", "BF16", ...), shape and [begin, end) byte offsets
    into the data that follows (plus "__metadata__": {"format": "pt"} and
    any string `metadata`), padded with spaces to a multiple of 8, then
    each tensor's raw little-endian bytes in name order. Each tensor is
    fetched once (bfloat16 as its bits, no widening). Returns None.
  * load(path, client=None, device=None) -> an OrderedDict (in file order)
    of name -> Tensor uploaded to `device` (default "cpu") on `client`
    (default: the default client). Raises ValueError for a file that is
    not safetensors (a header past the end, offsets that overlap, leave
    gaps or disagree with dtype and shape) and TypeError for a dtype tensord
    lacks (e.g. "U8").
Files load with safetensors.torch.load_file, and files it writes load here.
Stateless; thread-safety is the client's.
"""
import collections
import json
import math
import struct

import numpy as np

from tensord import _dtypes
from tensord._device import name_of

_CODE_OF = {_dtypes.float32: "F32", _dtypes.float64: "F64", _dtypes.float16: "F16",
            _dtypes.bfloat16: "BF16", _dtypes.int32: "I32", _dtypes.int64: "I64",
            _dtypes.bool_: "BOOL"}
_DTYPE_OF = {code: dtype for dtype, code in _CODE_OF.items()}
_HEADER_LENGTH = struct.Struct("<Q")


def save(tensors, path, metadata=None):
    header, blobs, offset = {}, [], 0
    header["__metadata__"] = {"format": "pt",
                              **{str(k): str(v) for k, v in (metadata or {}).items()}}
    for name in sorted(tensors):
        t = tensors[name]
        data = t._host_array().tobytes()
        header[name] = {"dtype": _CODE_OF[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(_HEADER_LENGTH.pack(len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)


def _read_header(blob, path):
    if len(blob) < _HEADER_LENGTH.size:
        raise ValueError(f"{path}: not safetensors (shorter than its header length)")
    (length,) = _HEADER_LENGTH.unpack_from(blob)
    if length > len(blob) - _HEADER_LENGTH.size:
        raise ValueError(f"{path}: not safetensors (a {length}-byte header in a "
                         f"{len(blob)}-byte file)")
    try:
        header = json.loads(blob[_HEADER_LENGTH.size:_HEADER_LENGTH.size + length])
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: not safetensors (header is not JSON: {e})") from None
    if not isinstance(header, dict):
        raise ValueError(f"{path}: not safetensors (header is not a JSON object)")
    header.pop("__metadata__", None)
    return header, _HEADER_LENGTH.size + length


def load(path, client=None, device=None):
    from tensord._client import default_client
    from tensord._tensor import Tensor
    client = client or default_client()
    with open(path, "rb") as f:
        blob = f.read()
    header, data_start = _read_header(blob, path)
    entries = sorted(header.items(), key=lambda item: item[1]["data_offsets"])
    expected_begin = 0
    tensors = collections.OrderedDict()
    for name, entry in entries:
        code = entry.get("dtype")
        if code not in _DTYPE_OF:
            raise TypeError(f"{path}: tensor '{name}' has dtype {code}, which tensord lacks")
        dtype, shape = _DTYPE_OF[code], [int(n) for n in entry["shape"]]
        begin, end = (int(n) for n in entry["data_offsets"])
        if begin != expected_begin or end - begin != math.prod(shape) * dtype.itemsize \
                or data_start + end > len(blob):
            raise ValueError(f"{path}: not safetensors (tensor '{name}' has offsets "
                             f"[{begin}, {end}) for a {code} tensor of shape {shape})")
        expected_begin = end
        array = np.frombuffer(blob, dtype=dtype.numpy_storage, count=math.prod(shape),
                              offset=data_start + begin).reshape(shape)
        array = np.ascontiguousarray(array) if array.ndim else array.copy()
        info = client._dispatcher.create_data(dtype, shape, memoryview(array).cast("B"),
                                              name_of(device))
        tensors[name] = Tensor._adopt(client, info)
    if data_start + expected_begin != len(blob):
        raise ValueError(f"{path}: not safetensors ({len(blob) - data_start - expected_begin}"
                         f" bytes after the last tensor)")
    return tensors
