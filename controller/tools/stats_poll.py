"""A flow-stats poll's cost to the controller, measured in-process: how long it holds the lock.

A router with DEVICES permitted devices that each learnt FLOWS flows (their first packets copied to
it, as the accounting table does) is handed the stats reply a poll of the switch brings back (one
entry per learnt flow, every counter grown since the last poll), ROUNDS times. It prints, medians
and maxima in ms:
  keyed off the lock   `accounting.rule_counters`: the reply's matches parsed and keyed (ofapp does
                       this before it takes the lock)
  under the lock       `HomeRouter.on_flow_counters`: what the poll does under the lock
  all under the lock   `HomeRouter.on_flow_stats`: both, as the poll did before the split

Usage (from the repository root):
  .venv/bin/python controller/tools/stats_poll.py [--devices 20] [--flows 150] [--rounds 20]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from support import ROUTER_MAC, WLAN, Clock, frame, lease

from homework_controller import dhcp, flows, packets
from homework_controller.accounting import rule_counters
from homework_controller.effects import InstallRules
from homework_controller.router import HomeRouter
from homework_controller.store import DeviceStore


def router_with_flows(state_dir: str, devices: int, per_device: int) -> tuple[HomeRouter, list]:
    """A router whose devices learnt their flows, and the poll entries of those flows' rules."""
    router = HomeRouter(
        DeviceStore(f"{state_dir}/controller.sqlite"), dhcp.LeasePolicy(30, 3600), clock=Clock(), flow_budget=per_device
    )
    router.switch_ready(WLAN, ROUTER_MAC)
    entries = []
    for d in range(devices):
        mac = f"02:00:00:00:01:{d:02x}"
        ip = lease(router, mac)
        router.permit(mac)
        router.on_dhcp(frame(mac, "request", ciaddr=ip, src_ip=ip))
        for n in range(per_device):
            far = f"198.51.100.{n % 250 + 1}"
            copy = packets.Frame(mac, ROUTER_MAC, 0x0800, ip_src=ip, ip_dst=far, ip_proto=6, sport=30000 + n, dport=443)
            for effect in router.on_flow_copy(WLAN, copy):
                if isinstance(effect, InstallRules):
                    entries += [
                        (r.priority, dict(r.match), 0, 0)
                        for r in effect.rules
                        if r.priority == flows.Accounting.LEARNT_FLOW
                    ]
    return router, entries


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
    args = parser.parse_args()
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
            router.on_flow_counters(counted)
            under.append(time.perf_counter() - started)
            started = time.perf_counter()
            router.on_flow_stats(grown(entries, 2 * poll + 1))
            whole.append(time.perf_counter() - started)
        print(summary("keyed off the lock", keyed))
        print(summary("under the lock", under))
        print(summary("all under the lock", whole))


if __name__ == "__main__":
    main()
