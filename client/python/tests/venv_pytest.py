"""CTest's entry to the Python client tests: install the package into a fresh venv, offline, and run pytest.

  venv_pytest.py VENV_DIR TENSORD_BINARY [pytest args...]

Creates VENV_DIR with `python3 -m venv --system-site-packages` (Debian's
python3-grpcio, -protobuf, -numpy, -pytest and -torch show through), installs
client/python into it with `pip install --no-build-isolation --no-index` (no
network: the stubs come from the system protoc and grpc_python_plugin when
grpcio-tools is absent), then runs this directory's tests against
TENSORD_BINARY from outside the source tree, so they import the installed
package: twice, with the command stream (--pipeline=on) and with unary
calls (--pipeline=off). Exits with the first failing run's status (or the
failing step's).
"""
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE = os.path.dirname(HERE)


def run(command, **kwargs):
    print("+", " ".join(command), flush=True)
    result = subprocess.run(command, **kwargs)
    if result.returncode != 0:
        sys.exit(result.returncode)


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    venv, tensord = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    shutil.rmtree(venv, ignore_errors=True)
    run([sys.executable, "-m", "venv", "--system-site-packages", venv])
    python = os.path.join(venv, "bin", "python")
    run([python, "-m", "pip", "install", "--quiet", "--no-build-isolation", "--no-index",
         "--no-cache-dir", PACKAGE])
    status = 0
    for mode in ("on", "off"):
        print(f"--- pipeline={mode}", flush=True)
        result = subprocess.run([python, "-m", "pytest", "-q", "-p", "no:cacheprovider", HERE,
                                 f"--tensord={tensord}", f"--pipeline={mode}", *sys.argv[3:]],
                                cwd=venv)
        status = status or result.returncode
    sys.exit(status)


if __name__ == "__main__":
    main()
