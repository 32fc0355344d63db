"""A tensord session: its lease, its releases and the one call path of every RPC.

Contract:
  * Session(channel, metadata, client_name, ttl_ms, attach) opens a session
    (or re-attaches to the session id `attach`, which must still be within
    its lease) and starts a daemon thread that renews the lease (KeepAlive
    when no call has renewed it for a third of the lease) and sends the
    releases no request carried.
  * call(method, request, mutating=...) performs one unary RPC (and
    call_encoded(method, body, mutating=...) one whose request is given as
    its serialized fields but session and release: _wire's bytes): it fills in
    the session id, lets the handles of dropped tensors ride the request's
    `release` list when it has one, gives a mutation a fresh request id
    (metadata `tensord-request-id`) and retries it, and reads, on UNAVAILABLE
    a few times (not when the server is shutting down); out of memory while
    releases of ours are in flight, it waits for them and tries once more.
    Every failure is raised as TensordError (_errors.py). Every reply's
    `tensord-instance` is compared with the first: a change means the server
    restarted and the call raises FAILED_PRECONDITION "server restarted".
    upload()/fetch() are the streaming RPCs on the same rules (an upload
    retried with its request id, a fetch resumed at the bytes it has; upload's
    on_chunk(n) hears of each chunk handed to gRPC).
  * start_stream() opens the session's ordered command stream (_stream.py,
    which reconnects a dropped connection itself) as `stream`; from then
    on every call(), upload() and fetch() first drains it (a sync point: a
    failed command is raised there), and the releases no request carried go
    on it as release commands.
  * drop(handle) never blocks and is safe from __del__ and from any thread
    (a deque append and a SimpleQueue put): the handle rides the next
    Create/To/Run/Execute/Release, or goes in a Release of its own after
    RELEASE_FLUSH_DELAY_S, whichever comes first, like the C++ client.
    wait_for_releases() sends what is queued and waits until every release
    sent has been answered (listings call it, so they never show tensors the
    program already dropped).
  * close() (also run when the Session is garbage collected, and at exit)
    stops the thread, cancels the command stream and closes the remote session, freeing its tensors;
    errors are ignored: there is nobody left to tell.
Thread-safety: every method may be called from any thread.
"""
import collections
import itertools
import queue
import secrets
import threading
import time
import weakref

import grpc

from tensord import _wire
from tensord._channel import backoff
from tensord._errors import TensordError, from_rpc_error
from tensord.v1 import tensord_pb2 as pb
from tensord.v1 import tensord_pb2_grpc as pb_grpc

REQUEST_ID_KEY = "tensord-request-id"
INSTANCE_KEY = "tensord-instance"
RELEASE_FLUSH_DELAY_S = 0.002
RETRY_ATTEMPTS = 4
RETRY_BACKOFF_S = 0.05
CLOSE_TIMEOUT_S = 2.0
_STOP = object()


def _instance_of(metadata):
    for key, value in metadata or ():
        if key == INSTANCE_KEY:
            return value
    return None


