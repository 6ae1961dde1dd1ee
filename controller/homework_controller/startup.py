"""How far the controller's start has come, in its CPU time and wall time since exec, logged at each phase:
a slow boot (a router box, a VM without KVM) then says where its time went (imports, os-ken, the store,
the switch). The image's boot test and `make bench` read these lines."""

from __future__ import annotations

import logging
import os

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


def phase(name: str) -> None:
    cpu, wall = since_exec()
    LOG.info("start: %s after %.2f s of CPU, %.2f s since exec", name, cpu, wall)
