"""A Python server that runs subprocesses between requests, and its client (subprocess.sh).

  subprocess_pair.py server PORT_FILE   epoll (selectors) echo server for two connections
  subprocess_pair.py client PORT        sends fixed 8-byte messages on both, checks echoes

Every message is 8 bytes. The server echoes each one; after the 10th and the 20th it runs
`subprocess.run(["true"])` (CPython starts it with vfork). On the client's "HANDOVER" message
on the first connection it runs `head -c 8` with that connection as stdin and stdout, which
echoes the client's next message itself; then the server echoes again.
"""
import selectors
import socket
import subprocess
import sys

MSG = 8
ROUNDS = 30


def recv_exact(sock, n):
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise SystemExit(f"end of stream after {len(data)} of {n} bytes")
        data += chunk
    return data


def server(port_file):
    lsock = socket.socket()
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(4)
    with open(port_file + ".tmp", "w") as f:
        f.write(str(lsock.getsockname()[1]))
    import os
    os.rename(port_file + ".tmp", port_file)
    conns = [lsock.accept()[0] for _ in range(2)]
    sel = selectors.EpollSelector()
    for c in conns:
        sel.register(c, selectors.EVENT_READ)
    served = 0
    while served < 2 * ROUNDS + 1:
        events = sel.select(timeout=10)
        if not events:
            raise SystemExit(f"server: epoll reported nothing for 10 s after {served} messages")
        for key, _ in events:
            sock = key.fileobj
            msg = recv_exact(sock, MSG)
            if msg == b"HANDOVER":
                # The child reads the client's next message from the socket and writes it back.
                subprocess.run(["head", "-c", str(MSG)], stdin=sock, stdout=sock, check=True)
            sock.sendall(msg)
            served += 1
            if served in (10, 20):
                subprocess.run(["true"], check=True)
    for c in conns:
        c.close()
    print(f"server: {served} messages, {len(conns)} connections", flush=True)


def client(port):
    socks = [socket.create_connection(("127.0.0.1", port)) for _ in range(2)]
    for s in socks:
        s.settimeout(20)
    for i in range(ROUNDS):
        for j, s in enumerate(socks):
            msg = b"%03d-%03d!" % (i, j)
            s.sendall(msg)
            got = recv_exact(s, MSG)
            assert got == msg, (got, msg)
    # The first connection goes to the server's child for one message, then back.
    s = socks[0]
    s.sendall(b"HANDOVER")
    s.sendall(b"child-rt")
    assert recv_exact(s, MSG) == b"child-rt", "the child's echo"
    assert recv_exact(s, MSG) == b"HANDOVER", "the server's echo after its child"
    for s in socks:
        assert s.recv(1) == b"", "end of stream"
    print(f"client: {2 * ROUNDS + 2} messages echoed", flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "server":
        server(sys.argv[2])
    else:
        client(int(sys.argv[2]))
