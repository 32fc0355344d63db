"""A dropped connection: the pipelined stream reconnects and loses or repeats nothing.

Between the client and the daemon sits a TCP proxy (CuttingProxy) whose
cut() shuts down every open connection; a scripted sequence cuts after each
line, while the line's commands may still await their answers. The unary
path (pipeline=False) retries its calls with request ids instead; the same
script runs there too.
"""
import socket
import threading
import time

import grpc
import numpy as np
import pytest

import tensord
from daemon import Daemon


class CuttingProxy:
    """Forwards 127.0.0.1:<port> to `upstream` ("host:port"); cut() drops
    every open connection (new ones are accepted as before)."""

    def __init__(self, upstream, slow_connects_s=0.0):
        """slow_connects_s > 0: for that long the listen queue is full (one
        idle connection of its own fills a queue of length 0), so a client's
        TCP connect waits for its SYN to be sent again (Linux: after 1 s)."""
        self.upstream = upstream  # may be changed: later connections go there
        self._listener = socket.create_server(("127.0.0.1", 0),
                                              backlog=0 if slow_connects_s else None)
        self.address = f"127.0.0.1:{self._listener.getsockname()[1]}"
        self._lock = threading.Lock()
        self._open = []  # sockets of the connections not cut
        self.cuts = 0
        self._closed = False
        if slow_connects_s:
            filler = socket.create_connection(self._listener.getsockname())
            threading.Thread(target=self._accept_after, args=(slow_connects_s, filler),
                             daemon=True).start()
        else:
            threading.Thread(target=self._accept, daemon=True).start()

    def _accept_after(self, seconds, filler):
        time.sleep(seconds)
        self._listener.accept()[0].close()  # the filler: the queue has room again
        filler.close()
        self._accept()

    def _accept(self):
        while True:
            try:
                down, _ = self._listener.accept()
            except OSError:
                return
            host, port = self.upstream.rsplit(":", 1)
            try:
                up = socket.create_connection((host, int(port)))
            except OSError:
                down.close()
                continue
            with self._lock:
                if self._closed:
                    down.close()
                    up.close()
                    return
                self._open += [down, up]
            for a, b in ((down, up), (up, down)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src, dst):
        try:
            while True:
                data = src.recv(1 << 16)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def cut(self):
        with self._lock:
            victims, self._open = self._open, []
            self.cuts += 1
        for s in victims:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def close(self):
        with self._lock:
            self._closed = True
        self._listener.close()
        self.cut()


def _killed(d):
    """Stops a daemon of these tests at once. Their cut connections sometimes
    leave the daemon's gRPC executor in a blocking poll that delays a graceful
    exit by ~10 s (a thread of gRPC's own shutdown; the suite's shared daemon
    still tests the graceful stop)."""
    d.close()


@pytest.fixture(scope="module")
def own_daemon(daemon):
    """A daemon of this module's own, reached only through proxies."""
    d = Daemon(daemon.binary, "--host-devices", "2")
    yield d
    _killed(d)


@pytest.fixture
def proxy(own_daemon):
    p = CuttingProxy(own_daemon.address)
    yield p
    p.close()


# Each line runs, then the connection is cut (the line's commands in flight).
SCRIPT = [
    "a = c.tensor([1.0, 2.0, 3.0])",
    "b = c.arange(3, dtype=tensord.float32)",
    "s = a + b",
    "m = s * a",
    "z = c.zeros(2, 3, device='cpu:1')",
    "w = (z + 1).sum()",
    "v = m.to('cpu:1')",
    "chain = a\nfor _ in range(300): chain = chain + 1",
    "got_m = m.numpy().tolist()",
    "got_w = w.item()",
    "got_chain = chain.tolist()",
]
# What the script holds at the end: a, b, s, m, z, w, v, chain.
HELD = 8


