"""Sessions: release on gc and on `with`, listings, lease keep-alive, request ids, threads."""
import gc
import threading
import time

import grpc
import pytest

import tensord
from tensord.v1 import tensord_pb2 as pb


def test_dropped_tensors_are_released(client):
    assert client.held_bytes() == 0
    xs = [client.zeros(1000) for _ in range(10)]
    y = xs[0] + xs[1]
    assert client.held_bytes() == 11 * 4000 and len(client.tensors()) == 11
    del xs, y
    gc.collect()
    assert client.held_bytes() == 0 and client.tensors() == []


def test_releases_ride_the_next_request(client):
    x = client.zeros(10)
    handle = x.handle
    del x  # queued, not yet sent...
    y = client.ones(3)  # ...rides this Create, or the 2 ms flush
    assert [t.handle for t in client.tensors()] == [y.handle] and handle != y.handle


def test_listing_describes_tensors(client):
    x = client.ones(2, 3, dtype=tensord.float64, device="cpu:1", requires_grad=True)
    (record,) = client.tensors()
    assert record.handle == x.handle and record.device == "cpu:1"
    assert record.dtype is tensord.float64 and record.shape == (2, 3)
    assert record.nbytes == 48 and record.requires_grad


def test_with_block_closes_the_session(daemon):
    with tensord.connect(daemon.address) as c:
        x = c.zeros(4)
        session = c.session
    assert c.closed
    observer = tensord.connect(daemon.address)
    stats = observer._session.call("GetStats", pb.GetStatsRequest())
    observer.close()
    assert stats.sessions >= 1  # the observer itself
    with pytest.raises(tensord.TensordError) as err:
        tensord.connect(daemon.address, session=session)
    assert err.value.code == grpc.StatusCode.NOT_FOUND
    del x


def test_reattach_within_the_lease(daemon):
    c = tensord.connect(daemon.address)
    x = c.tensor([1, 2, 3])
    c.synchronize()  # pipelined: another client sees it once the server ran it
    again = tensord.connect(daemon.address, session=c.session)
    assert [t.handle for t in again.tensors()] == [x.handle]
    del x
    c.close()


def test_lease_is_kept_alive(daemon):
    c = tensord.connect(daemon.address, session_ttl_ms=300)
    x = c.tensor([1.0])
    time.sleep(1.0)  # more than three leases with no call of ours
    assert (x + 1).item() == 2.0
    c.close()


def test_collected_client_closes_its_session(daemon):
    observer = tensord.connect(daemon.address)

    def sessions():
        return observer._session.call("GetStats", pb.GetStatsRequest()).sessions

    before = sessions()
    c = tensord.connect(daemon.address)
    c.zeros(3)  # dropped at once
    assert sessions() == before + 1
    tensord.connect(daemon.address)  # the newest becomes the default client...
    del c
    gc.collect()
    # ...and c's session closed when c went (at once, or when the session
    # thread lets go of it, if it was flushing releases just then).
    deadline = time.monotonic() + 5
    while sessions() != before + 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert sessions() == before + 1
    observer.close()


def test_mutations_carry_request_ids(daemon):
    # Unary calls: the command stream's commands are idempotent by seq.
    client = tensord.connect(daemon.address, pipeline=False)
    seen = []
    session = client._session
    original = session.next_request_id

    def recording():
        rid = original()
        seen.append(rid)
        return rid

    session.next_request_id = recording
    x = client.ones(2)
    (x + 1).to("cpu:1")
    assert len(seen) == 3 and len(set(seen)) == 3
    del session.next_request_id
    client.close()


def test_threads_share_a_client(client):
    errors = []

    def work(k):
        try:
            for _ in range(20):
                x = client.full((64,), float(k))
                y = (x * 2 + 1).sum()
                assert y.item() == 64 * (2 * k + 1)
                del x, y
        except Exception as e:  # noqa: BLE001  (reported below)
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    gc.collect()
    assert client.held_bytes() == 0


def test_no_grad_is_per_thread(client):
    w = client.ones(2, requires_grad=True)
    other = {}

    def in_thread():
        other["result"] = (w * 2).requires_grad

    with tensord.no_grad():
        assert not (w * 2).requires_grad
        t = threading.Thread(target=in_thread)
        t.start()
        t.join()
    assert other["result"] is True


def test_a_release_cut_off_is_sent_again_before_a_listing(daemon, monkeypatch):
    """A release flush that a dropped connection fails is retried before a
    listing, so tensors() never shows a tensor the program let go of (seen
    on a fast GPU machine, where a timed cut landed on the flush)."""
    c = tensord.connect(daemon.address, pipeline=False)
    try:
        keep = c.tensor([1.0])
        session = c._session
        real = session._raw_call
        failures = []

        def flaky(method, request, metadata=()):
            # The first two flushes are cut off: the background thread's
            # (if it comes first) and the listing's own first try.
            if method == "Release" and len(failures) < 2:
                failures.append(method)
                raise tensord.TensordError(grpc.StatusCode.UNAVAILABLE, "connection cut")
            return real(method, request, metadata)
        monkeypatch.setattr(session, "_raw_call", flaky)
        dropped = c.tensor([2.0])
        del dropped
        gc.collect()
        assert [t.handle for t in c.tensors()] == [keep.handle]
        assert failures == ["Release", "Release"]
    finally:
        c.close()
