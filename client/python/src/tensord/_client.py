"""Client: one session on one tensord server, with torch's factory functions.

Contract:
  * connect(address=None, token_file=None, tls=False, ...) opens the channel
    (_channel.py) and a session (_session.py) and returns a Client; the
    newest client is also the default one that tensord.tensor(...),
    tensord.nn and tensord.optim use when no client is named.
  * client.cuda.is_available() / device_count() / get_device_name(i) describe
    the server's GPUs; client.device(name) is a tensord.device; devices()
    the server's DeviceInfo list (name, model, memory...).
  * Factories as torch's: tensor, as_tensor, zeros, ones, full, empty
    (zeros), arange, rand, randn and their *_like forms, each with dtype=,
    device= (default "cpu") and requires_grad=; from_numpy(a) and
    from_torch(t) copy host data to a device (dtype and shape exact,
    bfloat16 included; from_numpy(a, progress=True), from_torch(t,
    progress=True), x.numpy(progress=True) and x.torch(progress=True) show
    a large transfer's progress on stderr, _progress.py, and
    tensord.save/load(..., progress=True) one line for the whole file,
    _safetensors.py); manual_seed(s) makes the following rand/randn and
    training-mode dropout reproducible (seeds s, s+1, ...; not torch's
    values).
  * capture(fn, *inputs): a step recorded once, replayed as one RunProgram
    (_capture.py).
  * tensors() lists what the session holds (after the releases of dropped
    tensors are answered); held() the memory it holds without a handle,
    which counts toward its quotas as tensors do: what autograd keeps
    (tensors saved for a backward, tag "saved by MulBackward0", and leaves'
    grads no handle names, "grad of tensor 17"; handle 0), as the C++
    Client::held(); held_bytes() is the total of both.
  * connect(..., pipeline=None|True|False): whether tensor work goes on the
    session's ordered command stream (the default where the server has it)
    or as unary calls; client.pipelined says which; client.synchronize()
    waits for what was sent and raises a failure not yet reported
    (_dispatch.py states the contract).
  * Same-host shared memory, opt-in as the C++ Client's:
    enable_shared_memory(nbytes) (or connect(..., shared_memory=nbytes))
    creates one region of `nbytes` (_shm.py) in the session, after which
    uploads (tensor, from_numpy, from_torch...) and fetches (numpy, tolist,
    item...) over 1 MiB that fit it go through it, the rest through the
    socket; concurrent large transfers take turns. It returns True, or
    False where the server cannot use it (another host: NOT_FOUND; another
    user: PERMISSION_DENIED; no /dev/shm here), the socket staying and
    shared_memory_reason saying why; calling it again replaces the region.
    disable_shared_memory() and close() release the region (unregistered,
    unmapped, unlinked); shared_memory_enabled says whether one is in use.
  * Zero-copy, as the C++ Client's: create_shared_memory(nbytes) gives the
    caller a region of its own (tensord.SharedMemoryRegion); numpy views of
    it (region.array) are written in place, upload_shared(region, offset,
    dtype, shape, device) makes a tensor from its bytes and
    x.fetch_shared(region, offset) writes a tensor's bytes into it and
    returns their view: no copy on this side either way.
  * close() (or leaving a `with` block) closes the session, freeing every
    tensor of it; tensors of a closed client fail with NOT_FOUND.
Thread-safety: a Client may be shared by threads.
"""
import collections
import threading
import weakref

import numpy as np

from tensord import _capture, _channel, _dtypes, _shm
from tensord._device import device as Device
from tensord._device import name_of
from tensord._dispatch import Dispatcher
from tensord._errors import TensordError
from tensord._session import Session
from tensord._tensor import Tensor
from tensord.v1 import tensord_pb2 as pb

TensorRecord = collections.namedtuple(
    "TensorRecord", ["handle", "device", "dtype", "shape", "nbytes", "tag",
                     "age_ms", "idle_ms", "requires_grad", "grad_fn"])

_default_lock = threading.Lock()
_default_client = None


def default_client():
    """The client tensord-level functions use: the newest connect()'s."""
    with _default_lock:
        if _default_client is None or _default_client.closed:
            raise RuntimeError("no open tensord client: call tensord.connect() first")
        return _default_client


