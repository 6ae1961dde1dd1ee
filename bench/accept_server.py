"""A TCP listener that accepts and closes: the far end for connect_latency.py."""

import socket
import sys

s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2])))
s.listen(1024)
while True:
    conn, _ = s.accept()
    conn.close()
