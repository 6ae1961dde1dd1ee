"""homework-network: the router's network at boot, as the emulated home sets it up
(homenet/homenet/topology.py) but on real NICs and OVS's kernel datapath.

- the WAN and LAN NICs are chosen (first and second wired NIC in bus order, unless
  STATE/config/network.conf says `wan=NAME-or-MAC` / `lan=NAME-or-MAC`) and renamed `wan`
  and `lan`; systemd-networkd runs DHCP on `wan`, nftables (/etc/nftables.conf) NATs out of it;
- OVS bridge br-lan (OpenFlow 1.3, fail-secure, controller tcp:127.0.0.1:6653; set up by
  homework_deploy.ovs_bridge, as the emulated home's is) gets `lan` as the port the controller
  calls the wireless port; its LOCAL port holds the router's LAN address;
- with a radio that can be an access point, the router is the access point: the radio's
  interface becomes `wlan0`, a port of br-lan, and hostapd serves it (driver=nl80211, `radio.py`);
  without one, hostapd's configuration is rendered for 802.1X on br-lan (driver=wired: an
  access point on the LAN port bridges its stations).

In the satellite role (the box is an access point of the household's router: STATE/config/satellite,
`role.py`) none of that: no OVS, no router address, no NAT, no hostapd of the router's. A Linux bridge
br0 over both wired NICs (so either port can be the cable into the router), with the LAN NIC's MAC set
on it: a bridge otherwise takes its lowest port's, and the radio joining it (the agent's hostapd makes
the radio a port) would give the box a new MAC, which the router takes for a newcomer's. The NICs keep
their names (networkd's `wan` file must not match them); networkd asks the router for br0's address
(/etc/systemd/network/20-satellite.network). The radio is named `wlan0` for the agent's hostapd."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from homework_deploy import ovs_bridge

from . import BRIDGE, LAN_PORT, ROUTER_LAN_IP, ROUTER_MAC, RUN, STATE, VENV, WAN_IFACE, radio, role

SYS_NET = Path("/sys/class/net")
CONFIG = STATE / "config" / "network.conf"


class NetworkError(RuntimeError):
    pass


@dataclass(frozen=True)
class Nic:
    name: str
    mac: str
    bus_path: str  # where it sits on the bus: its order is the order of the box's ports


def parse_config(text: str) -> dict[str, str]:
    """`wan=...` / `lan=...` lines (an interface name or MAC); # comments."""
    choice = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        key, sep, value = line.partition("=")
        key, value = key.strip().lower(), value.strip().lower()
        if not sep or key not in ("wan", "lan") or not value:
            raise NetworkError(f"{CONFIG} line {number}: expected wan=NAME-or-MAC or lan=NAME-or-MAC, got {raw!r}")
        choice[key] = value
    return choice


def choose(nics: list[Nic], config: dict[str, str]) -> tuple[Nic, Nic]:
    """(wan, lan): as configured, else the first and second NIC in bus order."""
    ordered = sorted(nics, key=lambda n: n.bus_path)

    def find(role: str, default_index: int) -> Nic:
        wanted = config.get(role)
        if wanted is None:
            if len(ordered) <= default_index:
                raise NetworkError(
                    f"the router needs two wired NICs, found {len(ordered)}: "
                    f"{', '.join(n.name for n in ordered) or 'none'}"
                )
            return ordered[default_index]
        for nic in ordered:
            if wanted in (nic.name, nic.mac):
                return nic
        raise NetworkError(f"{CONFIG}: {role}={wanted} matches no NIC ({', '.join(n.name for n in ordered)})")

    wan, lan = find("wan", 0), find("lan", 1)
    if wan == lan:
        raise NetworkError(f"{CONFIG}: wan and lan are the same NIC ({wan.name})")
    return wan, lan


def wired_nics() -> list[Nic]:
    nics = []
    for path in SYS_NET.iterdir():
        if not (path / "device").exists() or (path / "wireless").exists() or (path / "phy80211").exists():
            continue
        nics.append(Nic(path.name, (path / "address").read_text().strip().lower(), os.path.realpath(path / "device")))
    return nics


