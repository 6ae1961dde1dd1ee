"""The flow collector's CPU per datagram, measured in-process: its fast path against netflume's.

The datagrams are two captures of what a real Open vSwitch sent (controller/tests/data/):
`ipv4-fetches` (ovs_ipfix.json, HTTP fetches over IPv4) and `both-families` (ovs_ipfix_both_families
.json: TCP, UDP and ICMP over IPv6 and IPv4, and ARP, whose records take netflume's path). For each,
a round reads the datagrams of templates and then its data datagrams (one record each, as OVS
sends them) repeated to DATAGRAMS, with a fresh parser on each path, and sums the records per
connection direction as the collector's process does (`ConnectionTotals`); the two paths take
turns, so a busy machine slows both alike. Prints, per capture and path, the thread's CPU per
datagram (median over the rounds, and the spread), and checks that both paths read the same
records.

Then the collector's process end to end: a `Collector` (its own process, as the controller runs it)
is sent the templates and DATAGRAMS of the first capture's data datagrams on loopback at RATE a
second (the flood bench's is about 7,000); prints its loop's CPU per datagram read (idle wake-ups
included), what that is of a core at RATE, and how many the socket dropped.

Usage (from the repository root):
  .venv/bin/python controller/tools/export_parse.py [--datagrams 5000] [--rounds 9] [--rate 7000] [--json F]
"""

from __future__ import annotations

import argparse
import gc
import json
import socket
import statistics
import time
from pathlib import Path

from homework_controller.edge.feeds.flow_export import Collector, ConnectionTotals, ExportParser

DATA = Path(__file__).resolve().parents[1] / "tests" / "data"
CAPTURES = {"ipv4-fetches": DATA / "ovs_ipfix.json", "both-families": DATA / "ovs_ipfix_both_families.json"}
TEMPLATE_SETS = (2, 3)  # templates, options templates
EXPORTER = "127.0.0.1:4739"
PATHS = {"fast": True, "general": False}


def ovs_datagrams(capture: Path, count: int) -> tuple[list[bytes], list[bytes]]:
    """A capture's datagrams of templates, and `count` of its data datagrams."""
    datagrams = [bytes.fromhex(d) for d in json.loads(capture.read_text())["datagrams"]]
    templates = [d for d in datagrams if int.from_bytes(d[16:18], "big") in TEMPLATE_SETS]
    data = [d for d in datagrams if d not in templates]
    return templates, [data[n % len(data)] for n in range(count)]


def read_all(fast: bool, templates: list[bytes], data: list[bytes]) -> tuple[float, dict]:
    """The thread's CPU per datagram (us) reading and summing `data`, and the totals."""
    parser, totals = ExportParser(fast=fast), ConnectionTotals()
    for datagram in templates:
        parser.parse(datagram, EXPORTER)
    started = time.thread_time_ns()
    for datagram in data:
        totals.add(parser.parse(datagram, EXPORTER))
    used = time.thread_time_ns() - started
    return used / 1000 / len(data), totals.take()


def measure(capture: Path, datagrams: int, rounds: int) -> dict:
    templates, data = ovs_datagrams(capture, datagrams)
    per_datagram: dict[str, list[float]] = {path: [] for path in PATHS}
    for n in range(rounds):
        order = list(PATHS) if n % 2 == 0 else list(reversed(PATHS))
        read = {}
        for path in order:
            us, read[path] = read_all(PATHS[path], templates, data)
            per_datagram[path].append(us)
        if read["fast"] != read["general"]:
            raise SystemExit(f"{capture.name}: the fast path and netflume's read different records")
    result: dict = {}
    for path, samples in per_datagram.items():
        result[path] = {
            "median_us": round(statistics.median(samples), 2),
            "min_us": round(min(samples), 2),
            "max_us": round(max(samples), 2),
        }
    result["speedup"] = round(result["general"]["median_us"] / result["fast"]["median_us"], 1)
    return result


def collector_cost(capture: Path, datagrams: int, rate: int) -> dict:
    templates, data = ovs_datagrams(capture, datagrams)
    collector = Collector(lambda totals: None, interval_s=0.2).start()
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as exporter:
            for datagram in templates:
                exporter.sendto(datagram, ("127.0.0.1", collector.port))
            _wait(lambda: collector.stats()["datagrams"] == len(templates))
            before = collector.stats()
            started = time.monotonic()
            for n, datagram in enumerate(data):
                if n % 50 == 0:  # paced in bursts of 50, as OVS sends when connections end together
                    time.sleep(max(0.0, started + n / rate - time.monotonic()))
                exporter.sendto(datagram, ("127.0.0.1", collector.port))
            _wait(lambda: collector.stats()["datagrams"] + collector.stats()["dropped"] >= len(templates) + len(data))
            after = collector.stats()
    finally:
        collector.stop()
    read = after["datagrams"] - before["datagrams"]
    us = (after["cpu_ns"] - before["cpu_ns"]) / 1000 / max(1, read)
    return {
        "rate": rate,
        "read": read,
        "dropped": after["dropped"],
        "cpu_us_per_datagram": round(us, 2),
        "core_percent_at_rate": round(us * rate / 1e4, 1),
        "start_cpu_ms": round(after["start_cpu_ns"] / 1e6, 1),
    }


def _wait(condition, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise SystemExit("the collector did not read what was sent")
        time.sleep(0.05)
    time.sleep(0.5)  # its counts are handed on every 0.2 s: the last datagram's CPU with them


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--datagrams", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--rate", type=int, default=7000)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    gc.collect()
    gc.freeze()
    result: dict = {"datagrams": args.datagrams, "rounds": args.rounds}
    print(f"{args.datagrams} of OVS's data datagrams (one record each), {args.rounds} rounds; CPU per datagram:")
    for name, capture in CAPTURES.items():
        result[name] = measure(capture, args.datagrams, args.rounds)
        for path in PATHS:
            r = result[name][path]
            print(
                f"  {name:14} {path:8} median {r['median_us']:6.2f} us  (min {r['min_us']:.2f}, max {r['max_us']:.2f})"
            )
        print(f"  {name:14} the fast path is {result[name]['speedup']}x netflume's")
    cost = result["collector"] = collector_cost(CAPTURES["ipv4-fetches"], args.datagrams, args.rate)
    print(
        f"the collector's process, {cost['read']} datagrams read at {args.rate}/s ({cost['dropped']} dropped):"
        f" {cost['cpu_us_per_datagram']} us a datagram, {cost['core_percent_at_rate']} % of a core"
        f" (its start apart: {cost['start_cpu_ms']} ms)"
    )
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
