"""The client's side of the session's ordered command stream (the Stream RPC).

Contract (tensord.proto, "The session's ordered command stream"):
  * CommandStream(channel, session_id, metadata) opens one bidirectional
    Stream for the session (a random stream id). send(kind, request,
    result=..., pending=...) numbers a command (seq 1, 2, ...), queues it
    (its wire bytes: _wire.stream_command, no protobuf object per command)
    and returns at once; a writer (grpcio's request-iterator thread) sends
    what is queued, up to MAX_COMMANDS_PER_MESSAGE per message (batched
    while earlier commands await their replies: BATCH_COMMANDS,
    BATCH_DELAY_S), each message acknowledging the replies received so far
    (received_through). The replies are read, in seq order, by the thread
    that waits for one (wait, drain) when no other thread is reading, so a
    reply reaches its waiter with no hop through a thread of ours; a keeper
    thread reads them when commands are in flight and no waiter has read
    for KEEPER_DELAY_S, and for a send waiting for room. new_handle() names
    a result: the client's range, from a random point of [2^63, 2^63 + 2^62).
  * A PendingInfo stands for the TensorInfo a command's reply will carry:
    `handle` is known at once; reading any other field waits for the reply
    (and raises as wait() does, or why the tensor was never made).
  * Sync points: wait(pending) for one reply, drain() for every command sent
    so far. A failed command stops the server's stream until cleared; its
    failure is raised (once) at the first sync point at or after it as
    TensordError with the server's code and message, its `.command` naming
    it ("command <seq> (<kind>[ <op>], result <handle>)", also a note of
    the traceback), and cleared then (a clear_error is queued) so later
    commands run again. Tensors whose command failed or was
    refused are dead: dead_error(handle) says why.
  * At most WINDOW commands are without a reply; send() waits beyond that,
    and raises RESOURCE_EXHAUSTED when the window stays full FULL_WAIT_S.
  * A dropped connection (UNAVAILABLE or CANCELLED, not by close()) is
    reconnected, as the C++ client does: up to MAX_RECONNECTS tries in a
    row, RECONNECT_BACKOFF_S doubling (at most MAX_RECONNECT_BACKOFF_S:
    about 3.6 s in all; the channel watched meanwhile, _channel.backoff),
    each a new Stream call naming the
    same stream id with `received_through`; the server replays the replies
    it kept and skips the seqs it ran, and every command without a reply is
    sent again, so nothing is lost or run twice. `reconnects` counts them.
    Another server instance answering (trailing `tensord-instance`
    changed: the server restarted) is FAILED_PRECONDITION "server
    restarted", not a reconnect. A broken stream (out of tries, the session
    gone, the server ended it) stays broken: every later send and wait
    raises its error.
  * close() cancels the stream; commands without a reply may not run.
Thread-safety: every method may be called from any thread.
"""
import collections
import secrets
import threading
import time

import grpc

from tensord import _wire
from tensord._channel import backoff
from tensord._errors import TensordError, from_rpc_error, make_error
from tensord.v1 import tensord_pb2 as pb

STREAM_METHOD = "/tensord.v1.TensorService/Stream"
MAX_COMMANDS_PER_MESSAGE = 1024  # Limits.max_stream_commands
WINDOW = 4096
ACK_EVERY = 1024  # replies received before an acknowledgement goes alone
# Nagle for commands, as the C++ client: on an idle stream a command goes at
# once; while sent commands await their replies, new ones wait for company
# until a sync point waits, the replies come, BATCH_COMMANDS are queued or
# BATCH_DELAY_S has passed since the first, so they share one message.
BATCH_COMMANDS = 256
BATCH_DELAY_S = 0.002
FULL_WAIT_S = 60.0
# The keeper thread reads the replies once no waiter has for KEEPER_DELAY_S
# while commands are in flight; it sleeps once the stream has had nothing in
# flight for KEEPER_IDLE_S.
KEEPER_DELAY_S = 0.005
KEEPER_IDLE_S = 1.0
# Tries in a row (a reply read resets the count), RECONNECT_BACKOFF_S before
# the first, doubling up to MAX_RECONNECT_BACKOFF_S: about 3.6 s in all, past
# gRPC's own reconnect backoff (1 s, jittered by 20%), during which a channel
# whose connection attempt failed fails calls at once.
MAX_RECONNECTS = 8
RECONNECT_BACKOFF_S = 0.025
MAX_RECONNECT_BACKOFF_S = 1.0
INSTANCE_KEY = "tensord-instance"
_TRANSIENT = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED)
_CODES = {code.value[0]: code for code in grpc.StatusCode}
_NOT_STOPPING = ("release", "sync", "clear_error")


