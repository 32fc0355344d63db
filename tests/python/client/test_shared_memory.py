"""Same-host shared memory: large uploads and fetches through one region (_shm.py).

The server's GetStats counts the transfers that went through a region, so
each test says which path a transfer took.
"""
import os

import grpc
import numpy as np
import pytest

import tensord
from tensord import _shm
from tensord.v1 import tensord_pb2 as pb

MIB = 1 << 20


def stats(client):
    return client._session.call("GetStats", pb.GetStatsRequest())


def shm_path(client):
    return os.path.join(_shm.SHM_DIR, client._dispatcher.region.name.lstrip("/"))


@pytest.fixture
def shm_client(client):
    assert client.enable_shared_memory(8 * MIB), client.shared_memory_reason
    assert client.shared_memory_enabled and client.shared_memory_reason is None
    return client


def test_large_transfers_go_through_the_region_bytes_exact(shm_client):
    c = shm_client
    before = stats(c)
    rng = np.random.default_rng(7)
    cases = [rng.standard_normal((512, 1024), dtype=np.float32),    # 2 MiB
             rng.integers(-2**62, 2**62, size=(3, 100_000), dtype=np.int64),
             (rng.random(2 * MIB) < 0.5)]                          # bool, 2 MiB
    for a in cases:
        x = c.from_numpy(a)
        assert x.shape == a.shape
        got = x.numpy()
        assert got.dtype == a.dtype and got.shape == a.shape
        assert got.tobytes() == a.tobytes()
        got[...] = 0  # the caller's own copy, not the region
    doubled = (c.from_numpy(cases[0]) * 2).numpy()
    np.testing.assert_array_equal(doubled, cases[0] * 2)
    after = stats(c)
    assert after.shared_memory_uploads - before.shared_memory_uploads == 4
    assert after.shared_memory_fetches - before.shared_memory_fetches == 4


def test_small_and_too_large_transfers_use_the_socket(shm_client):
    c = shm_client
    before = stats(c)
    small = np.arange(1000, dtype=np.float32)
    assert c.from_numpy(small).numpy().tolist() == small.tolist()
    big = np.arange(3 * MIB, dtype=np.float32)  # 12 MiB: over the 8 MiB region
    np.testing.assert_array_equal(c.from_numpy(big).numpy(), big)
    after = stats(c)
    assert after.shared_memory_uploads == before.shared_memory_uploads
    assert after.shared_memory_fetches == before.shared_memory_fetches


def test_a_server_that_cannot_see_the_region_leaves_the_socket(client, monkeypatch):
    created = []

    def elsewhere(name, total):  # as if the server ran on another host
        mapping = real(name, total)
        created.append(name)
        _shm._unlink(name)
        return mapping

    real = _shm._create_object
    monkeypatch.setattr(_shm, "_create_object", elsewhere)
    assert not client.enable_shared_memory(8 * MIB)
    assert not client.shared_memory_enabled
    assert "share a host" in client.shared_memory_reason
    assert created
    a = np.arange(MIB, dtype=np.float32)  # 4 MiB: the socket
    np.testing.assert_array_equal(client.from_numpy(a).numpy(), a)


