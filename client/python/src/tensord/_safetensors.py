"""tensord.save / tensord.load: named tensors in the safetensors format, the file torch reads.

Contract:
  * save(tensors, path, metadata=None, progress=False) writes `tensors` (a
    mapping of names, e.g. a module's state_dict() with PyTorch's keys
    "conv1.weight", "fc3.bias", to tensord Tensors on any device) to `path`
    as safetensors: an 8-byte little-endian header length, a JSON header
    naming each tensor's dtype ("F32", "BF16", ...), shape and [begin, end)
    byte offsets into the data that follows (plus "__metadata__":
    {"format": "pt"} and any string `metadata`), padded with spaces to a
    multiple of 8, then each tensor's raw little-endian bytes in name
    order. Each tensor is fetched once (bfloat16 as its bits, no
    widening). Returns None.
  * load(path, client=None, device=None, progress=False) -> an OrderedDict
    (in file order) of name -> Tensor uploaded to `device` (default "cpu")
    on `client` (default: the default client). Raises ValueError for a file
    that is not safetensors (a header past the end, offsets that overlap,
    leave gaps or disagree with dtype and shape) and TypeError for a dtype
    tensord lacks (e.g. "U8").
  * progress=True: when the file's tensor data is over
    _progress.PROGRESS_MIN_BYTES, ONE progress line on stderr for the whole
    file ("save net.safetensors: 42%|####      | ...", "load ..."; tqdm's
    when it is installed), advanced by every tensor's fetch or upload,
    chunk by chunk on the streams (_progress.whole), not a line per
    tensor: a state_dict has hundreds. save's line ends once the file is
    written; on an error it ends where the transfers stopped. (A fetch or
    upload's own line, _progress.bar, is not drawn then.)
Files load with safetensors.torch.load_file, and files it writes load here.
Stateless; thread-safety is the client's.
"""
import collections
import json
import math
import os
import struct

import numpy as np

from tensord import _dtypes, _progress
from tensord._device import name_of

_CODE_OF = {_dtypes.float32: "F32", _dtypes.float64: "F64", _dtypes.float16: "F16",
            _dtypes.bfloat16: "BF16", _dtypes.int32: "I32", _dtypes.int64: "I64",
            _dtypes.bool_: "BOOL"}
_DTYPE_OF = {code: dtype for dtype, code in _CODE_OF.items()}
_HEADER_LENGTH = struct.Struct("<Q")


def _file_name(path):
    return os.path.basename(os.fspath(path))


def save(tensors, path, metadata=None, progress=False):
    """Writes `tensors` to `path` as safetensors. progress=True: one line on
    stderr for the file's fetches (over 1 MiB in all), not one per tensor."""
    header, blobs, offset = {}, [], 0
    header["__metadata__"] = {"format": "pt",
                              **{str(k): str(v) for k, v in (metadata or {}).items()}}
    names = sorted(tensors)
    # Each fetch advances this one line (None: nothing drawn, plain fetches).
    line = _progress.whole(progress, sum(tensors[name].nbytes for name in names),
                           f"save {_file_name(path)}")
    try:
        for name in names:
            t = tensors[name]
            data = t._host_array(line).tobytes()
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
    finally:
        if line is not None:
            line.close()  # after the write: its time is the save's too


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


def load(path, client=None, device=None, progress=False):
    """The tensors of the safetensors file `path`, uploaded to `device` on
    `client`. progress=True: one line on stderr for the file's uploads
    (over 1 MiB in all), not one per tensor."""
    from tensord._client import default_client
    from tensord._tensor import Tensor
    client = client or default_client()
    with open(path, "rb") as f:
        blob = f.read()
    header, data_start = _read_header(blob, path)
    entries = sorted(header.items(), key=lambda item: item[1]["data_offsets"])
    expected_begin = 0
    tensors = collections.OrderedDict()
    # The data after the header: all the tensors' bytes in a valid file (checked below).
    line = _progress.whole(progress, len(blob) - data_start, f"load {_file_name(path)}")
    try:
        for name, entry in entries:
            code = entry.get("dtype")
            if code not in _DTYPE_OF:
                raise TypeError(f"{path}: tensor '{name}' has dtype {code}, "
                                "which tensord lacks")
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
                                                  name_of(device), progress=line)
            tensors[name] = Tensor._adopt(client, info)
    finally:
        if line is not None:
            line.close()
    if data_start + expected_begin != len(blob):
        raise ValueError(f"{path}: not safetensors ({len(blob) - data_start - expected_begin}"
                         f" bytes after the last tensor)")
    return tensors
