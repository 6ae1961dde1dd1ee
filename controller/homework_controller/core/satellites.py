"""A satellite access point's channel to the router (issue 37, `docs/whole-home-wifi.md`), the decisions
(pure): what a satellite is given to serve the router's network (`keys_for_satellite`), which event it may
report for a station (`checked_event`), and where its stations are (`place`: its own cable's access port).

A satellite is a permitted device of the household, bound to an access port of the router's switch (its
cable). It serves the same network (name, guest passphrase, every device's own passphrase) and says which
station joined it with which key, and which left: `Joining.station_joined`/`station_left` with the
satellite's own port, never another (a satellite claims stations at its own port only). ws.v1's
`satellite-keys` and `satellite-station` (`api/operations.py`) are the satellite role's alone
(`api/authority.py`); the web UI calls them for a paired satellite's session, from its own address.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, TypeGuard

from ..effects import AuthenticatorKick, Effect, LogRow
from ..errors import ApiError, Conflict
from ..model import BadMac, State, normalize_mac
from ..policy import wifi_keys

if TYPE_CHECKING:
    from .router import HomeRouter

JOINED, LEFT = "joined", "left"
EVENTS = (JOINED, LEFT)
# hostapd's key id: at most 32 characters, no spaces ("" or "guest": the guest passphrase; "dev-<mac>": a
# device's own).
KEYID_RE = re.compile(r"[A-Za-z0-9_.:-]{0,32}")
# What of the radio's settings a satellite serves the same network with.
RADIO_FIELDS = ("ssid", "passphrase", "country", "band", "channel")


def keys_for_satellite(radio: dict, keys: Iterable[wifi_keys.WifiKey], denied: Iterable[str]) -> dict:
    """What a satellite serves the router's network with: the radio's settings (`RADIO_FIELDS`), every
    device's own key (mac, keyid, passphrase; hostapd's SAE password is made from the passphrase as the
    router's own is, `hostapd_conf.sae_password_lines`) and the MACs it lets complete no handshake
    (`denied`, as the router's own radio: `denied_macs`), in a fixed order, and `version`: a digest of all
    of it, which changes exactly when any of it does (a key issued or revoked, a setting changed, a device
    blacklisted or whitelisted), so that a satellite asks cheaply whether it has the latest (the web UI's
    ETag)."""
    content = {
        **{field: radio.get(field) for field in RADIO_FIELDS},
        "keys": sorted(
            ({"mac": k.mac, "keyid": k.keyid, "passphrase": k.passphrase} for k in keys), key=lambda k: k["mac"]
        ),
        "denied": sorted(denied),
    }
    digest = hashlib.sha256(json.dumps(content, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    return {**content, "version": digest[:32]}


def denied_macs(router: HomeRouter) -> list[str]:
    """The devices no access point lets complete a handshake: the blacklisted ones (the router's own radio
    is told each as it is decided, `AuthenticatorDeny`; a satellite reads them with its keys)."""
    return [device.mac for device in router.devices.values() if device.state is State.BLACKLISTED]


def checked_event(event: str, mac: str, keyid: str) -> tuple[str, str, str]:
    """A station's event as a satellite reports it, checked (400 otherwise): (event, mac, keyid)."""
    if event not in EVENTS:
        raise ApiError(f"a station's event is one of {', '.join(EVENTS)}, not {event[:20]!r}")
    mac = normalize_mac(mac)  # BadMac: 400
    if not KEYID_RE.fullmatch(keyid):
        raise ApiError("a key id is at most 32 of A-Z, a-z, 0-9, '_', '.', ':', '-' ('' for the guest passphrase)")
    return event, mac, keyid


def place(router: HomeRouter, ip: str) -> tuple[str, int]:
    """The satellite at the LAN address `ip`: its own device's MAC and the access port its cable is in, where
    its stations are. 409, with why, for a satellite the router cannot place (nothing is changed)."""
    device = router.registry.by_ip(ip)
    if device is None:
        raise Conflict(f"no device holds {ip[:45]}: a satellite reports from the address the router leased it")
    if device.state is not State.PERMITTED:
        raise Conflict(f"{device.label} is {device.state.value}: only a permitted device reports as a satellite")
    port = router.port_binding.port_of(device.mac)
    if port is None:
        raise Conflict(
            f"{device.label} is on no access port of its own: the router has one access port only, or the "
            "satellite has not taken its lease on its cable yet (it is bound at its next DHCP)"
        )
    return device.mac, port


def station(router: HomeRouter, ip: str, event: str, mac: str, keyid: str) -> list[Effect]:
    """The satellite at `ip` says a station joined it with `keyid` or left it: at the satellite's port. Checked
    (400) and placed (409) before anything changes."""
    event, mac, keyid = checked_event(event, mac, keyid)
    satellite, port = place(router, ip)
    if mac == satellite:
        raise ApiError(f"{mac} is the satellite itself, not a station of it")
    if event == JOINED:
        return router.joining.station_joined(mac, keyid, port)
    return router.joining.station_left(mac, port)


MAX_LINKS = 32  # stations' links in one report (ws.v1 takes a body of 4 KiB); a satellite with more sends several
RSSI_RANGE = range(-127, 1)  # dBm, as nl80211 reports a station's signal


def links(router: HomeRouter, ip: str, report: dict) -> list[Effect]:
    """The satellite at `ip` reports its stations' links ({"links": [{mac, rssi, retries, packets}]}, each since
    its previous report, as the router's own radio's `stations.link_rows`): a Links row for each station bound
    to the satellite's port, so the board shows its signal there. A station bound elsewhere (on the router's
    radio, or another satellite) is left out: a satellite speaks for its own stations only. Checked (400) and
    placed (409) before anything is logged."""
    entries = report.get("links")
    if not isinstance(entries, list) or len(entries) > MAX_LINKS:
        raise ApiError(f'send {{"links": [...]}} with at most {MAX_LINKS} stations\' {{mac, rssi, retries, packets}}')
    rows = [_checked_link(entry) for entry in entries]
    satellite, port = place(router, ip)
    return [LogRow("Links", row) for row in rows if row[0] != satellite and router.port_binding.port_of(row[0]) == port]


def links_answer(router: HomeRouter, effects: list[Effect], ip: str, report: dict) -> dict:
    """What `satellite-links` answers once its rows are logged: how many, and `roamed_away`, the reported
    stations the satellite is to forget (hostapd's `DEAUTHENTICATE <mac> tx=0`, `AuthenticatorForget`): each
    is bound at another access point, which authenticated it after this one (it roamed without telling this
    one, whose stale association would make its next visit here wait, `PortBinding.left_unheard`)."""
    _, port = place(router, ip)
    reported = {_checked_link(entry)[0] for entry in report["links"]}
    return {"logged": len(effects), "roamed_away": router.port_binding.stale_at(port, reported)}


def _checked_link(entry: object) -> tuple[str, int, int, int]:
    if not isinstance(entry, dict) or not isinstance(entry.get("mac"), str):
        raise ApiError("a station's link is an object {mac, rssi, retries, packets}")
    rssi, retries, packets = (entry.get(field) for field in ("rssi", "retries", "packets"))
    if not (_whole(rssi) and _whole(retries) and _whole(packets)):
        raise ApiError("a station's rssi, retries and packets are whole numbers")
    if rssi not in RSSI_RANGE or not (0 <= retries < 2**32 and 0 <= packets < 2**32):
        raise ApiError("rssi is -127..0 dBm; retries and packets 0..2^32 since the last report")
    try:
        return normalize_mac(entry["mac"]), rssi, retries, packets
    except BadMac as exc:
        raise ApiError(str(exc)) from None


def _whole(n: object) -> TypeGuard[int]:
    return isinstance(n, int) and not isinstance(n, bool)


def station_answer(router: HomeRouter, effects: list[Effect], ip: str, event: str, mac: str, keyid: str) -> dict:
    """What `satellite-station` answers once its `effects` are carried out: the station, the satellite's port,
    the access port the device is bound to now (None: not bound, or not a device the router knows), and
    `off_the_air`: the satellite is to put the station off its air (a copy of a device that has its own
    passphrase, with another key: the router's radio, where the device itself may be, is not told)."""
    _, port = place(router, ip)
    mac = normalize_mac(mac)
    kicked = AuthenticatorKick(mac, port) in effects
    return {
        "mac": mac,
        "event": event,
        "port": port,
        "access_port": router.port_binding.port_of(mac),
        "off_the_air": kicked,
    }