@pytest.mark.parametrize("pipeline", [True, False], ids=["pipelined", "unary"])
def test_a_script_cut_after_every_line_runs_once(proxy, pipeline):
    c = tensord.connect(proxy.address, pipeline=pipeline)
    try:
        assert c.pipelined == pipeline
        scope = {"c": c, "tensord": tensord}
        for line in SCRIPT:
            exec(line, scope)
            proxy.cut()
        assert scope["got_m"] == [1.0, 6.0, 15.0]  # (a + b) * a
        assert scope["got_w"] == 6.0
        assert scope["got_chain"] == [301.0, 302.0, 303.0]
        assert scope["v"].numpy().tolist() == [1.0, 6.0, 15.0]
        assert str(scope["v"].device) == "cpu:1"
        # Every create and op made its tensor once: no duplicates, none lost.
        assert len(c.tensors()) == HELD
        if pipeline:
            assert c._session.stream.reconnects >= 1
            assert c._session.stream.broken is None
    finally:
        c.close()
    assert proxy.cuts == len(SCRIPT)


def test_a_burst_cut_in_flight_runs_once(proxy):
    c = tensord.connect(proxy.address, pipeline=True)
    try:
        x = c.zeros(4)
        for _ in range(2000):
            x.add_(1)  # in place: a repeat would show in the sum
            if _ % 500 == 250:
                proxy.cut()
        assert x.numpy().tolist() == [2000.0] * 4
        assert len(c.tensors()) == 1
        assert c._session.stream.reconnects >= 1
    finally:
        c.close()


def test_a_failure_before_a_cut_is_still_reported_once(proxy):
    c = tensord.connect(proxy.address, pipeline=True)
    try:
        x = c.zeros(2, 3)
        # refused by the server (a class index out of range: a check of the values)
        bad = tensord.nn.functional.cross_entropy(x, c.tensor([0, 5]))
        proxy.cut()
        with pytest.raises(tensord.TensordError) as err:
            c.synchronize()
        assert err.value.code == grpc.StatusCode.INVALID_ARGUMENT
        assert err.value.command.endswith(f"(run loss, result {bad.handle})")
        proxy.cut()
        assert (x + 1).numpy().tolist() == [[1.0] * 3] * 2
    finally:
        c.close()


def test_a_slow_connect_is_waited_for(own_daemon):
    """A connect that takes a second (its SYN dropped by a full listen queue)
    is waited for, not cut at gRPC's connect timeout: the channel once set it
    to 100 ms (grpc.min_reconnect_backoff_ms), and under load a reconnect
    failed with "tcp handshaker shutdown"."""
    slow = CuttingProxy(own_daemon.address, slow_connects_s=0.3)
    try:
        t0 = time.monotonic()
        c = tensord.connect(slow.address, pipeline=True)
        try:
            assert (c.ones(2) + 1).tolist() == [2.0, 2.0]
        finally:
            c.close()
        assert time.monotonic() - t0 > 0.25  # the connect did wait
    finally:
        slow.close()


def test_a_server_restart_is_an_error_not_a_reconnect(proxy, own_daemon):
    c = tensord.connect(proxy.address, pipeline=True)
    other = Daemon(own_daemon.binary, "--host-devices", "2")
    try:
        x = c.tensor([1, 2, 3])
        assert x.tolist() == [1, 2, 3]
        proxy.upstream = other.address  # the "restarted" server
        proxy.cut()
        with pytest.raises(tensord.TensordError, match="server restarted") as err:
            (x + 1).numpy()
        assert err.value.code == grpc.StatusCode.FAILED_PRECONDITION
    finally:
        c.close()
        _killed(other)


def test_a_large_upload_and_fetch_survive_a_cut_before_them(proxy):
    c = tensord.connect(proxy.address)
    try:
        a = np.arange(300_000, dtype=np.float32)  # Upload and Fetch streams
        x = c.from_numpy(a)
        proxy.cut()
        np.testing.assert_array_equal((x * 2).numpy(), a * 2)
    finally:
        c.close()


def test_a_cut_during_a_large_upload_and_fetch(proxy):
    # The upload is retried with its request id (made once), the fetch
    # resumed at the bytes it has.
    c = tensord.connect(proxy.address)
    try:
        a = np.random.default_rng(3).standard_normal(8 << 20, dtype=np.float32)  # 32 MiB
        for _ in range(2):
            timer = threading.Timer(0.02, proxy.cut)
            timer.start()
            x = c.from_numpy(a)
            timer.join()
            timer = threading.Timer(0.02, proxy.cut)
            timer.start()
            got = x.numpy()
            timer.join()
            assert got.tobytes() == a.tobytes()
        assert len(c.tensors()) == 1
    finally:
        c.close()
