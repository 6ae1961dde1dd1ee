"""One household device's hour, compressed (bench/memory.py runs one in each device's namespace).

Usage: memory_device.py GATEWAY SEED HOUR_JSON WWW_IP WWW_HOST APPS_DOMAIN PORT,PORT...  -> JSON on stdout

In a random order, each step waiting for its answer: HOUR["lookups"] lookups through the router's DNS (at the
device's gateway) among HOUR["names"] names (WWW_HOST and names under APPS_DOMAIN, which the WAN's resolver
answers with the web server), HOUR["connections"] TCP connections to WWW_IP on the ports (a page on 80, the
others accept and close), and every quarter of the way an end-host agent's report to hwdb (at the gateway,
as the agent reports) naming the apps of the connections since the last one.
"""

import json
import random
import re
import socket
import subprocess
import sys
import time

import dnslib

from hwdb_client import HwdbClient, HwdbError, parse_reply

PAUSE_S = 0.2  # between steps, on average
APPS = ("browser", "mail", "video", "chat", "updates")


def hour(gateway: str, seed: int, plan: dict, www_ip: str, www_host: str, apps_domain: str, ports: list[int]) -> dict:
    rng = random.Random(seed)
    route = subprocess.run(["ip", "route", "get", gateway], capture_output=True, text=True).stdout
    own = re.search(r"src (\S+)", route)
    own_ip = own.group(1) if own else "0.0.0.0"
    names = [www_host] + [f"{APPS[k % len(APPS)]}-{seed}-{k}.{apps_domain}" for k in range(plan["names"] - 1)]
    steps = ["lookup"] * plan["lookups"] + ["connect"] * plan["connections"]
    rng.shuffle(steps)
    every = max(1, len(steps) // max(1, plan["agent_reports"]))
    out = {"lookups": 0, "lookups_answered": 0, "connections": 0, "connected": 0, "reports": 0, "reports_taken": 0}
    owners: list[tuple[int, int, str]] = []  # (local port, remote port, app) since the last report
    errors: list[str] = []
    for i, step in enumerate(steps, 1):
        if step == "lookup":
            out["lookups"] += 1
            query = dnslib.DNSRecord.question(rng.choice(names)).pack()
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
                sock.settimeout(3)
                for _ in range(2):  # one retry, as a stub resolver
                    sock.sendto(query, (gateway, 53))
                    try:
                        sock.recv(4096)
                        out["lookups_answered"] += 1
                        break
                    except OSError:  # no answer in time, or refused
                        continue
                else:
                    errors.append("lookup: no answer")
        else:
            out["connections"] += 1
            port = rng.choice(ports)
            try:
                with socket.create_connection((www_ip, port), timeout=10) as conn:
                    local = conn.getsockname()[1]
                    if port == 80:
                        conn.sendall(f"GET / HTTP/1.0\r\nHost: {www_host}\r\n\r\n".encode())
                    while conn.recv(4096):
                        pass
                out["connected"] += 1
                owners.append((local, port, rng.choice(APPS)))
            except OSError as exc:
                errors.append(f"connect {port}: {exc}")
        if i % every == 0 and out["reports"] < plan["agent_reports"] and owners:
            out["reports"] += 1
            rows = ", ".join(f"(6, '{own_ip}', {lp}, '{www_ip}', {rp}, '{app}', 'agent')" for lp, rp, app in owners)
            try:
                with HwdbClient(gateway, 987, timeout=20) as hwdb:
                    parse_reply(hwdb.request(f"insert into AppTuples values {rows}"))
                out["reports_taken"] += 1
            except (HwdbError, OSError) as exc:
                errors.append(f"report: {exc}")
            owners = []
        time.sleep(rng.uniform(0, 2 * PAUSE_S))
    out["errors"] = errors[:5]
    return out


if __name__ == "__main__":
    gateway, seed, plan, www_ip, www_host, apps_domain, ports = sys.argv[1:8]
    result = hour(
        gateway, int(seed), json.loads(plan), www_ip, www_host, apps_domain, [int(p) for p in ports.split(",")]
    )
    print(json.dumps(result))
