"""What every Python test shares: the daemon under test and how a run reports.

Options (run_pytest.py passes them; by hand: `pytest tests/python/... --tensord=build/server/tensord`):
  --tensord PATH      the daemon to test against (default $TENSORD_BINARY); it is
                      also exported as $TENSORD_BINARY for the unittest-style
                      proto tests. Tests that need it skip, saying so, without it.
  --pipeline on|off   what tensord.connect() does when a client test does not
                      say (tests/python/client/conftest.py).

The `daemon` fixture is one `tensord --host-devices 2` for the whole run
(daemon.py); it must stop cleanly (exit 0 on SIGTERM). A run in which every
test skipped exits 77, which CTest reports as skipped (SKIP_RETURN_CODE).
"""
import os

import pytest

from daemon import Daemon

SKIPPED_RUN = 77


def pytest_addoption(parser):
    parser.addoption("--tensord", default=os.environ.get("TENSORD_BINARY", ""),
                     help="path of the tensord daemon to test against")
    parser.addoption("--pipeline", default="on", choices=("on", "off"),
                     help="connect()'s default: the command stream (on) or unary calls")


def pytest_configure(config):
    binary = config.getoption("--tensord")
    if binary:
        os.environ["TENSORD_BINARY"] = os.path.abspath(binary)


def pytest_sessionfinish(session, exitstatus):
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    stats = reporter.stats if reporter is not None else {}
    if exitstatus == 0 and stats.get("skipped") and not stats.get("passed"):
        session.exitstatus = SKIPPED_RUN


def tensord_binary():
    """The daemon under test; skips the calling test when none was given."""
    binary = os.environ.get("TENSORD_BINARY", "")
    if not binary:
        pytest.skip("no tensord binary: set TENSORD_BINARY or pass --tensord")
    return binary


@pytest.fixture(scope="session")
def daemon():
    d = Daemon(tensord_binary(), "--host-devices", "2")
    yield d
    try:
        code, log = d.stop()
        assert code == 0, log
    finally:
        d.close()