def run(*cmd: str, input: str | None = None) -> str:
    proc = subprocess.run(cmd, capture_output=True, text=True, input=input)
    if proc.returncode != 0:
        raise NetworkError(f"`{' '.join(cmd)}` failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc.stdout


def rename(nic: Nic, name: str) -> None:
    if nic.name != name:
        run("ip", "link", "set", "dev", nic.name, "down")
        run("ip", "link", "set", "dev", nic.name, "name", name)


def wait_for_nics(config: dict[str, str], timeout: float = 30) -> tuple[Nic, Nic]:
    """NICs appear as their drivers probe them; give the slow ones time."""
    deadline = time.monotonic() + timeout
    while True:
        nics = wired_nics()
        named = {n.name: n for n in nics}
        if WAN_IFACE in named and LAN_PORT in named:  # set up before (a restart of this unit)
            return named[WAN_IFACE], named[LAN_PORT]
        try:
            return choose(nics, config)
        except NetworkError:
            if time.monotonic() > deadline:
                raise
        time.sleep(0.5)


@dataclass(frozen=True)
class SatelliteBridge:
    """The satellite role's network: `bridge` over `ports`, with the box's own MAC `mac` set on it."""

    bridge: str
    mac: str
    ports: tuple[str, ...]


def satellite_bridge(wan: Nic, lan: Nic) -> SatelliteBridge:
    """The bridge over both wired ports (the cable may be in either) with the LAN NIC's MAC: the box's one
    identity at the router, whichever port is cabled and whatever joins the bridge later."""
    return SatelliteBridge(role.SATELLITE_BRIDGE, lan.mac, (lan.name, wan.name))


def setup_satellite(wan: Nic, lan: Nic) -> None:
    plan = satellite_bridge(wan, lan)
    # The agent's own directory on the data partition (its unit may write only there): made by the
    # first-run page's job, and here too for a role file written by hand.
    role.SATELLITE_STATE.mkdir(mode=0o700, exist_ok=True)
    print(
        f"homework-network: an access point of the household's router: {plan.bridge} ({plan.mac})"
        f" over {', '.join(plan.ports)}"
    )
    links = {link["ifname"]: link for link in json.loads(run("ip", "-j", "link", "show") or "[]")}
    if plan.bridge not in links:  # set up before: a restart of this unit
        run("ip", "link", "add", plan.bridge, "address", plan.mac, "type", "bridge")
    run("ip", "link", "set", "dev", plan.bridge, "address", plan.mac)
    for port in plan.ports:
        Path(f"/proc/sys/net/ipv6/conf/{port}/disable_ipv6").write_text("1\n")
        run("ip", "link", "set", "dev", port, "master", plan.bridge)
        run("ip", "link", "set", "dev", port, "up")
    run("ip", "link", "set", "dev", plan.bridge, "up")
    try:
        name_the_radio()
    except (radio.RadioError, OSError, NetworkError) as exc:  # the cable still reaches the router
        print(f"homework-network: no radio to serve: {exc}", file=sys.stderr)


def name_the_radio() -> None:
    """The first radio that can be an access point, as `wlan0` (the agent's hostapd serves it)."""
    radios = radio.read_radios()
    if not radios:
        print("homework-network: this box has no radio that can be an access point", file=sys.stderr)
        return
    first = radios[0]
    if first.ifname != radio.RADIO_PORT:
        run("ip", "link", "set", "dev", first.ifname, "down")
        run("ip", "link", "set", "dev", first.ifname, "name", radio.RADIO_PORT)
    # A station-mode interface cannot be a bridge port; hostapd would make it an AP anyway.
    run("iw", "dev", radio.RADIO_PORT, "set", "type", "__ap")
    Path(f"/proc/sys/net/ipv6/conf/{radio.RADIO_PORT}/disable_ipv6").write_text("1\n")


def setup() -> None:
    config = parse_config(CONFIG.read_text()) if CONFIG.exists() else {}
    wan, lan = wait_for_nics(config)
    if role.is_satellite():
        setup_satellite(wan, lan)
        return
    print(f"homework-network: WAN is {wan.name} ({wan.mac}), LAN is {lan.name} ({lan.mac})")
    rename(wan, WAN_IFACE)
    rename(lan, LAN_PORT)
    Path(f"/proc/sys/net/ipv6/conf/{LAN_PORT}/disable_ipv6").write_text("1\n")
    run("ip", "link", "set", LAN_PORT, "up")
    ovs_bridge.set_up(BRIDGE, [LAN_PORT], ROUTER_MAC)  # the kernel datapath: OVS's default
    # The controller adds its IPv6 gateways (each device's /64's ::1, fe80::1) here; the ports stay without.
    Path(f"/proc/sys/net/ipv6/conf/{BRIDGE}/disable_ipv6").write_text("0\n")
    run("ip", "link", "set", BRIDGE, "up")
    run("ip", "addr", "replace", f"{ROUTER_LAN_IP}/32", "dev", BRIDGE)  # where devices reach the web UI
    try:
        if radio.setup_radio():
            return
    except (radio.RadioError, OSError) as exc:  # the wired side still serves the household
        print(f"homework-network: no access point: {exc}", file=sys.stderr)
    render_hostapd_conf()


def render_hostapd_conf() -> None:
    eap_users = STATE / "hostapd.eap_user"
    if not eap_users.exists():
        eap_users.write_text("# identity, EAP method, password: one device a line\n")
    conf = run(
        str(VENV / "bin" / "python"),
        "-m",
        "homework_controller.radio.hostapd_conf",
        "--driver",
        "wired",
        "--interface",
        BRIDGE,
        "--ctrl-dir",
        str(RUN / "hostapd"),
        "--eap-users",
        str(eap_users),
    )
    RUN.mkdir(parents=True, exist_ok=True)
    (RUN / "hostapd.conf").write_text(conf)


def main() -> int:
    try:
        setup()
    except (NetworkError, ovs_bridge.BridgeError, OSError) as exc:
        print(f"homework-network: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
