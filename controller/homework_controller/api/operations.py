"""ws.v1's operations, each declared once, on the function that performs it (a plugged-in gate's, by the
gate: `concerns/gates`): its name, verb and arguments (the routes, `api.py`), whether it is a household's
decision that must be on the disk before the answer and what it answers (`perform`, which `ofapp` calls
under the controller's lock), and `openapi.yaml` (`python -m homework_controller.api.operations >
controller/openapi.yaml`; a test checks the file).

What an operation answers:
  result     what the router's method returns (a query, or a passphrase)
  device     the device's status after the change, with `applied` (the switch has it)
  dns-rules  the device's DNS rules after the change
  edge       the I/O edge's own (health, counters): `ofapp` answers it
  radio      the radio's settings file (`radio_settings.RadioSettingsFile`), under a lock of its own:
             `ofapp` answers it off the controller's lock (file I/O)
  satellite  what a satellite access point serves the network with: the radio's settings file (off the
             controller's lock) and every device's own key (under it), `Ws1Service.satellite_keys`
  station    a satellite's station event (`core/satellites.py`): its effects are carried out, then the
             station and where it is bound now
A decision's effects reach the switch before the answer; `perform` refuses to answer effects.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from ..concerns.gates import GATES, GateOperation
from ..core import satellites
from . import authority

if TYPE_CHECKING:
    from ..core.router import HomeRouter
    from ..effects import Effect
    from ..radio.radio_settings import RadioSettingsFile
    from .ws_service import Ws1Service

PREFIX = "/ws.v1/"


@dataclass(frozen=True)
class Operation:
    name: str  # the ws.v1 method: /ws.v1/<name>/<path args>
    verb: str  # GET (a query) or POST (a change)
    summary: str
    # The function that performs it (its name is the operation's id in openapi.yaml), called with what it
    # acts on (the router; the radio's settings file for answers "radio"; the host for "edge"), then the
    # path's arguments, the query's and the body, in that order and by those names (test_operations).
    call: Callable[..., object]
    path: tuple[str, ...] = ()  # path arguments, in order
    optional: bool = False  # the last path argument may be left out
    query: str | None = None  # an argument in the query string (?name=...)
    body: bool = False  # a JSON object in the request's body (at most api.BODY_LIMIT bytes), the last argument
    decision: bool = False  # the household's decision: on the disk before the answer
    answers: str = "result"

    @property
    def arities(self) -> tuple[int, ...]:
        return (len(self.path) - 1, len(self.path)) if self.optional else (len(self.path),)


F = TypeVar("F", bound=Callable[..., object])
_DECLARED: list[Operation] = []


def operation(name: str, verb: str, summary: str, **declared) -> Callable[[F], F]:
    """Declares the function below it as ws.v1's operation `name` (the rest: `Operation`'s fields)."""

    def declare(call: F) -> F:
        _DECLARED.append(Operation(name, verb, summary, call, **declared))
        return call

    return declare


@operation(
    "status",
    "GET",
    "every device (or one) with its state, lease and flags, and what each signed-in role may do to it now (may)",
    path=("mac",),
    optional=True,
)
def status(router: HomeRouter, mac: str | None = None) -> dict | list[dict]:
    if mac is not None:
        return with_may(router, router.status(mac))
    return [with_may(router, device) for device in router.status()]


@operation("dhcp-status", "GET", "the live leases")
def dhcp_status(router: HomeRouter) -> list[dict]:
    return router.dhcp_status()


@operation("blacklist-status", "GET", "the blacklisted devices' MACs")
def blacklist_status(router: HomeRouter) -> list[str]:
    return router.blacklist_status()


@operation("counters", "GET", "what was dropped, refused or failed, and the lock's longest hold", answers="edge")
def counters(host: Ws1Service) -> dict:
    return host.counters()


@operation(
    "counters-phase",
    "POST",
    "start a measuring phase: the lock's longest hold in `counters` (lock_phase_*) counts afresh from now",
    answers="edge",
)
def counters_phase(host: Ws1Service) -> dict:
    return host.start_counters_phase()


@operation("health", "GET", "the switch, the store, hwdb, the resolver, DHCP, QoS and the slice", answers="edge")
def health(host: Ws1Service) -> dict:
    return host.health()


@operation("permit", "POST", "let a device in (not a blacklisted one)", path=("mac",), decision=True, answers="device")
def permit(router: HomeRouter, mac: str) -> list[Effect]:
    return router.decisions.permit(mac)


@operation("deny", "POST", "keep a device out (not a blacklisted one)", path=("mac",), decision=True, answers="device")
def deny(router: HomeRouter, mac: str) -> list[Effect]:
    return router.decisions.deny(mac)


@operation(
    "whitelist", "POST", "admit a device, seen or not; lifts a block", path=("mac",), decision=True, answers="device"
)
def whitelist(router: HomeRouter, mac: str) -> list[Effect]:
    return router.decisions.whitelist(mac)


@operation(
    "blacklist",
    "POST",
    "block a device, seen or not, DHCP and EAPOL included",
    path=("mac",),
    decision=True,
    answers="device",
)
def blacklist(router: HomeRouter, mac: str) -> list[Effect]:
    return router.decisions.blacklist(mac)


@operation(
    "merge",
    "POST",
    "the newcomer at mac is the device into, back under a new MAC (its status' looks_like): that device's "
    "record, decisions, name, rules and controls move to mac",
    path=("mac", "into"),
    decision=True,
    answers="device",
)
def merge(router: HomeRouter, mac: str, into: str) -> list[Effect]:
    return router.joining.merge(mac, into)


@operation(
    "name",
    "POST",
    "what the household calls a device (empty clears it)",
    path=("mac",),
    query="name",
    decision=True,
    answers="device",
)
def rename(router: HomeRouter, mac: str, name: str) -> list[Effect]:
    return router.decisions.rename(mac, name)


@operation(
    "pause",
    "POST",
    "stop a device's traffic now, until resumed (kept across a restart)",
    path=("mac",),
    decision=True,
    answers="device",
)
def pause(router: HomeRouter, mac: str) -> list[Effect]:
    return router.decisions.pause(mac)


@operation(
    "pause-for",
    "POST",
    "stop a device's traffic now for a while: minutes ('30', '1 h') or until 'tomorrow' (the reset)",
    path=("mac", "duration"),
    decision=True,
    answers="device",
)
def pause_for(router: HomeRouter, mac: str, duration: str) -> list[Effect]:
    return router.decisions.pause_for(mac, duration)


@operation(
    "resume",
    "POST",
    "a paused device's traffic flows again (at bedtime: until tonight's window ends)",
    path=("mac",),
    decision=True,
    answers="device",
)
def resume(router: HomeRouter, mac: str, bedtime: bool = True) -> list[Effect]:
    return router.decisions.resume(mac, bedtime)


@operation(
    "schedule",
    "POST",
    "a device's weekly bedtime, e.g. 'sun-thu 21:30-07:00; fri,sat 23:00-08:00' (empty clears it)",
    path=("mac",),
    query="windows",
    decision=True,
    answers="device",
)
def set_schedule(router: HomeRouter, mac: str, windows: str) -> list[Effect]:
    return router.decisions.set_schedule(mac, windows)


@operation(
    "allowance",
    "POST",
    "a device's daily allowance in time online or data, e.g. '2 h', '500 MB' (empty removes it)",
    path=("mac",),
    query="amount",
    decision=True,
    answers="device",
)
def set_allowance(router: HomeRouter, mac: str, amount: str) -> list[Effect]:
    return router.decisions.set_allowance(mac, amount)


@operation(
    "bonus",
    "POST",
    "more of the device's allowance for today, e.g. '30 min', '500 MB', until the reset",
    path=("mac",),
    query="amount",
    decision=True,
    answers="device",
)
def grant_bonus(router: HomeRouter, mac: str, amount: str) -> list[Effect]:
    return router.decisions.grant_bonus(mac, amount)


@operation(
    "shared-allowance",
    "POST",
    "a daily allowance several devices use together (a person's), e.g. '2 h', '5 GB' (empty removes it)",
    path=("shared",),
    query="amount",
    decision=True,
    answers="shared-allowance",
)
def set_shared_allowance(router: HomeRouter, shared: str, amount: str) -> list[Effect]:
    return router.decisions.set_shared_allowance(shared, amount)


@operation(
    "share-allowance",
    "POST",
    "the devices that share the allowance, replacing those that did (devices the router has not seen are left out)",
    path=("shared",),
    query="devices",
    decision=True,
    answers="shared-allowance",
)
def share_allowance(router: HomeRouter, shared: str, devices: str) -> list[Effect]:
    return router.decisions.share_allowance(shared, devices)


@operation(
    "shared-bonus",
    "POST",
    "more of a shared allowance for today, e.g. '30 min', '500 MB', until the reset",
    path=("shared",),
    query="amount",
    decision=True,
    answers="shared-allowance",
)
def grant_shared_bonus(router: HomeRouter, shared: str, amount: str) -> list[Effect]:
    return router.decisions.grant_shared_bonus(shared, amount)


@operation(
    "shared-allowances",
    "GET",
    "every shared allowance (or one): its standing today and the devices sharing it",
    path=("shared",),
    optional=True,
)
def shared_allowances(router: HomeRouter, shared: str | None = None) -> list[dict] | dict:
    return router.shared_allowances(shared)


@operation("household-time", "GET", "the household's time zone and daily reset time")
def household_time(router: HomeRouter) -> dict:
    return router.controls.household_time()


@operation(
    "time-zone",
    "POST",
    "the household's time zone (IANA name, e.g. Europe/London): schedules and resets are read in it",
    query="zone",
    decision=True,
)
def set_time_zone(router: HomeRouter, zone: str) -> dict:
    return router.controls.set_time_zone(zone)


@operation(
    "reset-time",
    "POST",
    "when the household's day begins (HH:MM): allowances start again, 'until tomorrow' ends",
    query="at",
    decision=True,
)
def set_reset_time(router: HomeRouter, at: str) -> dict:
    return router.controls.set_reset_time(at)


@operation(
    "radio-settings",
    "GET",
    "the router's own radio's settings (network name, guest passphrase, country, band, channel), the lines of "
    "its file left out, each band's channels, and which settings restart the radio when changed (restarts)",
    answers="radio",
)
def radio_settings(radio: RadioSettingsFile) -> dict:
    return radio.radio_settings()


@operation(
    "set-radio-settings",
    "POST",
    "change the radio's settings (a JSON object of any of ssid, passphrase, country, band, channel, checked "
    "together): written to its file; the radio takes a new guest passphrase while it runs and restarts for any "
    "other change (every device joins again), as restarting and message say",
    body=True,
    answers="radio",
)
def set_radio_settings(radio: RadioSettingsFile, settings: dict) -> dict:
    return radio.set_radio_settings(settings)


@operation(
    "permit-dns",
    "POST",
    "allow a name for a device (lifts its block)",
    path=("mac", "domain"),
    decision=True,
    answers="dns-rules",
)
def permit_dns(router: HomeRouter, mac: str, domain: str) -> list[Effect]:
    return router.decisions.permit_dns(mac, domain)


@operation(
    "deny-dns",
    "POST",
    "block a name (and its subdomains) for a device",
    path=("mac", "domain"),
    decision=True,
    answers="dns-rules",
)
def deny_dns(router: HomeRouter, mac: str, domain: str) -> list[Effect]:
    return router.decisions.deny_dns(mac, domain)


@operation("dns-rules", "GET", "a device's DNS rules", path=("mac",))
def dns_rules_of(router: HomeRouter, mac: str) -> list[dict]:
    return router.decisions.dns_rules_of(mac)


@operation("apps", "GET", "every app with its priority and who chose it")
def app_priorities(router: HomeRouter) -> list[dict]:
    return router.app_priorities()


@operation(
    "portal",
    "GET",
    "what the captive portal tells the device at an address about itself: held back, why, until when, its code",
    path=("ip",),
)
def portal_of(router: HomeRouter, ip: str) -> dict:
    return router.portal_of(ip)


@operation(
    "route-owner",
    "POST",
    "give a route's prefix (a Thread mesh's, advertised by a border router) a new owner, the device at mac: "
    "another device's offer of it is refused from then on",
    path=("mac",),
    query="prefix",
    decision=True,
    answers="device",
)
def give_route(router: HomeRouter, mac: str, prefix: str) -> list[Effect]:
    return router.give_route(mac, prefix)


@operation(
    "wifi-key", "POST", "a new passphrase of the device's own, with its QR payload", path=("mac",), decision=True
)
def issue_wifi_key(router: HomeRouter, mac: str) -> dict:
    return router.decisions.issue_wifi_key(mac)


@operation("show-wifi-key", "GET", "the device's own passphrase again (to show its QR code)", path=("mac",))
def wifi_key_of(router: HomeRouter, mac: str) -> dict:
    return router.decisions.wifi_key_of(mac)


@operation("revoke-wifi-key", "POST", "the device joins with the shared passphrase again", path=("mac",), decision=True)
def revoke_wifi_key(router: HomeRouter, mac: str) -> dict:
    return router.decisions.revoke_wifi_key(mac)


@operation(
    "satellite-keys",
    "GET",
    "what a satellite access point serves the router's network with: the radio's network name, guest passphrase, "
    "country, band and channel, every device's own key (mac, keyid, passphrase), and version, which changes "
    "exactly when any of it does",
    answers="satellite",
)
def satellite_keys(host: Ws1Service) -> dict:
    return host.satellite_keys()


@operation(
    "satellite-station",
    "POST",
    "the satellite access point at ip (a permitted device bound to an access port) says a station joined it "
    "with the passphrase keyid (a device's own; '' for the guest passphrase) or left it: the station is at the "
    "satellite's port (a roam moves it there)",
    path=("ip", "event", "mac"),
    query="keyid",
    answers="station",
)
def satellite_station(router: HomeRouter, ip: str, event: str, mac: str, keyid: str) -> list[Effect]:
    return satellites.station(router, ip, event, mac, keyid)


@operation(
    "satellite-links",
    "POST",
    "the satellite access point at ip reports its stations' links (a JSON object {links: [{mac, rssi, retries, "
    "packets}]}, each since its previous report): logged as Links rows for the stations bound to its port only; "
    "answers how many, and which of them roamed to another access point without telling it (to forget)",
    path=("ip",),
    body=True,
    answers="links",
)
def satellite_links(router: HomeRouter, ip: str, report: dict) -> list[Effect]:
    return satellites.links(router, ip, report)


def _gate_operation(gate: str, declared: GateOperation) -> Operation:
    """A plugged-in gate's operation (`concerns/gates`) as ws.v1's: a decision on one device, which answers
    its status."""

    def call(router: HomeRouter, mac: str) -> list[Effect]:
        return router.decisions.change_gate(mac, gate, declared.change)

    call.__name__ = call.__qualname__ = declared.name.replace("-", "_")
    return Operation(declared.name, "POST", declared.summary, call, path=("mac",), decision=True, answers="device")


OPERATIONS = tuple(_DECLARED) + tuple(_gate_operation(gate.name, op) for gate in GATES for op in gate.operations)
BY_NAME = {op.name: op for op in OPERATIONS}
# The operations on one device (named by its MAC), which its status' `may` lists; not `status` itself.
DEVICE_VERBS = tuple(op.name for op in OPERATIONS if op.path[:1] == ("mac",) and op.name != "status")


def with_may(router: HomeRouter, device: dict) -> dict:
    """The device's status with what each signed-in role may do to it now (`authority.may`)."""
    return dict(device, may=authority.may(router, device, DEVICE_VERBS))


