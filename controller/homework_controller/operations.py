"""ws.v1's operations, each declared once: its name, verb and arguments (the routes, `api.py`),
whether it is a household's decision that must be on the disk before the answer and what it
answers (`perform`, which `ofapp` calls under the controller's lock), and `openapi.yaml`
(`python -m homework_controller.operations > controller/openapi.yaml`; a test checks the file).

What an operation answers:
  result     what the router's method returns (a query, or a passphrase)
  device     the device's status after the change, with `applied` (the switch has it)
  dns-rules  the device's DNS rules after the change
  edge       the I/O edge's own (health, counters): `ofapp` answers it
  radio      the radio's settings file (`radio_settings.RadioSettingsFile`), under a lock of its own:
             `ofapp` answers it off the controller's lock (file I/O)
A decision's effects reach the switch before the answer; `perform` refuses to answer effects.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass

from . import authority

PREFIX = "/ws.v1/"


@dataclass(frozen=True)
class Operation:
    name: str  # the ws.v1 method: /ws.v1/<name>/<path args>
    verb: str  # GET (a query) or POST (a change)
    call: str  # HomeRouter's method (or the edge's, for answers "edge")
    summary: str
    path: tuple[str, ...] = ()  # path arguments, in order
    optional: bool = False  # the last path argument may be left out
    query: str | None = None  # an argument in the query string (?name=...)
    body: bool = False  # a JSON object in the request's body (at most api.BODY_LIMIT bytes), the last argument
    decision: bool = False  # the household's decision: on the disk before the answer
    answers: str = "result"

    @property
    def arities(self) -> tuple[int, ...]:
        return (len(self.path) - 1, len(self.path)) if self.optional else (len(self.path),)


OPERATIONS = (
    Operation("status", "GET", "status", "every device (or one) with its state, lease and flags", ("mac",), True),
    Operation("dhcp-status", "GET", "dhcp_status", "the live leases"),
    Operation("blacklist-status", "GET", "blacklist_status", "the blacklisted devices' MACs"),
    Operation(
        "counters",
        "GET",
        "counters",
        "what was dropped, refused or failed, and the lock's longest hold",
        answers="edge",
    ),
    Operation(
        "health", "GET", "health", "the switch, the store, hwdb, the resolver, DHCP, QoS and the slice", answers="edge"
    ),
    Operation(
        "permit", "POST", "permit", "let a device in (not a blacklisted one)", ("mac",), decision=True, answers="device"
    ),
    Operation(
        "deny", "POST", "deny", "keep a device out (not a blacklisted one)", ("mac",), decision=True, answers="device"
    ),
    Operation(
        "whitelist",
        "POST",
        "whitelist",
        "admit a device, seen or not; lifts a block",
        ("mac",),
        decision=True,
        answers="device",
    ),
    Operation(
        "blacklist",
        "POST",
        "blacklist",
        "block a device, seen or not, DHCP and EAPOL included",
        ("mac",),
        decision=True,
        answers="device",
    ),
    Operation(
        "merge",
        "POST",
        "merge",
        "the newcomer at mac is the device into, back under a new MAC (its status' looks_like): that device's "
        "record, decisions, name, rules and controls move to mac",
        ("mac", "into"),
        decision=True,
        answers="device",
    ),
    Operation(
        "name",
        "POST",
        "rename",
        "what the household calls a device (empty clears it)",
        ("mac",),
        query="name",
        decision=True,
        answers="device",
    ),
    Operation(
        "pause",
        "POST",
        "pause",
        "stop a device's traffic now, until resumed (kept across a restart)",
        ("mac",),
        decision=True,
        answers="device",
    ),
    Operation(
        "pause-for",
        "POST",
        "pause_for",
        "stop a device's traffic now for a while: minutes ('30', '1 h') or until 'tomorrow' (the reset)",
        ("mac", "duration"),
        decision=True,
        answers="device",
    ),
    Operation(
        "resume",
        "POST",
        "resume",
        "a paused device's traffic flows again (at bedtime: until tonight's window ends)",
        ("mac",),
        decision=True,
        answers="device",
    ),
    Operation(
        "schedule",
        "POST",
        "set_schedule",
        "a device's weekly bedtime, e.g. 'sun-thu 21:30-07:00; fri,sat 23:00-08:00' (empty clears it)",
        ("mac",),
        query="windows",
        decision=True,
        answers="device",
    ),
    Operation(
        "allowance",
        "POST",
        "set_allowance",
        "a device's daily allowance in time online or data, e.g. '2 h', '500 MB' (empty removes it)",
        ("mac",),
        query="amount",
        decision=True,
        answers="device",
    ),
    Operation(
        "bonus",
        "POST",
        "grant_bonus",
        "more of the device's allowance for today, e.g. '30 min', '500 MB', until the reset",
        ("mac",),
        query="amount",
        decision=True,
        answers="device",
    ),
    Operation(
        "shared-allowance",
        "POST",
        "set_shared_allowance",
        "a daily allowance several devices use together (a person's), e.g. '2 h', '5 GB' (empty removes it)",
        ("shared",),
        query="amount",
        decision=True,
        answers="shared-allowance",
    ),
    Operation(
        "share-allowance",
        "POST",
        "share_allowance",
        "the devices that share the allowance, replacing those that did (devices the router has not seen are left out)",
        ("shared",),
        query="devices",
        decision=True,
        answers="shared-allowance",
    ),
    Operation(
        "shared-bonus",
        "POST",
        "grant_shared_bonus",
        "more of a shared allowance for today, e.g. '30 min', '500 MB', until the reset",
        ("shared",),
        query="amount",
        decision=True,
        answers="shared-allowance",
    ),
    Operation(
        "shared-allowances",
        "GET",
        "shared_allowances",
        "every shared allowance (or one): its standing today and the devices sharing it",
        ("shared",),
        True,
    ),
    Operation("household-time", "GET", "household_time", "the household's time zone and daily reset time"),
    Operation(
        "time-zone",
        "POST",
        "set_time_zone",
        "the household's time zone (IANA name, e.g. Europe/London): schedules and resets are read in it",
        query="zone",
        decision=True,
    ),
    Operation(
        "reset-time",
        "POST",
        "set_reset_time",
        "when the household's day begins (HH:MM): allowances start again, 'until tomorrow' ends",
        query="at",
        decision=True,
    ),
    Operation(
        "radio-settings",
        "GET",
        "radio_settings",
        "the router's own radio's settings (network name, guest passphrase, country, band, channel) and the "
        "lines of its file left out",
        answers="radio",
    ),
    Operation(
        "set-radio-settings",
        "POST",
        "set_radio_settings",
        "change the radio's settings (a JSON object of any of ssid, passphrase, country, band, channel, checked "
        "together): written to its file, and the radio restarts with them (every device joins again)",
        body=True,
        answers="radio",
    ),
    Operation(
        "permit-dns",
        "POST",
        "permit_dns",
        "allow a name for a device (lifts its block)",
        ("mac", "domain"),
        decision=True,
        answers="dns-rules",
    ),
    Operation(
        "deny-dns",
        "POST",
        "deny_dns",
        "block a name (and its subdomains) for a device",
        ("mac", "domain"),
        decision=True,
        answers="dns-rules",
    ),
    Operation("dns-rules", "GET", "dns_rules_of", "a device's DNS rules", ("mac",)),
    Operation("apps", "GET", "app_priorities", "every app with its priority and who chose it"),
    Operation(
        "portal",
        "GET",
        "portal_of",
        "what the captive portal tells the device at an address about itself: held back, why, until when, its code",
        ("ip",),
    ),
    Operation(
        "route-owner",
        "POST",
        "give_route",
        "give a route's prefix (a Thread mesh's, advertised by a border router) a new owner, the device at mac: "
        "another device's offer of it is refused from then on",
        ("mac",),
        query="prefix",
        decision=True,
        answers="device",
    ),
    Operation(
        "wifi-key",
        "POST",
        "issue_wifi_key",
        "a new passphrase of the device's own, with its QR payload",
        ("mac",),
        decision=True,
    ),
    Operation(
        "show-wifi-key", "GET", "wifi_key_of", "the device's own passphrase again (to show its QR code)", ("mac",)
    ),
    Operation(
        "revoke-wifi-key",
        "POST",
        "revoke_wifi_key",
        "the device joins with the shared passphrase again",
        ("mac",),
        decision=True,
    ),
)

BY_NAME = {op.name: op for op in OPERATIONS}
BY_CALL = {op.call: op for op in OPERATIONS}


def perform(
    router, op: Operation, args: list, apply: Callable[[list], None], applied: bool, role: str = authority.OWNER
):
    """Run one operation on the router (under the controller's lock) for a role: refused (`authority`,
    403, nothing changed) unless the role may; a decision's effects are carried out by `apply` before the
    answer is made. applied: whether the switch is there to take them."""
    authority.check(router, role, op, args)
    result = getattr(router, op.call)(*args, **authority.keywords(role, op.name))
    if op.answers == "device":
        apply(result)
        # Said plainly when it has not reached the switch yet: it will, when the switch reconnects.
        return dict(router.status(args[0]), applied=applied)
    if op.answers == "shared-allowance":
        apply(result)
        return router.shared_allowances(args[0]) if op.call != "set_shared_allowance" or args[1].strip() else None
    if op.answers == "dns-rules":
        apply(result)
        return router.dns_rules_of(args[0])
    if isinstance(result, list) and op.verb == "POST":
        raise TypeError(f"{op.name} changed state but declares no answer for it (answers={op.answers!r})")
    return result


def openapi_yaml() -> str:
    """The API's description, from the declarations above."""
    out = [
        "# Made by `python -m homework_controller.operations` from operations.py; do not edit by hand.",
        "openapi: 3.0.3",
        "info:",
        "  title: ws.v1, the Homework controller's control API (loopback only)",
        "  version: '1'",
        "paths:",
    ]
    params = {
        "mac": "the device's MAC address",
        "into": "the MAC of the decided device the newcomer is",
        "domain": "a DNS name (IDNA or Unicode)",
        "ip": "a device's leased address (the web UI passes a request's source address)",
        "name": "the name; empty clears it",
        "shared": "a shared allowance's name: 1-40 of a-z, 0-9, '.', '_', '-' (the web UI's is person-<account>)",
        "duration": "minutes ('30', '30 min', '1 h') or 'tomorrow'",
        "windows": "the schedule's windows, DAYS HH:MM-HH:MM separated by ';' (empty clears it)",
        "amount": "minutes or data ('120 min', '2 h', '500 MB', '5 GB'); empty removes an allowance",
        "zone": "an IANA time zone name",
        "at": "a time of day, HH:MM",
        "devices": "MAC addresses, comma-separated (empty: none)",
        "prefix": "an IPv6 prefix, unique local (fc00::/7), /48 to /64",
    }
    for op in OPERATIONS:
        for count in op.arities:
            out.append(f"  {PREFIX}{'/'.join([op.name, *(f'{{{p}}}' for p in op.path[:count])])}:")
            out.append(f"    {op.verb.lower()}:")
            out.append(f"      operationId: {op.call}{'_one' if op.optional and count == len(op.path) else ''}")
            out.append(f"      summary: {op.summary}")
            if op.decision:
                out.append("      description: a decision; on the disk before the answer")
            names = [*op.path[:count], *([op.query] if op.query else [])]
            out.append("      parameters:")
            out.append(f"        - {{name: {authority.HEADER}, in: header, required: false, {ROLE_PARAMETER}}}")
            for p in names:
                where = "query" if p == op.query else "path"
                about = f"description: {params[p]}, schema: {{type: string}}"
                out.append(f"        - {{name: {p}, in: {where}, required: true, {about}}}")
            if op.body:
                out.append("      requestBody: {required: true, content: {application/json: {schema: {type: object}}}}")
            out.append("      responses:")
            out.append(f"        '200': {{description: \"{_answer_text(op)}\"}}")
            for status, why in _errors(op, count):
                out.append(f"        '{status}': {{description: \"{why}\"}}")
    return "\n".join(out) + "\n"


