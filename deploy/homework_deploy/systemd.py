"""systemd units for the router's services, rendered from `deploy/services.toml` (via `load`).

One unit per service: `ExecStart=` is the service's command, `After=`/`Wants=` its `after`,
it restarts when it fails, and it runs hardened with only the capabilities it needs. A `oneshot`
service runs once per change of its `triggered_by` paths: a .path unit (the one enabled) starts it.
Readiness: systemd counts a service as started only once it really serves, and a unit ordered
after it starts only then (the same moment the emulated home waits for). How it learns that
depends on the service, cheapest first, because on a slow router every Python start on the
boot's path costs seconds:
- a service that `notifies` (sd_notify `READY=1`) is `Type=notify`: it says so itself;
- a `ready` path is waited for by the shell (`ExecStartPost=/bin/sh -c ...`);
- any other check (a URL, a command) by this module's `--wait-ready`.
systemd waits for `ExecStartPost=` to end even when the service has already died, so both
waits give up as soon as the service's main process (`$MAINPID`, which systemd gives them) is
gone: a service that cannot start fails in seconds, not after its whole ready timeout, and the
next try (or the health check that rolls back an update) comes that much sooner.

    python -m homework_deploy.systemd --wait-ready '{"url": "http://..."}' --timeout 40
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from . import ROLES, Service, cpu_weight, ready_now

UNIT_PREFIX = "homework-"

# What each service needs beyond the hardening every one gets: the capabilities it keeps
# (everything else is dropped from the bounding set) and the socket families it opens.
# hwdb binds a port below 1024; the controller changes addresses, nftables and qdiscs, and
# serves DHCP on a packet socket (holding port 67); hostapd speaks EAPOL on a packet socket (its
# wired driver also binds a privileged port); the web UI needs nothing.
# dhcpcd (wan-pd) binds DHCPv6's client port 546, opens raw ICMPv6 and packet sockets and adds its
# unreachable route for the prefix; and it separates its privileges (Debian's 9.4.1 is built with
# PRIVSEP and always uses it when its user `dhcpcd` exists, no option turns it off): every process
# but the root "privileged actioneer" (which runs the hook) chroots to that user's home and
# setgroups/setgid/setuid to it, so it keeps CAP_SYS_CHROOT, CAP_SETGID and CAP_SETUID (the
# processes that drop to `dhcpcd` lose every capability by it). Without them dhcpcd still works, but
# says "failed to drop privileges" and parses what the ISP sends as root.
# The radio refresh needs none: it talks to hostapd's socket and to systemd's as root, and writes
# files root owns.
# A satellite's agent starts its own hostapd (nl80211 on the radio, which hostapd makes a port of the
# bridge): hostapd's capabilities, sockets and device.
CAPABILITIES: dict[str, tuple[str, ...]] = {
    "hwdb": ("CAP_NET_BIND_SERVICE",),
    "hostapd": ("CAP_NET_ADMIN", "CAP_NET_BIND_SERVICE", "CAP_NET_RAW"),
    "controller": ("CAP_NET_ADMIN", "CAP_NET_BIND_SERVICE", "CAP_NET_RAW"),
    "webui": (),
    "wan-pd": ("CAP_NET_ADMIN", "CAP_NET_BIND_SERVICE", "CAP_NET_RAW", "CAP_SETGID", "CAP_SETUID", "CAP_SYS_CHROOT"),
    "radio-refresh": (),
    "satellite": ("CAP_NET_ADMIN", "CAP_NET_BIND_SERVICE", "CAP_NET_RAW"),
}
# dhcpcd opens an AF_INET socket even IPv6-only (if_opensockets: interface ioctls "without INET"),
# netlink for routes and links (and udev's events), AF_PACKET for its link-layer sockets, AF_UNIX for
# its privilege separation's socket pairs and control sockets. The refresh speaks only AF_UNIX
# (hostapd's control socket, systemd's).
ADDRESS_FAMILIES: dict[str, str] = {
    "hostapd": "AF_UNIX AF_INET AF_INET6 AF_NETLINK AF_PACKET",
    "controller": "AF_UNIX AF_INET AF_INET6 AF_NETLINK AF_PACKET",
    "wan-pd": "AF_UNIX AF_INET AF_INET6 AF_NETLINK AF_PACKET",
    "radio-refresh": "AF_UNIX",
    "satellite": "AF_UNIX AF_INET AF_INET6 AF_NETLINK AF_PACKET",
}
DEFAULT_FAMILIES = "AF_UNIX AF_INET AF_INET6"
# Services that change network settings under /proc/sys keep it writable.
TOUCHES_KERNEL_TUNABLES = {"hostapd", "controller", "satellite"}


@dataclass(frozen=True)
class Account:
    """Whom a service runs as. Root only where it must be: the controller drives Open vSwitch
    through its root-only socket and hostapd is Debian's. hwdb, which the LAN's agents talk to,
    and the web UI, the LAN's management surface, run as their own users."""

    user: str = "root"
    group: str = "root"
    # Groups whose shared files it reads: hwdb's group can read the agent key hwdb makes (0640).
    supplementary: tuple[str, ...] = ()


