"""A misbehaving device: floods for a while, then stops by itself.

    flood.py udp IFACE PPS SECONDS    UDP to random ports of random addresses in the emulated
                                      internet (198.51.100.0/24 only: never anywhere else)
    flood.py dhcp IFACE PPS SECONDS   DISCOVERs from random forged MACs
"""
import random
import socket
import sys
import time

from scapy.layers.dhcp import BOOTP, DHCP
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

ETH_P_ALL = 0x0003


def forged_discovers(n, rng):
    frames = []
    for _ in range(n):
        mac = "02:" + ":".join(f"{rng.randrange(256):02x}" for _ in range(5))
        frames.append(bytes(Ether(src=mac, dst="ff:ff:ff:ff:ff:ff") / IP(src="0.0.0.0", dst="255.255.255.255")
                            / UDP(sport=68, dport=67)
                            / BOOTP(op=1, xid=rng.getrandbits(32), chaddr=bytes.fromhex(mac.replace(":", "")))
                            / DHCP(options=[("message-type", "discover"), "end"])))
    return frames


def main():
    mode, iface, pps, seconds = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    rng = random.Random()
    if mode == "dhcp":
        sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        sock.bind((iface, 0))
        frames = forged_discovers(2000, rng)

        def send(i):
            sock.send(frames[i % len(frames)])
    elif mode == "udp":
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)

        def send(i):
            sock.sendto(b"x" * 64, (f"198.51.100.{rng.randrange(1, 255)}", rng.randrange(1024, 65535)))
    else:
        sys.exit(f"unknown mode {mode!r}")
    start = time.monotonic()
    sent = 0
    while (now := time.monotonic()) - start < seconds:
        due = int((now - start) * pps)
        while sent < due:
            try:
                send(sent)
            except OSError:
                pass  # a full socket buffer is part of flooding
            sent += 1
        time.sleep(0.001)
    print(sent)


if __name__ == "__main__":
    main()
