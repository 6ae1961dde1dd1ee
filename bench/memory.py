#!/usr/bin/env python3
"""The router services' memory as a router owner would ask it (issue 36): each service at boot, with 5 devices
and with 100, each device having had an hour of use compressed into the bench, in the image's VM.

It runs in `bench/run.py boot`'s router boot (bench/boot.py calls `measure_in` before the VM is powered off),
so it costs no second boot, and writes bench/results/memory.json.

Each device is a network namespace on the router's LAN with its own MAC and the real ISC dhclient
(homenet.routervm). A phase brings devices up until the LAN has that many (the boot's laptop is the first):
each takes a lease, is permitted through the controller's ws.v1 (as the household permits on the Guest Board:
what a household's devices look like, each reaching the internet), renews into its hour-long lease, then
runs its hour (`HOUR`, in `device` below, in its namespace): lookups through the router's DNS, TCP
connections to the WAN's web server through the switch (so the switch's flow export, its collector and hwdb
see each one), and end-host agent reports to hwdb naming the apps that own those connections. The devices of
a phase run side by side, each waiting for every answer, so the pace is what the router serves.

Memory is counted per systemd unit, every process in its cgroup (/proc/PID/smaps_rollup): PSS (shared pages
split among the processes sharing them, so the services' sum is what they take together) and RSS, beside
each cgroup's own memory.current (page cache and kernel memory charged to it included). The collector is a
child of the controller in the controller's cgroup (`python -m ...flow_export`): counted apart from it.

Each device's hour is bench/memory_device.py, run in its namespace.
"""

from __future__ import annotations

import concurrent.futures
import json
import re
import subprocess
import time

from common import BENCH, PY, write_result

from homenet.routervm import APPS_DOMAIN, WWW_HOST, WWW_IP, Client, Network, RouterVm

PHASES = (5, 100)
QUICK_PHASES = (5, 20)  # make bench QUICK=1
GOAL_MIB = 200
DEVICE_MAC = "02:1b:00:00:00:{:02x}"  # the phases' devices (the boot's laptop is 02:1a:...)
# One device's hour, compressed: its lease (taken pending, then again once permitted: one hour), one lookup and
# one connection every 3 minutes, each name among 10 of its own (apps.example.test: any name there is the web
# server), and its agent's report every 15 minutes naming the apps of the connections since the last.
HOUR = {"leases": 2, "lookups": 20, "names": 10, "connections": 20, "agent_reports": 4}
# Devices join JOIN_BATCH at a time (lease, permit, hour-long lease), each batch's leases side by side. With
# 95 at once (25 dhclients side by side, each retrying every second or two; or 95 permits and then every
# pending lease's renewal) the router under software emulation fell behind: it answered DISCOVERs minutes
# late, each retransmission again, to devices that had given up, and most pending leases ran out unrenewed.
JOIN_BATCH = 10
LEASES_AT_ONCE = JOIN_BATCH
WAN_PORTS = (80, 443, 5223, 8443)  # 80: the WAN's web server (a page each); the others accept and close
UNITS = ("ovs-vswitchd", "ovsdb-server", "homework-controller", "homework-hwdb", "homework-webui", "homework-hostapd")
COLLECTOR = "collector"  # the controller's child reading the switch's flow export (homework_controller...flow_export)
SERVICES = (*UNITS[:3], COLLECTOR, *UNITS[3:])
MEMINFO = ("MemTotal", "MemFree", "MemAvailable", "Buffers", "Cached", "Shmem", "SReclaimable", "Slab")