def test_connect_option_and_the_region_released_on_close(daemon):
    c = tensord.connect(daemon.address, shared_memory=4 * MIB)
    assert c.shared_memory_enabled
    path = shm_path(c)
    assert os.path.exists(path) and os.stat(path).st_mode & 0o777 == 0o600
    regions = stats(c).shared_memory_regions
    assert regions >= 1
    a = np.ones((2, MIB // 2), dtype=np.float32)
    assert c.from_numpy(a).sum().item() == a.size
    c.close()
    assert not os.path.exists(path)
    check = tensord.connect(daemon.address)
    try:
        assert stats(check).shared_memory_regions == regions - 1
    finally:
        check.close()


def test_disable_and_replace_release_the_region(shm_client):
    c = shm_client
    first = shm_path(c)
    assert c.enable_shared_memory(2 * MIB)  # replaces it
    second = shm_path(c)
    assert second != first and not os.path.exists(first) and os.path.exists(second)
    c.disable_shared_memory()
    assert not c.shared_memory_enabled and not os.path.exists(second)
    a = np.arange(MIB, dtype=np.int32)
    np.testing.assert_array_equal(c.from_numpy(a).numpy(), a)


def test_a_bad_size_is_refused(client):
    assert not client.enable_shared_memory(0)
    assert "1 to" in client.shared_memory_reason
    with pytest.raises(tensord.TensordError) as err:
        _shm.Region.create(client._session, -1)
    assert err.value.code == grpc.StatusCode.INVALID_ARGUMENT


# --- a region of the caller's own: zero-copy upload_shared / fetch_shared ----

def test_zero_copy_upload_and_fetch_through_a_region_of_ones_own(client):
    rng = np.random.default_rng(3)
    before = stats(client)
    with client.create_shared_memory(4 * MIB) as region:
        assert isinstance(region, tensord.SharedMemoryRegion) and region.size == 4 * MIB
        path = os.path.join(_shm.SHM_DIR, region.name.lstrip("/"))
        assert os.path.exists(path)
        a = region.array((512, 512), tensord.float32)  # written in place: no copy
        a[...] = rng.standard_normal((512, 512), dtype=np.float32)
        x = client.upload_shared(region, 0, tensord.float32, (512, 512))
        assert x.shape == (512, 512) and x.dtype == tensord.float32
        a[...] = 0  # the tensor is the server's copy, not the region
        y = x * 2  # pipelined: fetch_shared runs after it
        view = y.fetch_shared(region, offset=MIB)
        np.testing.assert_array_equal(view, x.numpy() * 2)
        assert view.shape == (512, 512) and view.dtype == np.float32
        # The view is the region's memory itself.
        assert np.shares_memory(view, region.array(MIB // 4, tensord.float32, MIB))
        region.array(1, tensord.float32, MIB)[0] = 42.0
        assert view[0, 0] == 42.0
        # Other dtypes, at an offset that is not a multiple of 8.
        ints = region.array((3, 5), tensord.int64, offset=3 * MIB + 4)
        ints[...] = np.arange(15).reshape(3, 5) - 7
        z = client.upload_shared(region, 3 * MIB + 4, tensord.int64, [3, 5])
        assert z.tolist() == (np.arange(15).reshape(3, 5) - 7).tolist()
        bits = region.array(2, tensord.bfloat16, offset=3 * MIB + 512)  # uint16 bits
        assert bits.dtype == np.uint16
        bits[...] = [0x3F80, 0xC040]  # 1.0, -3.0
        b = client.upload_shared(region, 3 * MIB + 512, tensord.bfloat16, 2)
        assert b.dtype == tensord.bfloat16 and b.float().tolist() == [1.0, -3.0]
        assert (b * 2).fetch_shared(region, 8).tolist() == [0x4000, 0xC0C0]  # 2.0, -6.0
    assert region.closed and not os.path.exists(path)
    after = stats(client)
    assert after.shared_memory_uploads - before.shared_memory_uploads == 3
    assert after.shared_memory_fetches - before.shared_memory_fetches == 2


def test_a_region_of_ones_own_refuses_what_does_not_fit(client, daemon):
    region = client.create_shared_memory(MIB)
    x = client.zeros(MIB // 4 + 1)  # one float past the region
    for call in (lambda: x.fetch_shared(region),
                 lambda: client.zeros(8).fetch_shared(region, MIB - 16),
                 lambda: client.upload_shared(region, 0, tensord.float32, MIB // 4 + 1),
                 lambda: client.upload_shared(region, MIB - 4, tensord.float32, [2])):
        with pytest.raises(tensord.TensordError) as err:
            call()
        assert err.value.code == grpc.StatusCode.OUT_OF_RANGE, err.value.details
    with pytest.raises(ValueError, match="runs past the 1048576 bytes"):
        region.array(MIB // 4 + 1, tensord.float32)
    with pytest.raises(ValueError):
        region.array(4, tensord.float32, offset=-4)
    with pytest.raises(TypeError, match="SharedMemoryRegion"):
        client.upload_shared(bytearray(16), 0, tensord.float32, [4])
    # Another session's region: the server refuses it.
    other = tensord.connect(daemon.address)
    try:
        with pytest.raises(tensord.TensordError) as err:
            other.upload_shared(region, 0, tensord.float32, [4])
        assert err.value.code == grpc.StatusCode.INVALID_ARGUMENT, err.value.details
        with pytest.raises(tensord.TensordError) as err:
            other.zeros(4).fetch_shared(region)
        assert err.value.code == grpc.StatusCode.INVALID_ARGUMENT, err.value.details
    finally:
        other.close()
    # Nothing failed for good: the region still works.
    assert client.upload_shared(region, 0, tensord.float32, [4]).tolist() == [0.0] * 4
    path = os.path.join(_shm.SHM_DIR, region.name.lstrip("/"))
    client.close()  # closes the client's regions too
    assert region.closed and not os.path.exists(path)
    with pytest.raises(tensord.TensordError) as err:
        region.array(4, tensord.float32)
    assert err.value.code == grpc.StatusCode.FAILED_PRECONDITION