def connect(address=None, token_file=None, tls=False, *, tls_ca_file=None,
            tls_cert_file=None, tls_key_file=None, tls_server_name=None,
            client_name="tensord-python", session_ttl_ms=0, session=None, pipeline=None,
            shared_memory=None):
    """A Client on a new session (or attached to `session`, an id within its lease).

    pipeline: None (the default) sends tensor work on the session's ordered
    command stream when the server has it, True asks for it (unary where the
    server lacks it), False makes every request a unary call (_dispatch.py).
    shared_memory: bytes of a same-host region for large transfers
    (Client.enable_shared_memory; a server it cannot serve leaves the socket,
    client.shared_memory_reason saying why)."""
    global _default_client
    channel, metadata = _channel.open_channel(
        address, token_file, tls, tls_ca_file, tls_cert_file, tls_key_file, tls_server_name)
    try:
        client = Client(channel, metadata, client_name, session_ttl_ms, session, pipeline)
        if shared_memory:
            client.enable_shared_memory(shared_memory)
    except BaseException:
        channel.close()
        raise
    with _default_lock:
        _default_client = client
    return client


def _size_arg(size):
    if len(size) == 1 and isinstance(size[0], (tuple, list)):
        size = size[0]
    return [int(n) for n in size]


def _record(info):
    """The TensorRecord of a pb.TensorInfo."""
    return TensorRecord(info.handle, info.device, _dtypes.from_wire(info.dtype),
                        tuple(info.shape), info.nbytes, info.tag, info.age_ms, info.idle_ms,
                        info.requires_grad, info.grad_fn or None)


class _Cuda:
    """client.cuda: torch.cuda's queries, answered by the server."""

    def __init__(self, client):
        self._client = client

    def _gpus(self):
        return [d for d in self._client.devices() if d.kind == "cuda"]

    def is_available(self):
        return bool(self._gpus())

    def device_count(self):
        return len(self._gpus())

    def get_device_name(self, index=0):
        gpus = self._gpus()
        if not 0 <= index < len(gpus):
            raise AssertionError("Invalid device id")
        return gpus[index].model


