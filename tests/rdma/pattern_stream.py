# The byte stream the rdma fault tests (kill.sh, link_delete.sh) send and check: the
# sequence 0, 1, ..., 250 repeated, so that any byte lost, duplicated or reordered shows;
# and the peers' common parts (the accepting server, an echo loop, exact reads).
import os
import socket

PATTERN = bytes(i % 251 for i in range(251 * 256))


def expected(offset, n):
    """The n bytes of the stream from `offset` on."""
    start = offset % 251
    return (PATTERN[start:] + PATTERN * (n // len(PATTERN) + 1))[:n]


def recv_exact(s, n):
    """The next n bytes of the connection; exits the peer if it ends first."""
    got = b""
    while len(got) < n:
        more = s.recv(n - len(got))
        if not more:
            raise SystemExit(f"end of stream after {len(got)} of {n} bytes")
        got += more
    return got


def stream_until(s, stop):
    """Sends the pattern until the file `stop` exists (or for ever without one), then ends
    its side of the stream and says how much it sent."""
    sent = 0
    while stop is None or not os.path.exists(stop):
        s.sendall(PATTERN)
        sent += len(PATTERN)
    s.shutdown(socket.SHUT_WR)
    print(f"sent {sent}", flush=True)


def receive(s, threshold):
    """Counts and checks the stream to its end; prints "threshold" once that many bytes
    arrived, then "end eof|reset|error:WHY total=N ok=True|False"."""
    total, ok, told = 0, True, False
    try:
        while True:
            b = s.recv(65536)
            if not b:
                end = "eof"
                break
            ok = ok and b == expected(total, len(b))
            total += len(b)
            if total >= threshold and not told:
                print("threshold", flush=True)
                told = True
    except ConnectionResetError:
        end = "reset"
    except OSError as e:
        end = "error:" + (e.strerror or str(e))
    print(f"end {end} total={total} ok={ok}", flush=True)


def accept_one(addr):
    """Listens on an ephemeral port of `addr`, prints the port for the script, and returns
    the first connection accepted."""
    ls = socket.socket()
    ls.bind((addr, 0))
    ls.listen(1)
    print(ls.getsockname()[1], flush=True)
    return ls.accept()[0]


def echo(s):
    """Sends back everything received until the peer's end, then closes."""
    while True:
        b = s.recv(65536)
        if not b:
            break
        s.sendall(b)
    s.close()
