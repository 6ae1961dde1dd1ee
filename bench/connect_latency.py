"""Time TCP connection set-up (SYN to SYN/ACK) for many new connections, one after another.

Every connection is a new 5-tuple, so each first packet meets the switch's
rule lookup afresh. Usage: connect_latency.py HOST PORT COUNT -> JSON on stdout
"""

import json
import socket
import sys
import time


def main():
    host, port, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    times = []
    for _ in range(count):
        s = socket.socket()
        s.settimeout(3)
        t0 = time.perf_counter()
        s.connect((host, port))
        times.append(time.perf_counter() - t0)
        s.close()
        time.sleep(0.005)
    print(json.dumps({"connect_s": times}))


if __name__ == "__main__":
    main()
