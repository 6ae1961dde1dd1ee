"""The router's services as `deploy/services.toml` defines them: one definition, read by everyone who
starts them (the emulated home starts processes; the image renders systemd units; the OpenWrt feed
renders procd scripts)."""

from __future__ import annotations

import json
import re
import subprocess
import tomllib
import urllib.request
from dataclasses import dataclass
from pathlib import Path

SERVICES_FILE = Path(__file__).resolve().parents[1] / "services.toml"
# Who starts the services: the firmware image (systemd), the emulated home, the OpenWrt feed (procd).
PLATFORMS = ("image", "homenet", "openwrt")
# What a box is (docs/whole-home-wifi.md): the household's router, or an access point of another
# router's (a satellite). Only the image has the satellite role: the other starters run the router's.
ROLES = ("router", "satellite")
_PLACEHOLDER = re.compile(r"\$\{([A-Z_]+)\}")


class ServicesError(ValueError):
    """services.toml is wrong, or a caller did not give every setting it names."""


@dataclass(frozen=True)
class Service:
    name: str
    description: str
    command: tuple[str, ...]
    after: tuple[str, ...]
    ready: dict
    ready_timeout_s: float
    # The only paths it writes (its state and runtime files), for starters that can confine it
    # (the image's systemd units); an empty setting's path is left out.
    writes: tuple[str, ...] = ()
    # It tells a service manager that listens (systemd's sd_notify) `READY=1` at the moment its
    # `ready` check first holds, so that starter need not poll.
    notifies: bool = False
    # Who runs it (of PLATFORMS).
    platforms: frozenset[str] = frozenset(PLATFORMS)
    # It does one job and ends, started again whenever one of `triggered_by` changes (not at boot).
    oneshot: bool = False
    triggered_by: tuple[str, ...] = ()
    # Its CPU priority as nice(1) counts it (-20 first .. 19 last; 0 as everyone else).
    nice: int = 0
    # The roles of the box it runs in (of ROLES).
    roles: frozenset[str] = frozenset({"router"})


def settings(path: Path = SERVICES_FILE) -> dict[str, str]:
    """Every setting a starter must fill in, with its explanation."""
    return dict(tomllib.loads(path.read_text())["settings"])


def load(values: dict[str, object], path: Path = SERVICES_FILE, platform: str | None = None) -> dict[str, Service]:
    """Every service with its placeholders filled from `values` (all settings must be given); with
    `platform`, only the services that platform runs."""
    spec = tomllib.loads(path.read_text())
    missing = set(spec["settings"]) - set(values)
    if missing:
        raise ServicesError(f"settings missing for {path.name}: {', '.join(sorted(missing))}")

    def fill(value):
        if isinstance(value, str):
            return _PLACEHOLDER.sub(lambda m: str(values[m.group(1)]), value)
        if isinstance(value, list):
            return [fill(v) for v in value]
        if isinstance(value, dict):
            return {k: fill(v) for k, v in value.items()}
        return value

    services = {
        name: Service(
            name,
            s.get("description", name),
            tuple(fill(s["command"])),
            tuple(s.get("after", ())),
            fill(s.get("ready", {})),
            float(s.get("ready_timeout_s", 30)),
            tuple(path for path in fill(s.get("writes", [])) if path),
            bool(s.get("notifies", False)),
            _platforms(name, s),
            bool(s.get("oneshot", False)),
            tuple(path for path in fill(s.get("triggered_by", [])) if path),
            _nice(name, s),
            _roles(name, s),
        )
        for name, s in spec["services"].items()
    }
    for name, s in spec["services"].items():
        if bool(s.get("oneshot", False)) != bool(s.get("triggered_by")):
            raise ServicesError(f"{name}: a oneshot service needs `triggered_by` paths, and only it has them")
    if platform is not None:
        if platform not in PLATFORMS:
            raise ServicesError(f"no such platform {platform!r}: one of {', '.join(PLATFORMS)}")
        services = {name: s for name, s in services.items() if platform in s.platforms}
    start_order(services)  # refuses unknown names and circles now, not when something starts
    return services


def _nice(name: str, spec: dict) -> int:
    nice = spec.get("nice", 0)
    if type(nice) is not int or not -20 <= nice <= 19:
        raise ServicesError(f"{name}: `nice` must be a whole number from -20 to 19, not {nice!r}")
    return nice


def _roles(name: str, spec: dict) -> frozenset[str]:
    roles = frozenset(spec.get("roles", ("router",)))
    if not roles or roles - set(ROLES):
        raise ServicesError(f"{name}: `roles` must name some of {', '.join(ROLES)}, not {sorted(roles)}")
    if "router" not in roles and set(spec.get("platforms", PLATFORMS)) != {"image"}:
        raise ServicesError(
            f"{name}: only the image has a role other than the router's: its `platforms` is image alone"
        )
    return roles


def cpu_weight(nice: int) -> int:
    """The cgroup CPU weight (systemd's CPUWeight=, 100 for everyone else) that gives a service's group the
    share `nice` gives a process among others: the kernel's weights grow 1.25 times a step
    (sched_prio_to_weight). A service manager that puts each service in a group of its own shares the CPU
    between the groups first, so a nice alone would count only among the service's own threads."""
    return max(1, min(10000, round(100 * 1.25**-nice)))


def _platforms(name: str, spec: dict) -> frozenset[str]:
    platforms = frozenset(spec.get("platforms", PLATFORMS))
    if not platforms or platforms - set(PLATFORMS):
        raise ServicesError(f"{name}: `platforms` must name some of {', '.join(PLATFORMS)}, not {sorted(platforms)}")
    return platforms


def start_order(services: dict[str, Service]) -> list[str]:
    """Services ordered so that each starts after those it names in `after`."""
    order: list[str] = []

    def visit(name: str, path: tuple[str, ...] = ()) -> None:
        if name not in services:
            raise ServicesError(f"{path[-1]} starts after {name!r}, which is not a service")
        if name in path:
            raise ServicesError(f"services start after each other in a circle: {' -> '.join(path + (name,))}")
        if name not in order:
            for before in services[name].after:
                visit(before, path + (name,))
            order.append(name)

    for name in services:
        visit(name)
    return order


def ready_now(ready: dict) -> bool:
    """Whether a service passes its services.toml `ready` check right now."""
    if "command" in ready:
        return subprocess.run(ready["command"], capture_output=True).returncode == 0
    if "path" in ready:
        return Path(ready["path"]).exists()
    if "url" in ready:
        try:
            with urllib.request.urlopen(ready["url"], timeout=1) as resp:
                if "json_field" not in ready:
                    return resp.status == 200
                return json.loads(resp.read()).get(ready["json_field"]) is True
        except (OSError, ValueError):
            return False
    return True
