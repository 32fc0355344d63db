"""The same-host fast path: tensor bytes through a POSIX shared-memory region.

Contract (tensord.proto, "Same-host fast path: shared memory"; the C++
client's SharedMemoryRegion and Client::enable_shared_memory):
  * Region.create(session, data_bytes) creates "/tensord-<32 hex digits>"
    (O_CREAT|O_EXCL, mode 0600, on Linux's /dev/shm), reserves its pages
    (posix_fallocate: a full /dev/shm fails here, not with SIGBUS later),
    maps it, writes a random 16-byte cookie at [0, 16) of the 4 KiB header
    and registers it in the session (RegisterSharedMemory). Raises
    TensordError: NOT_FOUND when the server is on another host (or cannot
    see this one's /dev/shm), PERMISSION_DENIED when it runs as another user,
    RESOURCE_EXHAUSTED when /dev/shm has no room, UNIMPLEMENTED where this
    host has no /dev/shm; the object is unlinked on every failure.
  * region.data: a writable memoryview of the data area (data_bytes bytes,
    from byte 4096); region.upload(dtype, shape, device, tag, offset) /
    region.fetch(handle, offset) move tensor bytes through it, in the region's
    session (UploadFromSharedMemory, FetchToSharedMemory), from or to `offset` of
    the data area (the server answers OUT_OF_RANGE past its end). The
    client's automatic path holds region.lock around its copy into or out
    of `data` and the call.
  * region.array(shape, dtype=float32, offset=0): a writable numpy array
    over the data area's bytes at `offset` (no copy; bfloat16 as uint16
    bits, as Tensor._host_array). ValueError when they run past the data
    area or `offset` is negative.
    The array keeps the mapping alive: after close() it still reads and
    writes memory, but not the server's any more.
  * This class is tensord.SharedMemoryRegion, the user's zero-copy region
    (Client.create_shared_memory, Client.upload_shared,
    Tensor.fetch_shared): `with` closes it.
  * region.close(): unregisters it (best effort: the session's close unmaps
    it on the server anyway), unmaps and unlinks it; idempotent, and run
    when the Region is garbage collected or the process exits.
Thread-safety: the automatic path's transfers through one region take
turns (region.lock); a user's region is the user's to share out.
"""
import mmap
import os
import secrets
import threading
import weakref

import grpc
import numpy as np

from tensord import _dtypes
from tensord._errors import TensordError
from tensord.v1 import tensord_pb2 as pb

SHM_DIR = "/dev/shm"
HEADER_BYTES = 4096  # the data area starts here (page aligned)
COOKIE_BYTES = 16
MAX_DATA_BYTES = 1 << 46


