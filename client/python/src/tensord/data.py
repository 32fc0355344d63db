"""tensord.data: the seeds' datasets and torch's DataLoader, with batches on the server.

Contract:
  * Dataset: `images`, a float32 numpy array (N, C, H, W) already transformed
    as the seeds do (ToTensor's [0, 1], then Normalize(0.5, 0.5): [-1, 1]);
    `labels`, int64 (N,); `classes`, the class names. len(d) and d[i] ->
    (image, label) as torch's datasets.
  * synthetic_patterns(n, seed): n 3x32x32 images of 10 classes of spatial
    patterns (stripes in four orientations, checkerboard, spot, ring,
    cross, frame, X) in random colours and positions plus noise, each class's
    mean colour near 0, so a CNN must learn shapes: the Python port of the
    C++ client's SyntheticPatterns (tensord/data.h), same distributions,
    deterministic by seed (numpy's generator, so not the C++ values).
  * load_cifar10(root, train=True): CIFAR-10's binary batches
    (cifar-10-batches-bin: data_batch_1..5.bin or test_batch.bin) under
    `root`; FileNotFoundError when missing, ValueError when malformed.
  * DataLoader(dataset, batch_size=1, shuffle=False, seed=0, client=None,
    device="cpu"): iterating yields [images, labels] per batch as tensord
    Tensors on `device` of `client` (default: tensord's default client),
    float32 (B, C, H, W) and int64 (B,), as torch's DataLoader yields host
    tensors (the server's cpu device is the host here; the seed's
    `data[0].to(device)` then moves them). With shuffle, each pass draws a
    new order from a generator seeded once by `seed`; the last batch may be
    smaller; len() is the number of batches.
Thread-safety: a Dataset is read-only; a DataLoader is for one thread.
"""
import os

import numpy as np

PATTERN_CLASSES = ("horizontal", "vertical", "diagonal", "antidiagonal", "checkerboard",
                   "spot", "ring", "cross", "frame", "x")
CIFAR10_CLASSES = ("plane", "car", "bird", "cat", "deer", "dog", "frog", "horse", "ship",
                   "truck")
_CIFAR_RECORD_BYTES = 1 + 3 * 32 * 32


class Dataset:
    def __init__(self, images, labels, classes):
        if len(images) != len(labels):
            raise ValueError(f"{len(images)} images but {len(labels)} labels")
        self.images = np.ascontiguousarray(images, dtype=np.float32)
        self.labels = np.ascontiguousarray(labels, dtype=np.int64)
        self.classes = tuple(classes)

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, index):
        return self.images[index], int(self.labels[index])


def _pattern(k, x, y, p):
    """Class k's pattern in [0, 1] on the pixel grid (x, y), for images whose
    parameters are the (n, 1, 1) arrays of `p`."""
    dx, dy = x - p["cx"], y - p["cy"]
    d = np.sqrt(dx * dx + dy * dy)
    size = p["size"]

    def stripes(t):
        return np.sin(2 * np.pi * (t + p["phase"]) / p["period"]) > 0

    if k == 0:
        return stripes(y)
    if k == 1:
        return stripes(x)
    if k == 2:
        return stripes((x + y) / np.sqrt(2))
    if k == 3:
        return stripes((x - y) / np.sqrt(2))
    if k == 4:
        cells = (np.floor((x + p["phase"]) / p["cell"]).astype(np.int64)
                 + np.floor((y + p["phase"]) / p["cell"]).astype(np.int64))
        return cells % 2 != 0
    if k == 5:
        return np.exp(-d * d / (2 * 0.3 * size * size * 0.3))
    if k == 6:
        return np.exp(-(d - size) ** 2 / 2.0)
    if k == 7:
        return (np.abs(dx) < 1.5) | (np.abs(dy) < 1.5)
    if k == 8:
        edge = np.maximum(np.abs(dx), np.abs(dy))
        return (edge < size) & (edge > size - 2)
    return ((np.abs(dx - dy) < 1.5) | (np.abs(dx + dy) < 1.5)) & (d < size + 2)


def synthetic_patterns(n, seed):
    """n synthetic 3x32x32 images of PATTERN_CLASSES (see the module's contract)."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 10, size=n)
    period = rng.uniform(4, 7, n)
    params = {"period": period, "phase": rng.uniform(0, 1, n) * period,
              "cx": rng.uniform(11, 21, n), "cy": rng.uniform(11, 21, n),
              "size": rng.uniform(6, 10, n), "cell": rng.uniform(3, 5, n)}
    sign = np.where(rng.uniform(0, 1, (n, 3)) < 0.5, -1.0, 1.0)
    colour = rng.uniform(0.4, 1.0, (n, 3)) * sign
    background = rng.uniform(-0.3, 0.3, (n, 3))
    y, x = np.mgrid[0:32, 0:32].astype(np.float64)
    pattern = np.empty((n, 32, 32))
    for k in range(10):
        chosen = labels == k
        subset = {name: value[chosen, None, None] for name, value in params.items()}
        pattern[chosen] = _pattern(k, x, y, subset)
    images = (background[:, :, None, None]
              + colour[:, :, None, None] * (2 * pattern[:, None] - 1) * 0.8
              + rng.normal(0, 0.35, (n, 3, 32, 32)))
    return Dataset(images.astype(np.float32), labels, PATTERN_CLASSES)


def load_cifar10(root, train=True):
    """CIFAR-10's training (or test) set from its binary batches under `root`."""
    names = [f"data_batch_{i}.bin" for i in range(1, 6)] if train else ["test_batch.bin"]
    records = []
    for name in names:
        path = os.path.join(root, name)
        raw = np.fromfile(path, dtype=np.uint8)
        if raw.size == 0 or raw.size % _CIFAR_RECORD_BYTES:
            raise ValueError(f"{path}: {raw.size} bytes is not a whole number of "
                             f"{_CIFAR_RECORD_BYTES}-byte CIFAR-10 records")
        records.append(raw.reshape(-1, _CIFAR_RECORD_BYTES))
    records = np.concatenate(records)
    labels = records[:, 0].astype(np.int64)
    if labels.max() > 9:
        raise ValueError(f"{root}: label {labels.max()} is not a class (0-9)")
    images = (records[:, 1:].reshape(-1, 3, 32, 32).astype(np.float32) / 255 - 0.5) / 0.5
    return Dataset(images, labels, CIFAR10_CLASSES)


class DataLoader:
    def __init__(self, dataset, batch_size=1, shuffle=False, seed=0, client=None,
                 device="cpu"):
        if client is None:
            from tensord._client import default_client
            client = default_client()
        self.dataset, self.batch_size, self.shuffle = dataset, max(int(batch_size), 1), shuffle
        self._client, self._device = client, device
        self._rng = np.random.default_rng(seed)

    def __len__(self):
        return -(-len(self.dataset) // self.batch_size)

    def __iter__(self):
        order = np.arange(len(self.dataset))
        if self.shuffle:
            order = self._rng.permutation(order)
        for first in range(0, len(order), self.batch_size):
            chosen = order[first:first + self.batch_size]
            yield [self._client.from_numpy(self.dataset.images[chosen], self._device),
                   self._client.from_numpy(self.dataset.labels[chosen], self._device)]
