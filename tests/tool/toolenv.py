"""Shared helpers for the `fastsock` tool tests (tests/tool/test_*.py).

Meson passes FASTSOCK_TOOL (the built tool), FASTSOCK_LIB (the built libfastsock.so) and,
for the C++ helpers, STATS_WRITER. In AddressSanitizer builds it also passes
FASTSOCK_PRELOAD_PREFIX (libasan.so), which must come first in LD_PRELOAD of every process
that loads the instrumented library; `fastsock run` keeps existing LD_PRELOAD entries first,
so the tests put the prefix there before calling it.

Every check prints "ok - ..." or "not ok - ...", and the script exits 1 if any failed;
exit 77 means skipped (meson's convention), always with the reason printed.
"""

import json
import os
import subprocess
import sys
import time

SKIP = 77

TOOL = os.environ.get("FASTSOCK_TOOL", "")
LIB = os.environ.get("FASTSOCK_LIB", "")
PRELOAD_PREFIX = os.environ.get("FASTSOCK_PRELOAD_PREFIX", "")

_failures = []


def skip(reason):
    print(f"SKIP: {reason}")
    sys.exit(SKIP)


def require_tool():
    if not TOOL or not os.access(TOOL, os.X_OK):
        print(f"FASTSOCK_TOOL={TOOL!r} is not an executable: run this through meson test")
        sys.exit(1)


def check(condition, name, detail=""):
    """Records one check; `detail` (e.g. the command's output) is printed when it fails."""
    if condition:
        print(f"ok - {name}")
    else:
        print(f"not ok - {name}")
        if detail:
            print("  " + str(detail).replace("\n", "\n  "))
        _failures.append(name)
    return condition


def finish():
    if _failures:
        print(f"{len(_failures)} check(s) failed: " + "; ".join(_failures))
        sys.exit(1)
    print("all checks passed")
    sys.exit(0)


def clean_env(**overrides):
    """The test's environment without FASTSOCK_* settings and with LD_PRELOAD reduced to the
    sanitizer prefix (if any), plus `overrides` (a value of None removes the variable)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("FASTSOCK_") or k in ("FASTSOCK_TOOL", "FASTSOCK_LIB")}
    env.pop("LD_PRELOAD", None)
    if PRELOAD_PREFIX:
        env["LD_PRELOAD"] = PRELOAD_PREFIX
    for key, value in overrides.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


def tool(*args, env=None, timeout=30, stdin=subprocess.DEVNULL):
    """Runs the tool to completion and returns the CompletedProcess (text mode)."""
    return subprocess.run([TOOL, *args], env=env if env is not None else clean_env(),
                          stdin=stdin, capture_output=True, text=True, timeout=timeout)


def describe(proc):
    return f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"


def parse_json(text):
    try:
        return json.loads(text)
    except ValueError:
        return None


def json_tool_accepts(text):
    """True when `python3 -m json.tool` (the check a user would run) accepts `text`."""
    proc = subprocess.run([sys.executable, "-m", "json.tool"], input=text,
                          capture_output=True, text=True, timeout=30)
    return proc.returncode == 0


def poll(predicate, timeout=15.0, interval=0.05):
    """Calls predicate() until it returns a true value or `timeout` seconds pass; returns the
    last value. The bound keeps a broken build from hanging the suite; the interval only
    paces the retries."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(interval)


def dead_pid():
    """The pid of a process that has exited and been reaped."""
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid
