"""A flow-stats poll's cost to the controller, measured in-process: how long it holds the lock.

A router with DEVICES permitted devices that each learnt FLOWS flows (their first packets copied to
it, as the accounting table does) is handed the stats reply a poll of the switch brings back (one
entry per learnt flow, every counter grown since the last poll), ROUNDS times. It prints, medians
and maxima in ms:
  keyed off the lock   `accounting.rule_counters`: the reply's matches parsed and keyed (ofapp does
                       this before it takes the lock)
  under the lock       `HomeRouter.on_flow_counters`: what the poll does under the lock
  all under the lock   `HomeRouter.on_flow_stats`: both, as the poll did before the split

With --records, the router is as shipped (the switch's records, marks decided ahead, nothing copied):
each poll is handed the records of every connection (both directions; a tenth of the far addresses
named by the devices' lookups for an app, a tenth on a call's port, the rest nothing names), and it
prints what merging the records holds the lock for, the poll's CPU in all, and its longest hold of
the lock (it is read in parts, as the edge reads it: `FlowEvents.start_poll`).

Usage (from the repository root):
  .venv/bin/python controller/tools/stats_poll.py [--devices 20] [--flows 150] [--rounds 20] [--records]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import tempfile
import time

from agent_flood import ROUTER_MAC, WLAN, permitted_home

from homework_controller import flows
from homework_controller.concerns.accounting import rule_counters
from homework_controller.core.router import HomeRouter
from homework_controller.effects import InstallRules
from homework_controller.wire import packets


def permitted_devices(state_dir: str, devices: int, per_device: int, records: bool) -> tuple[HomeRouter, list]:
    """A router (as shipped with records: the switch's records; else learning flows from copies) with
    permitted devices: (mac, ip) each. Its clock stands still until a poll moves it on (`PollClock`)."""
    router = permitted_home(
        f"{state_dir}/controller.sqlite", devices, PollClock(), flow_budget=per_device, flows_from_export=records
    )
    return router, [(d.mac, d.subnet.device_ip) for d in router.devices.values()]


class PollClock:
    """The router's clock, moved on by the polls' interval (`now += 5`)."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


def router_with_flows(state_dir: str, devices: int, per_device: int) -> tuple[HomeRouter, list]:
    """A router whose devices learnt their flows, and the poll entries of those flows' rules."""
    router, permitted = permitted_devices(state_dir, devices, per_device, records=False)
    entries = []
    for mac, ip in permitted:
        for n in range(per_device):
            far = f"198.51.100.{n % 250 + 1}"
            copy = packets.Frame(mac, ROUTER_MAC, 0x0800, ip_src=ip, ip_dst=far, ip_proto=6, sport=30000 + n, dport=443)
            for effect in router.flow_events.on_flow_copy(WLAN, copy):
                if isinstance(effect, InstallRules):
                    entries += [
                        (r.priority, dict(r.match), 0, 0)
                        for r in effect.rules
                        if r.priority == flows.AccountingPriority.LEARNT_FLOW
                    ]
    return router, entries


def router_with_records(state_dir: str, devices: int, per_device: int) -> tuple[HomeRouter, dict]:
    """A router as shipped whose devices have per_device connections each, and their records."""
    router, permitted = permitted_devices(state_dir, devices, per_device, records=True)
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


def main_records(args) -> None:
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


def grown(entries: list, poll: int) -> list:
    """The entries as the poll-th poll reads them: every flow moved 10 packets of 100 bytes since."""
    return [(priority, match, 10 * poll, 1000 * poll) for priority, match, _, _ in entries]


def summary(name: str, seconds: list[float]) -> str:
    return f"{name:20} median {statistics.median(seconds) * 1e3:6.2f} ms  max {max(seconds) * 1e3:6.2f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--devices", type=int, default=20)
    parser.add_argument("--flows", type=int, default=150, help="learnt flows per device")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--records", action="store_true", help="the router as shipped: the switch's records")
    args = parser.parse_args()
    if args.records:
        main_records(args)
        return
    with tempfile.TemporaryDirectory() as state_dir:
        router, entries = router_with_flows(state_dir, args.devices, args.flows)
        gc.collect()
        gc.freeze()  # as the controller does after start-up (ofapp)
        print(f"{len(entries)} learnt flows, {args.devices} devices")
        keyed, under, whole = [], [], []
        for poll in range(1, args.rounds + 1):
            started = time.perf_counter()
            counted = rule_counters(grown(entries, 2 * poll))
            keyed.append(time.perf_counter() - started)
            started = time.perf_counter()
            router.flow_events.on_flow_counters(counted)
            under.append(time.perf_counter() - started)
            started = time.perf_counter()
            router.on_flow_stats(grown(entries, 2 * poll + 1))
            whole.append(time.perf_counter() - started)
        print(summary("keyed off the lock", keyed))
        print(summary("under the lock", under))
        print(summary("all under the lock", whole))


if __name__ == "__main__":
    main()
