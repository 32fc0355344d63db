"""Fixtures: a real tensord daemon (--host-devices 2) on a free loopback port, and clients.

The daemon binary is $TENSORD_BINARY or --tensord=PATH (CTest passes the
build's); the tests skip, saying so, when neither is given. --pipeline=on
(the default) or off is what tensord.connect() does when a test does not
say (connect(pipeline=...)): venv_pytest.py runs the suite in both modes.
"""
import os
import signal
import subprocess
import tempfile
import time

import pytest

import tensord


def pytest_addoption(parser):
    parser.addoption("--tensord", default=os.environ.get("TENSORD_BINARY", ""),
                     help="path of the tensord daemon to test against")
    parser.addoption("--pipeline", default="on", choices=("on", "off"),
                     help="connect()'s default: the command stream (on) or unary calls")


@pytest.fixture(scope="session", autouse=True)
def pipeline_mode(request):
    """Whether clients pipeline by default in this run (--pipeline)."""
    on = request.config.getoption("--pipeline") == "on"
    original = tensord.connect

    def connect(*args, **kwargs):
        kwargs.setdefault("pipeline", None if on else False)
        return original(*args, **kwargs)

    tensord.connect = connect
    yield on
    tensord.connect = original


class Daemon:
    def __init__(self, binary, *flags):
        self._dir = tempfile.TemporaryDirectory(prefix="tensord-pytest-")
        port_file = os.path.join(self._dir.name, "port")
        self.log_path = os.path.join(self._dir.name, "tensord.log")
        self._log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [binary, "--listen", "127.0.0.1:0", "--port-file", port_file, *flags],
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
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        code = self.proc.returncode
        log = open(self.log_path).read()
        self._dir.cleanup()
        return code, log


@pytest.fixture(scope="session")
def daemon(request):
    binary = request.config.getoption("--tensord")
    if not binary:
        pytest.skip("no tensord binary: set TENSORD_BINARY or pass --tensord")
    d = Daemon(binary, "--host-devices", "2")
    yield d
    code, log = d.stop()
    assert code == 0, log


@pytest.fixture
def client(daemon, pipeline_mode):
    c = tensord.connect(daemon.address)
    assert c.pipelined == pipeline_mode
    yield c
    c.close()
