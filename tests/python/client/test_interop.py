"""numpy and torch interop: dtype and shape exact, bfloat16 included."""
import numpy as np
import pytest

import tensord

DTYPES = [np.float32, np.float64, np.float16, np.int32, np.int64, np.bool_]


@pytest.mark.parametrize("dtype", DTYPES)
def test_numpy_round_trip(client, dtype):
    a = (np.arange(12).reshape(3, 4) % 3).astype(dtype)
    t = client.from_numpy(a, device="cpu:1")
    back = t.numpy()
    assert back.dtype == a.dtype and back.shape == a.shape
    np.testing.assert_array_equal(back, a)
    assert np.asarray(t).dtype == a.dtype


def test_numpy_noncontiguous_and_big_endian(client):
    a = np.arange(12, dtype=">i4").reshape(3, 4).T
    np.testing.assert_array_equal(client.from_numpy(a).numpy(), a)


def test_unsupported_numpy_dtype(client):
    with pytest.raises(TypeError, match="can't convert np.ndarray of type numpy.uint8"):
        client.from_numpy(np.zeros(2, np.uint8))


def test_bfloat16_numpy_is_pytorchs_type_error(client):
    with pytest.raises(TypeError, match="Got unsupported ScalarType BFloat16"):
        client.tensor([1.0], dtype=tensord.bfloat16).numpy()



@pytest.mark.parametrize("name", ["float32", "float64", "float16", "bfloat16", "int32",
                                  "int64", "bool"])
def test_torch_round_trip(client, name):
    torch = pytest.importorskip("torch")
    t = (torch.arange(-6, 6).reshape(3, 4) * 1.375).to(getattr(torch, name))
    remote = client.from_torch(t, device="cpu:1")
    assert remote.dtype is getattr(tensord, name if name != "bool" else "bool_")
    assert remote.shape == tuple(t.shape)
    back = remote.torch()
    assert back.dtype == t.dtype and back.shape == t.shape
    assert torch.equal(back, t)
    assert repr(client.from_torch(t)) == repr(t)


def test_bfloat16_from_python_rounds_like_torch(client):
    torch = pytest.importorskip("torch")
    values = [1.0, 1.00390625, 3.14159, -2.5e-3, 65504.0, 1e30]
    assert torch.equal(client.tensor(values, dtype=tensord.bfloat16).torch(),
                       torch.tensor(values, dtype=torch.bfloat16))
