"""Who may do what, decided in one place (issue 39): every ws.v1 operation, for each role, and the target's
states in which that role is refused it, as data. Pure: `operations.perform` (and `Ws1Service.call` for the
edge's and the radio's operations) asks `refusal` before anything runs, so no caller can skip it, and a
refusal (`Forbidden`, 403, with its reason) changes nothing.

Roles (ws.v1's `X-Homework-Role` header; the web UI sends the signed-in account's, or `device` for the
captive portal; a request without one is the router's own administrator on loopback, the owner):
  owner    the household's owner account
  member   a member account: the web UI lets a member act only on their own devices (it keeps who owns
           which device), so the controller sees a member's calls for those devices alone
  panel    the wall panel (the web UI's kiosk session): in everyone's reach, guests included
  device   a device acting on itself through the captive portal (held back or not): the web UI names it
           by the request's source address, never by anything the device sends
  isp      the ISP side: its slicer speaks OpenFlow to the household's slice link only, and reaches no
           ws.v1 operation (listed so that the generated test proves it)
  satellite a satellite access point (the web UI's satellite session, from the satellite's own address):
           it reads the keys it serves the household's network with and reports its stations, and may
           do nothing else (`docs/whole-home-wifi.md`)

A target's states (`target_states`): the device's state (pending | permitted | denied | blacklisted),
whether something holds it now (paused | bedtime | allowance, the hold `HouseholdControls` reports), and
for a merge, the device merged into (`into`) and whether the router offered it for that newcomer
(offered). What every role is refused alike (a blacklisted device is permitted by nobody until it is
whitelisted; a merge goes only into the device offered, never a blacklisted or denied one) is the
device's own rule, kept where that state is decided (409, `decisions.py`, `joining.py`).
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache

from ..concerns.gates import GATES
from ..errors import ApiError
from ..model import normalize_mac

OWNER, MEMBER, PANEL, DEVICE, ISP, SATELLITE = "owner", "member", "panel", "device", "isp", "satellite"
ROLES = (OWNER, MEMBER, PANEL, DEVICE, ISP, SATELLITE)
ROLE_NAMES = {
    OWNER: "the owner",
    MEMBER: "a member",
    PANEL: "the wall panel",
    DEVICE: "a device",
    ISP: "the ISP side",
    SATELLITE: "a satellite access point",
}
HEADER = "X-Homework-Role"

PENDING, PERMITTED, DENIED, BLACKLISTED = "pending", "permitted", "denied", "blacklisted"
PAUSED, BEDTIME, ALLOWANCE, OFFERED = "paused", "bedtime", "allowance", "offered"
STATES = (PENDING, PERMITTED, DENIED, BLACKLISTED, PAUSED, BEDTIME, ALLOWANCE, OFFERED)
MERGE = "merge"


class Forbidden(ApiError):
    """The role may not do this (to a target in this state): nothing was changed."""

    status = 403


ALWAYS: Mapping[str, str] = {}  # allowed whatever the target's state
SIGNED_IN = (OWNER, MEMBER, PANEL)


def _granted(roles: tuple[str, ...], **refused_in: Mapping[str, str]) -> dict[str, Mapping[str, str]]:
    """Each of `roles` may; refused_in: a role -> {a target's state: what it may not do then}."""
    return {role: refused_in.get(role, ALWAYS) for role in roles}


# What each operation does, for a refusal's reason: "<the role> may not <this>".
WHAT = {
    "status": "see the devices",
    "dhcp-status": "see the leases",
    "blacklist-status": "see the blocked devices",
    "counters": "see the router's counters",
    "counters-phase": "start a measuring phase of the router's counters",
    "health": "see the router's health",
    "permit": "let a device in",
    "deny": "keep a device out",
    "whitelist": "lift a blacklist or admit a device unasked (the owner's whitelist)",
    "blacklist": "block a device",
    "merge": "take a newcomer for a device the household knows",
    "name": "name a device",
    "pause": "pause a device",
    "pause-for": "pause a device",
    "resume": "resume a device",
    "schedule": "change a device's bedtime (the schedule is the owner's)",
    "allowance": "change a device's allowance",
    "bonus": "grant a device more of its allowance",
    "shared-allowance": "change a shared allowance",
    "share-allowance": "say which devices share an allowance",
    "shared-bonus": "grant more of a shared allowance",
    "shared-allowances": "see the shared allowances",
    "household-time": "see the household's time settings",
    "time-zone": "change the household's time zone",
    "reset-time": "change when the household's day begins",
    "radio-settings": "see the radio's settings (its guest passphrase)",
    "set-radio-settings": "change the radio's settings",
    "permit-dns": "change a device's DNS rules",
    "deny-dns": "change a device's DNS rules",
    "dns-rules": "see a device's DNS rules",
    "apps": "see the apps' priorities",
    "portal": "read the captive portal's page of a device",
    "wifi-key": "make a device's own Wi-Fi passphrase",
    "show-wifi-key": "see a device's own Wi-Fi passphrase",
    "revoke-wifi-key": "revoke a device's own Wi-Fi passphrase",
    "route-owner": "give an advertised route a new owner",
    "satellite-keys": "read the Wi-Fi keys a satellite access point serves the network with",
    "satellite-station": "say which station joined or left a satellite access point",
    "satellite-links": "report the links of a satellite access point's stations",
    # The plugged-in gates' operations say theirs (`concerns/gates`).
    **{op.name: op.what for gate in GATES for op in gate.operations},
}

NOT_A_BLOCK = {BLACKLISTED: "lift a blacklist (only the owner's whitelist does)"}

# operation -> role -> the target's states in which that role is refused it (with what it may not do).
# A role not listed may not perform the operation at all.
TABLE: dict[str, dict[str, Mapping[str, str]]] = {
    "status": _granted(SIGNED_IN),
    "dhcp-status": _granted(SIGNED_IN),
    "blacklist-status": _granted(SIGNED_IN),
    "counters": _granted(SIGNED_IN),
    "health": _granted(SIGNED_IN),
    "apps": _granted(SIGNED_IN),
    "household-time": _granted(SIGNED_IN),
    # Admission at the wall panel: a newcomer is let in or kept out where the household stands.
    "permit": _granted((OWNER, PANEL), panel=NOT_A_BLOCK),
    "deny": _granted((OWNER, PANEL), panel=NOT_A_BLOCK),
    "merge": _granted((OWNER, PANEL)),
    "whitelist": _granted((OWNER,)),
    "blacklist": _granted((OWNER,)),
    # Pausing is refusing for now: whoever may deny may pause, and resume a pause; a bedtime is the owner's.
    "pause": _granted((OWNER, PANEL)),
    "pause-for": _granted((OWNER, PANEL)),
    "resume": _granted((OWNER, PANEL), panel={BEDTIME: "lift a bedtime (the schedule is the owner's)"}),
    "schedule": _granted((OWNER,)),
    "allowance": _granted((OWNER,)),
    "bonus": _granted((OWNER,)),
    "shared-allowance": _granted((OWNER,)),
    "share-allowance": _granted((OWNER,)),
    "shared-bonus": _granted((OWNER,)),
    "shared-allowances": _granted((OWNER,)),
    "time-zone": _granted((OWNER,)),
    "counters-phase": _granted((OWNER,)),  # the router's administrator (make bench): it resets what others read
    "reset-time": _granted((OWNER,)),
    "radio-settings": _granted((OWNER,)),
    "set-radio-settings": _granted((OWNER,)),
    "permit-dns": _granted((OWNER,)),
    "deny-dns": _granted((OWNER,)),
    "route-owner": _granted((OWNER,)),
    # A member's own devices (the web UI checks which are theirs): their name, rules and passphrase.
    "name": _granted((OWNER, MEMBER)),
    "dns-rules": _granted((OWNER, MEMBER)),
    "wifi-key": _granted((OWNER, MEMBER)),
    "show-wifi-key": _granted((OWNER, MEMBER)),
    "revoke-wifi-key": _granted((OWNER, MEMBER)),
    # A device reads what the portal says about itself (the web UI asks with the request's source address).
    "portal": _granted((OWNER, DEVICE)),
    # A satellite access point (the web UI's satellite session, from its own address): the keys it serves and
    # its stations' joins and leaves, at its own port; nobody else, the owner included (no household verb
    # needs them, and a satellite's word about a station is a satellite's to give).
    "satellite-keys": _granted((SATELLITE,)),
    "satellite-station": _granted((SATELLITE,)),
    "satellite-links": _granted((SATELLITE,)),
    # The plugged-in gates' operations, granted to the roles each declares (`concerns/gates`).
    **{op.name: _granted(op.roles) for gate in GATES for op in gate.operations},
}

# A keyword an operation's call takes from what the role may do besides: the wall panel's resume lifts
# a pause, never a bedtime, because the panel may not change the schedule.
KEYWORDS = {"resume": {"bedtime": "schedule"}}


def role_of(header: str | None) -> str:
    """The role a ws.v1 request acts for: its header's (an unknown one is bad input), or the owner's."""
    if header is None:
        return OWNER
    role = header.strip().lower()
    if role not in ROLES:
        raise ApiError(f"{HEADER} must be one of {', '.join(ROLES)}, not {header[:40]!r}")
    return role


def refusal(role: str, operation: str, states: frozenset[str]) -> str | None:
    """Why `role` may not perform `operation` on a target in `states` (None: it may)."""
    granted = TABLE[operation].get(role)
    if granted is None:
        return f"{ROLE_NAMES[role]} may not {WHAT[operation]}"
    for state, what in granted.items():
        if state in states:
            return f"{ROLE_NAMES[role]} may not {what}"
    return None


def keywords(role: str, operation: str) -> dict[str, bool]:
    """The keyword arguments the role's call of the operation takes (`KEYWORDS`)."""
    return {kw: refusal(role, needs, frozenset()) is None for kw, needs in KEYWORDS.get(operation, {}).items()}


def check(router, role: str, op, args: list) -> None:
    """Raise `Forbidden` with the reason if the role may not perform `op` with `args` on the router now."""
    why = refusal(role, op.name, target_states(router, op, args))
    if why is not None:
        raise Forbidden(why)


def target_states(router, op, args: list) -> frozenset[str]:
    """The states of the device an operation acts on (none for one that names no device, or one the router
    has not seen)."""
    if not op.path or op.path[0] not in ("mac", "ip") or not args:
        return frozenset()
    if op.path[0] == "ip":
        device = router.registry.by_ip(str(args[0]))
        return device_states(router, device.mac) if device is not None else frozenset()
    mac = normalize_mac(str(args[0]))
    if op.name != MERGE:
        return device_states(router, mac)
    into = normalize_mac(str(args[1]))
    offered = (router.status(mac).get("looks_like") or {}).get("mac") if mac in router.devices else None
    return device_states(router, into) | ({OFFERED} if offered == into else set())


def device_states(router, mac: str) -> frozenset[str]:
    device = router.devices.get(mac)
    if device is None:
        return frozenset()
    return states_of(device.state.value, router.controls.status_of(mac)["paused_why"])


def states_of(state: str, hold: str | None) -> frozenset[str]:
    """A device's states: its state and what holds it now (its status' `state` and `paused_why`)."""
    return frozenset({state, *([hold] if hold else [])})


@cache
def allowed(role: str, states: frozenset[str], verbs: tuple[str, ...]) -> tuple[str, ...]:
    """Which of `verbs` the role may perform on a target in `states`: those `refusal` lets through, so what
    a status offers and what `check` lets through cannot disagree."""
    return tuple(verb for verb in verbs if refusal(role, verb, states) is None)


def may(router, status: dict, verbs: tuple[str, ...]) -> dict[str, list[str]]:
    """What each signed-in role may do to the device of `status` now, of the operations on a device (`verbs`):
    ws.v1's status carries it, so the web UI shows the buttons the table allows instead of restating it.
    A merge needs the device merged into: a newcomer may be merged into the device offered for it
    (`looks_like`), as that device's states allow, and into nothing else. The device's own rules (a
    blacklisted device is permitted by nobody; only a permitted one gets a passphrase) are its state's, for
    every role alike: they are not in `may`."""
    states = states_of(status["state"], status.get("paused_why"))
    offered = (status.get("looks_like") or {}).get("mac")
    into = device_states(router, offered) | {OFFERED} if offered else None
    answer = {}
    for role in SIGNED_IN:
        answer[role] = [verb for verb in allowed(role, states, verbs) if verb != MERGE]
        if into is not None and MERGE in allowed(role, into, verbs):
            answer[role].append(MERGE)
    return answer
