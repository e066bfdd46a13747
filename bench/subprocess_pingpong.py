"""Ping-pong between two Python processes after the server ran a subprocess (bench/subprocess.sh).

  subprocess_pingpong.py server PORT_FILE     accepts one connection, runs
                                              subprocess.run(["true"]) (CPython: vfork), then
                                              echoes 64-byte messages until end of stream
  subprocess_pingpong.py client PORT COUNT    COUNT round trips after the first; prints
                                              "<microseconds per round trip>"
"""
import os
import socket
import subprocess
import sys
import time

MSG = 64


def recv_exact(sock, n):
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            return data
        data += chunk
    return data


def server(port_file):
    lsock = socket.socket()
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(1)
    with open(port_file + ".tmp", "w") as f:
        f.write(str(lsock.getsockname()[1]))
    os.rename(port_file + ".tmp", port_file)
    conn, _ = lsock.accept()
    first = True
    while True:
        msg = recv_exact(conn, MSG)
        if len(msg) < MSG:
            break
        if first:
            subprocess.run(["true"], check=True)
            first = False
        conn.sendall(msg)


def client(port, count):
    sock = socket.create_connection(("127.0.0.1", port))
    msg = b"x" * MSG
    sock.sendall(msg)
    assert recv_exact(sock, MSG) == msg  # the server's subprocess ran before this answer
    start = time.perf_counter()
    for _ in range(count):
        sock.sendall(msg)
        if recv_exact(sock, MSG) != msg:
            sys.exit("bad echo")
    elapsed = time.perf_counter() - start
    print(f"{elapsed / count * 1e6:.2f}")


if __name__ == "__main__":
    if sys.argv[1] == "server":
        server(sys.argv[2])
    else:
        client(int(sys.argv[2]), int(sys.argv[3]))
