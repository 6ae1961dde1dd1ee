"""One device's DHCP handshake, timed again and again: DISCOVER to ACK for its own MAC.

Usage: dhcp_probe.py IFACE COUNT  -> JSON {"ack_s": [...], "lost": n} on stdout
"""

import json
import sys
import time
from pathlib import Path

from dhcp_storm_client import handshakes  # beside this script, which Python puts first on the path


def main():
    iface, count = sys.argv[1], int(sys.argv[2])
    mac = Path(f"/sys/class/net/{iface}/address").read_text().strip()
    acks, lost = [], 0
    for _ in range(count):
        result = handshakes(iface, [mac], timeout=2.0)
        acks += result["ack_s"]
        lost += 1 - result["acked"]
        time.sleep(0.2)  # well inside the device's own packet-in budget
    print(json.dumps({"ack_s": acks, "lost": lost}))


if __name__ == "__main__":
    main()
