"""The DLPack protocol: tensors on a server cpu device export a host copy (dtype and shape exact).

torch.from_dlpack(x) and np.from_dlpack(x) read tensord tensors directly;
arrays fetched with x.numpy() speak DLPack themselves. bfloat16 goes
through torch's exporter (numpy has no bfloat16); bool exports where
numpy's DLPack has it (numpy >= 1.25). Tensors elsewhere
(a GPU, in the protocol's eyes a remote memory) and tensors that require
grad are refused as numpy() and torch refuse them.
"""
import numpy as np
import pytest

import tensord

torch = pytest.importorskip("torch")

DTYPES = [(tensord.float32, torch.float32), (tensord.float64, torch.float64),
          (tensord.float16, torch.float16), (tensord.bfloat16, torch.bfloat16),
          (tensord.int32, torch.int32), (tensord.int64, torch.int64)]


@pytest.mark.parametrize("dtype,torch_dtype", DTYPES, ids=[str(d) for d, _ in DTYPES])
def test_torch_from_dlpack(client, dtype, torch_dtype):
    values = [[0, 1, 2, 0], [1, 2, 0, 1], [2, 0, 1, 2]]
    x = client.tensor(values, dtype=dtype, device="cpu:1")
    t = torch.from_dlpack(x)
    assert t.dtype == torch_dtype and tuple(t.shape) == (3, 4) and t.device.type == "cpu"
    expected = torch.tensor(values, dtype=torch_dtype)
    assert torch.equal(t, expected)
    assert x.__dlpack_device__() == (1, 0)


def test_bool_exports_where_numpys_dlpack_has_bool(client):
    x = client.tensor([True, False, True])
    try:
        exported = np.from_dlpack(x)
    except BufferError as e:  # numpy < 1.25 (Debian 12's 1.24)
        assert "DLPack only supports" in str(e)
    else:
        np.testing.assert_array_equal(exported, [True, False, True])


def test_numpy_from_dlpack_and_fetched_arrays(client):
    x = client.randn(5, 7)
    np.testing.assert_array_equal(np.from_dlpack(x), x.numpy())
    assert torch.equal(torch.from_dlpack(x.numpy()), x.torch())  # the fetched array's own


def test_the_export_is_a_copy(client):
    x = client.zeros(4)
    t = torch.from_dlpack(x)
    t += 1
    assert x.tolist() == [0.0] * 4


def test_refusals(client):
    w = client.ones(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="Can't export tensors that require gradient"):
        torch.from_dlpack(w)
    assert torch.equal(torch.from_dlpack(w.detach()), torch.ones(3))
    with pytest.raises(BufferError, match="stream"):
        w.detach().__dlpack__(stream=1)


def test_a_non_cpu_tensor_is_refused(client, monkeypatch):
    x = client.ones(2)
    monkeypatch.setattr(type(x), "device", property(lambda self: tensord.device("cuda:0")))
    with pytest.raises(TypeError, match="can't export a cuda:0 device type tensor"):
        torch.from_dlpack(x)
