"""Progress of large transfers, when asked (_progress.py): a tqdm-style line on stderr."""
import re
import sys
import types

import numpy as np

from tensord import _progress

MIB = 1 << 20
# The built-in line: "fetch tensor 9223...: 100%|##########| 12.0MB/12.0MB [00:00, 1.2GB/s]"
_DONE = re.compile(r"(upload to cpu|fetch tensor \d+): 100%\|#{10}\| "
                   r"(\d+\.\d[kMG])B/\2B \[\d\d:\d\d, [\d.]+[kMG]?B/s\]\n$")


def _without_tqdm(monkeypatch):
    monkeypatch.setitem(sys.modules, "tqdm", None)  # import tqdm raises ImportError


def test_large_transfers_draw_a_line_when_asked(client, capsys, monkeypatch):
    _without_tqdm(monkeypatch)
    a = np.arange(3 * MIB, dtype=np.float32)  # 12 MiB: Upload and Fetch streams
    x = client.from_numpy(a, progress=True)
    err = capsys.readouterr().err
    assert err.startswith("\rupload to cpu:   0%|          | 0B/12.0MB [00:00, ?B/s]")
    assert _DONE.search(err.rsplit("\r", 1)[-1]), err[-200:]
    assert "12.0MB/12.0MB" in err

    got = x.numpy(progress=True)
    err = capsys.readouterr().err
    np.testing.assert_array_equal(got, a)
    last = err.rsplit("\r", 1)[-1]
    assert _DONE.search(last) and f"fetch tensor {x.handle}: 100%" in last, err[-200:]


def test_nothing_is_drawn_unasked_or_small(client, capsys, monkeypatch):
    _without_tqdm(monkeypatch)
    a = np.arange(3 * MIB, dtype=np.float32)
    np.testing.assert_array_equal(client.from_numpy(a).numpy(), a)
    small = np.arange(1000, dtype=np.float32)  # under the threshold
    assert client.from_numpy(small, progress=True).numpy(progress=True).tolist() == \
        small.tolist()
    assert capsys.readouterr().err == ""


def test_the_shared_memory_path_reports_too(client, capsys, monkeypatch):
    _without_tqdm(monkeypatch)
    assert client.enable_shared_memory(8 * MIB), client.shared_memory_reason
    a = np.arange(MIB, dtype=np.int32)  # 4 MiB through the region
    x = client.from_numpy(a, progress=True)
    assert _DONE.search(capsys.readouterr().err)
    np.testing.assert_array_equal(x.numpy(progress=True), a)
    assert _DONE.search(capsys.readouterr().err)


def test_tqdm_is_used_when_importable(client, monkeypatch):
    bars = []

    class FakeTqdm:
        def __init__(self, total, desc, **kwargs):
            self.total, self.desc, self.kwargs, self.n, self.closed = total, desc, kwargs, 0, False
            bars.append(self)

        def update(self, n):
            self.n += n

        def close(self):
            self.closed = True

    monkeypatch.setitem(sys.modules, "tqdm", types.SimpleNamespace(tqdm=FakeTqdm))
    a = np.arange(2 * MIB, dtype=np.float32)
    x = client.from_numpy(a, progress=True)
    np.testing.assert_array_equal(x.numpy(progress=True), a)
    assert [(b.desc, b.total, b.n, b.closed) for b in bars] == [
        ("upload to cpu", a.nbytes, a.nbytes, True),
        (f"fetch tensor {x.handle}", a.nbytes, a.nbytes, True)]
    assert bars[0].kwargs["unit"] == "B" and bars[0].kwargs["unit_scale"]


def test_the_line_formats_sizes_as_tqdm():
    assert _progress._size(999) == "999"
    assert _progress._size(12 * MIB) == "12.0M"
    assert _progress._size(3 << 30) == "3.0G"
