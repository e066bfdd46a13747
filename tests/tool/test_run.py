#!/usr/bin/env python3
"""`fastsock run`: the library is really loaded into the program, the settings reach it as
FASTSOCK_* variables, LD_PRELOAD keeps earlier entries first and never lists the library
twice, and bad option values stop before the program runs."""

import os
import subprocess
import sys
import tempfile

from toolenv import (LIB, PRELOAD_PREFIX, check, clean_env, describe, finish, parse_json,
                     require_tool, tool)

require_tool()
real_lib = os.path.realpath(LIB)

# The child reports what it sees: its environment and whether libfastsock.so is mapped.
PROBE = r"""
import json, os
maps = open('/proc/self/maps').read()
print(json.dumps({
    'env': {k: v for k, v in os.environ.items() if k.startswith('FASTSOCK_') or k == 'LD_PRELOAD'},
    'mapped': [l.split()[-1] for l in maps.splitlines() if 'libfastsock' in l],
}))
"""


def run_probe(*options, env=None):
    p = tool("run", *options, "--", sys.executable, "-c", PROBE, env=env)
    return p, parse_json(p.stdout.strip().splitlines()[-1] if p.stdout.strip() else "")


def preload_entries(seen):
    return [e for e in seen["env"].get("LD_PRELOAD", "").replace(" ", ":").split(":") if e]


# Default resolution (build tree) loads the library and sets no settings of its own.
p, seen = run_probe()
check(p.returncode == 0 and seen is not None, "run -- python3 exits 0 with the probe's output",
      describe(p))
if seen:
    check(real_lib in {os.path.realpath(m) for m in seen["mapped"]},
          "the child has libfastsock.so mapped (/proc/self/maps)", seen)
    entries = preload_entries(seen)
    check(entries.count(real_lib) == 1 and entries[-1] == real_lib,
          "LD_PRELOAD ends with the absolute library path, once", entries)
    if PRELOAD_PREFIX:
        check(entries[0] == PRELOAD_PREFIX, "the sanitizer runtime stays first in LD_PRELOAD",
              entries)

# Every option becomes its variable; paths are made absolute (the program may chdir).
with tempfile.TemporaryDirectory() as tmp:
    with open(os.path.join(tmp, "rules"), "w") as f:
        f.write("use tcp any * *\n")
    # Relative paths resolve against the tool's working directory: run it from `tmp`.
    p = subprocess.run(
        [os.environ["FASTSOCK_TOOL"], "run", "--transports", "vendor,tcp", "--log=debug",
         "--log-file", "fs.log", "--rules", "rules", "--spin-us", "0", "--spin-adapt", "off", "--no-stats",
         "--lib", LIB, "--", sys.executable, "-c", PROBE],
        env=clean_env(), cwd=tmp, capture_output=True, text=True, timeout=30)
    seen = parse_json(p.stdout.strip().splitlines()[-1] if p.stdout.strip() else "")
    expected = {
        "FASTSOCK_TRANSPORTS": "vendor,tcp",
        "FASTSOCK_LOG": "debug",
        "FASTSOCK_LOG_FILE": os.path.join(os.path.realpath(tmp), "fs.log"),
        "FASTSOCK_RULES": os.path.join(os.path.realpath(tmp), "rules"),
        "FASTSOCK_SPIN_US": "0",
        "FASTSOCK_SPIN_ADAPT": "off",
        "FASTSOCK_STATS": "0",
    }
    got = {k: v for k, v in (seen or {}).get("env", {}).items() if k in expected}
    # os.path.realpath: tmp may sit behind a symlink; the tool uses the absolute cwd path.
    got = {k: (os.path.realpath(v) if k in ("FASTSOCK_LOG_FILE", "FASTSOCK_RULES") else v)
           for k, v in got.items()}
    check(p.returncode == 0 and got == expected,
          "every run option reaches the program as its FASTSOCK_* variable", describe(p))

# Existing LD_PRELOAD entries stay first; the library already present is not added again.
first = PRELOAD_PREFIX or "libm.so.6"  # any library that is harmless to preload
p, seen = run_probe(env=clean_env(LD_PRELOAD=f"{first} {LIB}"))
entries = preload_entries(seen) if seen else []
check(p.returncode == 0 and entries[:1] == [first] and
      [os.path.realpath(e) for e in entries].count(real_lib) == 1,
      "an LD_PRELOAD that already has the library keeps its order and one copy",
      f"{describe(p)}\nentries: {entries}")