def _create_object(name, total):
    """A new shared-memory object `name` of `total` bytes, mapped (an mmap)."""
    path = os.path.join(SHM_DIR, name.lstrip("/"))
    if not os.path.isdir(SHM_DIR):
        raise TensordError(grpc.StatusCode.UNIMPLEMENTED,
                           f"no {SHM_DIR} on this host: shared memory works only when "
                           "client and server share a (Linux) host")
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR | os.O_CLOEXEC, 0o600)
    except OSError as e:
        raise TensordError(grpc.StatusCode.UNAVAILABLE,
                           f"shm_open({name}): {e.strerror}") from None
    try:
        try:
            os.posix_fallocate(fd, 0, total)
        except OSError as e:
            raise TensordError(grpc.StatusCode.RESOURCE_EXHAUSTED,
                               f"cannot reserve {total} bytes of shared memory for "
                               f"{name}: {e.strerror}") from None
        return mmap.mmap(fd, total, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    except BaseException:
        _unlink(name)
        raise
    finally:
        os.close(fd)


def _unlink(name):
    try:
        os.unlink(os.path.join(SHM_DIR, name.lstrip("/")))
    except OSError:
        pass


def _teardown(session_ref, region_id, state):
    """Unregisters (best effort), unmaps and unlinks; safe to run twice."""
    mapping, name, data = state.pop("mapping", None), state.pop("name", None), \
        state.pop("data", None)
    session = session_ref() if region_id else None
    if session is not None and not session.closed:
        try:
            session._raw_call("UnregisterSharedMemory", pb.UnregisterSharedMemoryRequest(
                session=session.id, region=region_id))
        except Exception:  # noqa: BLE001 — e.g. a closed channel; the session's
            pass  # close unmaps it on the server anyway
    if data is not None:
        data.release()
    if mapping is not None:
        try:
            mapping.close()
        except BufferError:  # a view still exported: the unmap waits for the GC
            pass
    if name is not None:
        _unlink(name)


class Region:
    """A registered shared-memory region of one session (see the module doc)."""

    def __init__(self, session, name, mapping, data_bytes, region_id):
        self.name = name
        self.size = data_bytes
        self.id = region_id
        self.lock = threading.Lock()
        self._session = session
        self._state = {"mapping": mapping, "name": name,
                       "data": memoryview(mapping)[HEADER_BYTES:HEADER_BYTES + data_bytes]}
        self._finalizer = weakref.finalize(self, _teardown, weakref.ref(session), region_id,
                                           self._state)

    @classmethod
    def create(cls, session, data_bytes):
        data_bytes = int(data_bytes)
        if not 0 < data_bytes <= MAX_DATA_BYTES:
            raise TensordError(grpc.StatusCode.INVALID_ARGUMENT,
                               f"a shared memory region of {data_bytes} bytes: it must hold "
                               f"1 to {MAX_DATA_BYTES} bytes")
        name = "/tensord-" + secrets.token_hex(16)
        total = HEADER_BYTES + data_bytes
        mapping = _create_object(name, total)
        cookie = secrets.token_bytes(COOKIE_BYTES)
        mapping[:COOKIE_BYTES] = cookie
        try:
            reply = session.call("RegisterSharedMemory", pb.RegisterSharedMemoryRequest(
                name=name, size=total, cookie=cookie), mutating=True)
        except BaseException:
            _teardown(lambda: None, 0, {"mapping": mapping, "name": name})
            raise
        return cls(session, name, mapping, data_bytes, reply.region)

    @property
    def data(self):
        """The data area: a writable memoryview of `size` bytes."""
        data = self._state.get("data")
        if data is None:
            raise TensordError(grpc.StatusCode.FAILED_PRECONDITION,
                               f"shared memory region {self.name} is closed")
        return data

    @property
    def closed(self):
        return not self._finalizer.alive

    @property
    def session_id(self):
        """The id of the session the region is registered in."""
        return self._session.id

    def array(self, shape, dtype=_dtypes.float32, offset=0):
        """A writable numpy view of the data area's bytes at `offset` (see the module doc)."""
        shape = (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(
            int(n) for n in shape)
        offset = int(offset)
        count = 1
        for n in shape:
            if n < 0:
                raise ValueError(f"negative dimension {n} in shape {list(shape)}")
            count *= n
        nbytes = count * dtype.itemsize
        if offset < 0 or offset + nbytes > self.size:
            raise ValueError(f"a {dtype} array of shape {list(shape)} ({nbytes} bytes) at "
                             f"offset {offset} runs past the {self.size} bytes of shared "
                             f"memory region {self.name}")
        return np.frombuffer(self.data, dtype=dtype.numpy_storage, count=count,
                             offset=offset).reshape(shape)

    def upload(self, dtype, shape, device, tag="", offset=0):
        """The TensorInfo of a tensor made from the data area's bytes at `offset`."""
        return self._session.call("UploadFromSharedMemory", pb.UploadFromSharedMemoryRequest(
            region=self.id, offset=offset, device=device, dtype=dtype.wire, shape=list(shape),
            tag=tag), mutating=True).tensor

    def fetch(self, handle, offset=0):
        """Copies tensor `handle`'s bytes to the data area at `offset`; its TensorInfo."""
        return self._session.call("FetchToSharedMemory", pb.FetchToSharedMemoryRequest(
            handle=handle, region=self.id, offset=offset)).tensor

    def close(self):
        self._finalizer()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __repr__(self):
        state = "closed" if self.closed else f"{self.size} bytes"
        return f"<tensord.SharedMemoryRegion {self.name} ({state})>"
