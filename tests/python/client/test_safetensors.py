"""state_dict as safetensors: files the client writes load into torch's seed Net, and back."""
import json
import struct

import numpy as np
import pytest

import tensord
from tensord import nn
from tensord.nn import functional as F


class Net(nn.Module):  # seed 001's, with tensord's nn
    def __init__(self, device):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 6, 5, device=device)
        self.pool = nn.MaxPool2d(2, 2)
        self.conv2 = nn.Conv2d(6, 16, 5, device=device)
        self.fc1 = nn.Linear(16 * 5 * 5, 120, device=device)
        self.fc2 = nn.Linear(120, 84, device=device)
        self.fc3 = nn.Linear(84, 10, device=device)

    def forward(self, x):
        x = self.pool(F.relu(self.conv1(x)))
        x = self.pool(F.relu(self.conv2(x)))
        x = x.flatten(1)
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        return self.fc3(x)


def torch_net():
    torch = pytest.importorskip("torch")
    tnn, tF = torch.nn, torch.nn.functional

    class TorchNet(tnn.Module):  # seed 001's, as written there
        def __init__(self):
            super().__init__()
            self.conv1 = tnn.Conv2d(3, 6, 5)
            self.pool = tnn.MaxPool2d(2, 2)
            self.conv2 = tnn.Conv2d(6, 16, 5)
            self.fc1 = tnn.Linear(16 * 5 * 5, 120)
            self.fc2 = tnn.Linear(120, 84)
            self.fc3 = tnn.Linear(84, 10)

        def forward(self, x):
            x = self.pool(tF.relu(self.conv1(x)))
            x = self.pool(tF.relu(self.conv2(x)))
            x = torch.flatten(x, 1)
            x = tF.relu(self.fc1(x))
            x = tF.relu(self.fc2(x))
            return self.fc3(x)
    return TorchNet()


_TORCH_DTYPE = {"F32": "float32", "F64": "float64", "F16": "float16", "BF16": "bfloat16",
                "I32": "int32", "I64": "int64", "BOOL": "bool"}


def torch_read_safetensors(path):
    """safetensors.torch.load_file's result, read with json + struct (safetensors is not
    installed here)."""
    import torch
    blob = open(path, "rb").read()
    (length,) = struct.unpack_from("<Q", blob)
    header = json.loads(blob[8:8 + length])
    header.pop("__metadata__", None)
    out = {}
    for name, entry in header.items():
        begin, end = entry["data_offsets"]
        raw = bytearray(blob[8 + length + begin:8 + length + end])
        dtype = getattr(torch, _TORCH_DTYPE[entry["dtype"]])
        out[name] = torch.frombuffer(raw, dtype=dtype).reshape(entry["shape"])
    return out


def torch_write_safetensors(path, tensors):
    """safetensors.torch.save_file's format, written with json + struct."""
    import torch
    header, blobs, offset = {}, [], 0
    codes = {v: k for k, v in _TORCH_DTYPE.items()}
    for name in sorted(tensors):
        t = tensors[name].detach().contiguous()
        data = t.view(torch.int16).numpy().tobytes() if t.dtype == torch.bfloat16 \
            else t.numpy().tobytes()
        header[name] = {"dtype": codes[str(t.dtype).replace("torch.", "")],
                        "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def test_state_dict_keys_are_pytorchs(client):
    assert list(Net("cpu").state_dict()) == list(torch_net().state_dict())


def test_file_written_by_the_client_loads_into_torchs_net(client, tmp_path):
    import torch
    net = Net("cpu:1")
    path = str(tmp_path / "net.safetensors")
    tensord.save(net.state_dict(), path)

    blob = open(path, "rb").read()
    (length,) = struct.unpack_from("<Q", blob)
    assert (8 + length) % 8 == 0
    header = json.loads(blob[8:8 + length])
    assert header["__metadata__"] == {"format": "pt"}
    assert header["fc3.bias"]["dtype"] == "F32" and header["fc3.bias"]["shape"] == [10]

    theirs = torch_net()
    theirs.load_state_dict(torch_read_safetensors(path), strict=True)
    x = np.random.default_rng(1).standard_normal((2, 3, 32, 32)).astype(np.float32)
    expected = theirs(torch.from_numpy(x)).detach().numpy()
    got = net(client.from_numpy(x, device="cpu:1")).detach().cpu().numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)


def test_torchs_file_loads_into_the_clients_net(client, tmp_path):
    import torch
    theirs = torch_net()
    path = str(tmp_path / "torch.safetensors")
    torch_write_safetensors(path, theirs.state_dict())

    loaded = tensord.load(path, client, device="cpu:1")
    assert list(loaded) == sorted(theirs.state_dict())
    assert loaded["conv1.weight"].device == "cpu:1"
    net = Net("cpu:1")
    result = net.load_state_dict(loaded)
    assert result.missing_keys == [] and result.unexpected_keys == []
    weight = net.conv1.weight
    assert weight.requires_grad and weight.is_leaf and weight.grad_fn is None

    x = np.random.default_rng(2).standard_normal((1, 3, 32, 32)).astype(np.float32)
    expected = theirs(torch.from_numpy(x)).detach().numpy()
    got = net(client.from_numpy(x, device="cpu:1")).detach().cpu().numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)


def test_load_state_dict_takes_torch_tensors_and_checks_keys_and_shapes(client):
    theirs = torch_net()
    net = Net("cpu")
    net.load_state_dict(theirs.state_dict())
    np.testing.assert_array_equal(net.fc3.bias.detach().numpy(),
                                  theirs.fc3.bias.detach().numpy())
    partial = dict(theirs.state_dict())
    del partial["fc3.bias"]
    with pytest.raises(RuntimeError, match='Missing key\\(s\\) in state_dict: "fc3.bias"'):
        net.load_state_dict(partial)
    assert net.load_state_dict(partial, strict=False).missing_keys == ["fc3.bias"]
    partial["fc3.bias"] = client.zeros(11)
    with pytest.raises(RuntimeError, match="size mismatch for fc3.bias"):
        net.load_state_dict(partial)


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16", "int32",
                                   "int64", "bool"])
def test_every_dtype_round_trips_bit_exact(client, tmp_path, dtype):
    torch = pytest.importorskip("torch")
    t = (torch.arange(-6, 6).reshape(3, 4) * 1.375).to(getattr(torch, dtype))
    path = str(tmp_path / "t.safetensors")
    tensord.save({"t": client.from_torch(t), "scalar": client.tensor(2.5)}, path)
    assert torch.equal(torch_read_safetensors(path)["t"], t)
    back = tensord.load(path, client)
    assert back["t"].dtype is getattr(tensord, dtype if dtype != "bool" else "bool_")
    assert torch.equal(back["t"].torch(), t) and back["scalar"].item() == 2.5


def test_a_file_that_is_not_safetensors_is_a_value_error(client, tmp_path):
    path = tmp_path / "bad.safetensors"
    path.write_bytes(struct.pack("<Q", 1000) + b"{}")
    with pytest.raises(ValueError, match="not safetensors"):
        tensord.load(str(path), client)
    header = json.dumps({"x": {"dtype": "F32", "shape": [4], "data_offsets": [0, 8]}})
    path.write_bytes(struct.pack("<Q", len(header)) + header.encode() + bytes(8))
    with pytest.raises(ValueError, match="tensor 'x' has offsets"):
        tensord.load(str(path), client)
