#!/usr/bin/env python3
"""The switch's flow export under the `flood` bench (issue 26): with and without, in one run.

One device floods (UDP to random addresses and ports of the emulated internet at 3,000 pps, and
DISCOVERs from forged MACs at 1,000 pps, as `bench/run.py flood`) while a second device runs DHCP
handshakes and fetches a page. Measured three times in the same emulated home: quiet; flooding
with OVS exporting every packet's flow (IPFIX, sampling=1, as the router runs); flooding with the
export cleared. For each: the second device's DHCP and page times, the controller's and
ovs-vswitchd's CPU, the datapath's flows, and what the collector read and dropped.

Usage (as root, from the repository root; brings up the emulated home, so one at a time):
  flock /tmp/homenet.lock .venv/bin/python bench/flow_export_flood.py [--samples 60]
Writes bench/results/flow_export_flood.json (docs/PERFORMANCE.md: bench/report.py).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import time
from pathlib import Path

from common import BENCH, PY, add_client, homenet_up, in_client, page_times, ratio, summary, write_result

FLOOD_SECONDS = 60
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User and system time of a process, all its threads."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def datapath_flows() -> int:
    out = subprocess.run(["ovs-appctl", "dpctl/dump-flows"], capture_output=True, text=True, timeout=30).stdout
    return sum(1 for line in out.splitlines() if line.strip() and not line.startswith("flow-dump"))


def phase(home, samples: int, flood: bool) -> dict:
    """The second device's numbers, and what the controller and the switch spent, over one phase."""
    controller, vswitchd = home.processes.pid("controller"), int(Path("/run/openvswitch/ovs-vswitchd.pid").read_text())
    floods = []
    if flood:
        floods = [
            home.spawn(
                "flooder", PY, BENCH / "flood.py", mode, "wlan0", pps, FLOOD_SECONDS, stdout=subprocess.PIPE, text=True
            )
            for mode, pps in (("udp", "3000"), ("dhcp", "1000"))
        ]
        time.sleep(3)  # the flood at full strength before measuring
    before = home.api("GET", "counters")[1]
    started, cpu = time.monotonic(), (cpu_seconds(controller), cpu_seconds(vswitchd))
    dhcp = json.loads(in_client(home, "victim", PY, BENCH / "dhcp_probe.py", "wlan0", samples))
    failures: list = []
    pages = page_times(home, samples // 3, failures)
    flows_mid = datapath_flows()
    elapsed = time.monotonic() - started
    used = (cpu_seconds(controller) - cpu[0], cpu_seconds(vswitchd) - cpu[1])
    after = home.api("GET", "counters")[1]
    sent = [int(f.communicate(timeout=FLOOD_SECONDS + 60)[0] or 0) for f in floods]
    return {
        "dhcp": summary(dhcp["ack_s"]),
        "dhcp_lost": dhcp["lost"],
        "page": summary(pages),
        "page_failures": failures,
        "seconds": round(elapsed, 1),
        "controller_cpu_percent": round(100 * used[0] / elapsed, 1),
        "vswitchd_cpu_percent": round(100 * used[1] / elapsed, 1),
        "datapath_flows": flows_mid,
        "flood_packets_sent": sent,
        "collector": {
            name: after.get(f"flow_export_{name}", 0) - before.get(f"flow_export_{name}", 0)
            for name in ("datagrams", "records", "dropped", "malformed", "lost", "restarts")
        },
        # its CPU as it counts it (its own process's, or its threads' when it ran in the controller's)
        "collector_cpu_percent": round(
            100 * (after.get("flow_export_cpu_ns", 0) - before.get("flow_export_cpu_ns", 0)) / 1e9 / elapsed, 1
        ),
        "packet_in_dropped": after.get("packet_in_dropped", 0) - before.get("packet_in_dropped", 0),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=60, help="DHCP handshakes per phase (a third as many pages)")
    parser.add_argument("--result", default="flow_export_flood", help="the result's name in bench/results")
    args = parser.parse_args()
    home = homenet_up()
    try:
        add_client(home, "victim", permit=True)
        add_client(home, "flooder", permit=True)
        quiet = phase(home, args.samples, flood=False)
        exporting = phase(home, args.samples, flood=True)  # the controller has the switch export at its start
        subprocess.run(["ovs-vsctl", "clear", "Bridge", "br-lan", "ipfix"], check=True)
        plain = phase(home, args.samples, flood=True)
    finally:
        home.down()
    rows = []
    for label, key, goal in (("DHCP p99", ("dhcp", "p99_ms"), "< 100 ms"), ("page fetch p99", ("page", "p99_ms"), "")):
        on, off, q = exporting[key[0]][key[1]], plain[key[0]][key[1]], quiet[key[0]][key[1]]
        rows.append(
            [
                f"2nd device {label} under flood, flow export on",
                f"{on} ms",
                f"{off} ms export off ({q} ms quiet)",
                ratio(on, off),
                goal,
            ]
        )
    for label, key in (
        ("controller CPU", "controller_cpu_percent"),
        ("flow collector CPU", "collector_cpu_percent"),
        ("ovs-vswitchd CPU", "vswitchd_cpu_percent"),
    ):
        rows.append(
            [
                f"{label} under flood, flow export on",
                f"{exporting[key]} % of a core",
                f"{plain[key]} % export off ({quiet[key]} % quiet)",
                ratio(exporting[key], plain[key]),
                "",
            ]
        )
    rows.append(
        [
            "collector under flood: datagrams read, datagrams dropped",
            f"{exporting['collector']['datagrams']:,}, {exporting['collector']['dropped']:,}",
            "",
            "",
            "",
        ]
    )
    write_result(
        args.result,
        {
            "what": "the flood bench (one device floods UDP at 3,000 pps to random internet addresses and "
            "DISCOVERs at 1,000 pps) with the switch's flow export on (IPFIX sampling=1, active timeout 2 s) "
            f"and cleared, one run; a second device's DHCP ({args.samples} handshakes) and page fetches "
            f"({args.samples // 3}) and the CPU of the controller (its collector included) and ovs-vswitchd",
            "quiet": quiet,
            "export_on": exporting,
            "export_off": plain,
            "rows": rows,
        },
    )


if __name__ == "__main__":
    main()