HWDB_GROUP = "homework-hwdb"
ACCOUNTS: dict[str, Account] = {
    "hwdb": Account("homework-hwdb", HWDB_GROUP),
    "webui": Account("homework-webui", "homework-webui", (HWDB_GROUP,)),
}
# Device nodes a service opens (any other is closed to it; a root service that could open the
# disk could write an unsigned kernel). hostapd may use rfkill on a real radio.
DEVICES: dict[str, tuple[str, ...]] = {"hostapd": ("/dev/rfkill rw",), "satellite": ("/dev/rfkill rw",)}
STATE_ROOT = "/var/lib/"
# Services that share one private /tmp: hostapd answers a control client (the controller's
# hostapd_cli and event listener, the radio refresh's passwords) at the client's socket path in
# /tmp, which it must see.
SHARES_TMP_WITH: dict[str, str] = {"controller": "hostapd", "radio-refresh": "hostapd"}
# Five failures within two minutes and systemd stops trying: the unit is then "failed".
START_LIMIT_BURST, START_LIMIT_INTERVAL_S = 5, 120


def unit_name(service: str) -> str:
    return f"{UNIT_PREFIX}{service}.service"


def path_unit_name(service: str) -> str:
    return f"{UNIT_PREFIX}{service}.path"


def role_condition(service: Service, role_file: str | None) -> list[str]:
    """The line that starts a service only in its box's roles (services.toml's `roles`): a box is a satellite
    while `role_file` exists, a router otherwise. A condition that fails skips the unit (not a failure);
    one that holds changes nothing. None: the box has one role, the router's."""
    if not role_file or service.roles == frozenset(ROLES):
        return []
    if service.roles == {"satellite"}:
        return [f"ConditionPathExists={role_file}"]
    return [f"ConditionPathExists=!{role_file}"]


def enabled_units(services: dict[str, Service]) -> list[str]:
    """The units to enable: each service's, or for a oneshot the .path unit that starts it."""
    return [path_unit_name(n) if s.oneshot else unit_name(n) for n, s in services.items()]


def _quote(arg: str) -> str:
    """One ExecStart word: systemd expands % specifiers and $ variables, so both are escaped."""
    escaped = arg.replace("%", "%%").replace("$", "$$")
    if not escaped or any(c in escaped for c in " \t\"'\\;"):
        return "'" + escaped.replace("\\", "\\\\").replace("'", "\\'") + "'"
    return escaped


