"""Starts a real `tensord` daemon on a free loopback port for a test.

Used by the end-to-end tests (ctest runs them with Debian's /usr/bin/python3).
The daemon writes its bound port to a file; stop() sends SIGTERM and checks
the daemon shut down cleanly.
"""
import os
import signal
import subprocess
import tempfile
import time


class Daemon:
    def __init__(self, tensord, *flags):
        self._dir = tempfile.TemporaryDirectory(prefix="tensord-e2e-")
        port_file = os.path.join(self._dir.name, "port")
        self.log_path = os.path.join(self._dir.name, "tensord.log")
        self._log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [tensord, "--listen", "127.0.0.1:0", "--port-file", port_file, *flags],
            stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.time() + 30
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"tensord exited with {self.proc.returncode}:\n{self.log()}")
            if os.path.exists(port_file) and open(port_file).read().strip():
                self.address = "127.0.0.1:" + open(port_file).read().strip()
                return
            time.sleep(0.05)
        self.proc.kill()
        raise RuntimeError("tensord did not start within 30 s:\n" + self.log())

    def log(self):
        self._log.flush()
        with open(self.log_path) as f:
            return f.read()

    def stop(self):
        """SIGTERM; returns the exit code (0 expected) and the log."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise RuntimeError("tensord ignored SIGTERM for 30 s:\n" + self.log())
        return self.proc.returncode, self.log()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._log.close()
        self._dir.cleanup()
