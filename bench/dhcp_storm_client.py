"""Many devices ask for an address at once: DISCOVER from N MACs in one burst, REQUEST on
each OFFER, and the time from each device's DISCOVER to its ACK.

Runs inside one emulated device (a raw packet socket can speak for many MACs).
Usage: dhcp_storm_client.py IFACE COUNT TIMEOUT_S  -> JSON on stdout
(dhcp_probe.py reuses `handshakes` for one device, again and again.)
"""

import json
import os
import random
import socket
import sys
import time

import dpkt
from scapy.layers.dhcp import BOOTP, DHCP
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

ETH_P_ALL = 0x0003


def frame(mac, xid, msg_type, options=()):
    return bytes(
        Ether(src=mac, dst="ff:ff:ff:ff:ff:ff")
        / IP(src="0.0.0.0", dst="255.255.255.255")
        / UDP(sport=68, dport=67)
        / BOOTP(op=1, xid=xid, chaddr=bytes.fromhex(mac.replace(":", "")))
        / DHCP(options=[("message-type", msg_type), ("hostname", f"storm-{xid & 0xffff}"), *options, "end"])
    )


SERVER_MARK, ADDR_MARK = "1.2.3.4", "5.6.7.8"


def request_template(mac, xid):
    data = bytearray(frame(mac, xid, "request", [("server_id", SERVER_MARK), ("requested_addr", ADDR_MARK)]))
    data[40:42] = b"\x00\x00"  # no UDP checksum (allowed over IPv4), so patching needs no recompute
    return (
        data,
        data.index(bytes([54, 4]) + socket.inet_aton(SERVER_MARK)) + 2,
        data.index(bytes([50, 4]) + socket.inet_aton(ADDR_MARK)) + 2,
    )


def fill_request(template, server, addr):
    data, server_at, addr_at = template
    data = bytearray(data)
    data[server_at : server_at + 4] = socket.inet_aton(server)
    data[addr_at : addr_at + 4] = socket.inet_aton(addr)
    return bytes(data)


def handshakes(iface: str, macs: list[str], timeout: float) -> dict:
    """DISCOVER from every MAC at once, REQUEST on each OFFER; per-device DISCOVER-to-OFFER/ACK times."""
    rng = random.Random()
    devices = {rng.getrandbits(32): {"mac": mac} for mac in macs}
    discovers = {xid: frame(d["mac"], xid, "discover") for xid, d in devices.items()}
    # REQUESTs are built before the clock starts, with the two addresses the OFFER will
    # fill in patched into place later: building with scapy inside the loop would time the client.
    requests = {xid: request_template(d["mac"], xid) for xid, d in devices.items()}

    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    sock.bind((iface, 0))
    sock.settimeout(0.2)
    for xid, data in discovers.items():  # the burst: everyone at once
        devices[xid]["t0"] = time.monotonic()
        sock.send(data)
    deadline = time.monotonic() + timeout
    done = 0
    while done < len(devices) and time.monotonic() < deadline:
        try:
            data = sock.recv(2048)
        except TimeoutError:
            continue
        now = time.monotonic()
        try:
            eth = dpkt.ethernet.Ethernet(data)
            udp = eth.data.data
            if not isinstance(udp, dpkt.udp.UDP) or udp.dport != 68:
                continue
            msg = dpkt.dhcp.DHCP(udp.data)
        except (dpkt.UnpackError, AttributeError):
            continue
        device = devices.get(msg.xid)
        if device is None:
            continue
        mtype = dict(msg.opts).get(53, b"\x00")[0]
        if mtype == 2 and "offer" not in device:  # OFFER -> REQUEST
            device["offer"] = now - device["t0"]
            yiaddr = socket.inet_ntoa(msg.yiaddr.to_bytes(4, "big"))
            server = socket.inet_ntoa(dict(msg.opts)[54])
            sock.send(fill_request(requests[msg.xid], server, yiaddr))
        elif mtype == 5 and "ack" not in device:
            device["ack"] = now - device["t0"]
            done += 1
    sock.close()
    return {
        "count": len(devices),
        "acked": done,
        "offer_s": [d["offer"] for d in devices.values() if "offer" in d],
        "ack_s": [d["ack"] for d in devices.values() if "ack" in d],
    }


def main():
    iface, count, timeout = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    rng = random.Random(os.getpid())
    prefix = [0x02, rng.randrange(256), rng.randrange(256)]
    macs = [":".join(f"{b:02x}" for b in prefix + [i >> 16 & 0xFF, i >> 8 & 0xFF, i & 0xFF]) for i in range(count)]
    print(json.dumps(handshakes(iface, macs, timeout)))


if __name__ == "__main__":
    main()
