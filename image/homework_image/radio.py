"""The router's own access point: the first radio that can be one serves the household's network.

`homework-network` calls `setup_radio` once the bridge is up. It asks the kernel (nl80211, through
pyroute2) for the box's radios and takes the first, in the kernel's order, that supports AP mode;
a box without one keeps the wired setup (hostapd's 802.1X on the bridge). The radio's interface
is renamed `wlan0`, switched to AP mode and made a port of `br-lan`, so every station is a
port-level peer the controller sees, isolates and admits; hostapd runs on it with
`driver=nl80211` (`homework_controller.radio.hostapd_conf`: WPA2-PSK and WPA3-SAE, per-device
passphrases from `STATE/hostapd.wpa_psk`, `ap_isolate`, multicast as unicast).

The household's settings are in `STATE/config/wifi.conf` (`homework_controller.radio.radio_settings`:
network name, guest passphrase, country, band, channel; the household changes them in the web UI,
through the controller, which writes the file). At first boot the file is made with a guest
passphrase; its existence tells the controller the router has a radio. A line that is not
understood is reported and left out (the others still apply). The services
find hostapd's control socket under the bridge's name (`RUN/hostapd/br-lan`, as on a box without a
radio): with a radio that name is a link to the radio's socket.

`python -m homework_image.radio refresh` (homework-radio-refresh.service, started by its path unit
when the key file or the settings change) renders hostapd's configuration again. When only its
passwords changed (a device's own passphrase issued, moved or revoked, or the guest passphrase),
the running hostapd is given them and nobody is dropped for it (`AccessPoint.give_passwords`); anything else
(a network name, band, channel or country) restarts hostapd alone, and every station joins again
(a few seconds). WPA2 keys are in the key file, which the controller has hostapd reload when it
writes a device's.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path

from homework_controller.policy import wifi_keys
from homework_controller.radio import hostapd_ctrl, private_files, radio_settings
from homework_controller.radio.radio_settings import RadioSettings

from . import BRIDGE, RUN, STATE, VENV

RADIO_PORT = "wlan0"
WIFI_CONFIG = STATE / "config" / "wifi.conf"
PSK_FILE = STATE / "hostapd.wpa_psk"
HOSTAPD_CTRL = RUN / "hostapd"
HOSTAPD_UNIT = "homework-hostapd.service"


class RadioError(RuntimeError):
    pass


@dataclass(frozen=True)
class Radio:
    phy: str  # e.g. phy0
    ifname: str  # its network interface as the driver named it


def ap_radios(wiphys: Iterable[dict], interfaces: Iterable[dict]) -> list[Radio]:
    """Radios that support AP mode and have an interface, in the kernel's order (wiphy index).

    wiphys: {"index": int, "name": "phy0", "iftypes": ["station", "ap", ...]}, one or more per
    radio (a split dump repeats them); interfaces: {"wiphy": int, "ifname": "wlan0"}."""
    capable: dict[int, str] = {}
    for w in wiphys:
        if "ap" in w.get("iftypes", ()):
            capable[w["index"]] = w["name"]
    first_interface: dict[int, str] = {}
    for i in sorted(interfaces, key=lambda i: i["ifname"]):
        first_interface.setdefault(i["wiphy"], i["ifname"])
    return [Radio(capable[index], first_interface[index]) for index in sorted(capable) if index in first_interface]


def read_radios() -> list[Radio]:
    """The box's AP-capable radios, from nl80211 (none when the kernel has no nl80211 at all)."""
    from pyroute2 import IW
    from pyroute2.netlink.exceptions import NetlinkError

    try:
        iw = IW()
    except NetlinkError:  # no cfg80211: no wireless driver has loaded
        return []
    with iw:
        wiphys = [
            {
                "index": m.get("NL80211_ATTR_WIPHY"),
                "name": m.get("NL80211_ATTR_WIPHY_NAME"),
                "iftypes": m.get("NL80211_ATTR_SUPPORTED_IFTYPES") or [],
            }
            for m in iw.list_wiphy()
        ]
        interfaces = [
            {"wiphy": m.get("NL80211_ATTR_WIPHY"), "ifname": m.get("NL80211_ATTR_IFNAME")}
            for m in iw.get_interfaces_dump()
        ]
    return ap_radios(wiphys, interfaces)


