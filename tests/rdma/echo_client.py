# echo_client.py HOST PORT CONNS BYTES [LINK]: opens CONNS connections one after the other, on
# each sends BYTES random bytes (a thread, then SHUT_WR) while reading the echo to end of
# stream, and prints how many of them came back intact. With LINK (e.g. verbs), each
# connection first waits (up to 20 s) until the preloaded library says it is carried by
# LINK (fastsock_transport), so that the echo is not over before the link is up.
import ctypes
import os
import socket
import sys
import threading
import time

host, port, conns, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
link = sys.argv[5].encode() if len(sys.argv) > 5 else None
if link:
    transport = ctypes.CDLL(None).fastsock_transport
    transport.restype = ctypes.c_char_p
good = 0
for _ in range(conns):
    data = os.urandom(size)
    s = socket.create_connection((host, port))
    end = time.monotonic() + 20
    while link and transport(s.fileno()) != link and time.monotonic() < end:
        time.sleep(0.01)

    def send():
        s.sendall(data)
        s.shutdown(socket.SHUT_WR)

    t = threading.Thread(target=send)
    t.start()
    got = bytearray()
    while True:
        b = s.recv(65536)
        if not b:
            break
        got += b
    t.join()
    s.close()
    good += got == data
print(good)
