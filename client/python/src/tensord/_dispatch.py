"""Where tensor work leaves the process: the one dispatch point of creates, moves, ops and fetches.

Contract: a Dispatcher turns the client's requests into commands of its
Session and returns the server's TensorInfo (or bytes, for fetch). Two
paths, one contract for the tensor code above:
  * unary (stream None: connect(pipeline=False), or a server without the
    Stream RPC): each request is one unary call (Upload and Fetch streams
    for large data) and its errors are raised by the call that made them.
  * pipelined (the default where the server has Stream, i.e. ListDevices
    reports capability tables): creates with inline data or a fill, moves
    (to), ops (run), small reads, releases and syncs go on the session's one
    ordered command stream (_stream.CommandStream) as they are written,
    without waiting. Each result is named by a handle the client chooses, so
    a Tensor exists at once; its metadata (shape, dtype, device,
    requires_grad...) is a _stream.PendingInfo that arrives with the
    server's reply, and reading it waits for that reply (that one only).
    Planned at the line: an op of a family _planner.py plans (the
    plan_* methods below; the Tensor and functional code calls them) whose
    operands' metadata the client knows without waiting (each a create, a
    move, an in-place op's target or a planned result, or answered already)
    is planned before it is sent, by the server's rules: an op the server's
    planner would refuse raises its error (code, torch's class and message)
    on its own line and sends nothing, and the result's shape, dtype and
    device are known at once (PendingInfo.planned; they never wait). Ops
    on a tensor of unknown metadata are planned by the server alone, their
    errors raised at the next sync point; grad waits for its answer (below).
    Sync points wait for what they need: fetch (numpy, item, tolist, repr,
    bool) for its read's reply, synchronize() and every unary call (listings,
    large uploads and fetches, Execute, capture, close) for every command
    sent. A command that fails on the server is raised at the next sync
    point as TensordError with the server's code and message (PyTorch's
    wording where the server uses it), `.command` naming the command
    ("command <seq> (run <op>, result <handle>)"; the traceback's note says
    "command ... failed: <message>"), and cleared then, so the code after the except runs again; commands sent
    after it and before that sync are not run, and their tensors, like the
    failed command's, raise "tensor <handle> was never made: ..." when used.
    The grad property waits for its op (a missing grad is None, not an
    error at a later sync). While a step is captured, ops take the unary
    path (the recorder needs each result at once).
  * upload_shared(region, offset, dtype, shape, device) and
    fetch_shared(handle, region, offset): a user's region transfers
    (unary calls, after the stream's commands).
  * create_data(dtype, shape, data, device, tag, progress) and
    fetch(info, progress): with progress true, a transfer over
    _progress.PROGRESS_MIN_BYTES draws its progress line on stderr
    (_progress.py; per chunk on the Upload and Fetch streams).
  * create_data(dtype, shape, data, device, tag): through the shared-memory
    region (set_region; UploadFromSharedMemory) when one is set and the data
    is over SHM_MIN_BYTES and fits it, else inline Create up to
    INLINE_CREATE_BYTES (and the server's max_inline_bytes), else Upload in
    UPLOAD_CHUNK_BYTES chunks.
  * create_fill(dtype, shape, fill, device): a Create from a pb.Fill.
  * to(handle, device, copy), run(op, wait=False, planned=None) and
    execute(ops, keep): the tensor the server made or named (run marks the
    op no_grad inside tensord.no_grad(); wait=True: the reply is waited
    for, so its failure is raised here; planned: the result's Meta from
    one of the plan_* methods, which take the operands' infos and raise the
    planner's error, or give None where the server plans).
  * recorder: None, or while client.capture() runs a step, the
    _capture.Recorder that run() reports each op and its result to; to()
    and fetch() refuse then (RuntimeError).
  * fetch(info): all bytes of the tensor (a bytearray copied out of the
    shared-memory region as create_data's rule says, else bytes from a Read
    when it fits one reply, else a bytearray of the tensor's size filled by
    the Fetch stream; a bytearray is the caller's to keep and write); each
    chunk's offset must
    continue the bytes so far and its CRC-32 must match, else DATA_LOSS.
  * set_region(region): the _shm.Region large transfers go through (None:
    the socket only); the region it replaces is closed after its transfer
    in progress, if any.
  * synchronize(): waits for every command sent (raises a failure not yet
    reported); nothing to do on the unary path.
Thread-safety: as the Session's.
"""
import grpc