def hostapd_args(settings: RadioSettings) -> list[str]:
    """`homework_controller.radio.hostapd_conf`'s arguments for the radio, each option and its value one
    argument (`--ssid=-home`): a network name or passphrase starting with `-` is a value, never an option."""
    options = {
        "driver": "nl80211",
        "interface": RADIO_PORT,
        "ctrl-dir": str(HOSTAPD_CTRL),
        "ssid": settings.ssid,
        "passphrase": settings.passphrase,
        "psk-file": str(PSK_FILE),
        "country": settings.country,
        "band": settings.band,
        "channel": str(settings.channel),
    }
    return [f"--{option}={value}" for option, value in options.items()]


def run(*cmd: str) -> str:
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RadioError(f"`{' '.join(cmd)}` failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc.stdout


def wifi_settings() -> RadioSettings:
    """The household's settings; at first boot the file is made, with a guest passphrase."""
    current = private_files.read_text(str(WIFI_CONFIG))
    settings, problems = radio_settings.parse(current, str(WIFI_CONFIG))
    for problem in problems:
        print(f"homework-network: {problem}", file=sys.stderr)
    if not settings.passphrase:
        settings = replace(settings, passphrase=wifi_keys.new_passphrase())
        WIFI_CONFIG.parent.mkdir(parents=True, exist_ok=True)
        private_files.write(str(WIFI_CONFIG), radio_settings.render(settings, current))
    return settings


def setup_radio() -> bool:
    """Serve the household's network on the first AP-capable radio; False when the box has none."""
    radios = read_radios()
    if not radios:
        return False
    radio = radios[0]
    settings = wifi_settings()
    print(
        f"homework-network: access point on {radio.phy} ({radio.ifname} -> {RADIO_PORT}): "
        f"{settings.ssid!r}, {settings.band} GHz channel {settings.channel}, country {settings.country}"
    )
    if radio.ifname != RADIO_PORT:
        run("ip", "link", "set", "dev", radio.ifname, "down")
        run("ip", "link", "set", "dev", radio.ifname, "name", RADIO_PORT)
    # A station-mode interface cannot be a bridge port; hostapd would make it an AP anyway.
    run("iw", "dev", RADIO_PORT, "set", "type", "__ap")
    Path(f"/proc/sys/net/ipv6/conf/{RADIO_PORT}/disable_ipv6").write_text("1\n")
    run("ovs-vsctl", "--may-exist", "add-port", BRIDGE, RADIO_PORT)
    router_access_point().write_conf(render_hostapd_conf(settings))
    # The controller and the readiness check look for hostapd's socket under the bridge's name.
    HOSTAPD_CTRL.mkdir(parents=True, exist_ok=True)
    alias = HOSTAPD_CTRL / BRIDGE
    alias.unlink(missing_ok=True)
    alias.symlink_to(RADIO_PORT)
    return True


def render_hostapd_conf(settings: RadioSettings) -> str:
    return run(str(VENV / "bin" / "python"), "-m", "homework_controller.radio.hostapd_conf", *hostapd_args(settings))


SAE_PASSWORD = "sae_password="


def passwords_only(ran: str, conf: str) -> bool:
    """The two configurations differ in their SAE passwords alone: what hostapd takes while it runs."""

    def rest(conf_text: str) -> list[str]:
        return [line for line in conf_text.splitlines() if not line.startswith(SAE_PASSWORD)]

    return rest(ran) == rest(conf)


@dataclass(frozen=True)
class AccessPoint:
    """One hostapd serving the household's network, the router's own or a satellite's (`satellite.py`): the
    configuration it runs with, its key file, its control socket, and how it is started and stopped."""

    conf: Path
    psk_file: Path
    ctrl: Path
    start: Callable[[], object]
    stop: Callable[[], object]

    def follow(self, render: Callable[[], str]) -> str:
        """hostapd's configuration rendered again (`render`, which also writes the key file's guest line), and
        what was done: "unchanged"; "passwords", given to the running hostapd when only passwords changed;
        "restarted", when anything else did: hostapd stopped, given it and started (never running with a
        configuration other than the file's, which the controller reads)."""
        keys_before = self.key_file()
        conf = render()
        keys_changed = self.key_file() != keys_before
        ran = self.conf.read_text() if self.conf.exists() else ""
        if ran == conf and not keys_changed:
            return "unchanged"
        if ran and passwords_only(ran, conf):
            try:
                self.give_passwords(conf if conf != ran else "", keys_changed)
            except hostapd_ctrl.HostapdError as exc:
                raise RadioError(f"{exc}; hostapd runs with the passwords it had") from None
            self.write_conf(conf)  # after: the controller never reads a password hostapd does not have yet
            print("homework-network: hostapd took the passwords changed without a restart")
            return "passwords"
        self.stop()
        self.write_conf(conf)
        try:
            self.start()
        except RadioError:
            if not ran:
                raise
            # A setting hostapd cannot start with (a channel the country forbids, say): the radio goes
            # back to the configuration that ran rather than staying off.
            self.write_conf(ran)
            self.start()
            raise RadioError("hostapd did not start with the new settings; it runs with the earlier ones") from None
        print(f"homework-network: hostapd restarted with its configuration rendered again ({self.conf})")
        return "restarted"

    def give_passwords(self, conf: str, keys_changed: bool) -> None:
        """The running hostapd given `conf`'s SAE passwords ("": none changed), and its key file read again when
        `render` changed it (the router's: its guest line; the controller has it read again itself for every
        device key it writes. A satellite's: every device's line too, which its agent writes here).

        hostapd 2.10 puts each `SET sae_password` at the head of its list, as it does each line of a file it
        reads, and takes the first entry that fits a station: set again in the file's order, they are tried
        as the file's are, before every earlier one. An earlier password bound to a MAC that no new line
        binds is behind the new guest line, which fits every MAC: it no longer joins anyone (revoked). The
        list grows by a few entries per change until hostapd next starts.

        A station is not touched by the passwords: one already on keeps its connection until it joins again.
        But hostapd's RELOAD_WPA_PSK (the key file read again) puts off the air every station whose key is not
        in the file, and to hostapd 2.10 that is every WPA3 station too (its key came from SAE, not from a
        passphrase in the file): those rejoin by themselves, in about a second. A station amid joining would be
        put off the air too: the reload waits for it (`hostapd_ctrl.reload_keys`). So the key file is read again
        only when it changed: a device's WPA2 key issued works, and a revoked one stops, only from then on."""
        for line in conf.splitlines():
            if line.startswith(SAE_PASSWORD):  # straight to the socket: a password on no command line
                hostapd_ctrl.request(str(self.ctrl), f"SET sae_password {line.removeprefix(SAE_PASSWORD)}")
        if keys_changed:
            hostapd_ctrl.reload_keys(str(self.ctrl))

    def key_file(self) -> str:
        """The key file as it is now ("" without one)."""
        return private_files.read_text(str(self.psk_file))

    def write_conf(self, conf: str) -> None:
        self.conf.parent.mkdir(parents=True, exist_ok=True)
        self.conf.unlink(missing_ok=True)
        fd = os.open(self.conf, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)  # it holds the passphrases
        with os.fdopen(fd, "w") as f:
            f.write(conf)


def router_access_point() -> AccessPoint:
    """The router's own radio's hostapd, which systemd runs (homework-hostapd.service)."""
    return AccessPoint(
        RUN / "hostapd.conf",
        PSK_FILE,
        HOSTAPD_CTRL / BRIDGE,
        start=lambda: run("systemctl", "start", HOSTAPD_UNIT),
        stop=lambda: run("systemctl", "stop", HOSTAPD_UNIT),
    )


def refresh() -> str:
    """The router's radio follows its key file and the household's settings (`AccessPoint.follow`)."""
    if not (HOSTAPD_CTRL / BRIDGE).is_symlink():
        return "unchanged"  # no radio: the wired setup's configuration has no keys or settings to follow
    # The key file's guest line follows the settings' passphrase.
    return router_access_point().follow(lambda: render_hostapd_conf(wifi_settings()))


def main(argv: list[str]) -> int:
    if argv != ["refresh"]:
        print("usage: python -m homework_image.radio refresh", file=sys.stderr)
        return 2
    try:
        refresh()
    except (RadioError, OSError) as exc:
        print(f"homework-network: hostapd's configuration: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
