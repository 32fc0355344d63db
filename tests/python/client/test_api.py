"""PyTorch's device API and ops, against a real daemon, checked with numpy."""
import numpy as np
import pytest

import tensord


def _gpus(client):
    """The daemon's GPUs: none here, cuda:0... where the tests run on a GPU machine."""
    return [d.name for d in client.devices() if d.name.startswith("cuda")]


def test_device_queries(client):
    gpus = _gpus(client)  # --host-devices 2, and the machine's GPUs if any
    assert client.cuda.is_available() is bool(gpus)
    assert client.cuda.device_count() == len(gpus)
    assert [d.name for d in client.devices()] == ["cpu:0", "cpu:1"] + gpus
    assert client.device("cuda:0") == "cuda:0"
    assert repr(client.device("cuda", 1)) == "device(type='cuda', index=1)"


def test_module_level_cuda_is_the_default_clients(client):
    gpus = _gpus(client)
    assert tensord.cuda.is_available() is bool(gpus)
    assert tensord.cuda.device_count() == len(gpus)


def test_data_is_the_values_outside_autograd(client):
    w = client.tensor([1.0, 2.0], device="cpu:1", requires_grad=True)
    d = (w * 2).data
    assert d.requires_grad is False and d.grad_fn is None and d.device == "cpu:1"
    assert d.tolist() == [2.0, 4.0]


def test_tensor_metadata_and_move(client):
    x = client.tensor([[1, 2, 3], [4, 5, 6]])
    assert x.shape == (2, 3) and repr(x.shape) == "torch.Size([2, 3])"
    assert x.dtype is tensord.int64 and repr(x.dtype) == "torch.int64"
    assert x.device == "cpu:0" and x.device.type == "cpu"
    assert x.size(1) == 3 and x.dim() == 2 and x.numel() == 6 and len(x) == 2
    y = x.to("cpu:1")
    assert y.device == "cpu:1" and y is not x
    assert y.to("cpu:1") is y  # PyTorch: z.cuda(1) is z
    assert x.cpu() is x
    np.testing.assert_array_equal(y.numpy(), [[1, 2, 3], [4, 5, 6]])
    assert client.tensor(1.5).dtype is tensord.float32
    assert client.tensor([True]).dtype is tensord.bool
    assert client.tensor([1, 2], dtype=tensord.float64).dtype is tensord.float64


def test_factories(client):
    np.testing.assert_array_equal(client.zeros(2, 3).numpy(), np.zeros((2, 3), np.float32))
    np.testing.assert_array_equal(client.ones((2,), dtype=tensord.int32).numpy(), [1, 1])
    full = client.full((2, 2), 7)
    assert full.dtype is tensord.int64 and full.tolist() == [[7, 7], [7, 7]]
    assert client.arange(5).tolist() == [0, 1, 2, 3, 4]
    assert client.arange(1, 2, 0.25).tolist() == [1.0, 1.25, 1.5, 1.75]
    r = client.rand(100, seed=3)
    values = r.numpy()
    assert values.min() >= 0 and values.max() < 1
    np.testing.assert_array_equal(client.rand(100, seed=3).numpy(), values)
    assert client.randn(4, 5, device="cpu:1").device == "cpu:1"
    assert client.zeros_like(full).dtype is tensord.int64
    ones = client.ones(3, requires_grad=True)
    assert ones.requires_grad and ones.is_leaf


BINARY = [
    (lambda a, b: a + b), (lambda a, b: a - b), (lambda a, b: a * b),
    (lambda a, b: a / b), (lambda a, b: a == b), (lambda a, b: a != b),
    (lambda a, b: a < b), (lambda a, b: a > b), (lambda a, b: a <= b),
    (lambda a, b: a >= b),
]


@pytest.mark.parametrize("op", BINARY)
def test_binary_operators_match_numpy(client, op):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((3, 4)).astype(np.float32)
    b = rng.standard_normal((4,)).astype(np.float32)
    ta, tb = client.from_numpy(a), client.from_numpy(b)
    np.testing.assert_allclose(op(ta, tb).numpy(), op(a, b), rtol=1e-6)
    np.testing.assert_allclose(op(ta, 2.5).numpy(), op(a, np.float32(2.5)), rtol=1e-6)
    np.testing.assert_allclose(op(2.5, ta).numpy(), op(np.float32(2.5), a), rtol=1e-6)


def test_integer_promotion_and_pow(client):
    x = client.tensor([1, 2, 3])
    assert (x / 2).dtype is tensord.float32 and (x / 2).tolist() == [0.5, 1.0, 1.5]
    assert (x ** 2).tolist() == [1, 4, 9] and (2 ** x).tolist() == [2, 4, 8]
    assert (1 - x).tolist() == [0, -1, -2] and (-x).tolist() == [-1, -2, -3]
    assert (x * 1.5).dtype is tensord.float32