from tensord import _capture, _grad_mode, _planner, _progress, _wire
from tensord._errors import TensordError
from tensord._stream import PendingInfo, _Reply
from tensord.v1 import tensord_pb2 as pb

INLINE_CREATE_BYTES = 64 << 10
SHM_MIN_BYTES = 1 << 20  # transfers over this go through the region, as C++'s
UPLOAD_CHUNK_BYTES = 1 << 20
# Ops whose reply is an operand, updated (the target), not a new tensor:
# kind -> the field naming it.
# The requests made most often, written as wire bytes on the stream.
_CREATE_REQUEST = _wire.encoder(pb.CreateRequest)
_READ_REQUEST = _wire.encoder(pb.ReadRequest)
_IN_PLACE = {"in_place": "target", "requires_grad": "x", "backward": "root",
             "zero_grad": "tensors", "optimizer_step": "params"}


class Dispatcher:
    def __init__(self, session, stream=None, devices=()):
        """devices: ListDevices' DeviceInfos (names and capability tables)."""
        self.session = session
        self.recorder = None  # a _capture.Recorder while a step is captured
        self._stream = stream  # a _stream.CommandStream: the pipelined path
        self._device_names = frozenset(d.name for d in devices)
        self._caps = {d.name: _planner.Capabilities(d) for d in devices}
        self.region = None  # a _shm.Region: the same-host path of large transfers

    def set_region(self, region):
        old, self.region = self.region, region
        if old is not None:
            with old.lock:  # after the transfer it is doing
                old.close()

    def _region_for(self, nbytes):
        """The region to move `nbytes` through, or None (the socket)."""
        region = self.region
        if region is None or nbytes <= SHM_MIN_BYTES or nbytes > region.size:
            return None
        return region

    @property
    def pipelined(self):
        return self._stream is not None

    def _streaming(self):
        """The command stream, when this request should go on it."""
        stream = self._stream
        if stream is None or self.session.closed or self.recorder is not None:
            return None
        return stream

    def _canonical(self, device):
        """The server's name of `device` (its aliases resolved), or None."""
        names = self._device_names
        if device in names:
            return device
        if device in ("", "cpu", "cpu:0"):
            return next((n for n in ("cpu:0", "cpu") if n in names), None)
        if device == "cuda" and "cuda:0" in names:
            return "cuda:0"
        return None

    def _send(self, stream, kind, request, device_hint=None, planned=None):
        """A PendingInfo for the new tensor of a create/to/run command sent now."""
        pending = PendingInfo(stream, stream.new_handle(), device_hint, planned=planned)
        self._send_carrying(stream, kind, request, pending.handle, pending)
        return pending

    # Planned at the line. Each takes the operands' infos (a pb.TensorInfo
    # or PendingInfo; None for an optional operand not given) and returns
    # the result's Meta, raising the server planner's error; or None where
    # the op does not go on the stream or an operand's metadata is not
    # known here (the server plans it).
    def plan_binary(self, op, a, b, number=None, number_first=False):
        """a (op) b, or a (op) `number` (b None; number (op) a with number_first)."""
        return self._plan(lambda caps, a, b: _planner.plan_binary(
            op, a, b, number, caps, number_first=number_first), a, b)

    def plan_unary(self, op, x):
        return self._plan(lambda caps, x: _planner.plan_unary(op, x, caps), x)

    def plan_reduce(self, op, x, dims, keepdim):
        """Reduction `op` of x over `dims` (a list)."""
        return self._plan(lambda caps, x: _planner.plan_reduce(op, x, dims, keepdim, caps), x)

    def plan_matmul(self, a, b):
        return self._plan(lambda caps, a, b: _planner.plan_matmul(a, b, caps), a, b)

    def plan_linear(self, x, weight, bias=None):
        return self._plan(lambda caps, x, w, b: _planner.plan_linear(x, w, b, caps),
                          x, weight, bias)

    def plan_cast(self, x, dtype):
        """x.to(dtype), dtype a wire DType."""
        return self._plan(lambda caps, x: _planner.plan_cast(x, dtype, caps), x)

    def plan_softmax(self, x, dim, log):
        return self._plan(lambda caps, x: _planner.plan_softmax(x, dim, log), x)

    def plan_conv2d(self, x, weight, bias, stride, padding, dilation, groups):
        return self._plan(lambda caps, x, w, b: _planner.plan_conv2d(
            x, w, b, stride, padding, dilation, groups, caps), x, weight, bias)

    def plan_pool2d(self, op, x, kernel_size, stride, padding, dilation, output_size):
        """A pooling: op MAX_POOL or AVG_POOL with its window, or
        ADAPTIVE_AVG_POOL with output_size."""
        if op == pb.ADAPTIVE_AVG_POOL:
            return self._plan(lambda caps, x: _planner.plan_adaptive_avg_pool2d(
                x, output_size, caps), x)
        return self._plan(lambda caps, x: _planner.plan_pool2d(
            op, x, kernel_size, stride, padding, dilation, caps), x)

    def plan_loss(self, op, x, target, reduction):
        return self._plan(lambda caps, x, t: _planner.plan_loss(op, x, t, reduction, caps),
                          x, target)

    def plan_where(self, cond, x, x_number, y, y_number):
        """torch.where(cond, x or x_number, y or y_number)."""
        return self._plan(lambda caps, c, a, b: _planner.plan_where(
            c, a, x_number, b, y_number, caps), cond, x, y)

    def plan_cat(self, xs, dim):
        """torch.cat of the tensors whose infos are `xs`."""
        return self._plan(lambda caps, *metas: _planner.plan_cat(list(metas), dim, caps), *xs)

    def plan_clamp(self, x, lo, lo_number, hi, hi_number):
        """x.clamp(min, max): each bound a tensor's info or a number (or None)."""
        return self._plan(lambda caps, x, a, b: _planner.plan_clamp(
            x, a, lo_number, b, hi_number, caps), x, lo, hi)

    def plan_dropout(self, x, p, train):
        return self._plan(lambda caps, x: _planner.plan_dropout(x, p, train, caps), x)

    def plan_requires_grad(self, x, requires_grad):
        """requires_grad_: raises the planner's error; x keeps its Meta."""
        self._plan(lambda caps, x: _planner.check_requires_grad(x, requires_grad), x)

    def plan_detach(self, x):
        return self._plan(lambda caps, x: x, x)

    def plan_view(self, kind, x, *args):
        """kind: "reshape", "permute", "transpose", "narrow" or "select", with
        its arguments (_planner.plan_<kind>)."""
        planner = _VIEW_PLANNERS[kind]
        return self._plan(lambda caps, x: planner(x, *args), x)

    def plan_norm(self, op, x, weight, bias, running_mean, running_var, normalized_shape,
                  training):
        """F.batch_norm / F.layer_norm (op a wire NormOp): the tensors' infos, None where
        not given."""
        return self._plan(lambda caps, x, w, b, rm, rv: _planner.plan_norm(
            op, x, w, b, rm, rv, normalized_shape, training, caps),
            x, weight, bias, running_mean, running_var)

    def plan_backward(self, root, gradient):
        """root.backward(gradient): raises the planner's error; the root keeps its Meta."""
        self._plan(lambda caps, r, g: _planner.plan_backward(r, g), root, gradient)

    def plan_zero_grad(self, tensors):
        self._plan(lambda caps, *metas: _planner.plan_zero_grad(metas), *tensors)

    def plan_optimizer_step(self, kind, hyperparameters, params, state):
        """optimizer.step() of the parameters' and state tensors' infos (on any devices)."""
        n = len(params)
        self._plan(lambda caps, *metas: _planner.plan_optimizer_step(
            kind, hyperparameters, metas[:n], metas[n:]), *params, *state)

    def plan_in_place(self, op, target, other, number=None, alpha=None):
        """target (op)= other or `number` (alpha for AXPY_): raises the
        planner's error; the target's Meta stays as it is."""
        self._plan(lambda caps, t, o: _planner.plan_in_place(op, t, o, number, alpha, caps),
                   target, other)

    def _plan(self, plan, first, *others):
        """plan(caps, first's Meta, others' Metas) where all are known here."""
        if self._streaming() is None:
            return None
        metas = [_known(first)]
        caps = self._caps.get(metas[0].device) if metas[0] is not None else None
        if caps is None:
            return None
        for info in others:
            meta = _known(info) if info is not None else None
            if info is not None and meta is None:
                return None
            metas.append(meta)
        return plan(caps, *metas)

    def _send_carrying(self, stream, kind, request, result, pending):
        """Sends `request` (a message, or its bytes) with the dropped handles
        riding its release list."""
        taken = self.session._take_dropped()
        if taken:
            if isinstance(request, bytes):
                request += _wire.releases(kind, taken)
            else:
                request.release.extend(taken)
        try:
            stream.send(kind, request, result, pending)
        except BaseException:
            self.session._end_carry(taken, sent=False)
            raise
        # Ordered before anything sent later: a listing's drain sees it done.
        self.session._end_carry(taken, sent=True)

    def _check_operands(self, stream, op):
        if stream.has_dead():
            for operand in _capture._operands(op):
                error = stream.dead_error(operand.handle)
                if error is not None:
                    raise error

    def synchronize(self):
        if self._stream is not None and not self.session.closed:
            self._stream.drain()

    def create_data(self, dtype, shape, data, device, tag="", progress=False):
        nbytes = len(data)
        bar = _progress.bar(progress, nbytes, f"upload to {device or 'cpu'}")
        try:
            info = self._create_data(dtype, shape, data, device, tag, bar)
            if bar is not None:
                bar.update(nbytes - bar.n)
            return info
        finally:
            if bar is not None:
                bar.close()

    def _create_data(self, dtype, shape, data, device, tag, bar):
        region = self._region_for(len(data))
        if region is not None:
            with region.lock:
                if not region.closed:
                    region.data[:len(data)] = data
                    return region.upload(dtype, shape, device, tag)
        limits = self.session.limits
        inline_cap = INLINE_CREATE_BYTES
        if limits.max_inline_bytes:
            inline_cap = min(inline_cap, limits.max_inline_bytes)
        if len(data) <= inline_cap:
            stream = self._streaming()
            if stream is not None:
                return self._send_create(stream, _CREATE_REQUEST(
                    device=device, dtype=dtype.wire, shape=shape, data=data, tag=tag),
                    device, dtype.wire, shape)
            return self.session.call_encoded("Create", _CREATE_REQUEST(
                device=device, dtype=dtype.wire, shape=shape, data=data, tag=tag),
                mutating=True).tensor
        header = pb.UploadRequest.Header(device=device, dtype=dtype.wire,
                                         shape=list(shape), tag=tag)
        return self.session.upload(header, data, UPLOAD_CHUNK_BYTES,
                                   bar.update if bar is not None else None).tensor

    def upload_shared(self, region, offset, dtype, shape, device):
        """A user's zero-copy upload from `region` (Client.upload_shared): a
        unary call after the stream's commands, as every region transfer."""
        self._check_own(region)  # then the region's session is this one
        return region.upload(dtype, shape, device, offset=offset)

    def fetch_shared(self, handle, region, offset):
        """A user's zero-copy fetch of tensor `handle` into `region` at
        `offset` (Tensor.fetch_shared); its TensorInfo."""
        self._refuse_while_capturing("a fetch (fetch_shared)")
        self._check_own(region)
        return region.fetch(handle, offset)

    def _check_own(self, region):
        # As the C++ client: named here (the server would say only that it
        # does not know the region's id).
        if region.session_id != self.session.id:
            raise TensordError(grpc.StatusCode.INVALID_ARGUMENT,
                               f"shared memory region {region.name} belongs to another session")

    def _refuse_while_capturing(self, what):
        if self.recorder is not None:
            self.recorder.refuse(what)

    def create_fill(self, dtype, shape, fill, device):
        request = pb.CreateRequest(device=device, dtype=dtype.wire, shape=list(shape),
                                   fill=fill)
        stream = self._streaming()
        if stream is not None:
            # An arange without a shape: its length is the server's to compute.
            sized = bool(shape) or fill.kind != pb.Fill.ARANGE
            return self._send_create(stream, request, device, dtype.wire, shape, sized)
        return self.session.call("Create", request, mutating=True).tensor

    def _send_create(self, stream, request, device, dtype, shape, sized=True):
        """Sends a create (`request`: a pb.CreateRequest or its bytes) of a wire
        `dtype` and `shape` on `device`: its result planned (the request's own
        metadata) unless not `sized` or on a device this server lacks."""
        target = self._canonical(device)
        planned = (_planner.Meta(dtype, tuple(shape), target)
                   if target is not None and dtype and sized else None)
        return self._send(stream, "create", request, target, planned)

    def to(self, handle, device, copy=False):
        self._refuse_while_capturing("a move between devices (to/cuda/cpu)")
        stream = self._streaming()
        if stream is not None:
            target = self._canonical(device)
            if target is not None:
                error = stream.dead_error(handle)
                if error is not None:
                    raise error
                info = getattr(self.session.live(handle), "_info", None)
                if not copy and info is not None:
                    # x.to(its own device) is x, as the unary To answers.
                    where = getattr(info, "device_hint", None) or info.device
                    if where == target:
                        return info
                known = _known(info)
                planned = known._replace(device=target) if known is not None else None
                return self._send(stream, "to", pb.ToRequest(handle=handle, device=target),
                                  target, planned)
            # A device this server does not have: the unary call says so.
        return self.session.call("To", pb.ToRequest(
            handle=handle, device=device, copy=copy), mutating=True).tensor

    def run(self, op, wait=False, planned=None):
        """planned: the result's Meta (a plan_* method's), if planned."""
        if _grad_mode.no_grad_active():
            op.no_grad = True
        stream = self._streaming()
        if stream is not None:
            kind = op.WhichOneof("kind")
            return self._run_on(stream, kind, getattr(op, kind), op.no_grad, wait, planned,
                                None)
        result = self.session.call("Run", pb.RunRequest(op=op), mutating=True).tensor
        if self.recorder is not None:
            self.recorder.record(op, result)
        return result

    def run_args(self, kind, args, wait=False, planned=None, target=None):
        """run() of the pb.Op whose oneof field `kind` is `args`: a message,
        or its serialized bytes (a _wire encoder's; an in-place op's then
        names its `target` handle). On the stream the args are framed as
        they are (_wire.run_request): no pb.Op is built."""
        stream = self._streaming()
        if stream is not None:
            return self._run_on(stream, kind, args, _grad_mode.no_grad_active(), wait, planned,
                                target)
        if self.recorder is not None:  # the recorder keeps each op
            return self.run(_op_of(kind, args), wait, planned)
        return self.session.call_encoded(
            "Run", _wire.run_request(kind, args, _grad_mode.no_grad_active()),
            mutating=True).tensor

    def _run_on(self, stream, kind, args, no_grad, wait, planned, target):
        if stream.has_dead():
            self._check_operands(stream, _op_of(kind, args))
        request = _wire.run_request(kind, args, no_grad)
        field = _IN_PLACE.get(kind)
        if field is None:
            pending = self._send(stream, "run", request, planned=planned)
        else:
            handle = target
            if handle is None:
                if isinstance(args, bytes):
                    args = getattr(_op_of(kind, args), kind)
                named = getattr(args, field)
                handle = (named[0] if len(named) else pb.Operand()).handle \
                    if field in ("tensors", "params") else named.handle
            live = self.session.live(handle)
            fallback = getattr(live, "_info", None)
            # The target keeps its shape, dtype and device.
            pending = PendingInfo(stream, handle, fallback=fallback,
                                  planned=_known(fallback))
            self._send_carrying(stream, "run", request, 0, pending)
        if wait:
            pending.resolved()
        return pending

    def run_program(self, request):
        """The kept TensorInfos of a RunProgram: a command on the stream
        when one is open (in order with the commands before it, no drain),
        else the unary call."""
        stream = self._streaming()
        if stream is None:
            return list(self.session.call("RunProgram", request, mutating=True).kept)
        reply = _Reply()
        self._send_carrying(stream, "run_program", request, 0, reply)
        return list(stream.wait(reply).kept)

    def collective(self, request):
        """The result TensorInfos of a Collective (tensord.distributed): a
        command on the stream when one is open (in order with the commands
        before it, no drain), else the unary call."""
        self._refuse_while_capturing("a collective (tensord.distributed)")
        stream = self._streaming()
        if stream is None:
            return list(self.session.call("Collective", request, mutating=True).tensors)
        reply = _Reply()
        self._send_carrying(stream, "collective", request, 0, reply)
        return list(stream.wait(reply).kept)

    def execute(self, ops, keep):
        if _grad_mode.no_grad_active():
            for op in ops:
                op.no_grad = True
        return list(self.session.call("Execute", pb.ExecuteRequest(
            ops=ops, keep=keep), mutating=True).kept)

    def fetch(self, info, progress=False):
        self._refuse_while_capturing("a fetch (numpy, item, repr, bool)")
        nbytes = info.nbytes
        if nbytes == 0:
            return b""
        bar = _progress.bar(progress, nbytes, f"fetch tensor {info.handle}")
        try:
            data = self._fetch(info, nbytes, bar)
            if bar is not None:
                bar.update(nbytes - bar.n)
            return data
        finally:
            if bar is not None:
                bar.close()

    def read_ahead(self, info):
        """The bytes of the tensor `info` describes, when `info` is a result
        whose reply has not come: a read goes on the stream right behind
        it, with if_small_on_host, so the reply and the bytes come on one
        round trip. None when the reply is in already (the usual fetch is
        as quick), when nothing is pipelined, with shared memory on (a
        same-host client: larger results go through the region), or when
        the server sent no bytes (over one reply, or not on a host device)."""
        if (not isinstance(info, PendingInfo) or info._info is not None
                or info._error is not None or self.region is not None):
            return None
        stream = self._streaming()
        if stream is None:
            return None
        chunk = stream.request("read", _READ_REQUEST(handle=info.handle,
                                                     if_small_on_host=True)).chunk
        nbytes = chunk.tensor.nbytes
        data = chunk.data  # a copy each time it is read: once
        if nbytes == 0 or len(data) != nbytes:
            return None
        _check_chunk(info.handle, chunk, data, 0)
        return data

    def _fetch(self, info, nbytes, bar):
        region = self._region_for(nbytes)
        if region is not None:
            with region.lock:
                if not region.closed:
                    written = region.fetch(info.handle).nbytes
                    if written != nbytes:
                        raise TensordError(grpc.StatusCode.DATA_LOSS,
                                           f"tensor {info.handle}: the server wrote {written} "
                                           f"of {nbytes} bytes to shared memory")
                    return bytearray(region.data[:nbytes])
        if nbytes <= self.session.limits.max_read_bytes:
            stream = self._streaming()
            if stream is not None:
                chunk = stream.request("read", _READ_REQUEST(handle=info.handle)).chunk
            else:
                chunk = self.session.call_encoded("Read", _READ_REQUEST(handle=info.handle))
            data = chunk.data  # a copy each time it is read: once
            _check_chunk(info.handle, chunk, data, 0)
            if len(data) != nbytes:
                raise TensordError(grpc.StatusCode.DATA_LOSS,
                                   f"tensor {info.handle}: read {len(data)} "
                                   f"of {nbytes} bytes")
            return data
        # One buffer of the tensor's size, each chunk copied into it once;
        # the chunks' CRC-32s are computed on the checker thread meanwhile
        # (_wire.crc32_later), all checked before the bytes are returned.
        out = bytearray(nbytes)
        view = memoryview(out)
        received = 0
        checks = []  # (chunk, its offset, its CRC-32's future)
        for chunk, data in self.session.fetch(info.handle):
            if chunk.offset != received:
                _check_chunk(info.handle, chunk, data, received)  # raises
            checks.append((chunk, received, _wire.crc32_later(data)))
            end = received + len(data)
            if end <= nbytes:
                view[received:end] = data
            received = end
            if bar is not None:
                bar.update(len(data))
        for chunk, offset, crc in checks:
            _check_crc(info.handle, chunk, crc.result(), offset)
        if received != nbytes:
            raise TensordError(grpc.StatusCode.DATA_LOSS,
                               f"tensor {info.handle}: fetched {received} of {nbytes} bytes")
        return out


