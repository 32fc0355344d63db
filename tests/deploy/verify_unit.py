#!/usr/bin/python3
"""Runs `systemd-analyze verify` on deploy/systemd/tensord.service.

    verify_unit.py UNIT TENSORD_BINARY

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

Exit 77 (CTest's skip code here) when systemd-analyze is not installed.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

SKIP = 77


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    unit_path, binary = sys.argv[1], os.path.abspath(sys.argv[2])
    analyze = shutil.which("systemd-analyze") or "/usr/bin/systemd-analyze"
    if not os.access(analyze, os.X_OK):
        print("SKIP: systemd-analyze not found (Debian package: systemd)")
        return SKIP
    if not os.access(binary, os.X_OK):
        print(f"FAIL: tensord binary {binary} is not executable")
        return 1

    unit_name = os.path.basename(unit_path)
    with open(unit_path, encoding="utf-8") as f:
        text = f.read()
    # Only the program is replaced; its arguments stay as written.
    rewritten, n = re.subn(r"^ExecStart=(\S+)", lambda m: "ExecStart=" + binary,
                           text, count=1, flags=re.MULTILINE)
    if n != 1:
        print(f"FAIL: {unit_path} has no ExecStart= line")
        return 1

    enabled, n_opt = re.subn(r"^#((?:LoadCredential|Environment=TENSORD_)\S*)",
                             r"\1", rewritten, flags=re.MULTILINE)
    passes = [("as written", rewritten)]
    if n_opt:
        passes.append((f"with its {n_opt} commented-out options enabled", enabled))

    failed = False
    for what, text_ in passes:
        ok = verify(analyze, unit_name, text_, what)
        failed = failed or not ok
    return 1 if failed else 0


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


if __name__ == "__main__":
    sys.exit(main())
