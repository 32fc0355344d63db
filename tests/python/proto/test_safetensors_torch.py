"""Weights round-trip between PyTorch and tensord::nn through safetensors:
PyTorch's seed-001 Net writes its state_dict as a safetensors file (this
test's own writer: the `safetensors` package is not in Debian 12), the C++
example train_cifar_net loads it into its tensord::nn Net on a real daemon
(--load) and saves it back (--out) without training: every tensor comes
back with PyTorch's key name, shape and exact values. Then it trains a few
steps and the file it writes loads into PyTorch's Net with
load_state_dict(strict=True). Needs Debian's python3-torch (test-only).

  tests/python/run_pytest.py --env TENSORD_BINARY=BUILD/server/tensord \
      --env TENSORD_TRAIN_CIFAR_NET=BUILD/examples/train_cifar_net \
      tests/python/proto/test_safetensors_torch.py
"""
import json
import os
import struct
import subprocess
import tempfile
import unittest

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from daemon import Daemon  # tests/python/daemon.py

TENSORD = os.environ.get("TENSORD_BINARY") or pytest.skip(
    "no tensord binary: set TENSORD_BINARY", allow_module_level=True)
PROGRAM = os.environ.get("TENSORD_TRAIN_CIFAR_NET") or pytest.skip(
    "no train_cifar_net: set TENSORD_TRAIN_CIFAR_NET", allow_module_level=True)
DTYPES = {"F32": np.float32, "F64": np.float64, "I64": np.int64}


class Net(nn.Module):  # seed 001's, as written there
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 6, 5)
        self.pool = nn.MaxPool2d(2, 2)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.fc1 = nn.Linear(16 * 5 * 5, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, 10)

    def forward(self, x):
        x = self.pool(F.relu(self.conv1(x)))
        x = self.pool(F.relu(self.conv2(x)))
        x = torch.flatten(x, 1)
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        return self.fc3(x)


def write_safetensors(path, tensors):
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        data = tensors[name].detach().numpy().astype(np.float32).tobytes()
        header[name] = {"dtype": "F32", "shape": list(tensors[name].shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def read_safetensors(path):
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    body = blob[8 + n:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        out[name] = np.frombuffer(body[begin:end], dtype=DTYPES[info["dtype"]]
                                  ).reshape(info["shape"])
    return out


class SafetensorsTorchTest(unittest.TestCase):
    def run_program(self, daemon, *args):
        run = subprocess.run([PROGRAM, "--address", daemon.address, *args],
                             capture_output=True, text=True, timeout=240)
        self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
        return run.stdout

    def test_round_trip_through_tensord_nn(self):
        torch.manual_seed(0)
        net = Net()
        with tempfile.TemporaryDirectory() as tmp, Daemon(TENSORD) as daemon:
            source = os.path.join(tmp, "torch.safetensors")
            back = os.path.join(tmp, "tensord.safetensors")
            write_safetensors(source, net.state_dict())
            self.run_program(daemon, "--load", source, "--epochs", "0",
                             "--train", "8", "--test", "20", "--out", back)
            got = read_safetensors(back)
            self.assertEqual(sorted(got), sorted(net.state_dict()))
            for name, want in net.state_dict().items():
                np.testing.assert_array_equal(got[name], want.numpy(), err_msg=name)

            trained = os.path.join(tmp, "trained.safetensors")
            out = self.run_program(daemon, "--load", source, "--epochs", "1",
                                   "--train", "64", "--test", "20",
                                   "--batch-size", "8", "--lr", "0.01",
                                   "--log-every", "4", "--out", trained)
            self.assertIn("[1,     8] loss:", out)
            loaded = Net()
            loaded.load_state_dict({k: torch.from_numpy(v.copy())
                                    for k, v in read_safetensors(trained).items()},
                                   strict=True)
            moved = [k for k, v in loaded.state_dict().items()
                     if not torch.equal(v, net.state_dict()[k])]
            self.assertEqual(len(moved), len(net.state_dict()))  # all trained
            self.assertTrue(torch.isfinite(loaded(torch.zeros(1, 3, 32, 32))).all())

