"""Pipelining: tensor work on the session's ordered command stream (_dispatch.py).

These tests name their mode (connect(pipeline=...)), so they do the same in
both runs of the suite. Reconnecting a dropped stream is test_reconnect.py's.
"""
import collections
import time
import threading

import grpc
import numpy as np
import pytest

import tensord
import tensord.nn.functional as F
from tensord import _channel, _stream
from tensord._client import Client


class _Counter(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor,
               grpc.StreamUnaryClientInterceptor, grpc.StreamStreamClientInterceptor):
    """Counts the calls of each method that leave the client."""

    def __init__(self):
        self.calls = collections.Counter()
        self._lock = threading.Lock()

    def _count(self, details):
        with self._lock:
            self.calls[details.method.rsplit("/", 1)[-1]] += 1

    def intercept_unary_unary(self, continuation, details, request):
        self._count(details)
        return continuation(details, request)

    def intercept_unary_stream(self, continuation, details, request):
        self._count(details)
        return continuation(details, request)

    def intercept_stream_unary(self, continuation, details, requests):
        self._count(details)
        return continuation(details, requests)

    def intercept_stream_stream(self, continuation, details, requests):
        self._count(details)
        return continuation(details, requests)


def counted_client(address, pipeline):
    channel, metadata = _channel.open_channel(address, None, False, None, None, None, None)
    counter = _Counter()
    client = Client(grpc.intercept_channel(channel, counter), metadata, pipeline=pipeline)
    return client, counter, channel


@pytest.fixture
def piped(daemon):
    c = tensord.connect(daemon.address, pipeline=True)
    assert c.pipelined
    yield c
    c.close()


def test_a_chain_of_100_ops_is_one_stream_and_no_unary_run(daemon):
    client, counter, channel = counted_client(daemon.address, pipeline=None)
    try:
        assert client.pipelined
        before = dict(counter.calls)
        x = client.tensor([1, 2, 3])
        v = x
        for _ in range(100):
            v = v + 1  # the dropped intermediates' releases ride the stream too
        assert v.numpy().tolist() == [101, 102, 103]
        made = {m: n - before.get(m, 0) for m, n in counter.calls.items()}
        made = {m: n for m, n in made.items() if n and m != "KeepAlive"}
        assert counter.calls["Stream"] == 1
        assert made == {}, f"unary calls during the chain: {made}"
    finally:
        client.close()
        channel.close()


def test_unary_mode_makes_one_run_per_op(daemon):
    client, counter, channel = counted_client(daemon.address, pipeline=False)
    try:
        assert not client.pipelined
        x = client.tensor([1, 2, 3])
        for _ in range(10):
            x = x * 1
        assert x.numpy().tolist() == [1, 2, 3]
        assert counter.calls["Run"] == 10 and counter.calls["Stream"] == 0
    finally:
        client.close()
        channel.close()


def test_metadata_arrives_with_the_reply(piped):
    x = piped.arange(6).reshape(2, 3)
    y = x.to(tensord.float32).t()
    assert y.handle >= 1 << 63  # named by the client, at once
    assert y.shape == (3, 2) and y.dtype is tensord.float32 and str(y.device) == "cpu:0"
    assert x.to("cpu:0") is x and x.to("cpu") is x  # its own device: the tensor itself
    z = x.to("cpu:1")
    assert z is not x and str(z.device) == "cpu:1"
    assert z.numpy().tolist() == [[0, 1, 2], [3, 4, 5]]


def test_commands_run_in_the_order_written(piped):
    x = piped.zeros(3)
    seen = []
    for i in range(1, 51):
        x.add_(1)
        if i % 10 == 0:
            seen.append(x * 1)  # a snapshot of x after i adds
    assert [s.numpy()[0] for s in seen] == [10.0, 20.0, 30.0, 40.0, 50.0]
    assert x.numpy().tolist() == [50.0, 50.0, 50.0]
    a = piped.tensor([1.0, 2.0])
    b = (a * 3 - 1) / 2
    assert b.tolist() == [1.0, 2.5]


def test_many_commands_without_a_sync(piped):
    # More than a message holds, than the client keeps in flight, and than
    # the server keeps unacknowledged replies in one burst.
    v = piped.tensor([0])
    for _ in range(5000):
        v = v + 1
    assert v.item() == 5000
    assert len(piped.tensors()) == 1  # the 5000 intermediates were released


