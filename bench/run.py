#!/usr/bin/env python3
"""make bench: measure the router beside a baseline in the same run, write bench/results/*.json
and regenerate docs/PERFORMANCE.md.

    bench/run.py [dhcp_storm] [first_packet] [flood] [hwdb] [webui] [ui_load] [hwdb_abuse] [hostile]
                 [agent_flood] [qos] [ipv6_permit] [boot] [flow_export] [flow_export_flood]
                 [agent] [slicer]
                 [--quick]   (default: all)

Every result a benchmark writes is stamped with the commit, date, machine and load average as it began
(`common.run_stamped`), so the code measured must be this checkout's: the venv's packages installed from it
(a clone's `make deps`), or, from another worktree, PYTHONPATH=controller:homenet:webui.

Each benchmark brings up what it needs (the emulated home, a plain OVS bridge as the
baseline) and tears it down again. These machines are noisy: results are medians and
p99s over many samples, and comparisons are ratios within one run.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import agent_flood
import boot
import hostile
import ipv6_permit
import qos
from common import (
    BENCH,
    PY,
    REPO,
    RESULTS,
    add_client,
    homenet_up,
    in_client,
    page_times,
    ratio,
    run_stamped,
    sh,
    summary,
    write_result,
)

from homenet.browser import harness_env
from homenet.home import INTERNET_IP, WAN_INET_IP
from homenet.isp import DIST, NS_DIST

# ---- the baseline: a plain OVS bridge with the NORMAL action ------------------------------------


class PlainBridge:
    """Two namespaces on an OVS userspace bridge that just does L2 learning (no controller)."""

    BRIDGE, SERVER_NS, CLIENT_NS = "br-bench", "hw-bench-srv", "hw-bench-cli"
    SERVER_IP, CLIENT_IP = "10.9.0.1", "10.9.0.2"
    # `add_router`'s namespace, and its WAN's address at the emulated home's ISP (beside households A and B).
    ROUTER_NS, ROUTER_LAN_IP, ROUTER_WAN_IP = "hw-bench-rtr", "10.9.255.254", "198.51.100.4"

    def __enter__(self):
        self.__exit__()
        sh(
            "ovs-vsctl",
            "add-br",
            self.BRIDGE,
            "--",
            "set",
            "bridge",
            self.BRIDGE,
            "datapath_type=netdev",
            "fail-mode=standalone",
        )
        for ns, ip, port in ((self.SERVER_NS, self.SERVER_IP, "bsrv"), (self.CLIENT_NS, None, "bcli")):
            sh("ip", "netns", "add", ns)
            sh("ip", "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", ns)
            sh("ovs-vsctl", "add-port", self.BRIDGE, port)
            for dev, where in ((port, None), ("eth0", ns)):
                prefix = ["ip", "netns", "exec", where] if where else []
                sh(*prefix, "ethtool", "-K", dev, "tx", "off")
                sh(*prefix, "ip", "link", "set", dev, "up")
            sh("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")
            if ip:
                sh("ip", "netns", "exec", ns, "ip", "addr", "add", f"{ip}/16", "dev", "eth0")
        return self

    def add_router(self) -> None:
        """A plain router on the bridge, as an OpenWrt box forwards with the same parts: the client's frames
        switched by OVS NORMAL to a namespace that routes them with the kernel and NATs them (nftables
        masquerade) out of its WAN. Its WAN is a third household's line at the emulated home's ISP (which
        must be up), so its connections to the internet cross the same ISP as the home's: a household that
        picked a plain router instead would still have that ISP. No shaping and no per-device rules: the
        least a router does."""
        sh("ip", "netns", "add", self.ROUTER_NS)
        sh("ip", "link", "add", "brtr", "type", "veth", "peer", "name", "lan", "netns", self.ROUTER_NS)
        sh("ovs-vsctl", "add-port", self.BRIDGE, "brtr")
        sh("ethtool", "-K", "brtr", "tx", "off")
        sh("ip", "link", "set", "brtr", "up")
        sh("ip", "-n", self.ROUTER_NS, "link", "add", "wan", "type", "veth", "peer", "name", "dist-c", "netns", NS_DIST)
        sh("ip", "-n", NS_DIST, "link", "set", "dist-c", "master", DIST, "up")
        for dev, address in (("lan", f"{self.ROUTER_LAN_IP}/16"), ("wan", f"{self.ROUTER_WAN_IP}/24")):
            self.exec(self.ROUTER_NS, "ethtool", "-K", dev, "tx", "off")
            sh("ip", "-n", self.ROUTER_NS, "addr", "add", address, "dev", dev)
            sh("ip", "-n", self.ROUTER_NS, "link", "set", dev, "up")
        sh("ip", "-n", self.ROUTER_NS, "link", "set", "lo", "up")
        sh("ip", "-n", self.ROUTER_NS, "route", "add", "default", "via", WAN_INET_IP)
        self.exec(self.ROUTER_NS, "sysctl", "-qw", "net.ipv4.ip_forward=1")
        self.exec(
            self.ROUTER_NS,
            "nft",
            "add table ip nat; add chain ip nat post { type nat hook postrouting priority 100; };"
            " add rule ip nat post oifname wan masquerade",
        )
        # The client's address must be on eth0 before its route via the router can be added.
        sh("ip", "-n", self.CLIENT_NS, "route", "add", "default", "via", self.ROUTER_LAN_IP)

    def exec(self, ns, *cmd, **kw):
        return sh("ip", "netns", "exec", ns, *cmd, **kw)

    def spawn(self, ns, *cmd):
        return subprocess.Popen(
            ["ip", "netns", "exec", ns, *map(str, cmd)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )

    def __exit__(self, *exc):
        for ns in (self.SERVER_NS, self.CLIENT_NS, self.ROUTER_NS):
            for pid in sh("ip", "netns", "pids", ns, check=False).split():
                subprocess.run(["kill", "-9", pid], capture_output=True)
            sh("ip", "netns", "delete", ns, check=False)
        sh("ovs-vsctl", "--if-exists", "del-br", self.BRIDGE, check=False)


# ---- benchmarks -----------------------------------------------------------------------------------


def dhcp_storm(rounds: int, devices: int, path_rounds: int) -> None:
    """100 devices (10 people x 10 devices) DISCOVER at once; each device's time to its ACK. Then where a
    message's time goes: the controller's CPU per DISCOVER and REQUEST, in-process (controller/tools/dhcp_path.py)."""
    storm = [PY, BENCH / "dhcp_storm_client.py"]
    baseline_acks, homework_acks, unanswered = [], [], {"baseline": 0, "homework": 0}
    home = homenet_up()  # also starts Open vSwitch, which the baseline bridge needs too
    try:
        home.add("storm")
        with PlainBridge() as plain:
            # dnsmasq is what most home routers run: the reference for a plain DHCP server.
            server = plain.spawn(
                plain.SERVER_NS,
                "dnsmasq",
                "--keep-in-foreground",
                "--conf-file=/dev/null",
                "--no-resolv",
                "--no-hosts",
                "--port=0",
                "--bind-interfaces",
                "--interface=eth0",
                "--dhcp-range=10.9.0.10,10.9.255.250,255.255.0.0,30s",
                "--dhcp-authoritative",
                # no ping-before-offer: the fastest dnsmasq, a strict baseline
                "--no-ping",
                "--dhcp-leasefile=/dev/null",
                "--log-facility=/dev/null",
            )
            time.sleep(1)
            for round_no in range(rounds):  # interleaved, so drift in machine load hits both alike
                out = json.loads(plain.exec(plain.CLIENT_NS, *storm, "eth0", devices, 20))
                baseline_acks += out["ack_s"]
                unanswered["baseline"] += devices - out["acked"]
                if round_no:
                    # Each round is a household meeting a router that has not seen its devices. The last
                    # round's are still pending, and at most 256 may wait (the rest make way for them).
                    forget_devices(home)
                out = json.loads(in_client(home, "storm", *storm, "wlan0", devices, 20))
                homework_acks += out["ack_s"]
                unanswered["homework"] += devices - out["acked"]
                time.sleep(1)
            server.kill()
    finally:
        home.down()
    hw, base = summary(homework_acks), summary(baseline_acks)
    cpu = controller_cpu_per_message(devices, path_rounds)
    write_result(
        "dhcp_storm",
        {
            "what": f"{devices} devices send DISCOVER at once; per-device DISCOVER-to-ACK time; {rounds} rounds, "
            "fresh MACs each round",
            "homework": hw,
            "baseline_dnsmasq_plain_ovs": base,
            "unanswered": unanswered,
            "controller_cpu_per_message": cpu,
            "rows": [
                [
                    "DHCP storm: DISCOVER to ACK, median",
                    f"{hw['median_ms']} ms",
                    f"{base['median_ms']} ms (dnsmasq)",
                    ratio(hw["median_ms"], base["median_ms"]),
                    "< 50 ms (original router: 700 ms)",
                ],
                [
                    "DHCP storm: DISCOVER to ACK, p99",
                    f"{hw['p99_ms']} ms",
                    f"{base['p99_ms']} ms (dnsmasq)",
                    ratio(hw["p99_ms"], base["p99_ms"]),
                    "",
                ],
                # The storm client sends each DISCOVER once (a real client would retry after ~4 s): a
                # device left unanswered is not in the times above, so it is counted here.
                [
                    "DHCP storm: devices left unanswered",
                    f"{unanswered['homework']} of {rounds * devices}",
                    f"{unanswered['baseline']} of {rounds * devices} (dnsmasq)",
                    "",
                    "0",
                ],
                [
                    f"controller CPU per answer, DISCOVER / REQUEST, median of {cpu['rounds']} in-process storms",
                    f"{cpu['discover']['median_us']} / {cpu['request']['median_us']} us",
                    "",
                    "",
                    "",
                ],
            ],
        },
    )


def controller_cpu_per_message(devices: int, rounds: int) -> dict:
    """The serving thread's CPU per DHCP message, the socket to the answer, measured in-process (no network,
    no other process in the way): controller/tools/dhcp_path.py."""
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        tool = REPO / "controller/tools/dhcp_path.py"
        sh("nice", "-n", "19", PY, tool, "--devices", devices, "--rounds", rounds, "--json", out.name, timeout=1800)
        return json.loads(Path(out.name).read_text())


def forget_devices(home) -> None:
    """The router's controller, restarted with an empty device store."""
    home.processes.stop("controller")
    for path in home.run_dir.glob("controller.sqlite*"):
        path.unlink()
    home.start("controller")


