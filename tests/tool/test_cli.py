#!/usr/bin/env python3
"""The command line itself: --help, --version, help <cmd>, usage errors and their exit codes."""

import re

from toolenv import check, describe, finish, require_tool, tool

require_tool()

p = tool("--help")
check(p.returncode == 0 and all(c in p.stdout for c in ("run", "info", "stat")),
      "--help lists the commands and exits 0", describe(p))

p = tool("--version")
check(p.returncode == 0 and re.fullmatch(r"fastsock \d+\.\d+\.\d+\n", p.stdout) is not None,
      "--version prints 'fastsock X.Y.Z'", describe(p))

for command in ("run", "info", "stat"):
    p = tool("help", command)
    check(p.returncode == 0 and p.stdout.startswith(f"Usage: fastsock {command}"),
          f"help {command} prints that command's usage", describe(p))
    q = tool(command, "--help")
    check(q.returncode == 0 and q.stdout == p.stdout,
          f"{command} --help prints the same text as help {command}", describe(q))

p = tool("help", "frobnicate")
check(p.returncode == 2 and "frobnicate" in p.stderr, "help of an unknown command exits 2",
      describe(p))

p = tool()
check(p.returncode == 2 and "Usage" in p.stderr, "no command prints usage and exits 2",
      describe(p))

p = tool("--frobnicate")
check(p.returncode == 2 and "unknown option '--frobnicate'" in p.stderr,
      "an unknown top-level option exits 2 with a message", describe(p))

p = tool("frobnicate")
check(p.returncode == 2 and "unknown command 'frobnicate'" in p.stderr,
      "an unknown command exits 2 with a message", describe(p))

for args in (["info", "--frobnicate"], ["stat", "--frobnicate"], ["run", "--frobnicate", "true"]):
    p = tool(*args)
    check(p.returncode == 2 and "unknown option '--frobnicate'" in p.stderr
          and f"fastsock {args[0]}" in p.stderr,
          f"{args[0]}: an unknown option exits 2 and names the command", describe(p))

p = tool("info", "--json=yes")
check(p.returncode == 2 and "takes no value" in p.stderr, "a flag given a value exits 2",
      describe(p))

p = tool("stat", "12x")
check(p.returncode == 2 and "invalid PID '12x'" in p.stderr, "stat: a malformed PID exits 2",
      describe(p))

p = tool("stat", "1", "2")
check(p.returncode == 2 and "at most one PID" in p.stderr, "stat: two PIDs exit 2",
      describe(p))

p = tool("info", "extra")
check(p.returncode == 2 and "unexpected argument 'extra'" in p.stderr,
      "info: a stray argument exits 2", describe(p))

finish()
