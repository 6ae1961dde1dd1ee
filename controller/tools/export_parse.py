"""The flow collector's CPU per datagram, measured in-process: its fast path against netflume's.

The datagrams are the ones a real Open vSwitch sent (controller/tests/data/ovs_ipfix.json: one of
templates, then data datagrams of one record each, as OVS sends them), the data ones repeated to
DATAGRAMS. Each round reads them all with a fresh parser on each path (the templates first), and
sums the records per connection direction as the collector's process does (`ConnectionTotals`);
the two paths take turns, so a busy machine slows both alike. Prints, per path, the thread's CPU
per datagram (median over the rounds, and the spread), and checks that both paths read the same
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

FIXTURE = Path(__file__).resolve().parents[1] / "tests" / "data" / "ovs_ipfix.json"
EXPORTER = "127.0.0.1:4739"
PATHS = {"fast": True, "general": False}


def ovs_datagrams(count: int) -> tuple[bytes, list[bytes]]:
    """The templates' datagram and `count` data datagrams."""
    datagrams = [bytes.fromhex(d) for d in json.loads(FIXTURE.read_text())["datagrams"]]
    templates, data = datagrams[0], datagrams[1:]
    return templates, [data[n % len(data)] for n in range(count)]


def read_all(fast: bool, templates: bytes, data: list[bytes]) -> tuple[float, dict]:
    """The thread's CPU per datagram (us) reading and summing `data`, and the totals."""
    parser, totals = ExportParser(fast=fast), ConnectionTotals()
    parser.parse(templates, EXPORTER)
    started = time.thread_time_ns()
    for datagram in data:
        totals.add(parser.parse(datagram, EXPORTER))
    used = time.thread_time_ns() - started
    return used / 1000 / len(data), totals.take()


def measure(datagrams: int, rounds: int) -> dict:
    templates, data = ovs_datagrams(datagrams)
    per_datagram: dict[str, list[float]] = {path: [] for path in PATHS}
    gc.collect()
    gc.freeze()
    for n in range(rounds):
        order = list(PATHS) if n % 2 == 0 else list(reversed(PATHS))
        read = {}
        for path in order:
            us, read[path] = read_all(PATHS[path], templates, data)
            per_datagram[path].append(us)
        if read["fast"] != read["general"]:
            raise SystemExit("the fast path and netflume's read different records")
    result: dict = {"datagrams": datagrams, "rounds": rounds}
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
    result = measure(args.datagrams, args.rounds)
    print(f"{args.datagrams} OVS data datagrams (one record each), {args.rounds} rounds; CPU per datagram:")
    for path in PATHS:
        r = result[path]
        print(f"  {path:8} median {r['median_us']:7.2f} us  (min {r['min_us']:.2f}, max {r['max_us']:.2f})")
    print(f"  the fast path is {result['speedup']}x netflume's")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
