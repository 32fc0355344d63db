"""Progress of large transfers, when asked (_progress.py): a tqdm-style line on stderr."""
import json
import re
import struct
import sys
import types

import numpy as np
import pytest

import tensord
from tensord import _progress

MIB = 1 << 20
# The built-in line: "fetch tensor 9223...: 100%|##########| 12.0MB/12.0MB [00:00, 1.2GB/s]"
# (tensord.save/load: "save net.safetensors: 100%|...", one for the file).
_DONE = re.compile(r"(upload to cpu|fetch tensor \d+|(?:save|load) [\w.]+): 100%\|#{10}\| "
                   r"(\d+\.\d[kMG])B/\2B \[\d\d:\d\d, [\d.]+[kMG]?B/s\]\n$")
_PERCENT = re.compile(r": +(\d+)%\|")


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


def test_from_torch_and_torch_draw_a_line_when_asked(client, capsys, monkeypatch):
    torch = pytest.importorskip("torch")
    _without_tqdm(monkeypatch)
    base = torch.arange(3 * MIB, dtype=torch.float32)
    # float32 through _from_array, bfloat16 through from_torch's own branch (its bits).
    for t, size in ((base, "12.0M"), (base.to(torch.bfloat16), "6.0M")):
        x = client.from_torch(t, progress=True)
        err = capsys.readouterr().err
        assert err.startswith("\rupload to cpu:   0%|"), err[:200]
        last = err.rsplit("\r", 1)[-1]
        assert _DONE.search(last) and f"{size}B/{size}B" in last, (t.dtype, err[-200:])
        assert x.dtype == (tensord.bfloat16 if t.dtype == torch.bfloat16 else tensord.float32)

        got = x.torch(progress=True)
        err = capsys.readouterr().err
        last = err.rsplit("\r", 1)[-1]
        assert _DONE.search(last) and f"fetch tensor {x.handle}: 100%" in last, err[-200:]
        assert f"{size}B/{size}B" in last
        assert got.dtype == t.dtype and torch.equal(got, t)

        # Unasked: the same transfers draw nothing.
        assert torch.equal(client.from_torch(t).torch(), t)
        assert capsys.readouterr().err == ""


def _lines(err):
    """The lines `err` completes, each as the redraws ("\\r...") of its last state."""
    return [line.rsplit("\r", 1)[-1] for line in err.split("\n")[:-1]]


