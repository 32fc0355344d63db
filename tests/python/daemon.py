"""Starts a real `tensord` daemon on a free loopback port: the one helper for every test and bench that needs one.

Used by the Python tests (tests/python/conftest.py's `daemon` fixture and the
proto tests), by tests/e2e/run_program.py (the shipped C++ programs) and by
bench/python_client_bench.py. The daemon binds port 0 and writes the port it
got to a file (`--port-file`), so tests never race for a port.

    with Daemon(binary, "--host-devices", "2") as d:
        ... d.address ...
        code, log = d.stop()          # SIGTERM: the exit code (0 expected), the log

stop() may be called more than once; leaving the `with` (or close()) kills a
daemon that still runs and removes its directory. Not thread-safe.
"""
import os
import signal
import subprocess
import tempfile
import time

START_SECONDS = 30
STOP_SECONDS = 30


class Daemon:
    def __init__(self, binary, *flags):
        self._dir = tempfile.TemporaryDirectory(prefix="tensord-test-")
        port_file = os.path.join(self._dir.name, "port")
        self.log_path = os.path.join(self._dir.name, "tensord.log")
        self._log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [binary, "--listen", "127.0.0.1:0", "--port-file", port_file, *flags],
            stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.time() + START_SECONDS
        while time.time() < deadline:
            if self.proc.poll() is not None:
                log = self.log()
                self.close()
                raise RuntimeError(f"tensord exited with {self.proc.returncode}:\n{log}")
            if os.path.exists(port_file) and open(port_file).read().strip():
                self.address = "127.0.0.1:" + open(port_file).read().strip()
                return
            time.sleep(0.05)
        log = self.log()
        self.close()
        raise RuntimeError(f"tensord did not start within {START_SECONDS} s:\n{log}")

    @property
    def binary(self):
        return self.proc.args[0]

    def log(self):
        """Everything the daemon printed so far."""
        if not self._log.closed:
            self._log.flush()
        with open(self.log_path) as f:
            return f.read()

    def stop(self):
        """SIGTERM, then waits; returns (exit code, log). Raises if SIGTERM is
        ignored for STOP_SECONDS (the daemon is killed first)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=STOP_SECONDS)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise RuntimeError(f"tensord ignored SIGTERM for {STOP_SECONDS} s:\n"
                                   + self.log())
        return self.proc.returncode, self.log()

    def close(self):
        """Kills the daemon if it still runs and removes its files."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if not self._log.closed:
            self._log.close()
        self._dir.cleanup()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
