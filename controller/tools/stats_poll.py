"""A flow-stats poll's cost to the controller, measured in-process: how long it holds the lock.

A router as shipped (the switch's records, marks decided ahead, nothing copied) with DEVICES permitted
devices of FLOWS connections each: each poll is handed the records of every connection (both directions;
a tenth of the far addresses named by the devices' lookups for an app, a tenth on a call's port, the
rest nothing names), and it prints, medians and maxima in ms, what merging the records holds the lock
for, the poll's CPU in all, and its longest hold of the lock (it is read in parts, as the edge reads it:
`FlowEvents.start_poll`).

Usage (from the repository root):
  .venv/bin/python controller/tools/stats_poll.py [--devices 20] [--flows 150] [--rounds 20]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import tempfile
import time

from agent_flood import permitted_home

from homework_controller import flows
from homework_controller.core.router import HomeRouter


class PollClock:
    """The router's clock, moved on by the polls' interval (`now += 5`)."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


def router_with_records(state_dir: str, devices: int, per_device: int) -> tuple[HomeRouter, dict]:
    """A router as shipped whose devices have per_device connections each, and their records."""
    router = permitted_home(f"{state_dir}/controller.sqlite", devices, PollClock(), flow_budget=per_device)
    permitted = [(d.mac, d.subnet.device_ip) for d in router.devices.values()]
    totals: dict[flows.FiveTuple, list[int]] = {}
    for _, ip in permitted:
        for n in range(per_device):
            far = f"198.51.100.{n % 250 + 1}"
            if n % 10 == 0:
                router.dns_answer([(f"h{n}.zoom.us", far, 300)], ip)
            port = 3478 if n % 10 == 1 else 443
            out = flows.FiveTuple(17 if port == 3478 else 6, ip, 30000 + n, far, port)
            totals[out] = [10, 1000]
            totals[flows.FiveTuple(out.proto, far, port, ip, 30000 + n)] = [10, 1000]
    return router, totals


def measure(args) -> None:
    with tempfile.TemporaryDirectory() as state_dir:
        router, totals = router_with_records(state_dir, args.devices, args.flows)
        gc.collect()
        gc.freeze()
        print(f"{len(totals)} connection directions in the records, {args.devices} devices")
        merged, polled, held = [], [], []
        events = router.flow_events
        for _ in range(args.rounds):
            started = time.perf_counter()
            events.on_flow_export(totals)
            merged.append(time.perf_counter() - started)
            router.clock.now += 5
            # As the edge reads a poll: each step is one hold of the lock.
            holds = []
            started = time.perf_counter()
            poll, _ = events.start_poll([])
            holds.append(time.perf_counter() - started)
            for part in poll.parts():
                started = time.perf_counter()
                events.poll_part(poll, part)
                holds.append(time.perf_counter() - started)
            started = time.perf_counter()
            events.finish_poll(poll)
            holds.append(time.perf_counter() - started)
            polled.append(sum(holds))
            held.append(max(holds))
        print(summary("records merged", merged))
        print(summary("poll, all its parts", polled))
        print(summary("poll's longest hold", held))


def summary(name: str, seconds: list[float]) -> str:
    return f"{name:20} median {statistics.median(seconds) * 1e3:6.2f} ms  max {max(seconds) * 1e3:6.2f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--devices", type=int, default=20)
    parser.add_argument("--flows", type=int, default=150, help="connections per device")
    parser.add_argument("--rounds", type=int, default=20)
    measure(parser.parse_args())


if __name__ == "__main__":
    main()