def describe(command):
    """"command 12 (run binary, result 9223...)": a command as errors name it."""
    kind = command.WhichOneof("kind") or "command"
    if kind == "run":
        op = command.run.op.WhichOneof("kind")
        if op:
            kind += " " + op
    result = f", result {command.result}" if command.result else ""
    return f"command {command.seq} ({kind}{result})"


# The TensorInfo fields a planned result answers without its reply.
_PLANNED_FIELDS = frozenset(("shape", "dtype", "device"))


class PendingInfo:
    """The pb.TensorInfo of a command's result, once its reply comes.

    `planned` is the result's _planner.Meta where the client knows it
    without the reply (a create, a move, an op it planned at the line):
    shape, dtype and device then read from it and never wait, until the
    command is known to have failed (or not to have run): then they raise
    its "was never made" error, as every other use does."""

    __slots__ = ("handle", "device_hint", "planned", "_stream", "_seq", "_info", "_error",
                 "_fallback")

    def __init__(self, stream, handle, device_hint=None, fallback=None, planned=None):
        self.handle = handle
        self.device_hint = device_hint  # the device asked for, if the command says
        self.planned = planned
        self._stream = stream
        self._seq = 0
        self._info = None
        self._error = None
        self._fallback = fallback  # an in-place op's target: its metadata before

    def resolved(self):
        """The pb.TensorInfo (waiting for the reply); raises if never made."""
        info = self._info
        if info is None:
            info = self._stream.wait(self)
        return info

    def __getattr__(self, name):  # every field but handle
        planned = self.planned
        if (planned is not None and self._info is None and self._error is None
                and name in _PLANNED_FIELDS):
            return getattr(planned, name)
        return getattr(self.resolved(), name)

    def __repr__(self):
        state = "pending" if self._info is None and self._error is None else "answered"
        return f"<PendingInfo handle={self.handle} seq={self._seq} {state}>"


class _Reply:
    """The reply of a read or sync command, once it comes."""
    __slots__ = ("_seq", "_info", "_error", "_fallback")

    def __init__(self):
        self._seq = 0
        self._info = None  # the CommandReply
        self._error = None
        self._fallback = None


def _never_made(handle, error):
    """The error of using tensor `handle`, whose command failed with `error`."""
    why = f"{error.command} failed: {error.details}" if error.command else error.details
    return TensordError(error.code, f"tensor {handle} was never made: {why}")


