#!/usr/bin/env python3
"""`fastsock stat` end to end: a real server (python3) and a real unmodified client (socat),
both started with `fastsock run`, hold a loopback connection; `fastsock stat <pid>` shows the
listener and both ends on shm (both run the library) with the byte counts this test sent. A client killed with
SIGKILL leaves its stats file behind; `fastsock stat` detects it as stale and removes it."""

import os
import selectors
import shutil
import subprocess
import sys

from toolenv import (TOOL, check, clean_env, describe, finish, json_tool_accepts, parse_json,
                     poll, require_tool, skip, tool)

require_tool()
SOCAT = shutil.which("socat")
if SOCAT is None:
    skip("socat is not installed (apt-get install socat)")
PREFIX = "/dev/shm/fastsock-stats."
CLIENT_SENDS = 3000   # client -> server
SERVER_SENDS = 1234   # server -> client: different, so a swapped direction cannot pass

# Accepts one connection, reads exactly CLIENT_SENDS bytes, answers SERVER_SENDS bytes, and
# keeps everything open until its stdin closes.
SERVER = f"""
import socket, sys
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen(1)
print(s.getsockname()[1], flush=True)
conn, _ = s.accept()
got = 0
while got < {CLIENT_SENDS}:
    chunk = conn.recv(65536)
    if not chunk:
        sys.exit("server: peer closed early")
    got += len(chunk)
conn.sendall(b"s" * {SERVER_SENDS})
print("done", flush=True)
sys.stdin.read()
"""

# Accepts one connection with accept(fd, NULL, NULL) (through libc, so the library's hook
# sees exactly that) and keeps it open until its stdin closes.
NULL_ACCEPT_SERVER = """
import ctypes, socket, sys
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen(1)
print(s.getsockname()[1], flush=True)
fd = ctypes.CDLL(None, use_errno=True).accept(s.fileno(), None, None)
if fd < 0:
    sys.exit("server: accept failed")
print("accepted", flush=True)
sys.stdin.read()
"""


def read_line(proc, timeout=15.0):
    """One line of proc's (unbuffered) stdout, or '' if none arrives within `timeout`."""
    line = b""
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        while not line.endswith(b"\n"):
            if not sel.select(timeout):
                break
            byte = proc.stdout.read(1)
            if not byte:
                break
            line += byte
    return line.decode(errors="replace")


def stat_json(pid):
    p = tool("stat", str(pid), "--json")
    return parse_json(p.stdout) if p.returncode == 0 else None


def connections(pid, role):
    j = stat_json(pid) or {}
    return [c for c in j.get("connections", []) if c["role"] == role]


def start(*command, stdout=subprocess.PIPE, options=()):
    # Unbuffered pipes: read_line() selects on the descriptor, so nothing may sit in a buffer.
    return subprocess.Popen([TOOL, "run", *options, "--", *command], env=clean_env(), bufsize=0,
                            stdin=subprocess.PIPE, stdout=stdout, stderr=subprocess.PIPE)


