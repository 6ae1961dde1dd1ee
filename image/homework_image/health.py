"""homework-health: is this router really working? Ordered before boot-complete.target, so
systemd-bless-boot keeps a freshly updated version only when it passes; otherwise the unit
fails, the router reboots, and after the entry's tries run out the previous slot boots.

Working means: every service passes its own readiness check from deploy/services.toml (the
build writes them, filled in, to SHARE/services.json), Open vSwitch has br-lan, the switch is
connected to the controller, a DHCP request arriving on the LAN port goes to the router's own
port (traced through the switch's rules), where the controller's DHCP socket is running. A
service that keeps failing fails the check at once: its unit has failed, or it has failed as many
starts as systemd's start limit allows. systemd gives up only on that many failures within its
interval, which a slow box may never reach (there five tries of the controller take longer), and
the rollback would then wait for the whole timeout.

A box in the satellite role (`role.py`) works when its services (SHARE/satellite-services.json) do and
its bridge onto the cable is there: whether the router answers is not the box's to be judged by (an
update is not rolled back because the router is switched off)."""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

from homework_deploy import ready_now
from homework_deploy.systemd import START_LIMIT_BURST, unit_name

from . import BRIDGE, LAN_PORT, SHARE, role

SERVICES_FILE = SHARE / "services.json"
SATELLITE_SERVICES_FILE = SHARE / "satellite-services.json"  # the satellite role's
DHCP_DISCOVER = (
    f"in_port={LAN_PORT},udp,dl_src=02:00:00:00:00:99,dl_dst=ff:ff:ff:ff:ff:ff,"
    "nw_src=0.0.0.0,nw_dst=255.255.255.255,udp_src=68,udp_dst=67"
)
CONTROLLER_HEALTH = "http://127.0.0.1:8081/ws.v1/health"


def dhcp_goes_to_the_router(trace: str) -> bool:
    """From `ovs-appctl ofproto/trace`: a rule sends the DISCOVER to LOCAL (the router's own port,
    where the controller's DHCP socket reads it) and the datapath does not drop it."""
    actions = re.search(r"^Datapath actions: (.*)$", trace, re.M)
    return (
        actions is not None
        and actions.group(1).strip() != "drop"
        and re.search(r"^\s+(?:output:)?LOCAL\s*$", trace, re.M) is not None
    )


def dhcp_socket_running() -> bool:
    try:
        with urllib.request.urlopen(CONTROLLER_HEALTH, timeout=3) as resp:
            health = json.load(resp)
    except (OSError, ValueError):
        return False
    return (
        isinstance(health, dict) and isinstance(health.get("dhcp"), dict) and health["dhcp"].get("socket") == "running"
    )


def _out(*cmd: str) -> str:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=10)
    return proc.stdout if proc.returncode == 0 else ""


def _ready_check(ready: dict) -> Callable[[], bool]:
    return lambda: ready_now(ready)


def checks(services: dict[str, dict]) -> dict[str, Callable[[], bool]]:
    found = {f"{name} ready": _ready_check(ready) for name, ready in services.items()}
    found["ovs bridge"] = lambda: bool(_out("ovs-vsctl", "--timeout=3", "list-br").split().count(BRIDGE))
    found["controller connected"] = (
        lambda: _out("ovs-vsctl", "--timeout=3", "get", "controller", BRIDGE, "is_connected").strip() == "true"
    )
    found["dhcp reaches the router"] = lambda: dhcp_goes_to_the_router(
        _out("ovs-appctl", "ofproto/trace", BRIDGE, DHCP_DISCOVER)
    )
    found["controller's dhcp socket"] = dhcp_socket_running
    return found


def satellite_checks(services: dict[str, dict]) -> dict[str, Callable[[], bool]]:
    found = {f"{name} ready": _ready_check(ready) for name, ready in services.items()}
    found[f"bridge {role.SATELLITE_BRIDGE}"] = lambda: Path(f"/sys/class/net/{role.SATELLITE_BRIDGE}/bridge").is_dir()
    for name in services:
        found[f"{name} running"] = _unit_active(unit_name(name))
    return found


def _unit_active(unit: str) -> Callable[[], bool]:
    return lambda: _out("systemctl", "is-active", unit).strip() == "active"


def failing_units(show: str) -> list[str]:
    """From `systemctl show --property=Id,ActiveState,NRestarts UNIT...`: the units that have
    failed or have been restarted after as many failed starts as the start limit allows."""
    failing = []
    for block in show.strip().split("\n\n"):
        unit = dict(line.partition("=")[::2] for line in block.splitlines())
        restarts = unit.get("NRestarts", "0")
        if unit.get("ActiveState") == "failed" or (restarts.isdigit() and int(restarts) >= START_LIMIT_BURST):
            failing.append(unit.get("Id", "?"))
    return failing


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="homework-health", description=__doc__.split("\n\n")[0])
    p.add_argument("--timeout", type=float, default=180, help="seconds to wait for the router to work")
    args = p.parse_args(argv)
    satellite = role.is_satellite()
    services = json.loads(Path(SATELLITE_SERVICES_FILE if satellite else SERVICES_FILE).read_text())
    pending = satellite_checks(services) if satellite else checks(services)
    box = "the access point" if satellite else "the router"
    deadline = time.monotonic() + args.timeout
    while True:
        for name in [n for n, check in pending.items() if check()]:
            del pending[name]
        if not pending:
            print(f"homework-health: {box} works (all checks passed)", flush=True)
            return 0
        failing = failing_units(
            _out("systemctl", "show", "--property=Id,ActiveState,NRestarts", *(unit_name(n) for n in services))
        )
        if failing or time.monotonic() > deadline:
            why = f"{', '.join(failing)} keeps failing" if failing else f"not within {args.timeout:g} s"
            print(f"homework-health: NOT healthy ({why}); failing: {', '.join(pending)}", flush=True)
            return 1
        time.sleep(1)


if __name__ == "__main__":
    sys.exit(main())