# One console line: each unit's cgroup (memory.current, active state), then each of its processes: PID, RSS and
# PSS in KiB, command line; then /proc/meminfo's lines of MEMINFO.
MEMORY_SCRIPT = (
    f"for u in {' '.join(UNITS)}; do d=/sys/fs/cgroup/system.slice/$u.service; "
    'if [ ! -d $d ]; then echo "unit $u - $(systemctl is-active $u)"; continue; fi; '
    'echo "unit $u $(cat $d/memory.current) $(systemctl is-active $u)"; '
    "for p in $(cat $(find $d -name cgroup.procs)); do "
    "echo \"proc $u $p $(awk '/^Rss:/{r=$2} /^Pss:/{s=$2} END{print r+0, s+0}' /proc/$p/smaps_rollup 2>/dev/null) "
    "$(tr '\\0' ' ' </proc/$p/cmdline 2>/dev/null | cut -c1-160)\"; done; done; "
    f"grep -E '^({'|'.join(MEMINFO)}):' /proc/meminfo"
)


def parse_memory(text: str) -> dict:
    """MEMORY_SCRIPT's output: per service its processes' summed RSS and PSS (KiB) and its cgroup's
    memory.current (the collector's is inside the controller's), each process, and the VM's meminfo."""
    services: dict[str, dict] = {}
    processes, meminfo = [], {}
    for line in text.splitlines():
        f = line.split()
        if f[:1] == ["unit"] and len(f) >= 3:
            services[f[1]] = {
                "cgroup_kib": int(f[2]) // 1024 if f[2].isdigit() else None,
                "active": f[3] if len(f) > 3 else "unknown",
                "rss_kib": 0,
                "pss_kib": 0,
                "processes": 0,
            }
        elif f[:1] == ["proc"] and len(f) >= 5 and f[3].isdigit() and f[4].isdigit():
            unit, command = f[1], " ".join(f[5:])
            name = COLLECTOR if unit == "homework-controller" and "flow_export" in command else unit
            service = services.setdefault(
                name, {"cgroup_kib": None, "active": services.get(unit, {}).get("active"), "rss_kib": 0, "pss_kib": 0}
            )
            service.setdefault("processes", 0)
            service["rss_kib"] += int(f[3])
            service["pss_kib"] += int(f[4])
            service["processes"] += 1
            processes.append(
                {"service": name, "pid": int(f[2]), "rss_kib": int(f[3]), "pss_kib": int(f[4]), "command": command}
            )
        elif m := re.match(r"(\w+):\s+(\d+) kB", line):
            meminfo[m.group(1)] = int(m.group(2))
    running = {name: s for name, s in services.items() if s["processes"]}
    return {
        "services": services,
        "total_pss_kib": sum(s["pss_kib"] for s in running.values()),
        "total_rss_kib": sum(s["rss_kib"] for s in running.values()),
        "processes": processes,
        "meminfo_kib": meminfo,
        "vm_used_kib": meminfo["MemTotal"] - meminfo["MemAvailable"] if "MemAvailable" in meminfo else None,
    }


def memory_now(vm: RouterVm) -> dict:
    return parse_memory(vm.run(MEMORY_SCRIPT, timeout=120, check=False))


# ---- the bench, beside the booted router


def permit(vm: RouterVm, macs: list[str]) -> int:
    """Permit devices through the controller's ws.v1 (one curl on the console, its URLs made there: the console
    takes a line of at most 4 KiB); how many it answered 200."""
    urls = f"$(for m in {' '.join(macs)}; do echo http://127.0.0.1:8081/ws.v1/permit/$m; done)"
    out = vm.run(f"curl -s -w '\\n@%{{http_code}}\\n' -X POST {urls}", timeout=300, check=False)
    return out.split().count("@200")


def states(vm: RouterVm) -> dict[str, int]:
    out = vm.run("curl -s http://127.0.0.1:8081/ws.v1/status", timeout=60, check=False)
    counts: dict[str, int] = {}
    for state in re.findall(r'"state":\s*"(\w+)"', out):
        counts[state] = counts.get(state, 0) + 1
    return counts


def counters(vm: RouterVm) -> dict:
    out = vm.run("curl -s http://127.0.0.1:8081/ws.v1/counters", timeout=60, check=False)
    start = out.find("{")
    try:
        return json.loads(out[start : out.rfind("}") + 1]) if start >= 0 else {}
    except ValueError:
        return {}