FIRST_PACKET_RUNS = 3  # the ratio swings with the machine: each run's median is reported, and their spread


def first_packet(count: int) -> None:
    """Connection set-up time through the router's proactive rules, beside what a user would have instead: for
    device to device a plain OVS bridge (NORMAL) between two namespaces, for device to internet a plain router
    of the same parts (OVS NORMAL, then the kernel's routing and NAT) on a line of the same ISP, to the same
    server. Three runs, each of interleaved batches."""
    connect = [PY, BENCH / "connect_latency.py"]
    ways = ("bridge", "router", "device_to_device", "device_to_internet")
    runs: list[dict[str, list[float]]] = []
    home = homenet_up()
    try:
        with PlainBridge() as plain:
            server = plain.spawn(plain.SERVER_NS, PY, BENCH / "accept_server.py", plain.SERVER_IP, 9000)
            plain.exec(plain.CLIENT_NS, "ip", "addr", "add", f"{plain.CLIENT_IP}/16", "dev", "eth0")
            plain.add_router()
            server_ip = add_client(home, "benchsrv", permit=True)
            add_client(home, "benchcli", permit=True)
            srv = home.spawn(
                "benchsrv",
                PY,
                BENCH / "accept_server.py",
                "0.0.0.0",
                "9000",
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            time.sleep(1)
            n = max(1, count // (5 * FIRST_PACKET_RUNS))
            for _ in range(FIRST_PACKET_RUNS):
                run: dict[str, list[float]] = {way: [] for way in ways}
                for _ in range(5):  # interleaved batches
                    for way, where, host, port in (
                        ("bridge", None, plain.SERVER_IP, 9000),
                        ("router", None, INTERNET_IP, 80),
                        ("device_to_device", "benchcli", server_ip, 9000),
                        ("device_to_internet", "benchcli", INTERNET_IP, 80),
                    ):
                        probe = [*connect, host, port, n]
                        out = plain.exec(plain.CLIENT_NS, *probe) if where is None else in_client(home, where, *probe)
                        run[way] += json.loads(out)["connect_s"]
                runs.append(run)
            srv.kill()
            server.kill()
    finally:
        home.down()
    every = {way: summary([s for run in runs for s in run[way]]) for way in ways}
    medians = {way: [summary(run[way])["median_ms"] for run in runs] for way in ways}
    ratios = {
        ours: [round(o / b, 2) for o, b in zip(medians[ours], medians[base], strict=True)]
        for ours, base in (("device_to_device", "bridge"), ("device_to_internet", "router"))
    }

    def spread(values: list[float]) -> str:
        return f"runs: {', '.join(f'{v:g}' for v in values)}"

    d2d, d2i, bridge, router = (every[w] for w in ("device_to_device", "device_to_internet", "bridge", "router"))
    write_result(
        "first_packet",
        {
            "what": f"{FIRST_PACKET_RUNS} runs of {5 * n} new TCP connections per way, one after another, the ways "
            "interleaved in batches; time from SYN sent to SYN/ACK received",
            "baseline_plain_ovs_normal": bridge,
            "baseline_plain_router": router,
            "homework_device_to_device": d2d,
            "homework_device_to_internet": d2i,
            "run_medians_ms": medians,
            "run_ratios": ratios,
            "rows": [
                [
                    "New connection, device to device (routed, hairpin), median",
                    f"{d2d['median_ms']} ms",
                    f"{bridge['median_ms']} ms (plain OVS NORMAL)",
                    f"{ratio(d2d['median_ms'], bridge['median_ms'])} ({spread(ratios['device_to_device'])})",
                    "<= 1.2x",
                ],
                [
                    "New connection, device to device, p99",
                    f"{d2d['p99_ms']} ms",
                    f"{bridge['p99_ms']} ms",
                    ratio(d2d["p99_ms"], bridge["p99_ms"]),
                    "<= 1.5x",
                ],
                [
                    "New connection, device to internet (routed + NAT), median",
                    f"{d2i['median_ms']} ms",
                    f"{router['median_ms']} ms (plain router: OVS NORMAL, kernel routing and NAT, same ISP)",
                    f"{ratio(d2i['median_ms'], router['median_ms'])} ({spread(ratios['device_to_internet'])})",
                    "<= 1.2x",
                ],
                [
                    "New connection, device to internet, p99",
                    f"{d2i['p99_ms']} ms",
                    f"{router['p99_ms']} ms",
                    ratio(d2i["p99_ms"], router["p99_ms"]),
                    "<= 1.5x",
                ],
            ],
        },
    )


def flood_phase(home, samples: int, failures: list) -> dict:
    """The second device's DHCP and page times quiet, then while the flooder floods; the controller's
    packet-ins during the flood."""
    probe = [PY, BENCH / "dhcp_probe.py", "wlan0", samples]
    quiet = json.loads(in_client(home, "victim", *probe))
    quiet_pages = page_times(home, samples // 3, failures)
    before, started = home.api("GET", "counters")[1], time.monotonic()
    floods = [
        home.spawn("flooder", PY, BENCH / "flood.py", mode, "wlan0", pps, "60", stdout=subprocess.PIPE, text=True)
        for mode, pps in (("udp", "3000"), ("dhcp", "1000"))
    ]
    time.sleep(3)  # the flood at full strength before measuring
    loud = json.loads(in_client(home, "victim", *probe))
    loud_pages = page_times(home, samples // 3, failures)
    after, seconds = home.api("GET", "counters")[1], time.monotonic() - started
    sent = [int(f.communicate(timeout=120)[0] or 0) for f in floods]
    packet_ins_per_s = round((after.get("packet_ins", 0) - before.get("packet_ins", 0)) / seconds, 1)
    return {
        "quiet": {"dhcp": summary(quiet["ack_s"]), "page": summary(quiet_pages), "dhcp_lost": quiet["lost"]},
        "flood": {
            "dhcp": summary(loud["ack_s"]),
            "page": summary(loud_pages),
            "dhcp_lost": loud["lost"],
            "flood_packets_sent": sent,
            "pending_evicted": after.get("pending_evicted"),
            "packet_in_dropped": after.get("packet_in_dropped"),
            "packet_ins_per_s": packet_ins_per_s,
        },
    }


def flood(samples: int) -> None:
    """A second device's DHCP and page times while one device floods, beside the same when quiet; and the
    controller's packet-ins during the flood."""
    failures: list = []
    home = homenet_up()
    try:
        add_client(home, "victim", permit=True)
        add_client(home, "flooder", permit=True)
        measured = flood_phase(home, samples, failures)
    finally:
        home.down()
    q, loud_dhcp = measured["quiet"]["dhcp"], measured["flood"]["dhcp"]
    qp, lp = measured["quiet"]["page"], measured["flood"]["page"]
    write_result(
        "flood",
        {
            "what": "a permitted device floods (UDP to random ports/addresses of the emulated internet at 3000 pps, "
            "and DISCOVERs from random forged MACs at 1000 pps) while a second, known device runs full DHCP "
            f"handshakes ({samples}) and fetches a page ({samples // 3}); the same measured quiet first",
            "quiet": measured["quiet"],
            "page_failures": failures,
            "flood": measured["flood"],
            "rows": [
                [
                    "2nd device DHCP (DISCOVER to ACK) under flood, p99",
                    f"{loud_dhcp['p99_ms']} ms (lost {measured['flood']['dhcp_lost']})",
                    f"{q['p99_ms']} ms quiet (lost {measured['quiet']['dhcp_lost']})",
                    ratio(loud_dhcp["p99_ms"], q["p99_ms"]),
                    "< 100 ms",
                ],
                [
                    "2nd device DHCP under flood, median",
                    f"{loud_dhcp['median_ms']} ms",
                    f"{q['median_ms']} ms quiet",
                    ratio(loud_dhcp["median_ms"], q["median_ms"]),
                    "",
                ],
                [
                    "2nd device page fetch under flood, median",
                    f"{lp['median_ms']} ms",
                    f"{qp['median_ms']} ms quiet",
                    ratio(lp["median_ms"], qp["median_ms"]),
                    "",
                ],
                [
                    "2nd device page fetch under flood, p99",
                    f"{lp['p99_ms']} ms",
                    f"{qp['p99_ms']} ms quiet",
                    ratio(lp["p99_ms"], qp["p99_ms"]),
                    "",
                ],
                [
                    "controller packet-ins during the flood",
                    f"{measured['flood']['packet_ins_per_s']}/s",
                    "",
                    "",
                    "only DHCP/ARP/DNS/EAPOL",
                ],
            ],
        },
    )


def hwdb(_args) -> None:
    """hwdb's own benchmark (ingest, query latency, memory); it writes bench/results/hwdb.json."""
    sh("make", "-C", REPO / "hwdb", "bench", f"BENCH_OUT={RESULTS / 'hwdb.json'}", timeout=900)


def webui(_args) -> None:
    """The web UI's numbers against the live emulated home: join to label visible, drop to connected, size."""
    home = homenet_up()
    try:
        with tempfile.TemporaryDirectory(prefix="bench-webui-screenshots-") as screenshots:
            subprocess.run(
                ["make", "-C", REPO / "webui", "bench", f"BENCH_OUT={RESULTS / 'webui.json'}", f"PYTHON={PY}"],
                env=harness_env(home, Path(screenshots)),
                check=True,
                timeout=1800,
            )
    finally:
        home.down()


def hostile_dns(args) -> None:
    """Hostile DNS from one device; another device's lookups and DHCP, quiet and under attack."""
    write_result("hostile", hostile.measure_home(args.seconds, args.samples))


def agent_flood_home(args) -> None:
    """An agent floods hwdb from one device; another device's DHCP renewals and lookups, quiet and during it."""
    write_result("agent_flood", agent_flood.measure_home(args.seconds))


def hwdb_abuse(_args) -> None:
    """A loopback client's queries while LAN peers hold the most half-sent requests they may."""
    out = RESULTS / "hwdb_abuse.json"
    sh("make", "-C", REPO / "hwdb", "bench-abuse", f"BENCH_OUT={out}", timeout=300)


def ui_load(_args) -> None:
    """The web UI under load (100 live streams, a guest's sign-in flood) beside the same quiet."""
    out = RESULTS / "ui_load.json"
    sh("make", "-C", REPO / "webui", "bench-load", f"LOAD_OUT={out}", f"PYTHON={PY}", timeout=1800)


def flow_export(args) -> None:
    """The switch's per-connection records against a real OVS: connections reported, the collector's CPU; then
    what the collector costs a datagram of OVS's, its fast path beside netflume's alone, and its process at the
    flood's rate (controller/tools/export_parse.py; not niced: a starved collector would drop datagrams)."""
    tools, runs = REPO / "controller/tools", 1 if args.quick else 3
    burst = ["--runs", runs, "--json", RESULTS / "flow_export.json"]
    sh("nice", "-n", "19", PY, tools / "export_burst.py", *burst, timeout=3600)
    small = ["--datagrams", "1000", "--rounds", "3"] if args.quick else []
    sh(PY, tools / "export_parse.py", *small, "--json", RESULTS / "flow_export_parse.json", timeout=1800)


def flow_export_flood(args) -> None:
    """The `flood` bench with the switch's flow export on and off, in one run (bench/flow_export_flood.py)."""
    sh(PY, BENCH / "flow_export_flood.py", "--samples", args.samples, timeout=3600)


def agent(args) -> None:
    """The end-host agent's scan against gopsutil's /proc walk (endhost-agent/cmd/agent-bench)."""
    sizes = ["SIZES=1000"] if args.quick else []
    sh("make", "-C", REPO / "endhost-agent", "bench", f"BENCH_OUT={RESULTS / 'agent.json'}", *sizes, timeout=1800)


def slicer(args) -> None:
    """The ISP slicer beside OVS taking the same households' rules directly (isp-flowvisor/bench)."""
    small = ["SOAK=30", "SECONDS_PER_RUN=2"] if args.quick else []
    sh("make", "-C", REPO / "isp-flowvisor", "bench", f"PY={PY}", *small, timeout=3600)


BENCHMARKS = {
    "dhcp_storm": lambda a: dhcp_storm(a.rounds, a.devices, a.path_rounds),
    "first_packet": lambda a: first_packet(a.connections),
    "flood": lambda a: flood(a.samples),
    "hwdb": hwdb,
    "webui": webui,
    "ui_load": ui_load,
    "hwdb_abuse": hwdb_abuse,
    "hostile": hostile_dns,
    "agent_flood": agent_flood_home,
    "qos": qos.qos,
    "ipv6_permit": ipv6_permit.ipv6_permit,
    "boot": boot.measure,  # and, in the same boot of the router, its services' memory (bench/memory.py)
    "flow_export": flow_export,
    "flow_export_flood": flow_export_flood,
    "agent": agent,
    "slicer": slicer,
}
# make bench QUICK=1: the same set, small enough to run before a change is submitted (~15 minutes).
QUICK = {"rounds": 2, "devices": 50, "connections": 100, "samples": 20, "seconds": 3.0, "qos_seconds": 20.0}
QUICK |= {"ipv6_devices": 5, "path_rounds": 5}


def not_this_checkouts() -> list[str]:
    """The packages the benchmarks run (the emulated home, the controller) that the venv does not take from
    this checkout: the stamp names this checkout's commit, so the code measured must be its own."""
    return [
        f"{name} (from {Path(spec.origin).parent})"
        for name in ("homenet", "homework_controller", "homework_webui")
        if (spec := importlib.util.find_spec(name)) is None
        or spec.origin is None
        or REPO not in Path(spec.origin).resolve().parents
    ]


def main():
    if os.geteuid() != 0:
        sys.exit("bench needs root (network namespaces, OVS)")
    if elsewhere := not_this_checkouts():
        sys.exit(f"the venv runs another checkout's {', '.join(elsewhere)}, not {REPO}'s: its stamp would lie")
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("names", nargs="*", help=f"any of: {', '.join(BENCHMARKS)}")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--devices", type=int, default=100)
    p.add_argument("--connections", type=int, default=300)
    p.add_argument("--samples", type=int, default=60, help="flood, hostile: DHCP handshakes per phase")
    p.add_argument("--seconds", type=float, default=10.0, help="hostile, agent_flood: seconds of lookups per phase")
    p.add_argument("--qos-seconds", type=float, default=40.0, help="qos: length of each call (High from halfway)")
    p.add_argument("--path-rounds", type=int, default=30, help="dhcp_storm: in-process storms for the CPU per message")
    p.add_argument("--ipv6-devices", type=int, default=20, help="ipv6_permit: devices permitted one after another")
    p.add_argument("--quick", action="store_true", help="every benchmark, small: a check before submitting")
    args = p.parse_args()
    if args.quick:
        for name, value in QUICK.items():
            setattr(args, name, value)
    unknown = set(args.names) - set(BENCHMARKS)
    if unknown:
        p.error(f"unknown benchmark(s) {', '.join(sorted(unknown))}; known: {', '.join(BENCHMARKS)}")
    for name in args.names or BENCHMARKS:
        print(f"== {name}")
        run_stamped(functools.partial(BENCHMARKS[name], args), quick=args.quick)
    sh(PY, BENCH / "report.py")


if __name__ == "__main__":
    main()
