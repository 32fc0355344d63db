"""The one runner of the Python tests (tests/python): CTest calls it for every Python test entry.

  run_pytest.py --make-venv VENV
      Makes VENV with `python3 -m venv --system-site-packages` (Debian's
      python3-grpcio, -protobuf, -numpy, -pytest and -torch show through) and
      installs client/python into it offline (`pip install --no-build-isolation
      --no-index`: the stubs come from the system protoc and
      grpc_python_plugin when grpcio-tools is absent).
  run_pytest.py [--venv VENV] [--env NAME=VALUE]... TESTS [pytest args...]
      Runs pytest on TESTS (a file or folder under tests/python) with VENV's
      python (the installed `tensord` package), or with this interpreter
      (Debian's /usr/bin/python3, torch included) without --venv. NAME=VALUE
      pairs go into the tests' environment (TENSORD_BINARY: the daemon).

The tests run from the current directory (CTest's: the build tree), so the
client tests import the installed package, never client/python/src; pytest
writes no cache into the source tree. Exits with pytest's status: 0 passed,
77 when every test skipped (conftest.py), else a failure.
"""
import argparse
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
PACKAGE = os.path.join(REPO, "client", "python")


def run(command, **kwargs):
    print("+", " ".join(command), flush=True)
    result = subprocess.run(command, **kwargs)
    if result.returncode != 0:
        sys.exit(result.returncode)


def make_venv(venv):
    shutil.rmtree(venv, ignore_errors=True)
    run([sys.executable, "-m", "venv", "--system-site-packages", venv])
    run([os.path.join(venv, "bin", "python"), "-m", "pip", "install", "--quiet",
         "--no-build-isolation", "--no-index", "--no-cache-dir", PACKAGE])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--make-venv", metavar="VENV")
    parser.add_argument("--venv")
    parser.add_argument("--env", action="append", default=[], metavar="NAME=VALUE")
    args, pytest_args = parser.parse_known_args()
    if args.make_venv:
        make_venv(os.path.abspath(args.make_venv))
        return 0
    if not pytest_args:
        parser.error("no tests named")
    python = os.path.join(os.path.abspath(args.venv), "bin", "python") if args.venv \
        else sys.executable
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    for pair in args.env:
        name, _, value = pair.partition("=")
        env[name] = value
    command = [python, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
               f"--rootdir={HERE}", "--confcutdir", HERE, *pytest_args]
    print("+", " ".join(command), flush=True)
    return subprocess.run(command, env=env).returncode


if __name__ == "__main__":
    sys.exit(main())