def leases(clients: list[Client], timeout: float, side_by_side: int = LEASES_AT_ONCE) -> list[str]:
    """Every client's new lease, `side_by_side` at a time (the real dhclient each); the failures, as text."""
    failures = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=side_by_side) as pool:
        for client, done in zip(clients, pool.map(lambda c: _lease(c, timeout), clients), strict=True):
            if done:
                failures.append(f"{client.name}: {done}")
    return failures


def _lease(client: Client, timeout: float) -> str:
    try:
        client.dhcp(timeout=timeout)
        return ""
    except Exception as exc:  # reported with the phase; the others go on
        return str(exc)[-200:]


def hours(net: Network, clients: list[Client], timeout: float) -> dict:
    """Each client's hour (`device`), all side by side; their answers summed."""
    procs = []
    for client in clients:
        seed = list(net.clients).index(client.name) + 1
        gateway = subprocess.run(
            ["ip", "netns", "exec", client.ns, "ip", "-4", "route", "show", "default"], capture_output=True, text=True
        ).stdout.split()
        gw = gateway[2] if len(gateway) > 2 else "10.2.0.1"
        plan = [json.dumps(HOUR), WWW_IP, WWW_HOST, APPS_DOMAIN, ",".join(map(str, WAN_PORTS))]
        argv = ["ip", "netns", "exec", client.ns, PY, BENCH / "memory_device.py", gw, str(seed), *plan]
        procs.append(subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    total: dict = {"devices": len(clients), "failed_devices": 0, "errors": []}
    deadline = time.monotonic() + timeout
    for proc in procs:
        try:
            stdout, stderr = proc.communicate(timeout=max(1, deadline - time.monotonic()))
            one = json.loads(stdout)
        except (subprocess.TimeoutExpired, ValueError):
            proc.kill()
            stdout, stderr = proc.communicate()
            total["failed_devices"] += 1
            total["errors"].append(stderr.strip()[-200:])
            continue
        for key, value in one.items():
            if isinstance(value, int):
                total[key] = total.get(key, 0) + value
        total["errors"] += one.get("errors", [])
    total["errors"] = total["errors"][:10]
    return total


def wan_servers(net: Network) -> None:
    """The WAN's listeners for WAN_PORTS beyond the web server's 80 (they die with the WAN's namespace)."""
    for port in WAN_PORTS[1:]:
        subprocess.Popen(
            ["ip", "netns", "exec", net.wan_ns, PY, BENCH / "accept_server.py", WWW_IP, str(port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )


def measure_in(vm: RouterVm, net: Network, phases: tuple[int, ...] = PHASES) -> dict:
    """In the booted router: memory at boot, then for each phase the devices that make the LAN that many brought
    up, permitted and given their hour, and memory again. The LAN's clients so far (the boot's laptop, which
    has its pending lease) count among the first phase's devices; a later phase's hours are its new devices'
    (the earlier ones had theirs)."""
    wan_servers(net)
    started = time.monotonic()
    result: dict = {"boot": {"devices": 0, "memory": memory_now(vm), "states": states(vm)}}
    had_hour: set[str] = set()
    for n in phases:
        try:
            result[f"devices_{n}"] = phase_of(vm, net, n, had_hour)
        except Exception as exc:  # the phases so far are still worth writing, with what stopped the rest
            result["error"] = f"{n} devices: {type(exc).__name__}: {exc}"[:3000]
            print(f"memory: {result['error']}", flush=True)
            break
    result["seconds"] = round(time.monotonic() - started, 1)
    return result


def phase_of(vm: RouterVm, net: Network, n: int, had_hour: set[str]) -> dict:
    """The LAN made `n` devices: every device not yet used, JOIN_BATCH at a time, takes a lease (pending), is
    permitted and takes its hour-long lease; then they all have their hour side by side; then the memory."""
    started = time.monotonic()
    new = [net.add_client(f"d{i:03d}", DEVICE_MAC.format(i)) for i in range(len(net.clients) + 1, n + 1)]
    fresh = [c for c in net.clients.values() if c.name not in had_hour]
    phase: dict = {"devices": len(net.clients), "new_devices": len(fresh)}
    phase["lease_failures"], phase["permitted"], phase["renew_failures"] = [], 0, []
    for at in range(0, len(fresh), JOIN_BATCH):
        batch = fresh[at : at + JOIN_BATCH]
        phase["lease_failures"] += leases([c for c in batch if c in new], timeout=vm.paced(120))
        phase["permitted"] += permit(vm, [c.mac for c in batch])
        phase["renew_failures"] += leases(batch, timeout=vm.paced(120))
    leased_s = time.monotonic() - started
    phase["use"] = hours(net, fresh, timeout=vm.paced(900))
    had_hour |= {c.name for c in fresh}
    used_s = time.monotonic() - started - leased_s
    # The switch's last connections' records (IPFIX: at their end, or within its active timeout) to the
    # collector and on to hwdb, before the memory is read.
    time.sleep(15)
    phase["memory"] = memory_now(vm)
    phase["states"] = states(vm)
    phase["counters"] = counters(vm)
    phase["seconds"] = {
        "leases_and_permits": round(leased_s, 1),
        "hours_of_use": round(used_s, 1),
        "total": round(time.monotonic() - started, 1),
    }
    shown = {k: v for k, v in phase.items() if k not in ("memory", "counters")}
    print(f"memory, {phase['devices']} devices: {json.dumps(shown)}", flush=True)
    print(f"  services' PSS {phase['memory']['total_pss_kib'] / 1024:.0f} MiB", flush=True)
    return phase


def write(measured: dict, emulation: str) -> None:
    write_result(
        "memory",
        {
            "what": (
                "Resident memory of every router service in the image's VM (qemu, 1 GiB, "
                f"{emulation}): just after boot, then with 5 and with 100 devices on the LAN after each device's "
                "hour of use compressed into minutes: a lease (pending, then its hour-long lease once permitted "
                f"through ws.v1; devices join {JOIN_BATCH} at a time), "
                f"{HOUR['lookups']} lookups through the router's DNS among {HOUR['names']} names, "
                f"{HOUR['connections']} TCP connections to the WAN's server through the switch (so the flow export, "
                f"its collector and hwdb see each one), {HOUR['agent_reports']} end-host agent reports to hwdb naming "
                "the apps of those connections. PSS, MiB: every process of each service's cgroup, shared pages "
                "split among their sharers (so the total is what the services take together); RSS and the cgroup's "
                "memory.current in the raw file."
            ),
            "hour": HOUR,
            "goal_mib": GOAL_MIB,
            "phases": measured,
            "columns": columns_of(measured),
            "rows": rows_of(measured),
        },
    )


def _mib(kib: int | None) -> str:
    return "" if kib is None else f"{kib / 1024:.1f}"


def rows_of(phases: dict) -> list[list[str]]:
    """docs/PERFORMANCE.md's table (bench/report.py makes it again from the file): one row per service, its
    PSS at boot and after each phase; then the total against the goal; then the VM's used memory."""
    keys = ["boot", *(k for k in phases if k.startswith("devices_"))]

    def cell(key: str, name: str) -> str:
        service = phases[key]["memory"]["services"].get(name)
        if not service or not service.get("processes"):
            return "not running"
        return _mib(service["pss_kib"])

    rows = [[name.removeprefix("homework-"), *(cell(k, name) for k in keys), ""] for name in SERVICES]
    totals = [phases[k]["memory"]["total_pss_kib"] for k in keys]
    rows.append(["all services together", *map(_mib, totals), f"<= {GOAL_MIB} MiB with 100 devices"])
    rows.append(
        [
            "the VM's used memory (MemTotal - MemAvailable)",
            *(_mib(phases[k]["memory"]["vm_used_kib"]) for k in keys),
            "",
        ]
    )
    return rows


def columns_of(phases: dict) -> list[str]:
    counts = [f"{phases[k]['devices']} devices" for k in phases if k.startswith("devices_")]
    return ["service, PSS in MiB", "at boot", *counts, "goal"]