def perform(
    router: HomeRouter,
    op: Operation,
    args: list,
    apply: Callable[[list[Effect]], None],
    applied: bool,
    role: str = authority.OWNER,
) -> object:
    """Run one operation on the router (under the controller's lock) for a role: refused (`authority`,
    403, nothing changed) unless the role may; a decision's effects are carried out by `apply` before the
    answer is made. applied: whether the switch is there to take them."""
    authority.check(router, role, op, args)
    result = op.call(router, *args, **authority.keywords(role, op.name))
    if op.answers in ("device", "shared-allowance", "dns-rules", "station", "links"):
        if not isinstance(result, list):
            raise TypeError(f"{op.name} declares a change (answers={op.answers!r}) but its call made no effects")
        apply(result)
    if op.answers == "device":
        # Said plainly when it has not reached the switch yet: it will, when the switch reconnects.
        return dict(with_may(router, router.status(args[0])), applied=applied)
    if op.answers == "shared-allowance":
        return router.shared_allowances(args[0]) if op.name != "shared-allowance" or args[1].strip() else None
    if op.answers == "dns-rules":
        return router.decisions.dns_rules_of(args[0])
    if op.answers == "station":
        assert isinstance(result, list)  # its effects, carried out above
        return dict(satellites.station_answer(router, result, *args), applied=applied)
    if op.answers == "links":
        assert isinstance(result, list)
        return dict(satellites.links_answer(router, result, *args), applied=applied)
    if isinstance(result, list) and op.verb == "POST":
        raise TypeError(f"{op.name} changed state but declares no answer for it (answers={op.answers!r})")
    return result