class Session:
    def __init__(self, channel, metadata=(), client_name="tensord-python",
                 ttl_ms=0, attach=None):
        self._channel = channel
        self._stub = pb_grpc.TensorServiceStub(channel)
        # Upload and Fetch with their messages as bytes (_wire.py writes and
        # reads them in place).
        self._upload_raw = channel.stream_unary(
            "/tensord.v1.TensorService/Upload", request_serializer=None,
            response_deserializer=pb.TensorResponse.FromString)
        self._fetch_raw = channel.unary_stream(
            "/tensord.v1.TensorService/Fetch",
            request_serializer=pb.FetchRequest.SerializeToString,
            response_deserializer=None)
        self._metadata = tuple(metadata)
        self.instance = None
        if attach:
            reply = self._raw_call("KeepAlive", pb.KeepAliveRequest(session=attach))
            self.id, self.ttl_ms = attach, reply.ttl_ms
            self.limits = self._raw_call("GetLimits", pb.GetLimitsRequest())
        else:
            reply = self._raw_call("OpenSession", pb.OpenSessionRequest(
                client_name=client_name, ttl_ms=ttl_ms))
            self.id, self.ttl_ms, self.limits = reply.session, reply.ttl_ms, reply.limits
        self._encoded_rpcs = {}  # method -> _EncodedRpc (call_encoded)
        self._session_field = _wire.length_prefixed(self.id.encode())
        self._request_prefix = secrets.token_hex(6) + "-"
        self._request_counter = itertools.count(1)
        self._max_release = min(self.limits.max_release_handles, 1024)
        self._dropped = collections.deque()
        self._wake = queue.SimpleQueue()
        self._cond = threading.Condition()
        self._in_flight = 0
        self._last_contact = time.monotonic()
        self._live = weakref.WeakValueDictionary()
        self._live_lock = threading.Lock()
        self.closed = False
        self.stream = None  # a _stream.CommandStream once start_stream() ran
        self._streams = []  # the finalizer's view of it
        self._finalizer = weakref.finalize(
            self, _close_remote, self._stub, self.id, self._metadata, self._wake,
            self._streams)
        self._thread = threading.Thread(
            target=_background, name="tensord-session",
            args=(weakref.ref(self), self._wake, self.ttl_ms / 3000.0), daemon=True)
        self._thread.start()

    # --- calls -------------------------------------------------------------

    def start_stream(self):
        """Opens the session's command stream (_stream.py); unary calls drain it."""
        from tensord._stream import CommandStream
        self.stream = CommandStream(self._channel, self.id, self._metadata, self.instance)
        self._streams.append(self.stream)
        return self.stream

    def _drain_stream(self):
        stream = self.stream
        if stream is not None and not self.closed:
            stream.drain()

    def _raw_call(self, method, request, metadata=()):
        try:
            response, call = getattr(self._stub, method).with_call(
                request, metadata=self._metadata + tuple(metadata))
        except grpc.RpcError as e:
            raise from_rpc_error(e) from None
        self._check_instance(call.trailing_metadata())
        return response

    def _check_instance(self, trailing):
        instance = _instance_of(trailing)
        if instance is None:
            return
        if self.instance is None:
            self.instance = instance
        elif instance != self.instance:
            raise TensordError(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"server restarted (instance {self.instance} \u2192 {instance}): "
                "this session's tensors are gone; connect again")

    def next_request_id(self):
        return self._request_prefix + str(next(self._request_counter))

    def call(self, method, request, mutating=False):
        """The reply of unary RPC `method` (a TensorService method name)."""
        fields = request.DESCRIPTOR.fields_by_name
        if "session" in fields:
            request.session = self.id
        self._before_call(method)
        taken = []
        if "release" in fields:
            taken = self._take_dropped()
            request.release.extend(taken)
        return self._invoke(getattr(self._stub, method), request, taken, mutating)

    def call_encoded(self, method, body, mutating=False):
        """call() of a request given as its serialized fields but `session`
        and `release` (a _wire encoder's bytes): the session and the
        dropped handles are written around them, no protobuf object made."""
        rpc = self._encoded_rpcs.get(method)
        if rpc is None:
            rpc = self._encoded_rpcs[method] = _EncodedRpc(self._channel, method)
        self._before_call(method)
        taken = self._take_dropped() if rpc.releases is not None else []
        request = b"".join((rpc.session_key, self._session_field, body,
                            rpc.releases(taken) if taken else b""))
        return self._invoke(rpc.call, request, taken, mutating)

    def _before_call(self, method):
        if method in ("ListTensors", "ListDevices", "GetStats"):
            self.wait_for_releases()
        self._drain_stream()  # in order after every command sent before

    def _invoke(self, rpc, request, taken, mutating):
        metadata = ((REQUEST_ID_KEY, self.next_request_id()),) if mutating else ()
        waited = False
        attempt = 0
        while True:
            try:
                response, call = rpc.with_call(request, metadata=self._metadata + metadata)
            except grpc.RpcError as e:
                self._check_instance(e.trailing_metadata())
                if (mutating and not waited
                        and e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
                        and self._releases_pending()):
                    waited = True
                    self.wait_for_releases()
                    continue
                if self._retryable(e, attempt):
                    self._backoff(attempt)
                    attempt += 1
                    continue
                self._end_carry(taken, sent=False)
                raise from_rpc_error(e) from None
            self._last_contact = time.monotonic()
            self._end_carry(taken, sent=True)
            self._check_instance(call.trailing_metadata())
            return response

    def _retryable(self, error, attempt):
        """Whether a failed call (grpc.RpcError) should be made again: a
        dropped connection, not a server that is shutting down, within
        RETRY_ATTEMPTS (a restarted server raises here instead)."""
        self._check_instance(error.trailing_metadata())
        return (error.code() == grpc.StatusCode.UNAVAILABLE and attempt + 1 < RETRY_ATTEMPTS
                and "shutting down" not in (error.details() or ""))

    def _backoff(self, attempt):
        """Waits before retry number attempt + 1 (exponential backoff; the
        channel watched meanwhile, _channel.backoff)."""
        backoff(self._channel, RETRY_BACKOFF_S * 2 ** attempt)

    def upload(self, header, data, chunk_bytes, on_chunk=None):
        """Upload's reply for `header` (an UploadRequest.Header) and `data`;
        on_chunk(n), when given, as each chunk of n bytes is handed to gRPC
        the first time (a retry, with the same request id, says nothing)."""
        header.session = self.id
        self._drain_stream()
        view = memoryview(data)
        reported = [0]  # bytes on_chunk has heard of

        head = header.SerializeToString()

        def messages():  # serialized here: each chunk copied once (_wire.py)
            for offset in range(0, max(len(view), 1), chunk_bytes):
                chunk = view[offset:offset + chunk_bytes]
                yield _wire.upload_message(head if offset == 0 else None, chunk)
                end = offset + len(chunk)
                if on_chunk is not None and end > reported[0]:
                    on_chunk(end - reported[0])
                    reported[0] = end

        metadata = ((REQUEST_ID_KEY, self.next_request_id()),)
        attempt = 0
        while True:
            try:
                response, call = self._upload_raw.with_call(
                    messages(), metadata=self._metadata + metadata)
                break
            except grpc.RpcError as e:
                if not self._retryable(e, attempt):
                    raise from_rpc_error(e) from None
            self._backoff(attempt)
            attempt += 1
        self._last_contact = time.monotonic()
        self._check_instance(call.trailing_metadata())
        return response

    def fetch(self, handle, offset=0):
        """Fetch's chunks of tensor `handle` from byte `offset`, in order, as
        (chunk, its data) pairs: _wire.FetchChunkView's, whose data is a
        memoryview of the message grpcio received (no copy). A chunk that
        does not parse is DATA_LOSS. A dropped connection resumes where it
        stopped."""
        self._drain_stream()
        attempt = 0
        while True:
            request = pb.FetchRequest(session=self.id, handle=handle, offset=offset)
            try:
                for raw in self._fetch_raw(request, metadata=self._metadata):
                    try:
                        chunk = _wire.parse_fetch_chunk(raw)
                    except ValueError as e:
                        raise TensordError(grpc.StatusCode.DATA_LOSS,
                                           f"tensor {handle}: {e} at offset {offset}") from None
                    data = chunk.data
                    offset += len(data)
                    yield chunk, data
                break
            except grpc.RpcError as e:
                if not self._retryable(e, attempt):
                    raise from_rpc_error(e) from None
            self._backoff(attempt)
            attempt += 1
        self._last_contact = time.monotonic()

    # --- releases ----------------------------------------------------------

    def drop(self, handle):
        """Releases `handle` soon, without waiting (safe in __del__)."""
        if not self.closed:
            self._dropped.append(handle)
            self._wake.put(None)

    def _take_dropped(self):
        with self._cond:
            taken = []
            limit = max(self._max_release, 1)
            while self._dropped and len(taken) < limit:
                taken.append(self._dropped.popleft())
            if taken:
                self._in_flight += 1
            return taken

    def _end_carry(self, taken, sent):
        if not taken:
            return
        with self._cond:
            if not sent:
                self._dropped.extendleft(reversed(taken))
            self._in_flight -= 1
            self._cond.notify_all()

    def _releases_pending(self):
        with self._cond:
            return bool(self._dropped) or self._in_flight > 0

    def flush_releases(self):
        """Sends every queued release now; failures leave them queued."""
        while not self.closed:
            taken = self._take_dropped()
            if not taken:
                return
            try:
                if self.stream is not None:  # in order with the commands before
                    self.stream.send("release", pb.ReleaseRequest(release=taken))
                elif self._max_release == 0:  # a server without release lists
                    for handle in taken:
                        self._raw_call("Release", pb.ReleaseRequest(session=self.id, handle=handle))
                else:
                    self._raw_call("Release", pb.ReleaseRequest(session=self.id, release=taken))
            except TensordError:
                self._end_carry(taken, sent=False)
                return
            self._end_carry(taken, sent=True)

    def wait_for_releases(self):
        """Returns once every handle dropped so far is released on the
        server, so a listing after it does not show them. A flush that a
        dropped connection failed is tried again, as calls are (a release
        list is idempotent on the server: released if present)."""
        for attempt in range(RETRY_ATTEMPTS):
            self.flush_releases()
            with self._cond:
                self._cond.wait_for(lambda: self._in_flight == 0)
                if not self._dropped or self.closed:
                    return
            self._backoff(attempt)

    def keepalive(self):
        if time.monotonic() - self._last_contact < self.ttl_ms / 3000.0:
            return
        try:
            self._raw_call("KeepAlive", pb.KeepAliveRequest(session=self.id))
            self._last_contact = time.monotonic()
        except TensordError:
            pass  # the next call reports the session's fate

    # --- the tensors this process holds ------------------------------------

    def live(self, handle):
        """The live Tensor object of `handle`, or None."""
        with self._live_lock:
            return self._live.get(handle)

    def adopt(self, info, make):
        """The live object of info.handle, its metadata updated to `info`;
        else make(), registered as that handle's object."""
        with self._live_lock:
            tensor = self._live.get(info.handle)
            if tensor is None:
                tensor = make()
                self._live[info.handle] = tensor
            else:
                tensor._info = info
            return tensor

    def close(self):
        self.closed = True
        self._finalizer()