p, seen = run_probe(env=clean_env(LD_PRELOAD=f"{first}:libm.so.6" if PRELOAD_PREFIX
                                  else first))
entries = preload_entries(seen) if seen else []
check(p.returncode == 0 and entries[0] == first and entries[-1] == real_lib,
      "the library is appended after existing LD_PRELOAD entries", entries)

# FASTSOCK_LIBRARY and --lib select the library; missing files are errors, not fallbacks.
p, seen = run_probe(env=clean_env(FASTSOCK_LIBRARY=LIB))
check(p.returncode == 0 and seen and preload_entries(seen)[-1] == real_lib,
      "FASTSOCK_LIBRARY selects the library", describe(p))
p = tool("run", "--lib", "/nonexistent/libfastsock.so", "--", "true")
check(p.returncode == 2 and "/nonexistent/libfastsock.so" in p.stderr,
      "--lib with a missing file exits 2 and names it", describe(p))
p = tool("run", "--", "true", env=clean_env(FASTSOCK_LIBRARY="/nonexistent/libfastsock.so"))
check(p.returncode == 1 and "FASTSOCK_LIBRARY" in p.stderr,
      "FASTSOCK_LIBRARY naming a missing file is an error", describe(p))

# Bad values: exit 2 with a message naming the option, and the program never starts.
with tempfile.TemporaryDirectory() as tmp:
    marker = os.path.join(tmp, "ran")
    bad_rules = os.path.join(tmp, "bad-rules")
    with open(bad_rules, "w") as f:
        f.write("use tcp any * *\nuse warp9 any * *\n")
    cases = [
        (["--transports", "bogus"], "--transports"),
        (["--transports", "tcp,shm"], "--transports"),      # tcp must be last
        (["--transports", ""], "--transports"),
        (["--log", "loud"], "--log"),
        (["--spin-us", "-1"], "--spin-us"),
        (["--spin-us", "1000001"], "--spin-us"),
        (["--spin-us", "12abc"], "--spin-us"),
        (["--spin-adapt", "sometimes"], "--spin-adapt"),
        (["--rules", os.path.join(tmp, "missing")], "--rules"),
        (["--rules", bad_rules], ":2:"),                    # the line of the bad rule
        (["--log-file="], "--log-file"),
        (["--log"], "--log"),                               # value missing
        (["--no-stats=1"], "--no-stats"),
    ]
    for options, needle in cases:
        p = tool("run", *options, "--", "touch", marker)
        check(p.returncode == 2 and needle in p.stderr and not os.path.exists(marker),
              f"run {' '.join(options) or repr('')}: exit 2, message, program not run",
              describe(p))

p = tool("run")
check(p.returncode == 2 and "no program to run" in p.stderr, "run without a program exits 2",
      describe(p))
p = tool("run", "--", "fastsock-no-such-program-xyz")
check(p.returncode == 127 and "fastsock-no-such-program-xyz: command not found" in p.stderr,
      "a program not in PATH exits 127 with a message", describe(p))
p = tool("run", "--", "/nonexistent/prog")
check(p.returncode == 127 and "/nonexistent/prog" in p.stderr,
      "a missing program path exits 127 with a message", describe(p))
with tempfile.NamedTemporaryFile() as not_executable:
    p = tool("run", "--", not_executable.name)
    check(p.returncode == 126 and "Permission denied" in p.stderr,
          "a file that is not executable exits 126", describe(p))

# The program's exit status and arguments pass through unchanged; `--` is optional.
p = tool("run", "--", "sh", "-c", 'exit 42')
check(p.returncode == 42, "run exits with the program's status", describe(p))
p = tool("run", "sh", "-c", 'printf "%s|" "$@"', "sh", "a b", "--log", "")
check(p.returncode == 0 and p.stdout == "a b|--log||",
      "options after the program belong to the program", describe(p))

# An inherited malformed setting is not fatal (the library falls back) but is announced.
p = tool("run", "--", "true", env=clean_env(FASTSOCK_LOG="loud"))
check(p.returncode == 0 and "warning" in p.stderr and "FASTSOCK_LOG" in p.stderr,
      "an inherited bad FASTSOCK_LOG is a warning, and the program still runs", describe(p))

finish()