def openapi_yaml() -> str:
    """The API's description, from the declarations above."""
    out = [
        "# Made by `python -m homework_controller.api.operations` from operations.py; do not edit by hand.",
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
        "event": "what happened to the station: joined or left",
        "keyid": "the passphrase's key id the station joined with ('' for the guest passphrase; ignored for left)",
    }
    for op in OPERATIONS:
        for count in op.arities:
            out.append(f"  {PREFIX}{'/'.join([op.name, *(f'{{{p}}}' for p in op.path[:count])])}:")
            out.append(f"    {op.verb.lower()}:")
            out.append(
                f"      operationId: {op.call.__name__}{'_one' if op.optional and count == len(op.path) else ''}"
            )
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
    "description: 'whom the caller acts for: owner, member, panel (the wall panel), device (the captive portal), "
    "isp or satellite (a satellite access point); checked against the authority table (authority.py); "
    "without it, the owner', "
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
        "satellite": "ssid, passphrase, country, band, channel, keys: [{mac, keyid, passphrase}], version",
        "station": "mac, event, port (the satellite's), access_port (the device's now), off_the_air, applied",
        "links": "logged: how many stations' links were logged (those bound to the satellite's port), "
        "roamed_away: the reported stations bound at another access point since (the satellite forgets them), applied",
        "result": "JSON",
    }[op.answers]


def _errors(op: Operation, path_args: int) -> list[tuple[int, str]]:
    errors = [(400, "bad arguments (a MAC, a domain, the role)"), (405, "wrong verb")]
    errors.append((403, "the role may not do this (to this device now): the reason, nothing changed"))
    if op.body:
        errors[0] = (400, "not a JSON object, or a setting refused: fields names each with why")
    if path_args and op.answers not in ("station", "links"):
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
    if op.name == "wifi-key":
        errors.append((501, "no Wi-Fi network configured"))
    if op.answers in ("radio", "satellite"):
        errors.append((501, "this router has no radio of its own"))
    if op.answers in ("station", "links"):
        errors.append((409, "the satellite cannot be placed: no device at ip, not permitted, or on no access port"))
    if op.body:
        errors.append((413, "the body is too large"))
    return sorted(errors)


if __name__ == "__main__":
    sys.stdout.write(openapi_yaml())
