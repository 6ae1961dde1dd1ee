"""One device flooding AppTuples, measured in-process: the controller's lock and another device's DHCP.

Issue 20 measured a device on the LAN inserting 173,280 AppTuples rows in 1.5 s (480-row batches).
This sends such batches as fast as the controller takes them, for the whole phase, through what
the controller does with them, without the network: hwdb's rows (dicts, as the subscription
delivers them) parsed and checked off the lock (`hwdb_feed.parse_reports`), then handed to the
router in turns under a `TimedLock` (`hwdb_feed.in_turns`, as ofapp does), on a thread of their
own, while another thread renews a quiet device's lease every 10 ms (`on_dhcp` under the same
lock, as the DHCP socket's worker does). DEVICES permitted devices with live leases each have
LEARNT connections with rules of their own (what a report re-marks) and report them now and then.

Prints, quiet (the devices' own reports only) and during the flood: the lock's longest hold and its
99th percentile, in wall time and in the holder's CPU time (the work done under the lock), the
renewing device's DHCP time (lock wait + answer) p50/p99/max, the flood's parse time per 480-row
batch (off the lock) and rows per second, and the book's size for the flooder and the others (the
others must keep theirs).

Usage (from the repository root):
  nice -n 19 .venv/bin/python controller/tools/agent_flood.py [--devices 20] [--seconds 6]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time

from dhcp_path import client_frame

from homework_controller.api.server import TimedLock
from homework_controller.concerns.agent_reports import AgentReport
from homework_controller.core.router import HomeRouter
from homework_controller.edge.feeds import hwdb_feed
from homework_controller.model import Device, State
from homework_controller.store import DeviceStore
from homework_controller.wire import packets
from homework_controller.wire.lan import Subnet

WLAN, ROUTER_MAC = 1, "02:48:57:00:00:01"
BATCH = 480
FAR = "198.51.100.7"


class MeasuredLock(TimedLock):
    """The controller's lock, also keeping every hold (for a percentile, not only the longest), and
    the holder's CPU time in it: wall time also counts the holder waiting for the interpreter (another
    thread parsing) or the machine (other processes); CPU time is the work done under the lock."""

    def __init__(self):
        super().__init__()
        self.holds: list[float] = []
        self.cpu: list[float] = []

    def __enter__(self):
        super().__enter__()
        self._cpu_since = time.thread_time()
        return self

    def __exit__(self, *exc):
        self.cpu.append(time.thread_time() - self._cpu_since)
        self.holds.append(time.monotonic() - self._since)
        super().__exit__(*exc)


def mac_of(i: int) -> str:
    return f"02:00:00:00:{i >> 8:02x}:{i & 0xFF:02x}"


def permitted_home(db: str, devices: int, clock=time.time, **options) -> HomeRouter:
    """A router (HomeRouter's options) whose devices are permitted and hold live leases, as a restart finds
    them: device i (from 1) has MAC mac_of(i) and the /30 Subnet(i)."""
    store, now = DeviceStore(db), clock()
    for i in range(devices):
        store.save(
            Device(
                mac_of(i + 1), State.PERMITTED, Subnet(i + 1), first_seen=now, last_seen=now, lease_expires=now + 3600
            )
        )
    store.flush()
    router = HomeRouter(store, clock=clock, **options)
    router.switch_ready(WLAN, ROUTER_MAC)
    return router


def home(db: str, devices: int, learnt: int) -> HomeRouter:
    """A router whose devices are permitted, hold live leases and each have `learnt` connections with rules
    of their own, both ways (their agents named them: a call, where the port's mark ahead is Normal)."""
    router = permitted_home(db, devices, flow_budget=2 * learnt)
    for i in range(devices):
        ip = Subnet(i + 1).device_ip
        router.flow_events.agent_reported(
            [AgentReport(6, ip, 30000 + port, FAR, 443, "zoom") for port in range(learnt)]
        )
    assert len(router.learnt_connections()) == devices * learnt * 2, "every device's connections have rules"
    return router


def rows_of(ip: str, first_port: int, count: int, app: str) -> list[dict]:
    return [
        {"proto": 6, "saddr": ip, "sport": first_port + n, "daddr": FAR, "dport": 443, "app": app} for n in range(count)
    ]


def run(args, flood: bool) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        router = home(f"{tmp}/controller.sqlite", args.devices, args.learnt)
        lock = MeasuredLock()
        stop = threading.Event()
        flooder, renewer = Subnet(1).device_ip, mac_of(2)
        flood_parse_s: list[float] = []

        def deliver(rows: list[dict], parse_s: list[float] | None = None) -> None:
            started = time.perf_counter()
            reports = hwdb_feed.parse_reports(rows)
            if parse_s is not None:
                parse_s.append(time.perf_counter() - started)
            for part in hwdb_feed.in_turns(reports):
                with lock:
                    router.flow_events.agent_reported(part)

        def agents() -> None:
            """Every device but the flooder reports its learnt connections, one device per 20 ms; the flooder floods."""
            turn = 0
            while not stop.is_set():
                i = 2 + turn % (args.devices - 1)
                deliver(rows_of(Subnet(i).device_ip, 30000, args.learnt, f"app-{i}"))
                turn += 1
                if flood:
                    deliver(rows_of(flooder, 1024 + len(flood_parse_s) * BATCH % 60000, BATCH, "flood"), flood_parse_s)
                else:
                    time.sleep(0.02)

        # INIT-REBOOT: the device asks for the address it holds (as after waking up), and is ACKed.
        renew = packets.parse(client_frame(renewer, 0x1234, "request", [("requested_addr", Subnet(2).device_ip)]))
        dhcp_s: list[float] = []
        worker = threading.Thread(target=agents, daemon=True)
        worker.start()
        deadline = time.monotonic() + args.seconds
        while time.monotonic() < deadline:
            started = time.perf_counter()
            with lock:
                router.joining.on_dhcp(renew)
            dhcp_s.append(time.perf_counter() - started)
            time.sleep(0.01)
        stop.set()
        worker.join()
        holds, cpu = sorted(lock.holds), sorted(lock.cpu)
        others = [router.agent_reports.reports_of(mac_of(i)) for i in range(2, args.devices + 1)]
        return {
            "lock_max_ms": lock.max_hold_s * 1000,
            "lock_p99_ms": holds[int(len(holds) * 0.99)] * 1000,
            "lock_cpu_max_ms": cpu[-1] * 1000,
            "lock_cpu_p99_ms": cpu[int(len(cpu) * 0.99)] * 1000,
            "dhcp_p50_ms": statistics.median(dhcp_s) * 1000,
            "dhcp_p99_ms": sorted(dhcp_s)[int(len(dhcp_s) * 0.99)] * 1000,
            "dhcp_max_ms": max(dhcp_s) * 1000,
            "flood_parse_ms_per_batch": statistics.median(flood_parse_s) * 1000 if flood_parse_s else 0.0,
            "flood_rows_per_s": len(flood_parse_s) * BATCH / args.seconds,
            "flooder_reports": router.agent_reports.reports_of(mac_of(1)),
            "others_min_reports": min(others),
        }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--devices", type=int, default=20)
    p.add_argument("--learnt", type=int, default=100, help="connections with rules of their own, reported, per device")
    p.add_argument("--seconds", type=float, default=6.0, help="how long each phase runs")
    args = p.parse_args()
    for name, flood in (("quiet", False), ("flood", True)):
        result = run(args, flood)
        print(f"{name:6}", "  ".join(f"{k}={v:.2f}" if isinstance(v, float) else f"{k}={v}" for k, v in result.items()))


if __name__ == "__main__":
    main()
