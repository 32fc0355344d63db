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