class Client:
    def __init__(self, channel, metadata=(), client_name="tensord-python",
                 session_ttl_ms=0, session=None, pipeline=None):
        self._channel = channel
        self._session = Session(channel, metadata, client_name, session_ttl_ms, session)
        stream, listed = None, ()
        if pipeline is None or pipeline:
            try:
                listed = self._session.call("ListDevices", pb.ListDevicesRequest()).devices
            except BaseException:
                self._session.close()
                raise
            # A server without capability tables has no command stream either.
            if listed and all(len(d.capabilities) for d in listed):
                stream = self._session.start_stream()
        self._dispatcher = Dispatcher(self._session, stream, listed)
        self._seed_lock = threading.Lock()
        self._next_seed = None
        self.shared_memory_reason = None  # why enable_shared_memory last failed
        self._regions = weakref.WeakSet()  # create_shared_memory's, closed with the client
        self.cuda = _Cuda(self)

    # --- the session -------------------------------------------------------

    @property
    def session(self):
        """The session id (its only credential: connect(session=...) re-attaches)."""
        return self._session.id

    @property
    def closed(self):
        return self._session.closed

    @property
    def pipelined(self):
        """Whether tensor work goes on the session's command stream (_dispatch.py)."""
        return self._dispatcher.pipelined

    def synchronize(self):
        """Waits until the server has run everything sent so far; raises the
        failure of a command not yet reported (torch.cuda.synchronize())."""
        self._dispatcher.synchronize()

    def close(self):
        if not self._session.closed:
            self._dispatcher.set_region(None)
            for region in list(self._regions):
                region.close()
        self._session.close()
        self._channel.close()

    # --- same-host shared memory -------------------------------------------

    def enable_shared_memory(self, nbytes):
        """Large transfers through a same-host region of `nbytes` from now on;
        False (the socket stays; shared_memory_reason says why) where the
        server cannot use it."""
        try:
            region = _shm.Region.create(self._session, nbytes)
        except TensordError as e:
            self.shared_memory_reason = str(e)
            return False
        self.shared_memory_reason = None
        self._dispatcher.set_region(region)
        return True

    def disable_shared_memory(self):
        """Back to the socket only; the region is released."""
        self._dispatcher.set_region(None)

    @property
    def shared_memory_enabled(self):
        return self._dispatcher.region is not None

    def create_shared_memory(self, nbytes):
        """A new same-host region of `nbytes` registered in this session, the
        caller's to fill and read (a tensord.SharedMemoryRegion: region.array
        gives numpy views of it; upload_shared and Tensor.fetch_shared move
        tensors through it with no copy on this side). Raises TensordError:
        NOT_FOUND when the server is on another host, PERMISSION_DENIED when
        it runs as another user, RESOURCE_EXHAUSTED when /dev/shm has no
        room. `with` (or close()) releases it; so does closing the client."""
        region = _shm.Region.create(self._session, nbytes)
        self._regions.add(region)
        return region

    def upload_shared(self, region, offset, dtype, shape, device=None):
        """Zero-copy upload: a tensor of `dtype` and `shape` from the bytes at
        `offset` of `region`'s data area (written there by the caller, e.g.
        through region.array(shape, dtype, offset)); the server copies them
        onto `device` (default "cpu"). OUT_OF_RANGE when they run past the
        region; INVALID_ARGUMENT for a region of another session."""
        if not isinstance(region, _shm.Region):
            raise TypeError(f"upload_shared: region must be a tensord.SharedMemoryRegion "
                            f"(Client.create_shared_memory), not {type(region).__name__}")
        shape = _size_arg((shape,))
        info = self._dispatcher.upload_shared(region, int(offset), dtype, shape,
                                              name_of(device))
        return Tensor._adopt(self, info)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def devices(self):
        return list(self._session.call("ListDevices", pb.ListDevicesRequest()).devices)

    def device(self, name, index=None):
        return Device(name, index)

    def tensors(self):
        """What the session holds now, as TensorRecords (by handle)."""
        records, token = [], ""
        while True:
            reply = self._session.call("ListTensors", pb.ListTensorsRequest(page_token=token))
            records += [_record(t) for t in reply.tensors]
            token = reply.next_page_token
            if not token:
                return records

    def held(self):
        """What the session holds without a handle (autograd's saved tensors and
        grads), as TensorRecords with handle 0."""
        reply = self._session.call("ListTensors", pb.ListTensorsRequest(page_size=1))
        return [_record(t) for t in reply.held]

    def held_bytes(self):
        """Bytes the session holds on the server: its tensors' and held()'s."""
        return self._session.call("ListTensors", pb.ListTensorsRequest(page_size=1)).total_bytes

    def manual_seed(self, seed):
        with self._seed_lock:
            self._next_seed = int(seed)

    def _seed(self, seed):
        if seed is not None:
            return int(seed)
        with self._seed_lock:
            if self._next_seed is None:
                return None
            self._next_seed += 1
            return self._next_seed - 1

    def _take_seeds(self, n):
        """The first of n consecutive seeds taken from the manual_seed
        sequence, or None when manual_seed was never called."""
        with self._seed_lock:
            if self._next_seed is None:
                return None
            self._next_seed += n
            return self._next_seed - n

    def capture(self, fn, *inputs):
        """fn(*inputs) run once and recorded; the CapturedStep replays it as one
        RunProgram of a program planned once on the server, with new inputs
        (tensors or numpy arrays; see _capture.py)."""
        return _capture.capture(self, fn, *inputs)

    # --- making tensors ----------------------------------------------------

    def _finish(self, info, requires_grad):
        t = Tensor._adopt(self, info)
        if requires_grad and not t.is_floating_point():
            # A factory's words in torch (requires_grad_() has its own).
            raise RuntimeError(
                "Only Tensors of floating point and complex dtype can require gradients")
        return t.requires_grad_() if requires_grad else t

    def _from_array(self, array, dtype, device, requires_grad=False, progress=False):
        """A tensor of `dtype` holding `array`'s values (converted)."""
        array = _dtypes.host_array(array, dtype)
        info = self._dispatcher.create_data(dtype, array.shape, memoryview(array).cast("B"),
                                            name_of(device), progress=progress)
        return self._finish(info, requires_grad)

    def tensor(self, data, dtype=None, device=None, requires_grad=False):
        """torch.tensor: a copy of `data` (numbers, nested lists, a numpy array,
        a torch tensor or a tensord Tensor) on `device`."""
        if isinstance(data, Tensor):
            t = data.detach().to(device or data.device, dtype or data.dtype, copy=True)
            return t.requires_grad_() if requires_grad else t
        if type(data).__module__.startswith("torch"):
            t = self.from_torch(data, device)
            t = t if dtype is None else t.to(dtype)
            return t.requires_grad_() if requires_grad else t
        if isinstance(data, np.ndarray):
            dtype = dtype or _dtypes.from_numpy(data.dtype)
        else:
            dtype = dtype or _dtypes.infer(data)
            data = np.asarray(data, dtype=np.float64 if dtype.is_floating_point else None)
        return self._from_array(data, dtype, device, requires_grad)

    def as_tensor(self, data, dtype=None, device=None):
        if isinstance(data, Tensor):
            return data.to(device or data.device, dtype or data.dtype)
        return self.tensor(data, dtype, device)

    def from_numpy(self, array, device=None, progress=False):
        """A tensor with `array`'s values, dtype and shape. progress=True: an
        upload over 1 MiB draws a progress line on stderr (tqdm's when it is
        installed)."""
        array = np.asarray(array)
        return self._from_array(array, _dtypes.from_numpy(array.dtype), device,
                                progress=progress)

    def from_torch(self, tensor, device=None, progress=False):
        """A tensor with torch `tensor`'s values, dtype and shape (bfloat16 too).
        progress=True: an upload over 1 MiB draws a progress line on stderr
        (tqdm's when it is installed), bfloat16's as the others'."""
        import torch
        host = tensor.detach().cpu().contiguous()
        dtype = _dtypes.from_torch(host.dtype)
        if host.dtype == torch.bfloat16:
            bits = host.view(torch.int16).numpy().view(np.uint16)
            info = self._dispatcher.create_data(
                dtype, bits.shape, memoryview(bits.copy(order="C")).cast("B"),
                name_of(device), progress=progress)
            t = Tensor._adopt(self, info)
        else:
            t = self._from_array(host.numpy(), dtype, device, progress=progress)
        return t.requires_grad_() if tensor.requires_grad else t

    def _fill(self, size, fill, dtype, device, requires_grad):
        dtype = dtype or _dtypes.float32
        info = self._dispatcher.create_fill(dtype, size, fill, name_of(device))
        return self._finish(info, requires_grad)

    def zeros(self, *size, dtype=None, device=None, requires_grad=False):
        return self._fill(_size_arg(size), pb.Fill(kind=pb.Fill.ZEROS), dtype, device,
                          requires_grad)

    empty = zeros

    def ones(self, *size, dtype=None, device=None, requires_grad=False):
        return self._fill(_size_arg(size), pb.Fill(kind=pb.Fill.ONES), dtype, device,
                          requires_grad)

    def full(self, size, fill_value, dtype=None, device=None, requires_grad=False):
        return self._fill(_size_arg([size]), pb.Fill(kind=pb.Fill.FULL, value=fill_value),
                          dtype or _dtypes.of_scalar(fill_value), device, requires_grad)

    def arange(self, start, end=None, step=1, dtype=None, device=None, requires_grad=False):
        if end is None:
            start, end = 0, start
        if dtype is None:
            integral = all(isinstance(v, (int, np.integer)) for v in (start, end, step))
            dtype = _dtypes.int64 if integral else _dtypes.float32
        if step == 0:
            raise RuntimeError("step must be nonzero")
        fill = pb.Fill(kind=pb.Fill.ARANGE, start=start, end=end, step=step)
        return self._fill([], fill, dtype, device, requires_grad)

    def rand(self, *size, dtype=None, device=None, requires_grad=False, seed=None):
        fill = pb.Fill(kind=pb.Fill.RAND)
        seed = self._seed(seed)
        if seed is not None:
            fill.seed = seed
        return self._fill(_size_arg(size), fill, dtype, device, requires_grad)

    def randn(self, *size, dtype=None, device=None, requires_grad=False, seed=None):
        fill = pb.Fill(kind=pb.Fill.RANDN)
        seed = self._seed(seed)
        if seed is not None:
            fill.seed = seed
        return self._fill(_size_arg(size), fill, dtype, device, requires_grad)

    def _like(self, factory, t, dtype, device, **kwargs):
        return factory(list(t.shape), dtype=dtype or t.dtype, device=device or t.device,
                       **kwargs)

    def zeros_like(self, t, dtype=None, device=None, requires_grad=False):
        return self._like(self.zeros, t, dtype, device, requires_grad=requires_grad)

    def ones_like(self, t, dtype=None, device=None, requires_grad=False):
        return self._like(self.ones, t, dtype, device, requires_grad=requires_grad)

    def rand_like(self, t, dtype=None, device=None, requires_grad=False):
        return self._like(self.rand, t, dtype, device, requires_grad=requires_grad)

    def randn_like(self, t, dtype=None, device=None, requires_grad=False):
        return self._like(self.randn, t, dtype, device, requires_grad=requires_grad)

    def full_like(self, t, fill_value, dtype=None, device=None, requires_grad=False):
        return self.full(list(t.shape), fill_value, dtype=dtype or t.dtype,
                         device=device or t.device, requires_grad=requires_grad)
