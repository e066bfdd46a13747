#!/usr/bin/env python3
"""`fastsock stat` against stats files written by tests/tool/stats_writer (the library's own
layout): a well-formed area is shown exactly; garbled, hostile, truncated or stale files give a
clear message or are ignored, never a crash; stale files are detected and removed."""

import os
import subprocess
import sys

from toolenv import (check, dead_pid, describe, finish, json_tool_accepts, parse_json,
                     require_tool, tool)

require_tool()
WRITER = os.environ.get("STATS_WRITER", "")
if not os.access(WRITER, os.X_OK):
    print(f"STATS_WRITER={WRITER!r} is not an executable: run this through meson test")
    sys.exit(1)
PREFIX = "/dev/shm/fastsock-stats."
AREA_SIZE = 448 + 4096 * 256  # sizeof(stats::Area); stats_writer checks it against the header


def write(mode, pid):
    subprocess.run([WRITER, mode, str(pid)], check=True, capture_output=True, timeout=30)
    return PREFIX + str(pid)


def not_crashed(p):
    """The tool exited on its own (a signal gives a negative return code) with 0 or 1."""
    return p.returncode in (0, 1)


# A live process to attribute the fake files to; it holds nothing open and is killed at the end.
holder = subprocess.Popen(["sleep", "300"])
pid = holder.pid
try:
    # --- a well-formed area -------------------------------------------------------------
    write("valid", pid)
    p = tool("stat", str(pid))
    rows = [line.split(None, 7) for line in p.stdout.splitlines()]
    table = {r[0]: r for r in rows if r and r[0].lstrip("-").isdigit()}
    check(p.returncode == 0 and f"process {pid} (fake-server)" in p.stdout,
          "stat PID names the process and program", describe(p))
    check(any(line.split()[:8] == ["FD", "ROLE", "LOCAL", "PEER", "TRANSPORT", "SENT",
                                   "RECEIVED", "WHY"] for line in p.stdout.splitlines()),
          "stat PID prints the FD ROLE LOCAL PEER TRANSPORT SENT RECEIVED WHY header", p.stdout)
    check(table.get("3") == ["3", "listener", "0.0.0.0:8080", "-", "tcp", "0", "0", "listening"],
          "the listener row", table.get("3"))
    check(table.get("7") == ["7", "server", "127.0.0.1:8080", "127.0.0.1:40000", "tcp", "1234",
                             "5678", "shm: not in this build"],
          "the server connection row, with its reason", table.get("7"))
    check(table.get("9") == ["9", "client", "[::1]:40001", "[::1]:9000", "tcp",
                             str(1 << 40), "0", "-"],
          "the IPv6 client row, 64-bit counters", table.get("9"))
    check("11" not in table, "a closed slot is not shown", table.keys())
    check("chain:        shm,verbs,vendor,tcp" in p.stdout and "config error: none" in p.stdout
          and "3 tracked since start, 0 untracked" in p.stdout,
          "header: chain, config error, totals", p.stdout)

    p = tool("stat", str(pid), "--json")
    j = parse_json(p.stdout)
    check(p.returncode == 0 and j is not None and json_tool_accepts(p.stdout),
          "stat PID --json is valid JSON", describe(p))
    if j:
        conns = {c["fd"]: c for c in j["connections"]}
        check(j["pid"] == pid and j["program"] == "fake-server" and sorted(conns) == [3, 7, 9],
              "--json: pid, program and the three open sockets", j)
        check(conns.get(7, {}).get("bytes_sent") == 1234
              and conns.get(7, {}).get("bytes_received") == 5678
              and conns.get(9, {}).get("bytes_sent") == 1 << 40,
              "--json: byte counts", conns)

    p = tool("stat")
    listed = [line.split() for line in p.stdout.splitlines()]
    check(p.returncode == 0 and [str(pid), "fake-server", "1", "2", "3"] in listed,
          "stat without PID lists the process: 1 listening, 2 connected, 3 total", p.stdout)
    j = parse_json(tool("stat", "--json").stdout) or {}
    mine = [e for e in j.get("processes", []) if e.get("pid") == pid]
    check(mine == [{"pid": pid, "program": "fake-server", "listening": 1, "connected": 2,
                    "total_connections": 3}], "stat --json lists the process", j)
    check(os.path.exists(PREFIX + str(pid)), "a live process's file is not removed")

    # --- hostile field contents -----------------------------------------------------------
    write("hostile", pid)
    for args in ([str(pid)], [str(pid), "--json"]):
        p = tool("stat", *args)
        printable = all(c == "\n" or " " <= c <= "~" for c in p.stdout)
        check(p.returncode == 0 and printable and "\x1b" not in p.stdout,
              f"stat {' '.join(args)} on hostile fields: exit 0, only printable output",
              describe(p))
    j = parse_json(p.stdout)
    check(j is not None and json_tool_accepts(p.stdout), "hostile fields: --json stays valid",
          p.stdout)
    if j:
        check(j["ignored_slots"] == 3, "slots with a bad role, transport or state are ignored",
              j["ignored_slots"])
        check(len(j["program"]) == 64 and j["program"].startswith("?[31mevil")
              and len(j["chain"]) == 64 and len(j["config_error"]) == 256,
              "unterminated strings stop at their field's size; escapes become '?'", j)
        conns = {c["fd"]: c for c in j["connections"]}
        check(conns.get(-5, {}).get("reason", "").startswith("??RRR")
              and len(conns.get(-5, {}).get("reason", "")) == 240,
              "an unterminated reason is cut at 240 bytes, control bytes replaced", conns)
        check(conns.get(7, {}).get("local") == "?", "an unknown address family prints '?'",
              conns.get(7))
        check(j["total_connections"] == 2**64 - 1, "counters are shown as stored",
              j["total_connections"])

    # --- files that are not a valid area: a clear message, exit 1 -------------------------
    invalid = [
        ("garbage", "bad magic"),
        ("uninitialized", "bad magic"),
        ("bad-version", "layout version 3"),
        ("bad-slots", "slot count 17"),
        ("pid-mismatch", f"written for pid {pid + 1}"),
        ("size:0", "wrong size (0 bytes"),
        ("size:4096", "wrong size (4096 bytes"),
        (f"size:{AREA_SIZE - 1}", "wrong size"),
        (f"size:{AREA_SIZE + 4096}", "wrong size"),
    ]
    for mode, needle in invalid:
        write(mode, pid)
        p = tool("stat", str(pid))
        check(p.returncode == 1 and "not a valid fastsock stats area" in p.stderr
              and needle in p.stderr and p.stdout == "",
              f"{mode}: exit 1 with '{needle}'", describe(p))
        p = tool("stat")
        check(not_crashed(p) and p.returncode == 0 and os.path.exists(PREFIX + str(pid)),
              f"{mode}: stat without PID reports it and leaves a live process's file alone",
              describe(p))

    # Random bytes in every slot behind a valid header: all ignored, no crash.
    write("garbage-slots", pid)
    p = tool("stat", str(pid), "--json")
    j = parse_json(p.stdout) or {}
    check(p.returncode == 0 and j.get("connections") == [] and j.get("ignored_slots", 0) > 4000,
          "random slot contents are ignored, not shown", describe(p))

    # A symlink planted in /dev/shm is refused, and its target is neither read nor removed.
    target = write("valid", pid)
    os.rename(target, target + ".target")
    os.symlink(target + ".target", target)
    p = tool("stat", str(pid))
    check(p.returncode == 1 and "symbolic link" in p.stderr, "a symlinked stats file is refused",
          describe(p))
    os.unlink(target)
    os.rename(target + ".target", target)

    # --- stale files ----------------------------------------------------------------------
    # The pid was reused: the live process started at another time than the file says.
    path = write("start-mismatch", pid)
    p = tool("stat", str(pid))
    check(p.returncode == 1 and "stale" in p.stderr and "start time" in p.stderr
          and not os.path.exists(path),
          "stat PID: a file from an earlier process with this pid is stale and removed",
          describe(p))

    gone = dead_pid()
    path = write("valid", gone)
    p = tool("stat", str(gone))
    check(p.returncode == 1 and "stale" in p.stderr and "has exited" in p.stderr
          and not os.path.exists(path),
          "stat PID: the file of a dead process is stale and removed", describe(p))

    write("start-mismatch", pid)
    gone_files = [write(mode, dead_pid()) for mode in ("valid", "garbage", "size:10")]
    p = tool("stat", "--json")
    j = parse_json(p.stdout) or {}
    removed = {e["path"] for e in j.get("problems", []) if e["status"] == "stale" and e["removed"]}
    # Other processes on this host may have stats files too: only ours are checked.
    mine = set(gone_files) | {PREFIX + str(pid)}
    check(p.returncode == 0 and mine <= removed and not any(os.path.exists(f) for f in mine),
          "stat without PID removes stale files, whatever their contents", describe(p))

    # Only our own files are removed.
    if os.geteuid() == 0:
        path = write("valid", dead_pid())
        os.chown(path, 65534, 65534)
        p = tool("stat")
        check(p.returncode == 0 and os.path.exists(path) and "another user" in p.stdout,
              "a stale file of another user is reported, not removed", describe(p))
        os.unlink(path)
    else:
        print("skip - another user's stale file (needs root to create one)")

    p = tool("stat", str(dead_pid()))
    check(p.returncode == 1 and "is not running under fastsock, or has no TCP socket yet"
          in p.stderr, "stat PID without a stats file: exit 1 with a clear message",
          describe(p))
finally:
    holder.kill()
    holder.wait()
    try:
        os.unlink(PREFIX + str(pid))
    except FileNotFoundError:
        pass

finish()