class _EncodedRpc:
    """A unary method called with its request's bytes: the multicallable,
    the key of the request's `session` field and the writer of its
    `release` list (None when it has none)."""

    def __init__(self, channel, method):
        rpc = pb.DESCRIPTOR.services_by_name["TensorService"].methods_by_name[method]
        request, response = rpc.input_type, rpc.output_type
        self.call = channel.unary_unary(
            f"/tensord.v1.TensorService/{method}", request_serializer=None,
            response_deserializer=getattr(pb, response.name).FromString)
        self.session_key = _wire.length_key(request.fields_by_name["session"])
        release = request.fields_by_name.get("release")
        self.releases = _wire.field_writer(release) if release is not None else None


def _close_remote(stub, session_id, metadata, wake, streams):
    wake.put(_STOP)
    for stream in streams:
        stream.close()
    try:
        stub.CloseSession(pb.CloseSessionRequest(session=session_id),
                          metadata=metadata, timeout=CLOSE_TIMEOUT_S)
    except grpc.RpcError:
        pass


def _background(session_ref, wake, keepalive_period_s):
    """The session thread: flushes dropped handles, keeps the lease."""
    timeout = keepalive_period_s if keepalive_period_s > 0 else None
    while True:
        try:
            woke = wake.get(timeout=timeout)
        except queue.Empty:
            woke = None
        else:
            if woke is _STOP:
                return
            time.sleep(RELEASE_FLUSH_DELAY_S)  # let a request carry them
            while True:  # absorb the wake-ups of the handles flushed now
                try:
                    if wake.get_nowait() is _STOP:
                        return
                except queue.Empty:
                    break
        session = session_ref()
        if session is None or session.closed:
            return
        session.flush_releases()
        if timeout is not None:
            session.keepalive()
        del session