class CommandStream:
    def __init__(self, channel, session_id, metadata=(), instance=None):
        lock = threading.Lock()
        self._lock = lock
        self._cond = threading.Condition(lock)  # replies taken, reading ended, a break
        self._writer_cv = threading.Condition(lock)
        self._keeper_cv = threading.Condition(lock)
        self._outbox = collections.deque()  # framed commands, not yet written
        # seq -> (framed command, kind, result, pending or None): no reply yet
        self._in_flight = {}
        self._next_seq = 0
        self._next_handle = (1 << 63) | (secrets.randbits(64) >> 2)
        self._received_through = 0
        self._acked = 0
        self._ack_due = False
        self._failure = None  # (seq, TensordError): the first not yet reported
        self._dead = {}  # handle -> TensordError
        self._broken = None
        self._closing = False
        self._flush = False  # a sync point waits: send what is queued now
        self._first_queued = 0.0
        self._reading = False  # a thread is reading the call (one at a time)
        self._waiters = 0  # threads in wait() or drain(): they read themselves
        self._full_waiters = 0  # sends waiting for room: the keeper reads for them
        self._quiet_since = 0.0  # when the replies were last read by a waiter
        self._keeper_idle = False  # the keeper sleeps until a command goes in flight
        self._tries = 0  # reconnects in a row (a reply read resets the count)
        self._session_id = session_id
        self._stream_id = secrets.randbits(63) + 1
        # Commands go as wire bytes (_wire.stream_command); replies are parsed.
        self._rpc = channel.stream_stream(
            STREAM_METHOD, request_serializer=None,
            response_deserializer=pb.StreamResponse.FromString)
        self._channel = channel  # watched while reconnects wait
        self._metadata = tuple(metadata)
        self._instance = instance  # the server instance the session lives on
        self.reconnects = 0  # connections made again after a drop
        self._connection = 0  # which connection the writer feeds
        self._call = None
        with lock:
            self._connect_locked()
        self._keeper = threading.Thread(target=self._keep, name="tensord-stream", daemon=True)
        self._keeper.start()

    # --- sending -------------------------------------------------------------

    def new_handle(self):
        with self._lock:
            handle = self._next_handle
            self._next_handle += 1
            return handle

    def send(self, kind, request, result=0, pending=None, flush=False):
        """Numbers and queues a command (`kind` its oneof field); returns its seq."""
        with self._lock:
            if len(self._in_flight) >= WINDOW and self._broken is None:
                self._wait_for_room_locked()
            if self._broken is not None:
                raise self._broken
            return self._queue_locked(kind, request, result, pending)

    def _wait_for_room_locked(self):
        self._flush_locked()
        self._full_waiters += 1
        self._keeper_cv.notify()
        try:
            if not self._cond.wait_for(
                    lambda: self._broken is not None or len(self._in_flight) < WINDOW,
                    FULL_WAIT_S):
                raise TensordError(
                    grpc.StatusCode.RESOURCE_EXHAUSTED,
                    f"{len(self._in_flight)} commands have waited for the server's "
                    f"answers for {FULL_WAIT_S:.0f} s: the most the client keeps in "
                    f"flight on its command stream is {WINDOW}")
        finally:
            self._full_waiters -= 1

    def _queue_locked(self, kind, request, result=0, pending=None):
        self._next_seq += 1
        seq = self._next_seq
        framed = _wire.stream_command(seq, result, kind, request)
        if pending is not None:
            pending._seq = seq
        if not self._in_flight:
            self._quiet_since = time.monotonic()
            if self._keeper_idle:
                self._keeper_cv.notify()
        self._in_flight[seq] = (framed, kind, result, pending)
        self._outbox.append(framed)
        if len(self._outbox) == 1:
            self._first_queued = time.monotonic()
            self._writer_cv.notify()
        elif len(self._outbox) == BATCH_COMMANDS:
            self._writer_cv.notify()
        return seq

    def _flush_locked(self):
        if self._outbox and not self._flush:
            self._flush = True
            self._writer_cv.notify()

    def _connect_locked(self):
        """A new Stream call; its first message opens (or takes over) the
        stream, and everything without a reply goes again (the server skips
        the seqs it ran and replays their replies)."""
        self._connection += 1
        self._outbox = collections.deque(sent[0] for sent in self._in_flight.values())
        if self._outbox:
            self._first_queued = time.monotonic()
        self._call = self._rpc(self._requests(self._connection), metadata=self._metadata)
        self._writer_cv.notify_all()

    def _requests(self, connection):
        """The messages of one Stream call (run on grpcio's writer thread)."""
        first = True
        while True:
            with self._lock:
                self._writer_cv.wait_for(lambda: self._outbox or self._ack_due or self._closing
                                         or self._broken is not None or first
                                         or self._connection != connection)
                # An idle stream sends at once; while sent commands await their
                # replies, new ones wait for company (the replies flush too).
                if (not first and not self._ack_due
                        and len(self._in_flight) > len(self._outbox)):
                    self._writer_cv.wait_for(
                        lambda: self._flush or len(self._outbox) >= BATCH_COMMANDS
                        or self._closing or self._broken is not None
                        or self._connection != connection,
                        self._first_queued + BATCH_DELAY_S - time.monotonic())
                if (self._closing or self._broken is not None
                        or self._connection != connection):
                    return
                self._flush = False
                opened = None
                if first:
                    opened = pb.StreamOpen(session=self._session_id,
                                           stream=self._stream_id).SerializeToString()
                    first = False
                outbox = self._outbox
                commands = [outbox.popleft()
                            for _ in range(min(len(outbox), MAX_COMMANDS_PER_MESSAGE))]
                received = self._acked = self._received_through
                self._ack_due = False
                if outbox:
                    self._first_queued = time.monotonic()
            yield _wire.stream_request(opened, commands, received)

    # --- receiving -----------------------------------------------------------

    def _await_locked(self, done):
        """Returns once done() holds or the stream broke. The waiting thread
        reads the replies itself when no other thread is reading: a reply
        reaches its waiter without a hop through another thread."""
        self._waiters += 1
        try:
            while not done() and self._broken is None:
                if not self._reading and self._in_flight:
                    self._read_locked(waiter=True)
                else:
                    self._cond.wait()
        finally:
            self._waiters -= 1

    def _keep(self):
        """The keeper thread: reads the replies when no waiter has for
        KEEPER_DELAY_S while commands are in flight (a program that runs ahead
        without syncing, a send waiting for room), so acknowledgements flow
        and the server's kept replies stay few."""
        with self._lock:
            while not self._closing and self._broken is None:
                if not self._reading and self._in_flight and (
                        self._full_waiters or (not self._waiters and time.monotonic()
                                               - self._quiet_since >= KEEPER_DELAY_S)):
                    self._read_locked(waiter=False)
                elif (not self._in_flight
                      and time.monotonic() - self._quiet_since >= KEEPER_IDLE_S):
                    self._keeper_idle = True
                    self._keeper_cv.wait()
                    self._keeper_idle = False
                else:
                    self._keeper_cv.wait(KEEPER_DELAY_S)

    def _read_locked(self, waiter):
        """Reads the call's next response (the lock released meanwhile) and
        takes its replies; a call that failed is reconnected or the stream
        broken. The lock is held on entry and on return."""
        self._reading = True
        call = self._call
        try:
            response = failure = None
            self._lock.release()
            try:
                response = next(call)
            except StopIteration:
                failure = TensordError(grpc.StatusCode.UNAVAILABLE,
                                       "the session's command stream ended")
            except grpc.RpcError as e:
                failure = e
            except Exception as e:  # noqa: BLE001 — the stream is useless now; say why
                failure = TensordError(grpc.StatusCode.INTERNAL, f"command stream reader: {e!r}")
            finally:
                self._lock.acquire()
            if response is not None:
                self._tries = 0
                self._take_locked(response)
            else:
                self._lost_locked(failure)
        finally:
            self._reading = False
            if waiter:
                self._quiet_since = time.monotonic()
            self._cond.notify_all()

    def _lost_locked(self, failure):
        """The call failed (a grpc.RpcError, or a TensordError saying why):
        a dropped connection is made again after a backoff (the lock
        released meanwhile), up to MAX_RECONNECTS in a row; else the stream
        is broken."""
        if isinstance(failure, grpc.RpcError):
            error = from_rpc_error(failure)
            transient = error.code in _TRANSIENT
            restarted = self._restarted(failure)
            if restarted is not None:
                error, transient = restarted, False
        else:
            error, transient = failure, False
        if transient and self._tries < MAX_RECONNECTS and not self._closing:
            delay = min(RECONNECT_BACKOFF_S * 2 ** self._tries, MAX_RECONNECT_BACKOFF_S)
            self._tries += 1
            self._lock.release()
            try:
                backoff(self._channel, delay)  # watching the channel drives its connect
            finally:
                self._lock.acquire()
            if not self._closing and self._broken is None:
                self.reconnects += 1
                self._connect_locked()
                return
        self._break_locked(error)

    def _break_locked(self, error):
        if self._closing:
            error = TensordError(grpc.StatusCode.CANCELLED, "the client is closing")
        if self._broken is None:
            self._broken = error
        for sent in self._in_flight.values():
            pending = sent[3]
            if pending is not None and pending._error is None:
                pending._error = self._broken
        self._in_flight.clear()
        self._outbox.clear()
        self._cond.notify_all()
        self._writer_cv.notify_all()
        self._keeper_cv.notify_all()

    def _restarted(self, error):
        """The error to raise when another server instance answered, else None."""
        try:
            trailing = error.trailing_metadata() or ()
        except Exception:  # noqa: BLE001 — a call that never reached a server
            return None
        now = next((value for key, value in trailing if key == INSTANCE_KEY), None)
        if now is None:
            return None
        if self._instance is None:
            self._instance = now
            return None
        if now == self._instance:
            return None
        return TensordError(
            grpc.StatusCode.FAILED_PRECONDITION,
            f"server restarted (instance {self._instance} \u2192 {now}): "
            "this session's tensors are gone; connect again")

    def _take_locked(self, response):
        in_flight = self._in_flight
        for reply in response.replies:
            seq = reply.seq
            if seq <= self._received_through:
                continue  # a replay of one we hold
            self._received_through = seq
            sent = in_flight.pop(seq, None)
            pending = sent[3] if sent is not None else None
            if reply.code:
                self._failed_locked(sent, reply)
            elif isinstance(pending, _Reply):
                pending._info = reply
            elif pending is not None:
                if reply.HasField("tensor"):
                    pending._info = reply.tensor
                else:
                    pending._info = pending._fallback or pb.TensorInfo(handle=pending.handle)
        if len(in_flight) == len(self._outbox):
            self._flush_locked()  # all sent are answered: wait no longer
        if self._received_through - self._acked >= ACK_EVERY:
            self._ack_due = True
            self._writer_cv.notify()

    def _failed_locked(self, sent, reply):
        framed, kind, result, pending = sent if sent is not None else (None, None, 0, None)
        code = _CODES.get(reply.code, grpc.StatusCode.UNKNOWN)
        refusal = (code == grpc.StatusCode.FAILED_PRECONDITION
                   and reply.message.startswith("not run: command "))
        if kind not in _NOT_STOPPING and not refusal and self._failure is None:
            name = (describe(_wire.parse_stream_command(framed)) if framed is not None
                    else f"command {reply.seq}")
            self._failure = (reply.seq, make_error(code, reply.message, reply.error_kind,
                                                   command=name))
        error = self._failure[1] if self._failure is not None else make_error(
            code, reply.message, reply.error_kind)
        if result:
            self._dead[result] = error
        if pending is not None:
            if pending._fallback is not None:  # an in-place op: the target lives on
                pending._info = pending._fallback
            else:
                pending._error = error

    # --- sync points ---------------------------------------------------------

    def _raise_failure_through_locked(self, seq):
        if self._failure is None or self._failure[0] > seq:
            return
        failed, error = self._failure
        self._failure = None
        if self._broken is None:  # acknowledged: commands run again from here
            self._queue_locked("clear_error", pb.ClearError(seq=failed))
        raise error

    def wait(self, pending):
        """pending's answer (a pb.TensorInfo, or a _Reply's CommandReply)."""
        with self._lock:
            if pending._info is None and pending._error is None:
                self._flush_locked()
                self._await_locked(
                    lambda: pending._info is not None or pending._error is not None)
            self._raise_failure_through_locked(pending._seq)
            if pending._info is not None:
                return pending._info
            error = pending._error or self._broken
            handle = getattr(pending, "handle", None)
            if handle is not None and error is not self._broken:
                raise _never_made(handle, error)
            raise error

    def request(self, kind, request):
        """The CommandReply of a command sent now (a read, a sync)."""
        slot = _Reply()
        self.send(kind, request, pending=slot)
        return self.wait(slot)

    def drain(self):
        """Waits for the replies of every command sent so far; raises the
        failure not yet reported, if any, or the stream's break."""
        with self._lock:
            last = self._next_seq
            self._flush_locked()
            self._await_locked(lambda: self._received_through >= last)
            if self._received_through < last and self._broken is not None:
                raise self._broken
            self._raise_failure_through_locked(last)

    def dead_error(self, handle):
        """Why tensor `handle` was never made (a TensordError), or None."""
        if not self._dead:
            return None
        with self._lock:
            error = self._dead.get(handle)
        if error is None:
            return None
        return _never_made(handle, error)

    def has_dead(self):
        return bool(self._dead)

    @property
    def broken(self):
        return self._broken

    def close(self):
        with self._lock:
            self._closing = True
            self._break_locked(None)  # CANCELLED: the client is closing
            call = self._call
        call.cancel()
