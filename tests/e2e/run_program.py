"""Runs a client program (an example, tensorctl) against a real daemon.

  run_program.py TENSORD [--daemon-flags "..."] [--expect TEXT]...
                 [--expect-exit N] -- PROGRAM ARGS...

Starts `tensord` on a free port, runs PROGRAM with --address ADDR appended,
checks its exit code and that each --expect TEXT occurs in its output, then
stops the daemon with SIGTERM and checks it exited 0 and logged a clean stop.
"""
import argparse
import os
import shlex
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from daemon import Daemon  # noqa: E402  (tests/python/daemon.py)


def main():
    argv = sys.argv[1:]
    split = argv.index("--")
    parser = argparse.ArgumentParser()
    parser.add_argument("tensord")
    parser.add_argument("--daemon-flags", default="")
    parser.add_argument("--expect", action="append", default=[])
    parser.add_argument("--expect-exit", type=int, default=0)
    parser.add_argument("--timeout", type=int, default=240)
    args = parser.parse_args(argv[:split])
    program = argv[split + 1:]

    with Daemon(args.tensord, *shlex.split(args.daemon_flags)) as daemon:
        run = subprocess.run(program + ["--address", daemon.address],
                             capture_output=True, text=True, timeout=args.timeout)
        output = run.stdout + run.stderr
        print(output)
        failures = []
        if run.returncode != args.expect_exit:
            failures.append(f"exit code {run.returncode}, expected {args.expect_exit}")
        for text in args.expect:
            text = text.encode().decode("unicode_escape")
            if text not in output:
                failures.append(f"output lacks {text!r}")
        code, log = daemon.stop()
        if code != 0:
            failures.append(f"tensord exited {code} after SIGTERM")
        if "tensord stopped" not in log:
            failures.append("tensord did not log a clean stop")
        if failures:
            print("---- tensord log ----\n" + log)
            print("FAILED: " + "; ".join(failures))
            return 1
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
