"""How far the controller's start has come, in its CPU time and wall time since exec, logged at each phase:
a slow boot (a router box, a VM without KVM) then says where its time went (imports, os-ken, the store,
the switch). The image's boot test and `make bench` read these lines.

The service manager hears it too (systemd's sd_notify protocol; the router's unit is `Type=notify`):
`READY=1` once the switch serves DHCP, the phase as `STATUS=`, and at each phase more time to reach
the next one, as long again as the start has taken so far. A start that keeps making progress on a
slow machine is then not killed by a timeout set for a fast one; a start that hangs still is."""

from __future__ import annotations

import logging
import os
import socket

LOG = logging.getLogger("homework.controller")


def since_exec() -> tuple[float, float]:
    """(CPU seconds, user and system, wall seconds) since this process was started."""
    times = os.times()
    with open("/proc/self/stat") as f:
        # starttime is the 22nd field; the 2nd (the command, in parentheses) may hold spaces.
        started_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
    with open("/proc/uptime") as f:
        uptime = float(f.read().split()[0])
    return times.user + times.system, uptime - started_ticks / os.sysconf("SC_CLK_TCK")


# A phase may take at least this long to reach the next, however fast the ones before it were.
LEAST_STEP_S = 60


def notify(*states: str) -> None:
    """Tell the service manager `states` (e.g. "READY=1"), if it asked to be told ($NOTIFY_SOCKET;
    an '@' starts an abstract socket name). Without one (the emulated home, a shell) nothing is sent."""
    address = os.environ.get("NOTIFY_SOCKET")
    if not address:
        return
    if address.startswith("@"):
        address = "\0" + address[1:]
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
        try:
            sock.sendto("\n".join(states).encode(), address)
        except OSError as exc:
            LOG.warning("cannot tell the service manager %s: %s", states, exc)


def phase(name: str) -> None:
    cpu, wall = since_exec()
    LOG.info("start: %s after %.2f s of CPU, %.2f s since exec", name, cpu, wall)
    notify(f"STATUS=start: {name}", f"EXTEND_TIMEOUT_USEC={int(max(wall, LEAST_STEP_S) * 1e6)}")


def ready(name: str) -> None:
    """The last phase: the controller now serves."""
    phase(name)
    notify("READY=1", f"STATUS={name}")