def test_save_and_load_draw_one_line_for_the_file(client, capsys, monkeypatch, tmp_path):
    _without_tqdm(monkeypatch)
    big = np.arange(3 * MIB, dtype=np.float32)  # 12 MiB: Fetch and Upload streams
    mid = np.arange(MIB // 4, dtype=np.int64)  # 2 MiB
    small = np.arange(1000, dtype=np.float64)  # 8000 B: paths that report no chunks
    tensors = {"big": client.from_numpy(big), "mid": client.from_numpy(mid),
               "small": client.from_numpy(small)}
    path = str(tmp_path / "net.safetensors")
    capsys.readouterr()

    tensord.save(tensors, path, progress=True)
    err = capsys.readouterr().err
    assert "fetch tensor" not in err and "upload" not in err, err[-300:]
    lines = _lines(err)
    assert len(lines) == 1 and err.endswith("\n"), err[-300:]
    total = big.nbytes + mid.nbytes + small.nbytes  # 14.0078 MiB
    assert _DONE.search(lines[0] + "\n") and lines[0].startswith("save net.safetensors: 100%")
    assert "14.0MB/14.0MB" in lines[0], lines[0]
    percents = [int(p) for p in _PERCENT.findall(err)]
    assert percents == sorted(percents) and percents[-1] == 100, percents

    loaded = tensord.load(path, client, progress=True)
    err = capsys.readouterr().err
    assert "fetch tensor" not in err and "upload" not in err, err[-300:]
    lines = _lines(err)
    assert len(lines) == 1, err[-300:]
    assert _DONE.search(lines[0] + "\n") and lines[0].startswith("load net.safetensors: 100%")
    assert "14.0MB/14.0MB" in lines[0], lines[0]
    percents = [int(p) for p in _PERCENT.findall(err)]
    assert percents == sorted(percents) and percents[-1] == 100, percents
    assert list(loaded) == ["big", "mid", "small"]
    for name, a in (("big", big), ("mid", mid), ("small", small)):
        np.testing.assert_array_equal(loaded[name].numpy(), a)
    assert sum(t.nbytes for t in loaded.values()) == total
    assert capsys.readouterr().err == ""


def test_save_and_load_draw_nothing_unasked_or_small(client, capsys, monkeypatch, tmp_path):
    _without_tqdm(monkeypatch)
    big = np.arange(3 * MIB, dtype=np.float32)
    # Two tensors of 600 KiB: 1.2 MiB in all is over the threshold, so it draws,
    # while each one alone would not: the file's size decides.
    halves = {"a": client.from_numpy(np.zeros(150 << 10, np.float32)),
              "b": client.from_numpy(np.ones(150 << 10, np.float32))}
    small = {"s": client.from_numpy(np.arange(1000, dtype=np.float32))}
    path = str(tmp_path / "t.safetensors")
    capsys.readouterr()

    tensord.save({"big": client.from_numpy(big)}, path)
    np.testing.assert_array_equal(tensord.load(path, client)["big"].numpy(), big)
    tensord.save(small, path, progress=True)
    assert tensord.load(path, client, progress=True)["s"].tolist() == list(range(1000))
    assert capsys.readouterr().err == ""

    tensord.save(halves, path, progress=True)
    assert _DONE.search(capsys.readouterr().err)
    loaded = tensord.load(path, client, progress=True)
    assert _DONE.search(capsys.readouterr().err)
    assert loaded["a"].sum().item() == 0 and loaded["b"].sum().item() == 150 << 10


def test_a_failed_load_ends_its_line(client, capsys, monkeypatch, tmp_path):
    _without_tqdm(monkeypatch)
    # 4 MiB, then a dtype tensord lacks, then 4 MiB more: the load stops half way.
    big = np.arange(MIB, dtype=np.float32).tobytes()
    n = len(big)
    header = {"a": {"dtype": "F32", "shape": [MIB], "data_offsets": [0, n]},
              "u8": {"dtype": "U8", "shape": [16], "data_offsets": [n, n + 16]},
              "b": {"dtype": "F32", "shape": [MIB], "data_offsets": [n + 16, 2 * n + 16]}}
    text = json.dumps(header).encode()
    path = tmp_path / "bad.safetensors"
    path.write_bytes(struct.pack("<Q", len(text)) + text + big + bytes(16) + big)
    with pytest.raises(TypeError, match="U8"):
        tensord.load(str(path), client, progress=True)
    err = capsys.readouterr().err
    lines = _lines(err)
    # The line ends (its newline before the traceback) where the uploads stopped:
    # 4 MiB of 8 MiB + 16 B, just under half.
    assert len(lines) == 1 and err.endswith("\n"), err[-300:]
    assert lines[0].startswith("load bad.safetensors:  50%|####      | 4.0MB/8.0MB"), lines


def test_tqdm_draws_one_bar_for_a_file(client, monkeypatch, tmp_path):
    bars = []

    class FakeTqdm:
        def __init__(self, total, desc, **kwargs):
            self.total, self.desc, self.n, self.closed = total, desc, 0, False
            bars.append(self)

        def update(self, n):
            assert not self.closed and n > 0
            self.n += n

        def close(self):
            self.closed = True

    monkeypatch.setitem(sys.modules, "tqdm", types.SimpleNamespace(tqdm=FakeTqdm))
    a, b = np.arange(2 * MIB, dtype=np.float32), np.arange(10, dtype=np.int32)
    path = str(tmp_path / "m.safetensors")
    tensord.save({"a": client.from_numpy(a), "b": client.from_numpy(b)}, path, progress=True)
    loaded = tensord.load(path, client, progress=True)
    np.testing.assert_array_equal(loaded["a"].numpy(), a)
    total = a.nbytes + b.nbytes
    assert [(x.desc, x.total, x.n, x.closed) for x in bars] == [
        ("save m.safetensors", total, total, True), ("load m.safetensors", total, total, True)]


def test_a_whole_counts_each_part_at_most_its_size():
    assert _progress.whole(False, 12 * MIB, "save x") is None
    assert _progress.whole(True, MIB, "save x") is None  # not over the threshold

    class Line:
        n, closed = 0, False

        def update(self, n):
            self.n += n

        def close(self):
            self.closed = True

    line = Line()
    whole = _progress.Whole(line)
    part = _progress.bar(whole, 100, "fetch tensor 1")  # any size: the file decides
    part.update(60)
    part.update(60)  # a chunk counted again (a retry): only its 100 bytes count
    assert (part.n, line.n) == (100, 100)
    part.update(part.total - part.n)  # the dispatcher's top-up at the end: nothing left
    part.update(-5)
    part.close()
    assert (part.n, line.n, line.closed) == (100, 100, False)
    _progress.bar(whole, 50, "upload to cpu").update(50)
    whole.close()
    assert (line.n, line.closed) == (150, True)
