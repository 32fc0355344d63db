"""A program's --help lists its own flags with their defaults and exits 0.

  tests/python/run_pytest.py --env TENSORD_PROGRAM=NAME=BINARY \
      tests/python/programs/test_help.py

NAME is one of the programs in EXPECTED (CTest: e2e_help_<target>). Runs
BINARY with --help, --version, --helpfull, an unknown flag and a stray word,
and checks exit codes and output (server/program_flags.h says what each must
do).
"""
import os
import re
import subprocess

import pytest

BAD_CONFIG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "e2e",
                          "bad-config.toml")

# A few of each program's flags, as --help spells them, with their defaults.
EXPECTED = {
    "tensord": {
        "listen": '"127.0.0.1:50051"',
        "session-ttl": "1m",
        "host-devices": "1",
        "max-message-bytes": '"64MiB"',
        "insecure": "false",
        "config": '""',
    },
    "tensord-bench": {
        "iterations": "10000",
        "seconds": "3",
        "matmul-sizes": '"256,512,1024,2048,4096"',
        "quick": "false",
    },
    "logging_bench": {
        "steps": "1000",
        "size": "100",
        "address": '""',
    },
    "gpu_bench": {
        "sizes": '"1024,2048,4096,8192"',
        "min-seconds": "1",
        "device": "0",
    },
}


def run(binary, *args, env=None):
    full_env = dict(os.environ)
    full_env.pop("TENSORD_CONFIG", None)
    full_env.update(env or {})
    proc = subprocess.run([binary, *args], capture_output=True, text=True,
                          timeout=120, env=full_env)
    return proc.returncode, proc.stdout, proc.stderr


def check_help(name, binary, failures, env=None, currently=None):
    code, out, err = run(binary, "--help", env=env)
    label = f"{name} --help" + (f" with {env}" if env else "")
    if code != 0:
        failures.append(f"{label}: exit code {code}, expected 0\n{err}")
    if "No flags matched" in out + err:
        failures.append(f"{label}: says 'No flags matched'")
    if f"Usage: {name} [flags]" not in out:
        failures.append(f"{label}: no 'Usage: {name} [flags]' line")
    if f"Example: {name} " not in out:
        failures.append(f"{label}: no example command line")
    for flag, default in EXPECTED[name].items():
        shown = f"  --{flag} (default {default}"
        if shown not in out:
            failures.append(f"{label}: lacks {shown!r}")
    for flag, value in (currently or {}).items():
        shown = f"  --{flag} (default {EXPECTED[name][flag]}; currently {value})"
        if shown not in out:
            failures.append(f"{label}: lacks {shown!r}")
    if "--helpfull" not in out:
        failures.append(f"{label}: does not point to --helpfull")
    return out


def test_help_version_and_bad_flags():
    program = os.environ.get("TENSORD_PROGRAM") or pytest.skip(
        "no program: set TENSORD_PROGRAM=NAME=BINARY")
    name, _, binary = program.partition("=")
    assert name in EXPECTED, f"{name}: not one of {sorted(EXPECTED)}"
    failures = []

    out = check_help(name, binary, failures)
    print(out)

    # Other spellings absl accepts for a bool flag.
    for spelling in ("-help", "--help=true"):
        code, out2, _ = run(binary, spelling)
        if code != 0 or out2 != out:
            failures.append(f"{name} {spelling}: exit {code} or not --help's text")

    code, out, err = run(binary, "--version")
    if code != 0 or not re.fullmatch(rf"{re.escape(name)} \d+\.\d+\.\d+\n", out):
        failures.append(f"{name} --version: exit {code}, printed {out!r} {err!r}")

    # absl's full listing still works: every flag, ours among them.
    code, out, err = run(binary, "--helpfull")
    first = next(iter(EXPECTED[name])).replace("-", "_")
    if f"--{first} " not in out or "No flags matched" in out:
        failures.append(f"{name} --helpfull: lacks --{first} (exit {code})")

    # absl's --help=TEXT: the flags whose name, help or file holds TEXT.
    code, out, err = run(binary, f"--help={first}")
    if f"--{first} " not in out or "No flags matched" in out:
        failures.append(f"{name} --help={first}: lacks --{first} (exit {code})")

    code, out, err = run(binary, "--no-such-flag")
    if code == 0 or "no_such_flag" not in out + err:
        failures.append(f"{name} --no-such-flag: exit {code}, said {out + err!r}")

    code, out, err = run(binary, "stray")
    if code != 2 or "unexpected argument 'stray'" not in err:
        failures.append(f"{name} stray: exit {code}, said {out + err!r}")

    if name == "tensord":
        # The layers below the command line show as current values, and a
        # broken config file does not stop --help (it still stops a start).
        check_help(name, binary, failures,
                   env={"TENSORD_SESSION_TTL": "30s",
                        "TENSORD_LISTEN": "127.0.0.1:7000"},
                   currently={"session-ttl": "30s",
                              "listen": '"127.0.0.1:7000"'})
        check_help(name, binary, failures,
                   env={"TENSORD_CONFIG": BAD_CONFIG})

    assert not failures, "\n".join(failures)
