"""Seed 001's training loop (examples/train_cifar_net.py) trains its Net to the C++ example's bar.

The example runs in-process against the test daemon, eagerly as the seed's
code does, on the synthetic patterns (4,000 images, 2 epochs, batch 8,
lr 0.01, as examples/train_cifar_net.cc): at least 60% of 1,000 held-out
images right (it gets over 90%), in about 10 s on two cores. The "GPU" is
the daemon's second host device (cpu:1), so the seed's `.to(device)` moves
every batch. Shorter runs check that the captured-step mode (--capture: one
Execute a step) prints the eager loop's losses, and the seed's per-class cell. Afterwards the session holds nothing: training leaks
neither tensors nor autograd memory (client.tensors(), client.held()).
"""
import gc
import importlib.util
import pathlib

import pytest

REPO = pathlib.Path(__file__).resolve().parents[3]
EXAMPLE = str(REPO / "client" / "python" / "examples" / "train_cifar_net.py")


@pytest.fixture(scope="module")
def example():
    spec = importlib.util.spec_from_file_location("train_cifar_net", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_seed_001_trains_to_the_cpp_examples_bar(client, example, tmp_path, capsys):
    accuracy = example.main(["--device", "cpu:1", "--log-every", "250",
                             "--out", str(tmp_path / "cifar_net.safetensors")], client)
    out = capsys.readouterr().out
    assert accuracy >= 60, out
    assert "[2,   500] loss: " in out and "Finished Training" in out, out
    assert "Accuracy of the network on the 1000 test images: " in out, out
    assert (tmp_path / "cifar_net.safetensors").stat().st_size > 240_000  # 62,006 floats
    # Its net, optimizer and batches are gone: nothing stays on the server.
    gc.collect()
    assert client.tensors() == [] and client.held() == [] and client.held_bytes() == 0


def _loss_lines(out):
    return [line for line in out.splitlines() if " loss: " in line]


def test_seed_001_captured_steps_print_the_eager_losses(daemon, example, tmp_path, capsys):
    common = ["--address", daemon.address, "--train", "200", "--test", "100", "--epochs", "1",
              "--log-every", "5", "--out", str(tmp_path / "net.safetensors")]
    example.main(common)
    eager = capsys.readouterr().out
    example.main(common + ["--capture", "--per-class"])
    captured = capsys.readouterr().out
    assert len(_loss_lines(eager)) == 5
    assert _loss_lines(captured) == _loss_lines(eager), (eager, captured)
    assert "Accuracy of horizontal : " in captured and "Accuracy of     x : " in captured
