# vendor_peer.py server MODE | client PORT MODE: the two ends of the vendor link's preload
# tests (vendor.sh). The server prints its port, then each end prints what it saw:
#   c2s / s2c    one end streams 4 MB of the pattern (pattern_stream.py) and ends its side;
#                the other checks it: "end eof total=N ok=True"
#   chat         client speaks first, server answers; then server speaks first (on a
#                second connection): "chat ok"
#   poll / epoll the server waits for the socket together with a pipe (a kernel fd)
#                written by a thread: "poll ok" once both were reported
#   fork         the client streams 1 MB, forks; the child streams 1 MB more, the parent
#                closes its copy: the server reads 2 MB of the pattern, then the end
#   forklate     (the server's library delivers late: TV_DELAY_MS) the client waits for
#                the link, streams 64 KB and forks at once, before the server can have read
#                its Switch: the server must see the pattern intact up to a reset
#   forever      the client streams until killed; the server reports how the stream ended
#   c2s_closed   c2s, the server closing its listening socket right after accept (as
#                fastsock-pipe does), before the client's library connect can have come
#   s2c_pair     two connections: the server streams 1 MB on the first, 64 KB on the second
#                (the client reads it only after the first: it fits the buffers), closes
#                both one after the other and stays a while; the client checks both
#                streams to their ends
import os, select, socket, sys, threading, time
from pattern_stream import PATTERN, expected, receive, recv_exact

MB = 1 << 20
role, mode = sys.argv[1], sys.argv[-1]


def send_pattern(s, total, offset=0):
    while total > 0:
        chunk = expected(offset, min(total, 65536))
        s.sendall(chunk)
        offset += len(chunk)
        total -= len(chunk)


if role == "server":
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(4)
    print(ls.getsockname()[1], flush=True)
    s, _ = ls.accept()
    if mode == "s2c_pair":
        s2, _ = ls.accept()
        time.sleep(0.5)
        send_pattern(s, MB)
        send_pattern(s2, 64 * 1024)
        s.close()
        time.sleep(0.2)  # the library closes the first in its service thread meanwhile
        s2.close()
        time.sleep(6)  # alive: the end of the stream comes from the library, not the exit
        sys.exit(0)
    if mode == "c2s_closed":
        ls.close()
    time.sleep(0.5)  # the link comes up (or fails) before the data: it carries the stream
    if mode in ("c2s", "c2s_closed", "forever"):
        receive(s, 1 << 62)
    elif mode == "fork" or mode == "forklate":
        receive(s, 1 << 62)
    elif mode == "s2c":
        send_pattern(s, 4 * MB)
        s.shutdown(socket.SHUT_WR)
        assert s.recv(1) == b""
    elif mode == "chat":
        assert recv_exact(s, 4) == b"ping"
        s.sendall(b"pong" * 1000)
        assert recv_exact(s, 4) == b"done"
        s2, _ = ls.accept()
        s2.sendall(b"220 ready")  # server speaks first
        assert recv_exact(s2, 4) == b"helo"
        s2.sendall(b"250 ok" * 1000)
        assert s2.recv(1) == b""
        print("chat ok", flush=True)
    elif mode in ("poll", "epoll"):
        r, w = os.pipe()
        threading.Timer(0.3, lambda: os.write(w, b"k")).start()
        seen = set()
        total = 0
        want = 2 * MB
        p = select.poll() if mode == "poll" else select.epoll()
        p.register(s.fileno(), select.POLLIN)
        p.register(r, select.POLLIN)
        while total < want or "pipe" not in seen:
            for fd, ev in p.poll(10):
                if fd == r:
                    os.read(r, 1)
                    seen.add("pipe")
                    p.unregister(r)
                else:
                    b = s.recv(65536)
                    assert b == expected(total, len(b)), "pattern broken"
                    total += len(b)
                    seen.add("socket")
        s.sendall(b"k")
        print(f"{mode} ok total={total}", flush=True)
else:
    s = socket.create_connection(("127.0.0.1", int(sys.argv[2])))
    if mode == "s2c_pair":
        s2 = socket.create_connection(("127.0.0.1", int(sys.argv[2])))
    time.sleep(0.5)
    if mode == "c2s" or mode == "poll" or mode == "epoll":
        send_pattern(s, 4 * MB if mode == "c2s" else 2 * MB)
        if mode != "c2s":
            assert recv_exact(s, 1) == b"k"
        s.shutdown(socket.SHUT_WR)
        print("sent", flush=True)
        # VENDOR_PEER_LINGER=S: the connection stays open S seconds more (for fastsock stat).
        time.sleep(float(os.environ.get("VENDOR_PEER_LINGER", "0")))
    elif mode == "s2c":
        receive(s, 1 << 62)
    elif mode == "s2c_pair":
        receive(s, 1 << 62)
        receive(s2, 1 << 62)
    elif mode == "chat":
        s.sendall(b"ping")
        assert recv_exact(s, 4000) == b"pong" * 1000
        s.sendall(b"done")
        s2 = socket.create_connection(("127.0.0.1", int(sys.argv[2])))
        assert recv_exact(s2, 9) == b"220 ready"
        s2.sendall(b"helo")
        assert recv_exact(s2, 6000) == b"250 ok" * 1000
        s2.close()
        print("chat ok", flush=True)
    elif mode == "fork":
        send_pattern(s, MB)
        time.sleep(0.2)
        pid = os.fork()
        if pid == 0:
            send_pattern(s, MB, MB)
            s.shutdown(socket.SHUT_WR)
            os._exit(0)
        s.close()
        _, status = os.waitpid(pid, 0)
        print(f"forked child status={status}", flush=True)
    elif mode == "forklate":
        time.sleep(2.5)  # the handshake, held back 1 s by the server's library, is done
        send_pattern(s, 64 * 1024)  # fits the library's buffer: no wait for the reader
        pid = os.fork()
        if pid == 0:
            try:
                send_pattern(s, 64 * 1024, 64 * 1024)
                s.shutdown(socket.SHUT_WR)
            except OSError as e:
                print(f"child: {e!r}", flush=True)
            os._exit(0)
        s.close()
        os.waitpid(pid, 0)
        print("forked", flush=True)
    elif mode == "forever":
        offset = 0
        while True:
            send_pattern(s, 256 * 1024, offset)
            offset += 256 * 1024