def test_unary_reductions_and_shapes(client):
    rng = np.random.default_rng(1)
    a = rng.uniform(0.5, 2.0, (2, 3, 4))
    t = client.from_numpy(a)
    expected_of = {"exp": np.exp(a), "log": np.log(a), "sqrt": np.sqrt(a),
                   "relu": np.maximum(a, 0), "sigmoid": 1 / (1 + np.exp(-a)),
                   "tanh": np.tanh(a), "abs": np.abs(a), "neg": -a}
    for name, expected in expected_of.items():
        np.testing.assert_allclose(getattr(t, name)().numpy(), expected, rtol=1e-12)
    np.testing.assert_allclose(t.sum().item(), a.sum())
    np.testing.assert_allclose(t.sum((0, 2)).numpy(), a.sum((0, 2)))
    np.testing.assert_allclose(t.mean(1, keepdim=True).numpy(), a.mean(1, keepdims=True))
    values, indices = t.max(2)
    np.testing.assert_array_equal(values.numpy(), a.max(2))
    np.testing.assert_array_equal(indices.numpy(), a.argmax(2))
    np.testing.assert_array_equal(t.min(1).indices.numpy(), a.argmin(1))
    assert t.argmax().item() == a.argmax() and t.argmin().item() == a.argmin()
    np.testing.assert_allclose(t.norm().item(), np.linalg.norm(a.ravel()))
    np.testing.assert_array_equal(t.permute(2, 0, 1).numpy(), a.transpose(2, 0, 1))
    np.testing.assert_array_equal(t.transpose(0, 2).numpy(), a.swapaxes(0, 2))
    np.testing.assert_array_equal(t.reshape(6, -1).numpy(), a.reshape(6, -1))
    np.testing.assert_array_equal(t.view(-1).numpy(), a.ravel())
    np.testing.assert_array_equal(t.flatten(1).numpy(), a.reshape(2, 12))
    np.testing.assert_array_equal(t.unsqueeze(0).shape, (1, 2, 3, 4))
    np.testing.assert_array_equal(t.narrow(2, 1, 2).numpy(), a[:, :, 1:3])
    np.testing.assert_array_equal(t.select(1, -1).numpy(), a[:, -1])
    np.testing.assert_array_equal(t[1, :, 2:].numpy(), a[1, :, 2:])
    np.testing.assert_array_equal(t[..., 0].numpy(), a[..., 0])
    with pytest.raises(IndexError, match="index 2 is out of bounds for dimension 0 with size 2"):
        t[2]
    np.testing.assert_allclose(t.softmax(-1).numpy(),
                               np.exp(a) / np.exp(a).sum(-1, keepdims=True))
    np.testing.assert_allclose(t.clamp(0.8, 1.5).numpy(), np.clip(a, 0.8, 1.5))
    assert t.float().dtype is tensord.float32 and t.long().dtype is tensord.int64


def test_matmul_cat_where(client):
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((5, 7)), rng.standard_normal((7, 3))
    ta, tb = client.from_numpy(a), client.from_numpy(b)
    np.testing.assert_allclose((ta @ tb).numpy(), a @ b, rtol=1e-12)
    np.testing.assert_allclose(ta.t().numpy(), a.T)
    np.testing.assert_array_equal(tensord.cat([ta, ta], 1).numpy(), np.concatenate([a, a], 1))
    np.testing.assert_array_equal(tensord.stack([ta, ta]).numpy(), np.stack([a, a]))
    np.testing.assert_array_equal(tensord.where(ta > 0, ta, 0.0).numpy(), np.where(a > 0, a, 0))


def test_in_place_keeps_the_object(client):
    x = client.tensor([1.0, 2.0])
    handle = x.handle
    assert x.add_(1) is x and x.handle == handle
    x *= 2
    assert x.handle == handle and x.tolist() == [4.0, 6.0]
    x.add_(client.tensor([1.0, 1.0]), alpha=0.5)
    assert x.tolist() == [4.5, 6.5]


def test_item_and_numpy(client):
    assert client.tensor(3).item() == 3 and isinstance(client.tensor(3).item(), int)
    assert client.tensor([2.5]).item() == 2.5
    assert client.tensor(True).item() is True
    with pytest.raises(ValueError, match="only one element tensors can be converted to Python "
                                         "scalars"):
        client.tensor([1, 2]).item()
    a = client.tensor([1, 2]).numpy()
    a[0] = 9  # a writable host copy
    assert a.tolist() == [9, 2]
    assert f"{client.tensor(0.5):.2f}" == "0.50"


def test_large_tensor_streams(client):
    a = np.arange(600_000, dtype=np.float64)  # 4.8 MB: Upload and Fetch streams
    t = client.from_numpy(a)
    np.testing.assert_array_equal(t.numpy(), a)
    np.testing.assert_array_equal((t * 2).numpy(), a * 2)


def test_default_client_factories(client):
    assert tensord.default_client() is client
    assert tensord.tensor([1, 2]).tolist() == [1, 2]
    assert tensord.zeros(2).tolist() == [0.0, 0.0]