procs = []
try:
    server = start(sys.executable, "-c", SERVER, stdout=subprocess.PIPE)
    procs.append(server)
    port_line = read_line(server)
    if not port_line.strip().isdigit():
        server.kill()
        check(False, "the server under fastsock run reports its port",
              f"got {port_line!r}; stderr: {server.stderr.read().decode(errors='replace')}")
        finish()
    port = int(port_line)

    # `fastsock run` execs: the pid of the launched process is the program's pid.
    client = start(SOCAT, "STDIO", f"TCP:127.0.0.1:{port}", stdout=subprocess.DEVNULL)
    procs.append(client)
    os.write(client.stdin.fileno(), b"c" * CLIENT_SENDS)  # fits in a pipe: written whole
    # stdin stays open: socat keeps the connection
    check(read_line(server).strip() == "done", "the server received the client's bytes")

    # Counters are updated by the processes themselves: poll until they show everything.
    def settled():
        c = connections(client.pid, "client")
        s = connections(server.pid, "server")
        return (c and s and c[0]["bytes_received"] == SERVER_SENDS
                and s[0]["bytes_sent"] == SERVER_SENDS) and (c, s)
    result = poll(settled)
    check(bool(result), "stat shows both ends of the connection with the final byte counts",
          f"client: {stat_json(client.pid)}\nserver: {stat_json(server.pid)}")

    # The server: a listener and the accepted connection, on shm (both ends run the
    # library), with exact counts.
    p = tool("stat", str(server.pid))
    rows = {r[1]: r for r in (line.split(None, 7) for line in p.stdout.splitlines())
            if len(r) >= 7 and r[0].isdigit()}
    listener, served = rows.get("listener"), rows.get("server")
    check(p.returncode == 0 and listener is not None
          and listener[2] == f"127.0.0.1:{port}" and listener[4] == "tcp",
          "stat <server pid> shows the listener on tcp", describe(p))
    check(served is not None and served[2] == f"127.0.0.1:{port}" and served[4] == "shm"
          and served[5] == str(SERVER_SENDS) and served[6] == str(CLIENT_SENDS),
          f"stat <server pid> shows the connection: sent {SERVER_SENDS}, "
          f"received {CLIENT_SENDS}", describe(p))
    comm = open(f"/proc/{server.pid}/comm").read().strip()
    check(f"process {server.pid} ({comm})" in p.stdout, "the header names the server program",
          p.stdout)

    # The client (socat, unmodified): one client connection, the mirror image.
    p = tool("stat", str(client.pid), "--json")
    j = parse_json(p.stdout) or {}
    check(p.returncode == 0 and json_tool_accepts(p.stdout), "stat <client pid> --json is valid",
          describe(p))
    mine = [c for c in j.get("connections", []) if c["role"] == "client"]
    server_side = connections(server.pid, "server")
    check(j.get("program") == "socat" and len(mine) == 1 and mine[0]["transport"] == "shm"
          and mine[0]["bytes_sent"] == CLIENT_SENDS
          and mine[0]["bytes_received"] == SERVER_SENDS
          and mine[0]["peer"] == f"127.0.0.1:{port}"
          and server_side and mine[0]["local"] == server_side[0]["peer"],
          "socat's stats: one client connection on shm with the exact counts and addresses",
          j)
    check(all(c["reason"] == "" for c in mine),
          "a connection on the first link of the chain has no reason to give", mine)

    # Both processes are listed.
    j = parse_json(tool("stat", "--json").stdout) or {}
    listed = {e["pid"]: e for e in j.get("processes", [])}
    check(listed.get(client.pid, {}).get("connected") == 1
          and listed.get(server.pid, {}).get("listening") == 1
          and listed.get(server.pid, {}).get("connected") == 1,
          "stat without PID lists the server and the client", j)

    # SIGKILL leaves the client's file behind; stat notices the process is gone.
    client.kill()
    client.wait()
    stale = PREFIX + str(client.pid)
    check(os.path.exists(stale), "a killed process leaves its stats file behind")
    p = tool("stat", "--json")
    j = parse_json(p.stdout) or {}
    entry = [e for e in j.get("problems", []) if e["pid"] == client.pid]
    check(p.returncode == 0 and len(entry) == 1 and entry[0]["status"] == "stale"
          and entry[0]["removed"] and not os.path.exists(stale),
          "stat without PID detects the killed client's stale file and removes it", describe(p))
    check(server.pid in {e["pid"] for e in j.get("processes", [])},
          "the live server's file is kept")

    # A clean exit removes the file (the library unlinks it); stat then says so clearly.
    server.stdin.close()
    server.wait(timeout=30)
    p = tool("stat", str(server.pid))
    check(p.returncode == 1 and "not running under fastsock" in p.stderr
          and not os.path.exists(PREFIX + str(server.pid)),
          "after the server exits, stat <pid> exits 1 with a clear message", describe(p))

    # Pass-through (only tcp allowed) and an application that accepts without asking for the
    # peer's address: the library does not ask the kernel for it either (it saves a copy per
    # connection), and stat finds both unknown addresses in /proc.
    server = start(sys.executable, "-c", NULL_ACCEPT_SERVER, options=("--transports", "tcp"))
    procs.append(server)
    port = int(read_line(server).strip() or 0)
    client = start(SOCAT, "STDIO", f"TCP:127.0.0.1:{port}", stdout=subprocess.DEVNULL,
                   options=("--transports", "tcp"))
    procs.append(client)
    check(read_line(server).strip() == "accepted", "the NULL-address server accepted")
    result = poll(lambda: (connections(server.pid, "server") and connections(client.pid, "client")
                           and (connections(server.pid, "server")[0],
                                connections(client.pid, "client")[0])))
    served, mine = result if result else ({}, {})
    check(served.get("transport") == "tcp" and served.get("peer") not in (None, "-", "")
          and served.get("peer") == mine.get("local")
          and mine.get("peer") == f"127.0.0.1:{port}",
          "stat shows the accepted connection's peer (from /proc) = the client's local address",
          {"server": stat_json(server.pid), "client": stat_json(client.pid)})
    client.kill()
    server.kill()

    # --no-stats: the library publishes nothing.
    probe = ("import socket, os; s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(); "
             "print(os.path.exists('/dev/shm/fastsock-stats.%d' % os.getpid()))")
    for options, expected in (([], "True"), (["--no-stats"], "False")):
        p = subprocess.run([TOOL, "run", *options, "--", sys.executable, "-c", probe],
                           env=clean_env(), capture_output=True, text=True, timeout=30)
        check(p.returncode == 0 and p.stdout.strip() == expected,
              f"run {' '.join(options) or '(default)'}: stats file published = {expected}",
              describe(p))
finally:
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        try:
            os.unlink(PREFIX + str(proc.pid))
        except FileNotFoundError:
            pass

finish()
