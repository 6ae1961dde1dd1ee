"""Devices: the list and one device's detail, the household's decisions (permit, deny,
blacklist, whitelist, merging a newcomer into the device it is), pausing and resuming, internet only,
names, owners and DNS blocks.

Who may make each decision is the controller's (homework_controller/api/authority.py): a route that only
asks the controller is open to every signed-in role, the controller is told whose session asks
(`controller.request_role`) and its refusal (403, with the reason) is passed on. What the web UI alone
knows stays here: which member owns which device (`own_device`), and who sets a device's owner."""

from __future__ import annotations

import re

from flask import Blueprint

from ..accounts import printable_name
from ..controller import ControllerDownError
from ..errors import ApiError, ask_controller
from ..security import SIGNED_IN, access
from ..services import services
from .bedtime import reshare
from .common import account_call, body, changed, mac_of, own_device, seen

bp = Blueprint("devices", __name__)

DOMAIN_RE = re.compile(r"^(?=.{1,253}$)([a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?\.)*[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
# The controller's word: a blacklist is lifted only by whitelist.
BLACKLISTED = {409: ("blacklisted", None)}
DNS_UNAVAILABLE = {501: ("dns-unavailable", "This router cannot block names for a device yet.")}
PAUSE_UNAVAILABLE = {501: ("pause-unavailable", "This router cannot pause a device.")}
CANNOT_MERGE = {409: ("cannot-merge", None)}
ROUTES_UNAVAILABLE = {501: ("routes-unavailable", "This router does not run IPv6: no device offers routes.")}


@bp.get("/api/devices")
@access(*SIGNED_IN)
def list_devices():
    hub = services().hub
    if hub.refresh_devices() is None:
        raise ControllerDownError("status")
    return {"devices": seen(hub.devices()), "health": hub.health}


@bp.get("/api/devices/<mac>")
@access(*SIGNED_IN)
def device_detail(mac):
    svc, mac = services(), mac_of(mac)
    svc.hub.update_device(svc.controller.device(mac))
    device = next(d for d in seen(svc.hub.devices()) if d["mac"] == mac)
    if "dns-rules" in device["may"]:
        device["dns"] = _dns_rules(mac)
    return {"device": device}


@bp.post("/api/devices/<mac>/permit")
@access(*SIGNED_IN)
def device_permit(mac):
    return changed(services().controller.decide, "permit", mac_of(mac), meaning=BLACKLISTED)


@bp.post("/api/devices/<mac>/deny")
@access(*SIGNED_IN)
def device_deny(mac):
    return changed(services().controller.decide, "deny", mac_of(mac), meaning=BLACKLISTED)


@bp.post("/api/devices/<mac>/blacklist")
@access(*SIGNED_IN)
def device_blacklist(mac):
    return changed(services().controller.decide, "blacklist", mac_of(mac), meaning=BLACKLISTED)


@bp.post("/api/devices/<mac>/whitelist")
@access(*SIGNED_IN)
def device_whitelist(mac):
    return changed(services().controller.decide, "whitelist", mac_of(mac), meaning=BLACKLISTED)


@bp.post("/api/devices/<mac>/merge")
@access(*SIGNED_IN)
def device_merge(mac):
    """The newcomer is the device the router says it looks like (`looks_like`), back under a new MAC:
    it is let in as that device. Whoever may let a newcomer in may say so (owner and wall panel), and
    only into the device offered (the controller refuses any other, and a denied or blocked one)."""
    into = mac_of(str(body().get("into", "")))
    return changed(services().controller.merge, mac_of(mac), into, meaning=CANNOT_MERGE, instead_of=into)


# Pausing is refusing for now: whoever may deny a device may pause it (owner and wall panel); the
# wall panel's resume lifts a pause, never a bedtime (the controller's table).


@bp.post("/api/devices/<mac>/pause")
@access(*SIGNED_IN)
def device_pause(mac):
    return changed(services().controller.pause, mac_of(mac), meaning=PAUSE_UNAVAILABLE)


@bp.post("/api/devices/<mac>/internet-only")
@access(*SIGNED_IN)
def device_internet_only(mac):
    """{"on": true | false}: the device reaches the internet and the router only, or other devices too."""
    on = body().get("on")
    if not isinstance(on, bool):
        raise ApiError(400, "on must be true or false")
    return changed(services().controller.set_internet_only, mac_of(mac), on)


@bp.post("/api/devices/<mac>/resume")
@access(*SIGNED_IN)
def device_resume(mac):
    return changed(services().controller.resume, mac_of(mac), meaning=PAUSE_UNAVAILABLE)


@bp.post("/api/devices/<mac>/name")
@access(*SIGNED_IN)
def rename_device(mac):
    mac = own_device(mac, "name")
    name = account_call(printable_name, str(body().get("name", "")), 64, "a device name", True)
    return changed(services().controller.rename, mac, name)


@bp.post("/api/devices/<mac>/route-owner")
@access(*SIGNED_IN)
def give_route(mac):
    """{"prefix": "fd12:3456:789a:1::/64"}: the route a border router advertised is this device's from
    now on (a new border router, say); the controller refuses anyone but the owner, and a prefix no
    device could offer (400)."""
    prefix = body().get("prefix", "")
    if not isinstance(prefix, str) or not 0 < len(prefix) <= 64:
        raise ApiError(400, "prefix must be an IPv6 prefix (text of at most 64 characters)")
    return changed(services().controller.give_route, mac_of(mac), prefix, meaning=ROUTES_UNAVAILABLE)


@bp.post("/api/devices/<mac>/owner")
@access("owner")
def set_device_owner(mac):
    accounts = services().accounts
    account_id = body().get("account_id")
    if not isinstance(account_id, int) or accounts.get_account(account_id) is None:
        raise ApiError(400, "account_id must name an account")
    mac = mac_of(mac)
    earlier = accounts.device_owners().get(mac)
    accounts.claim_device(mac, account_id, force=True)
    reshare(earlier, account_id)  # a person's allowance goes with the devices they own
    return {"ok": True}


@bp.post("/api/devices/<mac>/dns-blocks")
@access(*SIGNED_IN)
def block_domain(mac):
    return _dns_change("deny-dns", mac)


@bp.post("/api/devices/<mac>/dns-unblocks")
@access(*SIGNED_IN)
def unblock_domain(mac):
    return _dns_change("permit-dns", mac)


def _dns_change(action, mac):
    mac = mac_of(mac)
    domain = str(body().get("domain", "")).strip().lower().rstrip(".")
    if not DOMAIN_RE.match(domain):
        raise ApiError(400, "not a domain name")
    ask_controller(services().controller.dns, action, mac, domain, meaning=DNS_UNAVAILABLE)
    return {"dns": _dns_rules(mac)}


def _dns_rules(mac):
    try:
        rules = ask_controller(services().controller.dns_rules, mac, meaning=DNS_UNAVAILABLE)
    except ApiError as exc:
        if exc.status == 501:
            return {"available": False, "rules": []}
        raise
    return {"available": True, "rules": rules}
