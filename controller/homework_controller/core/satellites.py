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
from typing import TYPE_CHECKING

from ..effects import AuthenticatorKick, Effect
from ..errors import ApiError, Conflict
from ..model import State, normalize_mac
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


def keys_for_satellite(radio: dict, keys: Iterable[wifi_keys.WifiKey]) -> dict:
    """What a satellite serves the router's network with: the radio's settings (`RADIO_FIELDS`) and every
    device's own key (mac, keyid, passphrase; hostapd's SAE password is made from the passphrase as the
    router's own is, `hostapd_conf.sae_password_lines`), in a fixed order, and `version`: a digest of all
    of it, which changes exactly when any of it does (a key issued or revoked, a setting changed), so that a
    satellite asks cheaply whether it has the latest (the web UI's ETag)."""
    content = {
        **{field: radio.get(field) for field in RADIO_FIELDS},
        "keys": sorted(
            ({"mac": k.mac, "keyid": k.keyid, "passphrase": k.passphrase} for k in keys), key=lambda k: k["mac"]
        ),
    }
    digest = hashlib.sha256(json.dumps(content, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    return {**content, "version": digest[:32]}


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
