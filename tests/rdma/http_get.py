# http_get.py HOST PORT PATH LINK: downloads http://HOST:PORT/PATH to stdout over one
# connection, which first waits (up to 20 s) until the preloaded library says it is carried
# by LINK (fastsock_transport), so that the download is not over before the link is up: a
# 1 MiB response takes a few milliseconds on TCP, less than a new process takes to bring
# an RDMA connection up (its first rdma_create_event_channel alone takes about 100 ms in the
# Soft-RoCE VM), and such a connection would rightly end on TCP. Exits 3 if the link never
# came. Python's http.client, not curl: curl deadlocks at start-up under LD_PRELOAD=libasan
# (docs/compatibility.md), and the rdma tests run in the sanitizer build too.
import ctypes
import http.client
import sys
import time

host, port, path, link = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4].encode()
transport = ctypes.CDLL(None).fastsock_transport
transport.restype = ctypes.c_char_p
conn = http.client.HTTPConnection(host, port, timeout=50)
conn.connect()
end = time.monotonic() + 20
while transport(conn.sock.fileno()) != link and time.monotonic() < end:
    time.sleep(0.01)
carried = transport(conn.sock.fileno()) or b"no link"
if carried != link:
    sys.exit(f"http_get: the connection is carried by {carried.decode()}, not {link.decode()}")
conn.request("GET", path)
response = conn.getresponse()
if response.status != 200:
    sys.exit(f"http_get: HTTP status {response.status}")
sys.stdout.buffer.write(response.read())
