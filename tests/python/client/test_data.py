"""tensord.data: the synthetic patterns are deterministic by seed, CIFAR-10's batches parse, batches are server tensors."""
import numpy as np
import pytest

import tensord
from tensord import data


def test_synthetic_patterns_are_deterministic_by_seed():
    a, b, c = (data.synthetic_patterns(50, seed) for seed in (3, 3, 4))
    assert a.images.shape == (50, 3, 32, 32) and a.images.dtype == np.float32
    assert a.labels.dtype == np.int64 and set(a.labels) <= set(range(10))
    np.testing.assert_array_equal(a.images, b.images)
    np.testing.assert_array_equal(a.labels, b.labels)
    assert not np.array_equal(a.images, c.images)
    assert len(a.classes) == 10 and len(a) == 50
    image, label = a[0]
    assert image.shape == (3, 32, 32) and label == a.labels[0]


def test_a_class_is_a_shape_not_a_colour():
    s = data.synthetic_patterns(2000, 0)
    for k in range(10):
        mean_colour = s.images[s.labels == k].mean(axis=(0, 2, 3))
        assert np.all(np.abs(mean_colour) < 0.1), (s.classes[k], mean_colour)


def test_load_cifar10_reads_binary_batches(tmp_path):
    rng = np.random.default_rng(0)
    records = rng.integers(0, 256, (5, 3073), dtype=np.uint8)
    records[:, 0] = [0, 9, 3, 3, 1]
    records.tofile(tmp_path / "test_batch.bin")
    s = data.load_cifar10(str(tmp_path), train=False)
    assert s.labels.tolist() == [0, 9, 3, 3, 1] and s.classes[0] == "plane"
    np.testing.assert_allclose(s.images[1, 2, 31, 31], records[1, -1] / 255 * 2 - 1, rtol=1e-6)
    records[:, :10].tofile(tmp_path / "test_batch.bin")
    with pytest.raises(ValueError, match="not a whole number of 3073-byte"):
        data.load_cifar10(str(tmp_path), train=False)
    with pytest.raises(FileNotFoundError):
        data.load_cifar10(str(tmp_path), train=True)


def test_the_loader_yields_server_tensors(client):
    s = data.synthetic_patterns(10, 1)
    loader = data.DataLoader(s, batch_size=4, shuffle=True, seed=5, client=client,
                             device="cpu:1")
    assert len(loader) == 3
    batches = list(loader)
    assert [b[0].shape[0] for b in batches] == [4, 4, 2]
    images, labels = batches[0]
    assert images.device == "cpu:1" and images.dtype == tensord.float32
    assert labels.dtype == tensord.int64
    seen = np.concatenate([b[1].numpy() for b in batches])
    assert sorted(seen.tolist()) == sorted(s.labels.tolist())
    first = labels.numpy()
    index = [int(np.flatnonzero((s.images == img).all(axis=(1, 2, 3)))[0])
             for img in images.numpy()]
    np.testing.assert_array_equal(s.labels[index], first)
    again = [b[1].numpy().tolist() for b in loader]  # a new order each pass
    assert again != [b[1].numpy().tolist() for b in batches]
