"""repr() is exactly PyTorch 1.13's, checked against torch's own repr of the same values."""
import numpy as np
import pytest

import tensord
from tensord._repr import format_tensor

torch = pytest.importorskip("torch")

CASES = [
    [5, 16, 3],
    [[1.5, -2.25], [3.0, 4.0]],
    [1.0, 2.0, 3.0],
    [0.0001, 12345.0],
    [1e-5, 1.0],
    [[True, False], [False, True]],
    3.25,
    7,
    [float("nan"), float("inf"), -float("inf"), 1.5],
    [[0.1234567, 100.5], [1e9, -3.0]],
]


@pytest.mark.parametrize("values", CASES)
def test_repr_matches_torch(client, values):
    assert repr(client.tensor(values)) == repr(torch.tensor(values))


@pytest.mark.parametrize("dtype", ["float64", "float16", "bfloat16", "int32", "int64", "bool"])
def test_dtype_suffixes_match_torch(client, dtype):
    values = [[0, 1, 2], [3, 4, 5]]
    t = client.tensor(values, dtype=getattr(tensord, dtype))
    assert repr(t) == repr(torch.tensor(values, dtype=getattr(torch, dtype)))
    assert repr(client.zeros(0, 3, dtype=getattr(tensord, dtype))) == \
        repr(torch.zeros(0, 3, dtype=getattr(torch, dtype)))


def test_summarized_and_wrapped_match_torch(client):
    big = np.arange(2000, dtype=np.float64).reshape(40, 50) / 7
    assert repr(client.from_numpy(big)) == repr(torch.from_numpy(big))
    row = np.linspace(-3, 3, 40).astype(np.float32)
    assert repr(client.from_numpy(row)) == repr(torch.from_numpy(row))
    cube = np.arange(24).reshape(2, 3, 4)
    assert repr(client.from_numpy(cube)) == repr(torch.from_numpy(cube))


def test_device_and_autograd_suffixes(client):
    x = client.tensor([5, 16, 3], device="cpu:1")
    assert repr(x) == "tensor([ 5, 16,  3], device='cpu:1')"
    w = client.tensor([1.0, 2.0], requires_grad=True)
    tw = torch.tensor([1.0, 2.0], requires_grad=True)
    assert repr(w) == repr(tw)
    assert repr(w * 2) == repr(tw * 2)
    assert repr((w * 2).sum()) == repr((tw * 2).sum())


def test_format_tensor_cuda_example():
    assert format_tensor([3], tensord.int64, [5, 16, 3], "cuda:0") == \
        "tensor([ 5, 16,  3], device='cuda:0')"
