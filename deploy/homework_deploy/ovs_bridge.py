"""The router's OVS bridge (br-lan), set up the one way both its builders use: the firmware image at
boot (homework_image.network, on OVS's kernel datapath) and the emulated home (homenet.topology, on
the userspace datapath, `datapath_type="netdev"`).

The bridge speaks OpenFlow 1.3 only, fails secure (no controller: no forwarding), carries the
router's MAC, has no in-band control, gets `ports` and dials `controller`; it reconnects within a
second of a controller restart, and `set_up` returns once the kernel has the bridge's device."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

CONTROLLER = "tcp:127.0.0.1:6653"
SYS_NET = Path("/sys/class/net")


class BridgeError(RuntimeError):
    """ovs-vsctl failed, or OVS did not create the bridge's device in time."""


def commands(
    bridge: str, ports: list[str], hwaddr: str, controller: str = CONTROLLER, datapath_type: str | None = None
) -> list[list[str]]:
    """The ovs-vsctl command lines that set the bridge up (idempotent: `--may-exist`)."""
    create = ["ovs-vsctl", "--may-exist", "add-br", bridge, "--", "set", "bridge", bridge]
    if datapath_type:
        create.append(f"datapath_type={datapath_type}")
    create += [
        "protocols=OpenFlow13",
        "fail-mode=secure",
        f"other-config:hwaddr={hwaddr}",
        "other-config:disable-in-band=true",
    ]
    for port in ports:
        create += ["--", "--may-exist", "add-port", bridge, port]
    create += ["--", "set-controller", bridge, controller]
    # Reconnect within a second of a controller restart (the default backoff grows to 8 s).
    reconnect = ["ovs-vsctl", "set", "controller", bridge, "max_backoff=1000", "inactivity_probe=5000"]
    return [create, reconnect]


def set_up(
    bridge: str,
    ports: list[str],
    hwaddr: str,
    controller: str = CONTROLLER,
    datapath_type: str | None = None,
    timeout: float = 10,
) -> None:
    """Create (or keep) the bridge with its ports and controller; wait until its device exists."""
    for cmd in commands(bridge, ports, hwaddr, controller, datapath_type):
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise BridgeError(f"`{' '.join(cmd)}` failed ({proc.returncode}): {proc.stderr.strip()}")
    deadline = time.monotonic() + timeout
    while not (SYS_NET / bridge).exists():
        if time.monotonic() > deadline:
            raise BridgeError(f"OVS did not create {bridge} within {timeout:g} s")
        time.sleep(0.05)