def test_a_failure_is_raised_at_the_next_sync_naming_its_command(piped):
    x = piped.zeros(2, 3)
    ok = x + 1
    # No error here: a class index out of range is a check of the values,
    # which only the server makes (the shapes are planned at the line:
    # test_planned_at_the_line.py), so it is sent, not answered.
    bad = F.cross_entropy(x, piped.tensor([0, 5]))
    after = ok * 2  # sent after the failure, before the sync: not run
    with pytest.raises(tensord.TensordError) as err:
        piped.synchronize()
    e = err.value
    assert e.code == grpc.StatusCode.INVALID_ARGUMENT and isinstance(e, IndexError)
    # The server's message, as unary: torch's words.
    assert str(e) == "Target 5 is out of bounds."
    assert e.command.startswith("command ") and e.command.endswith(
        f"(run loss, result {bad.handle})")
    assert f"{e.command} failed: " in "".join(getattr(e, "__notes__", []))
    piped.synchronize()  # reported once: cleared
    # Later commands run again.
    assert (ok * 3).numpy().tolist() == [[3.0] * 3] * 2
    # Tensors whose command failed or was not run raise when used.
    with pytest.raises(tensord.TensordError, match=f"tensor {bad.handle} was never made"):
        bad + 1
    with pytest.raises(tensord.TensordError, match="was never made") as err:
        bad.shape
    assert err.value.code == grpc.StatusCode.INVALID_ARGUMENT
    with pytest.raises(tensord.TensordError, match=f"tensor {after.handle} was never made"):
        after.numpy()
    piped.synchronize()


def test_a_fetch_is_a_sync_point(piped):
    x = piped.tensor([1, 2, 3])
    z = F.nll_loss(piped.zeros(3, 2), piped.tensor([0, 1, 7]))  # values: the server's check
    with pytest.raises(IndexError) as err:
        repr(z)
    # PyTorch's exact words, as unary; the command is named beside them.
    assert str(err.value) == "Target 7 is out of bounds."
    assert err.value.command.endswith(f"(run loss, result {z.handle})")
    assert (x * 2).tolist() == [2, 4, 6]


def test_a_listing_is_a_sync_point(piped):
    F.cross_entropy(piped.zeros(2, 3), piped.tensor([0, 5]))  # refused by the server
    with pytest.raises(tensord.TensordError):
        piped.tensors()
    assert piped.tensors() == []


def test_grad_waits_for_its_answer(piped):
    w = piped.ones(3, requires_grad=True)
    assert w.grad is None  # not an error at a later sync
    (w * w).sum().backward()
    assert w.grad.tolist() == [2.0, 2.0, 2.0]
    piped.synchronize()


def test_threads_share_a_pipelined_client(piped):
    errors = []

    def work(k):
        try:
            v = piped.tensor([k])
            for _ in range(200):
                v = v + 1
            assert v.item() == k + 200
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_large_tensors_take_the_unary_paths(piped):
    a = np.arange(300_000, dtype=np.float32)  # over the inline bound: Upload
    x = piped.from_numpy(a)
    y = x * 2  # on the stream, after the upload
    np.testing.assert_array_equal(y.numpy(), a * 2)  # Fetch drains first


def test_reading_a_fresh_result_is_one_round_trip(piped, monkeypatch):
    """numpy(), item(), tolist() and repr() of a result whose reply has not come send
    the read right behind it (if_small_on_host): one wait, not one for the
    metadata and another for the bytes; a result too large for one reply
    falls back to the Fetch stream."""
    stream = piped._dispatcher._stream
    waits = []
    real_wait = stream.wait

    def counting_wait(pending):
        waits.append(pending)
        return real_wait(pending)
    monkeypatch.setattr(stream, "wait", counting_wait)
    a, b = piped.tensor([1, 2, 3]), piped.tensor([5, 8, 1])
    piped.synchronize()
    for read in (lambda t: t.numpy().tolist(), lambda t: t.sum().item(), repr,
                 lambda t: t.tolist()):
        waits.clear()
        product = a * b
        value = read(product)
        assert len(waits) == 1, f"{len(waits)} waits for {value!r}"
    assert (a * b).numpy().tolist() == [5, 16, 3]
    assert (a * b).sum().item() == 24
    assert repr(a * b) == "tensor([ 5, 16,  3])"
    big = piped.zeros(2 << 20) + 1  # 8 MiB: over one reply
    assert big.numpy().sum() == 2 << 20


def test_replies_are_read_while_no_one_waits(piped):
    """No sync point: the stream's keeper thread reads the replies (so the
    server's kept replies are acknowledged) once no waiter has for a while."""
    stream = piped._session.stream
    x = piped.tensor([1.0])
    kept = [x + i for i in range(50)]
    deadline = time.monotonic() + 10
    while stream._received_through < stream._next_seq and time.monotonic() < deadline:
        time.sleep(0.01)
    assert stream._received_through == stream._next_seq
    assert kept[-1].item() == 50.0


def test_a_full_window_is_emptied_by_the_keeper(piped, monkeypatch):
    """More commands than the window without a sync: sends wait for room
    while the keeper reads the replies, and nothing is lost."""
    monkeypatch.setattr(_stream, "WINDOW", 32)
    v = piped.tensor([0])
    for _ in range(500):
        v = v + 1
    assert v.item() == 500
