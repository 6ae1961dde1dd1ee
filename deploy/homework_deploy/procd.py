"""The router's services as OpenWrt procd init scripts, rendered from `deploy/services.toml`.

Each service becomes `/etc/init.d/homework-<name>`: its services.toml command line, with every
`${SETTING}` either a fixed OpenWrt path or an option of `/etc/config/homework` read with
`config_get`, plus what only a router passes: the shaper's tuning flags, each added when its UCI
option is set, and where the web UI's built frontend is installed. OpenWrt's build does not run
Python, so the scripts are committed in `openwrt-feed/` (`make -C openwrt-feed render`); its tests
render them again and compare.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from homework_deploy import SERVICES_FILE, Service, ServicesError, load, settings, start_order


@dataclass(frozen=True)
class Uci:
    """One option of /etc/config/homework; the init script holds it in the variable `<section>_<option>`.
    A required option left empty stops the service with a message naming it."""

    section: str
    option: str
    required: bool = True

    @property
    def var(self) -> str:
        return f"{self.section}_{self.option}"


# A value on the router: literal text and UCI options, joined.
Value = tuple[str | Uci, ...]

# Every [settings] name of services.toml, as the router fills it in. A setting added to services.toml
# must be added here too: render() refuses to guess.
SETTINGS: dict[str, Value] = {
    "PYTHON": ("/usr/bin/python3",),
    "HWDB_BIN": ("/usr/bin/hwdb",),
    "STATE": (Uci("main", "state_dir"),),
    "RUN": ("/var/run",),
    "LAN_IFACE": (Uci("lan", "iface"),),
    "WLAN_PORT": (Uci("lan", "wlan_port"),),
    "ACCESS_PORTS": (Uci("lan", "access_ports", required=False),),  # empty: the radio's port alone
    "UPSTREAM_DNS": (Uci("dns", "upstream"),),
    "STATIONS": ("iw:", Uci("lan", "wlan_port")),
    "LAN_ADDRESS": (Uci("lan", "address"),),
    "HOSTAPD_IFACE": (Uci("lan", "wlan_port"),),  # OpenWrt's hostapd names its socket after the radio
    "WIFI_SSID": (Uci("lan", "ssid", required=False),),  # the radio's network name, for passphrase QR codes
    # The wifi-iface's `option wpa_psk_file` (wpad reads it): where devices' own passphrases go.
    "WIFI_PSK_FILE": (Uci("lan", "wpa_psk_file", required=False),),
    # OpenWrt's radio is set in /etc/config/wireless (LuCI, netifd): nothing there would follow a file of ours.
    "RADIO_SETTINGS": ("",),
    "LATENCY_TARGET": (Uci("webui", "latency_target", required=False),),  # empty: no connection check
    "WAN_IFACE": (Uci("qos", "upstream_iface", required=False),),  # empty: the uplink is not shaped
    "UPLINK_KBIT": (Uci("qos", "uplink_kbit"),),  # 0: not shaped
    "DOWNLINK_KBIT": (Uci("qos", "downlink_kbit"),),
    "UPDATES": ("",),  # OpenWrt updates itself with sysupgrade, not through our web UI
    "SETUP_CODE_FILE": (Uci("webui", "setup_code_file", required=False),),  # a code printed on the box's label
    "ROLE_SPOOL": ("",),  # an OpenWrt box is a router: its access points are OpenWrt's own (mesh, WDS)
    # The ISP's slice (isp-flowvisor); an empty slicer: none, and the rest stay empty too.
    "SLICE": (Uci("slice", "slicer", required=False),),
    "SLICE_CERT": (Uci("slice", "cert", required=False),),
    "SLICE_KEY": (Uci("slice", "key", required=False),),
    "SLICE_CA": (Uci("slice", "ca", required=False),),
    "PUBLIC_ADDRESS": (Uci("slice", "public_address", required=False),),
    # Only services OpenWrt does not run read it (wan-pd: netifd's odhcp6c asks for the prefix there).
    "SERVICE_FILES": ("",),
}

# Services OpenWrt already runs: netifd starts hostapd (package wpad) for each wifi-iface of
# /etc/config/wireless, with its control socket in /var/run/hostapd/. A second hostapd of ours on the
# same radio would fight netifd for it, so the feed configures OpenWrt's (homework-base's
# uci-defaults) and ships no script for it.
PROVIDED_BY_OPENWRT = frozenset({"hostapd"})


@dataclass(frozen=True)
class OptionalFlag:
    """A flag only the router passes, with the value of `option`, and only if that option is set."""

    flag: str
    option: Uci


ROUTER_FLAGS: dict[str, list[OptionalFlag]] = {
    # The shaper's tuning: the controller's own defaults unless the household sets them.
    "controller": [
        OptionalFlag(f"--{name.replace('_', '-')}", Uci("qos", name, required=False))
        for name in ("shaper_percent", "high_share", "high_device_share")
    ],
}

# Arguments only the router adds, always: the web UI's built frontend is installed outside the
# Python package (homework-webui's Makefile).
ROUTER_ARGS: dict[str, tuple[str, ...]] = {"webui": ("--dist", "/usr/share/homework-webui/dist")}

START_BASE, START_STEP = 50, 5  # after openvswitch (15), homework-switch (16) and network with wifi (20)
RESPAWN = "3600 5 0"  # restart after 5 s, without limit: a router has no one to restart it by hand

_SENTINEL = re.compile("\x00([A-Z_]+)\x00")
_SAFE_WORD = re.compile(r"[A-Za-z0-9_@%+=:,./-]+")


def _shell_word(value: Value) -> str:
    """One shell word: literals quoted, UCI options as `${var}` inside double quotes."""
    if all(isinstance(part, str) for part in value):
        text = "".join(part for part in value if isinstance(part, str))
        return text if _SAFE_WORD.fullmatch(text) else "'" + text.replace("'", "'\\''") + "'"
    out = []
    for part in value:
        if isinstance(part, Uci):
            out.append("${" + part.var + "}")
        else:
            out.append(re.sub(r'(["\\$`])', r"\\\1", part))
    return '"' + "".join(out) + '"'


def _router_value(arg: str) -> Value:
    """A services.toml argument with its placeholders (sentinels) replaced by router values."""
    pieces = _SENTINEL.split(arg)  # literal, name, literal, name, ..., literal
    value: list[str | Uci] = []
    for i, piece in enumerate(pieces):
        if i % 2:
            value.extend(SETTINGS[piece])
        elif piece:
            value.append(piece)
    return tuple(value)


def _options(values: Sequence[Value]) -> list[Uci]:
    seen: dict[Uci, None] = {}
    for value in values:
        for part in value:
            if isinstance(part, Uci):
                seen.setdefault(part)
    return list(seen)


def _services(path: Path) -> dict[str, Service]:
    names = settings(path)
    unmapped = sorted(set(names) - set(SETTINGS))
    if unmapped:
        raise ServicesError(
            f"services.toml setting(s) {', '.join(unmapped)} have no OpenWrt value: "
            "add them to SETTINGS in deploy/homework_deploy/procd.py"
        )
    return load({name: f"\x00{name}\x00" for name in names}, path)


def render_service(service: Service, start: int) -> str:
    """The procd init script of one service."""
    command = [_router_value(a) for a in service.command]
    flags = ROUTER_FLAGS.get(service.name, [])
    options = _options([*command, *((f.option,) for f in flags)])
    lines = [
        "#!/bin/sh /etc/rc.common",
        "# Generated from deploy/services.toml by deploy/homework_deploy/procd.py",
        "# (make -C openwrt-feed render): edit those, not this file.",
        f"# homework-{service.name}: {service.description}",
        "# USE_PROCD, START and STOP are read by /etc/rc.common, which sources this file.",
        "# shellcheck disable=SC2034",
        "",
        "USE_PROCD=1",
        f"START={start}",
        f"STOP={100 - start}",
        "",
        "start_service() {",
        "\tconfig_load homework",
    ]
    # config_get SECTION OPTION prints the value: an assignment shellcheck can see.
    lines += [f"\t{o.var}=$(config_get {o.section} {o.option})" for o in options]
    for option in [o for o in options if o.required]:
        lines += [
            f'\tif [ -z "${{{option.var}}}" ]; then',
            f'\t\techo "homework-{service.name}: homework.{option.section}.{option.option} is not set '
            '(/etc/config/homework)" >&2',
            "\t\treturn 1",
            "\tfi",
        ]
    if set(_options([SETTINGS["STATE"]])) & set(options):  # the services create their files, not the directory
        lines.append(f"\tmkdir -p {_shell_word(SETTINGS['STATE'])}")
    words = [_shell_word(v) for v in command] + [_shell_word((a,)) for a in ROUTER_ARGS.get(service.name, ())]
    lines += ["", "\tprocd_open_instance", "\tprocd_set_param command " + " ".join(words)]
    for f in flags:
        lines += [
            f'\tif [ -n "${{{f.option.var}}}" ]; then',
            f'\t\tprocd_append_param command {f.flag} "${{{f.option.var}}}"',
            "\tfi",
        ]
    lines += [
        f"\tprocd_set_param respawn {RESPAWN}",
        *([f"\tprocd_set_param nice {service.nice}"] if service.nice else []),
        "\tprocd_set_param stdout 1",
        "\tprocd_set_param stderr 1",
        "\tprocd_close_instance",
        "}",
        "",
        "service_triggers() {",
        "\tprocd_add_reload_trigger homework",
        "}",
        "",
    ]
    return "\n".join(lines)


def render(path: Path = SERVICES_FILE) -> dict[str, str]:
    """File name -> text of every init script the feed ships (homework-<name>.init)."""
    services = _services(path)
    scripts = {}
    for index, name in enumerate(start_order(services)):
        # The feed ships no script for what OpenWrt runs itself, nor for what services.toml's `platforms`
        # leaves out (a oneshot of the image's, the image's prefix-delegation client).
        if name not in PROVIDED_BY_OPENWRT and "openwrt" in services[name].platforms:
            scripts[f"homework-{name}.init"] = render_service(services[name], START_BASE + START_STEP * index)
    return scripts