def render(
    service: Service,
    python: str,
    requires: Sequence[str] = (),
    slowness: float = 1,
    read_only: Sequence[str] = (),
    role_file: str | None = None,
) -> str:
    """The unit file text for one service.

    python: the interpreter that runs the readiness check (has homework_deploy installed);
    requires: units of the system every service starts after (e.g. the router's network);
    slowness: how many times longer than services.toml's ready_timeout_s a start may take on
    this hardware (a router's CPU can be several times slower than a developer's);
    read_only: paths inside the service's own `writes` that are another's (`render_all`);
    role_file: the file whose presence makes the box a satellite (`role_condition`), if it can be one.
    The service may write only its `writes` from services.toml: everything else is read-only."""
    if service.name not in CAPABILITIES:
        raise ValueError(f"no capabilities declared for service {service.name!r}: add it to CAPABILITIES")
    account = ACCOUNTS.get(service.name, Account())
    deps = [*requires, *(unit_name(s) for s in service.after)]
    caps = " ".join(CAPABILITIES[service.name])
    lines = [
        "# Rendered from deploy/services.toml by homework_deploy.systemd: edit that file, not this one.",
        "[Unit]",
        f"Description=Homework {service.name}: {service.description}",
        *role_condition(service, role_file),
    ]
    if deps:
        # Wants=, not Requires=: with Requires=, a dependency whose first start fails (and
        # that systemd restarts a moment later) leaves this unit's start job failed for good.
        lines += [f"After={' '.join(deps)}", f"Wants={' '.join(deps)}"]
    if service.name in SHARES_TMP_WITH:
        lines.append(f"JoinsNamespaceOf={unit_name(SHARES_TMP_WITH[service.name])}")
    if not service.oneshot:
        lines += [
            # The router's health check reports a failed unit at once (and counts slower failures).
            # A oneshot keeps systemd's own limit: its path unit starts it at every change, and a
            # start limit reached there would stop the path unit watching.
            f"StartLimitIntervalSec={START_LIMIT_INTERVAL_S}",
            f"StartLimitBurst={START_LIMIT_BURST}",
        ]
    lines += [
        "",
        "[Service]",
        *_readiness(service, python, slowness),
        f"TimeoutStartSec={service.ready_timeout_s * slowness + 10:g}",
    ]
    if not service.oneshot:  # a failed refresh waits for the next change
        lines += ["Restart=on-failure", "RestartSec=2"]
    if service.nice:
        lines += [f"Nice={service.nice}", f"CPUWeight={cpu_weight(service.nice)}"]
    if account.user != "root":
        lines.append(f"User={account.user}")
    if account.group != "root":
        lines.append(f"Group={account.group}")
    if account.supplementary:
        lines.append(f"SupplementaryGroups={' '.join(account.supplementary)}")
    lines += [
        # Hardening: read-only system, no privilege gain, only the listed capabilities.
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
        *_writable(service.writes, account),
        *(f"ReadOnlyPaths=-{path}" for path in read_only),
        "ProtectHome=yes",
        "PrivateTmp=yes",
    ]
    if service.name in DEVICES:
        lines += ["DevicePolicy=closed", *(f"DeviceAllow={device}" for device in DEVICES[service.name])]
    else:
        lines.append("PrivateDevices=yes")
    lines += [
        "ProtectKernelModules=yes",
        "ProtectKernelLogs=yes",
        "ProtectControlGroups=yes",
        "ProtectClock=yes",
        "RestrictSUIDSGID=yes",
        "RestrictRealtime=yes",
        "RestrictNamespaces=yes",
        "LockPersonality=yes",
        "SystemCallArchitectures=native",
        f"RestrictAddressFamilies={ADDRESS_FAMILIES.get(service.name, DEFAULT_FAMILIES)}",
        f"CapabilityBoundingSet={caps}",
        f"AmbientCapabilities={caps}",
    ]
    if service.name not in TOUCHES_KERNEL_TUNABLES:
        lines.append("ProtectKernelTunables=yes")
    if not service.oneshot:  # a oneshot is started by its .path unit (render_path), not at boot
        lines += ["", "[Install]", "WantedBy=multi-user.target"]
    return "\n".join([*lines, ""])


def render_path(service: Service, role_file: str | None = None) -> str:
    """The .path unit that starts a oneshot service whenever one of its `triggered_by` paths changes
    (systemd watches the directories of those that do not exist yet)."""
    return "\n".join(
        [
            "# Rendered from deploy/services.toml by homework_deploy.systemd: edit that file, not this one.",
            "[Unit]",
            f"Description=Homework {service.name}: watch {' '.join(service.triggered_by)}",
            *role_condition(service, role_file),
            f"RequiresMountsFor={' '.join(service.triggered_by)}",
            "",
            "[Path]",
            *(f"PathChanged={path}" for path in service.triggered_by),
            f"Unit={unit_name(service.name)}",
            "",
            "[Install]",
            "WantedBy=paths.target",
            "",
        ]
    )


