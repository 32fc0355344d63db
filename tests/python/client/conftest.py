"""Fixtures of the client package's tests: connect()'s default mode and a client of the shared daemon.

The daemon is tests/python/conftest.py's (`tensord --host-devices 2`).
--pipeline=on (the default) or off is what tensord.connect() does when a
test does not say (connect(pipeline=...)): CTest runs this folder in both
modes, as python_client_pytest_stream and python_client_pytest_unary.
"""
import pytest

import tensord


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


@pytest.fixture
def client(daemon, pipeline_mode):
    c = tensord.connect(daemon.address)
    assert c.pipelined == pipeline_mode
    yield c
    c.close()


@pytest.fixture(scope="module")
def torch_one_thread():
    """torch at one thread for a module's tests (the comparisons with torch)."""
    import torch
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