ROLE_PARAMETER = (
    "description: 'whom the caller acts for: owner, member, panel (the wall panel), device (the captive portal) "
    "or isp; checked against the authority table (authority.py); without it, the owner', "
    f"schema: {{type: string, enum: [{', '.join(authority.ROLES)}]}}"
)


def _answer_text(op: Operation) -> str:
    return {
        "device": "the device's status, with applied (the switch has the change)",
        "dns-rules": "the device's DNS rules",
        "shared-allowance": "the shared allowance's standing and devices (null once removed)",
        "edge": "a JSON object",
        "radio": "the settings (ssid, passphrase, country, band, channel), problems: the file's lines left out "
        "(and to a GET, the channels of each band and of the world domain)",
        "result": "JSON",
    }[op.answers]


def _errors(op: Operation, path_args: int) -> list[tuple[int, str]]:
    errors = [(400, "bad arguments (a MAC, a domain, the role)"), (405, "wrong verb")]
    errors.append((403, "the role may not do this (to this device now): the reason, nothing changed"))
    if op.body:
        errors[0] = (400, "not a JSON object, or a setting refused: fields names each with why")
    if path_args:
        errors.append((404, "no such device (or passphrase, or shared allowance)"))
    if op.name in ("permit", "deny"):
        errors.append((409, "the device is blacklisted: only whitelist lifts that"))
    if op.name == "merge":
        errors.append(
            (
                409,
                "mac is decided already, or into is not the device offered for it (looks_like): online now, "
                "a newcomer too, denied or blacklisted, with its own passphrase, or its DHCP client differs",
            )
        )
    if op.call in ("issue_wifi_key",):
        errors.append((501, "no Wi-Fi network configured"))
    if op.answers == "radio":
        errors.append((501, "this router has no radio of its own"))
    if op.body:
        errors.append((413, "the body is too large"))
    return sorted(errors)


if __name__ == "__main__":
    sys.stdout.write(openapi_yaml())
