"""Runs `systemd-analyze verify` on deploy/systemd/tensord.service.

    tests/python/run_pytest.py --env TENSORD_BINARY=BUILD/server/tensord \
        tests/python/deploy/test_systemd_unit.py

verify refuses a unit whose ExecStart binary does not exist, and the unit
names the installed path (/usr/local/bin/tensord). So the unit is copied to a
temporary directory with ExecStart pointing at the tensord just built, and
verified there. verify reports most mistakes (unknown keys or sections, bad
values) as warnings with exit status 0, so any line of its output that
mentions the unit fails the test too, not only a nonzero exit.

The unit documents optional settings as commented-out lines (`#LoadCredential=`
and `#Environment=TENSORD_...` for the token and TLS credentials). A second
pass verifies the unit with those lines enabled, so the documented options
are valid too.

Skips when systemd-analyze is not installed (the run exits 77: CTest skips).
"""
import os
import pathlib
import re
import shutil
import subprocess
import tempfile

import pytest

UNIT = pathlib.Path(__file__).resolve().parents[3] / "deploy" / "systemd" / "tensord.service"


def test_the_unit_verifies_as_written_and_with_its_options():
    analyze = shutil.which("systemd-analyze") or "/usr/bin/systemd-analyze"
    if not os.access(analyze, os.X_OK):
        pytest.skip("systemd-analyze not found (Debian package: systemd)")
    binary = os.path.abspath(os.environ.get("TENSORD_BINARY") or pytest.skip(
        "no tensord binary: set TENSORD_BINARY"))
    assert os.access(binary, os.X_OK), f"tensord binary {binary} is not executable"

    unit_name = UNIT.name
    text = UNIT.read_text(encoding="utf-8")
    # Only the program is replaced; its arguments stay as written.
    rewritten, n = re.subn(r"^ExecStart=(\S+)", lambda m: "ExecStart=" + binary,
                           text, count=1, flags=re.MULTILINE)
    assert n == 1, f"{UNIT} has no ExecStart= line"

    enabled, n_opt = re.subn(r"^#((?:LoadCredential|Environment=TENSORD_)\S*)",
                             r"\1", rewritten, flags=re.MULTILINE)
    passes = [("as written", rewritten)]
    if n_opt:
        passes.append((f"with its {n_opt} commented-out options enabled", enabled))
    failed = [what for what, text_ in passes if not verify(analyze, unit_name, text_, what)]
    assert not failed, f"systemd-analyze verify complained ({', '.join(failed)}): see above"


def verify(analyze: str, unit_name: str, text: str, what: str) -> bool:
    with tempfile.TemporaryDirectory() as tmp:
        copy = os.path.join(tmp, unit_name)
        with open(copy, "w", encoding="utf-8") as f:
            f.write(text)
        cmd = [analyze, "verify", "--man=no", "--generators=no",
               "--recursive-errors=no", copy]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        output = (proc.stdout + proc.stderr).replace(tmp + "/", "")

    print(f"$ {' '.join(cmd[:-1] + [unit_name])}    # {what}")
    if output.strip():
        print(output.rstrip())
    ours = [line for line in output.splitlines() if unit_name in line]
    if proc.returncode != 0 or ours:
        print(f"FAIL: systemd-analyze verify exited {proc.returncode} with "
              f"{len(ours)} complaint(s) about {unit_name} ({what})")
        return False
    print(f"ok: {unit_name} verifies cleanly ({what})")
    return True

