# echo_client.py HOST PORT CONNS BYTES: opens CONNS connections one after the other, on each
# sends BYTES random bytes (a thread, then SHUT_WR) while reading the echo to end of stream,
# and prints how many of them came back intact.
import os
import socket
import sys
import threading

host, port, conns, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
good = 0
for _ in range(conns):
    data = os.urandom(size)
    s = socket.create_connection((host, port))

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