_VIEW_PLANNERS = {"reshape": _planner.plan_reshape, "permute": _planner.plan_permute,
                  "transpose": _planner.plan_transpose, "narrow": _planner.plan_narrow,
                  "select": _planner.plan_select}


def _op_of(kind, args):
    """The pb.Op whose oneof field `kind` is `args` (a message or its bytes)."""
    op = pb.Op()
    field = getattr(op, kind)
    field.SetInParent()
    if isinstance(args, bytes):
        field.MergeFromString(args)
    else:
        field.CopyFrom(args)
    return op


def _known(info):
    """The _planner.Meta of `info` (a pb.TensorInfo or PendingInfo) where
    it is known without waiting: planned (a planned result's metadata is
    its answer's), or answered; else None."""
    if info is None:
        return None
    if isinstance(info, PendingInfo):
        if info.planned is not None:
            return info.planned
        if info._info is None:
            return None
        info = info._info
    if not info.dtype:
        return None
    return _planner.Meta(info.dtype, tuple(info.shape), info.device)


def _check_chunk(handle, chunk, data, expected_offset):
    """Raises DATA_LOSS unless `chunk` (whose bytes are `data`) is at
    `expected_offset` with a matching CRC-32."""
    _check_crc(handle, chunk, _wire.crc32(data), expected_offset)


def _check_crc(handle, chunk, crc, expected_offset):
    """Raises DATA_LOSS unless `chunk` is at `expected_offset` and its
    bytes' CRC-32 `crc` is the one it was sent with."""
    if chunk.offset != expected_offset or crc != chunk.crc32:
        raise TensordError(grpc.StatusCode.DATA_LOSS,
                           f"tensor {handle}: a corrupt chunk at offset {chunk.offset} "
                           f"(expected offset {expected_offset}, CRC-32 "
                           f"{crc:08x}, sent {chunk.crc32:08x})")