def _readiness(service: Service, python: str, slowness: float) -> list[str]:
    """The lines by which systemd learns that the service serves (see the module's docstring)."""
    if service.oneshot:  # started when it has ended
        return ["Type=oneshot", f"ExecStart={_command(service.command)}"]
    if service.notifies:
        return ["Type=notify", "NotifyAccess=main", f"ExecStart={_command(service.command)}"]
    if not service.ready:  # started once it runs: the router serves without it
        return ["Type=exec", f"ExecStart={_command(service.command)}"]
    timeout = service.ready_timeout_s * slowness
    if set(service.ready) == {"path"}:
        wait = [
            "/bin/sh",
            "-c",
            'i=0; until [ -e "$1" ]; do kill -0 "$MAINPID" 2>/dev/null || exit 1; '
            '[ "$i" -lt "$2" ] || exit 1; i=$((i + 1)); sleep 0.1; done',
            "wait-ready",
            service.ready["path"],
            f"{int(timeout * 10)}",
        ]
    else:
        wait = [python, "-m", "homework_deploy.systemd", "--wait-ready", json.dumps(service.ready, sort_keys=True)]
        wait += ["--timeout", f"{timeout:g}"]
    return ["Type=exec", f"ExecStart={_command(service.command)}", f"ExecStartPost={_command(wait)}"]


def _command(argv: Sequence[str]) -> str:
    return " ".join(_quote(a) for a in argv)


def _writable(paths: Sequence[str], account: Account) -> list[str]:
    """A root service's paths are opened up as they are. A service with its own user gets its
    state directories as systemd's StateDirectory=, which hands them (and what an older image
    left in them as root) to that user at each start."""
    lines = []
    for path in paths:
        if account.user != "root" and path.startswith(STATE_ROOT):
            lines.append(f"StateDirectory={path.removeprefix(STATE_ROOT)}")
        else:
            lines.append(f"ReadWritePaths=-{path}")
    return lines


def _inside(path: str, directory: str) -> bool:
    return path == directory or path.startswith(directory.rstrip("/") + "/")


def render_all(
    services: dict[str, Service],
    python: str,
    requires: Sequence[str] = (),
    slowness: float = 1,
    role_file: str | None = None,
) -> dict[str, str]:
    """{unit file name: text} for every service (and the .path unit of each oneshot). What one
    service writes stays read-only to the others, also where it lies inside another's (the web
    UI's state inside the data directory the controller writes, the update spool inside the
    runtime directory, the delegated prefix's directory inside the data directory). `role_file`: the file
    whose presence makes the box a satellite, for a box that can be one (`role_condition`)."""
    units = {
        unit_name(name): render(
            service,
            python,
            requires,
            slowness,
            read_only=[
                path
                for other in services.values()
                if other.name != name
                for path in other.writes
                if path not in service.writes and any(_inside(path, mine) for mine in service.writes)
            ],
            role_file=role_file,
        )
        for name, service in services.items()
    }
    units |= {
        path_unit_name(name): render_path(service, role_file) for name, service in services.items() if service.oneshot
    }
    return units


def process_alive(pid: int) -> bool:
    """Is `pid` a process that still runs (not gone, and not a zombie waiting to be reaped)?"""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    # The state follows the command name, which is in parentheses and may itself hold any byte.
    return stat[stat.rindex(")") + 2 :][:1] not in ("Z", "X", "")


def wait_ready(ready: dict, timeout: float, interval: float = 0.2, alive: Callable[[], bool] = lambda: True) -> bool:
    """True once `ready` holds; False after `timeout`, or as soon as `alive()` says the service died."""
    deadline = time.monotonic() + timeout
    while True:
        if ready_now(ready):
            return True
        if time.monotonic() >= deadline or not alive():
            return False
        time.sleep(interval)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m homework_deploy.systemd",
        description="Wait until a service passes its services.toml readiness check.",
    )
    p.add_argument("--wait-ready", required=True, metavar="JSON", help="the service's `ready` table as JSON")
    p.add_argument("--timeout", type=float, required=True, help="seconds to wait")
    args = p.parse_args(argv)
    try:
        ready = json.loads(args.wait_ready)
    except ValueError as exc:
        p.error(f"--wait-ready is not JSON: {exc}")
    if not isinstance(ready, dict):
        p.error("--wait-ready must be a JSON object")
    main_pid = int(os.environ.get("MAINPID") or 0)
    alive = (lambda: process_alive(main_pid)) if main_pid else (lambda: True)
    if wait_ready(ready, args.timeout, alive=alive):
        return 0
    if not alive():
        print(f"the service (process {main_pid}) ended before it was ready: {args.wait_ready}", file=sys.stderr)
    else:
        print(f"not ready after {args.timeout:g} s: {args.wait_ready}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
