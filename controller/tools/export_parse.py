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

Usage (from the repository root):
  .venv/bin/python controller/tools/export_parse.py [--datagrams 5000] [--rounds 9] [--json out.json]
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import time
from pathlib import Path

from homework_controller.edge.flow_export import ConnectionTotals, ExportParser

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--datagrams", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=9)
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
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
