"""Progress of a large transfer, when asked: a tqdm-style line on stderr.

Contract:
  * bar(progress, total, desc) -> a Progress for a transfer of `total`
    bytes when `progress` is true and total > PROGRESS_MIN_BYTES, else
    None (callers skip the updates). A Progress is tqdm's own bar
    (unit "B", scaled by 1024, on sys.stderr) when tqdm is importable, else
    a minimal built-in line of the same form, redrawn in place with "\\r":
        "fetch tensor 9223...: 100%|##########| 12.0M/12.0M [00:00, 1.2GB/s]"
    update(n) adds n bytes done; close() completes the line (a newline);
    both are no-ops after close(). Used as a context manager, close() runs
    on exit.
  * whole(progress, total, desc) -> one line for several transfers of
    `total` bytes together (tensord.save/load: the file's tensors), a Whole
    when bar() would draw one, else None. Passed as those transfers'
    `progress`, bar(whole, n, desc) is that transfer's part of it (whatever
    its size): its updates advance the whole line (past n bytes they count
    nothing) and its close() leaves the line open; the Whole's close()
    completes it.
Thread-safety: one Progress (one Whole) belongs to one transfer (one
sequence of transfers) on one thread.
"""
import sys
import time

PROGRESS_MIN_BYTES = 1 << 20  # smaller transfers show nothing
_BAR_WIDTH = 10
_MIN_REDRAW_S = 0.1


def bar(progress, total, desc):
    if isinstance(progress, Whole):
        return progress.part(total)
    if not progress or total <= PROGRESS_MIN_BYTES:
        return None
    try:
        from tqdm import tqdm
    except ImportError:
        return _Line(total, desc)
    return tqdm(total=total, desc=desc, unit="B", unit_scale=True, unit_divisor=1024,
                file=sys.stderr, leave=True)


def whole(progress, total, desc):
    line = bar(progress, total, desc)
    return None if line is None else Whole(line)


class Whole:
    """One line over several transfers; bar(whole, n, desc) gives each its part."""

    def __init__(self, line):
        self._line = line

    def part(self, total):
        return _Part(self._line, total)

    def close(self):
        self._line.close()


class _Part:
    """One transfer's `total` bytes of a Whole's line. Its owner (the
    dispatcher) tops it up to `total` when the transfer is done, which
    covers the paths that report no chunks (inline, Read, shared memory);
    a retried chunk reported twice cannot push the line past the file."""

    def __init__(self, line, total):
        self._line = line
        self.total = total
        self.n = 0

    def update(self, n):
        n = max(0, min(n, self.total - self.n))
        if n:
            self.n += n
            self._line.update(n)

    def close(self):
        pass  # the line goes on with the next transfer; the Whole's owner closes it


def _size(n):
    """1.5M, 12.0G: bytes as tqdm's unit_scale with unit_divisor 1024 shows them."""
    for unit in ("", "k", "M", "G", "T"):
        if abs(n) < 999.5 or unit == "T":
            return f"{n:.1f}{unit}" if unit else f"{n:.0f}"
        n /= 1024
    return f"{n:.1f}P"


def _clock(seconds):
    minutes, seconds = divmod(int(seconds), 60)
    return f"{minutes:02d}:{seconds:02d}"


class _Line:
    """tqdm's line, minimally: desc, percent, bar, sizes, elapsed time, rate."""

    def __init__(self, total, desc):
        self.total = total
        self.n = 0
        self._desc = desc
        self._start = time.monotonic()
        self._drawn = 0.0
        self._closed = False
        self._draw()

    def _draw(self, end=""):
        elapsed = time.monotonic() - self._start
        fraction = min(self.n / self.total, 1.0) if self.total else 1.0
        filled = int(fraction * _BAR_WIDTH)
        rate = f"{_size(self.n / elapsed)}B/s" if elapsed > 0 and self.n else "?B/s"
        line = (f"{self._desc}: {fraction * 100:3.0f}%|{'#' * filled:<{_BAR_WIDTH}}| "
                f"{_size(self.n)}B/{_size(self.total)}B [{_clock(elapsed)}, {rate}]")
        sys.stderr.write("\r" + line + end)
        sys.stderr.flush()
        self._drawn = time.monotonic()

    def update(self, n):
        if self._closed or not n:
            return
        self.n += n
        if time.monotonic() - self._drawn >= _MIN_REDRAW_S or self.n >= self.total:
            self._draw()

    def close(self):
        if not self._closed:
            self._closed = True
            self._draw("\n")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False
