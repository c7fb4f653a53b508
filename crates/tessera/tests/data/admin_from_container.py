"""Ask the daemon at SOCKET, over its control protocol (a 4-byte little-endian length,
then JSON), to start a pod allocation with a made-up token and to end the allocation
whose token is TOKEN: what only the node's admin may do. Prints each reply, one line
each. usage: admin_from_container.py SOCKET TOKEN"""

import json
import socket
import struct
import sys


def call(sock, message):
    body = json.dumps(message).encode()
    sock.sendall(struct.pack("<I", len(body)) + body)
    head = b""
    while len(head) < 4:
        head += sock.recv(4 - len(head))
    (n,) = struct.unpack("<I", head)
    data = b""
    while len(data) < n:
        data += sock.recv(n - len(data))
    print(data.decode())


s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
call(s, {"type": "pod_start", "token": "ab" * 16, "gpu": 0, "memory": 1 << 30, "weight": 1, "name": "x"})
call(s, {"type": "pod_end", "token": sys.argv[2]})
