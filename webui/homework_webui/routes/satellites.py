"""Satellite access points (issue 37, `docs/whole-home-wifi.md`): the owner makes a code, a satellite pairs
with it from its own LAN address (its device is let in: the owner's code is the owner's consent), and its
session then reads the keys it serves the household's network with and reports its stations' joins and
leaves, from the device it paired from only. The owner lists the satellites and removes one (its sessions
end at once).

Who may call the controller's satellite operations is the controller's word (its authority table: the
satellite role alone); this side keeps the pairing, the session, and which device each satellite is.
"""

from __future__ import annotations

import re
import secrets

from flask import Blueprint, Response, g, request, session

from ..accounts import AccountError
from ..controller import OWNER, SATELLITE, ControllerDownError, ControllerError
from ..errors import ApiError, ask_controller
from ..security import PUBLIC, access
from ..services import services
from .accounts import _start_session
from .common import body, limited, no_store

bp = Blueprint("satellites", __name__)

PAIR_PATH = "/api/satellite/pair"  # what a device not let in yet may reach beside the captive portal (gate.py)
MAX_EVENTS = 64  # station events in one report
MAX_LINKS = 32  # stations' links in one report (the controller's bound too)
KEYID_RE = re.compile(r"^[A-Za-z0-9_.:-]{0,32}$")
ETAG_RE = re.compile(r'(?:W/)?"([0-9a-f]{1,64})"')


def _device_at(ip: str, fresh: bool = False) -> dict | None:
    """The controller's device holding the LAN address `ip` (None: none). fresh: asked of the controller now,
    not the live board's copy (a device that has just joined)."""
    hub = services().hub
    devices = (hub.refresh_devices() if fresh else None) or hub.devices()
    return next((d for d in devices if d.get("ip") == ip and d.get("mac")), None)


@bp.get(PAIR_PATH)
@access(PUBLIC)
def pairing_token():
    """A satellite's first request (it holds no session yet): the CSRF token its pairing sends back, with the
    session cookie that holds it. {"csrf_token": ...}"""
    if "csrf" not in session:
        session["csrf"] = secrets.token_urlsafe(32)
    return {"csrf_token": session["csrf"]}


@bp.post(PAIR_PATH)
@access(PUBLIC)
def pair():
    """{code, name?}: the satellite at the request's source address pairs with the owner's code; 201 with
    {user, csrf_token, mac} and its session cookie."""
    svc, sent = services(), body()
    # Charged before the code is looked up, as a wall panel's pairing (the same count per address): a wrong
    # or expired code costs a guess; a right one, or one refused for another reason, is refunded.
    limited(svc.pairing_guesses.take(g.client_ip))
    device = _device_at(g.client_ip, fresh=True)
    if device is None:
        svc.pairing_guesses.refund(g.client_ip)
        raise ApiError(409, "a satellite pairs from the address the router leased it (this address is no device's)")
    if device.get("state") == "blacklisted":
        svc.pairing_guesses.refund(g.client_ip)
        raise ApiError(409, "this device is blocked: only the owner's whitelist lifts that")
    try:
        code, name = str(sent.get("code", "")), str(sent.get("name", ""))
        account = svc.accounts.redeem_satellite_code(code, name, device["mac"])
    except AccountError as exc:  # a bad name, which spends no code
        svc.pairing_guesses.refund(g.client_ip)
        raise ApiError(400, str(exc)) from None
    if account is None:
        raise ApiError(400, "that pairing code is wrong or has expired")
    svc.pairing_guesses.refund(g.client_ip)
    # The owner made the code: redeeming it is the owner's consent to let this device in, so the permit is
    # asked as the owner (the satellite role may do nothing of the household's).
    try:
        permitted = svc.controller.acting_as(OWNER).decide("permit", device["mac"])
    except (ControllerError, ControllerDownError):
        svc.accounts.remove_satellite(account["id"])  # not let in: no satellite either (the code is spent)
        raise
    svc.hub.update_device(permitted)
    answer = _start_session(account)
    return {**answer, "mac": device["mac"]}, 201


def _own_device() -> str:
    """The paired satellite's MAC, if this request comes from the device it paired from (403 otherwise): a
    satellite's session used from any other address reads nothing and reports nothing."""
    mac = services().accounts.satellite_mac(g.user["id"])
    device = _device_at(g.client_ip)
    if mac is None or device is None or device["mac"] != mac:
        raise ApiError(403, "this satellite's session is used from another device than the one it paired from",
                       code="satellite-device")  # fmt: skip
    return mac


@bp.get("/api/satellite/keys")
@access(SATELLITE)
def keys():
    """{ssid, passphrase, country, band, channel, keys: [{mac, keyid, passphrase}], version}; ETag: the version
    (If-None-Match with it: 304, nothing sent). Never cached by anyone else."""
    _own_device()
    served = ask_controller(services().controller.satellite_keys, meaning=NO_RADIO)
    if not isinstance(served, dict) or not isinstance(served.get("version"), str):
        raise ApiError(502, "the controller's answer about the keys is not an object with a version")
    etag = f'"{served["version"]}"'
    if served["version"] in ETAG_RE.findall(request.headers.get("If-None-Match", "")):
        resp = Response(status=304)
        resp.headers["ETag"] = etag
        return resp
    resp = no_store(served)
    resp.headers["ETag"] = etag
    return resp


NO_RADIO = {501: ("radio-unavailable", "The router has no radio settings: there is no network to serve yet.")}


@bp.post("/api/satellite/stations")
@access(SATELLITE)
def stations():
    """A JSON list of at most 64 {event: joined|left, mac, keyid?} (or {"events": [...]}), in the order they
    happened: each is the controller's `satellite-station` from this address. {"results": [{ok, ...}]}, one
    per event: a refused one costs only itself (ok false, its status and error)."""
    _own_device()
    sent = request.get_json(silent=True)
    events = sent.get("events") if isinstance(sent, dict) else sent
    if not isinstance(events, list) or len(events) > MAX_EVENTS:
        raise ApiError(400, f"send a JSON list of at most {MAX_EVENTS} station events")
    controller = services().controller
    results = []
    for event in events:
        checked = _checked(event)
        if isinstance(checked, str):
            results.append({"ok": False, "status": 400, "error": checked})
            continue
        try:
            results.append({"ok": True, **controller.satellite_station(g.client_ip, *checked)})
        except ControllerError as exc:
            results.append({"ok": False, "status": exc.status, "error": str(exc)})
    return {"results": results}


@bp.post("/api/satellite/links")
@access(SATELLITE)
def links():
    """{"links": [{mac, rssi, retries, packets}]}, at most 32 stations' links since the last report: the
    controller's `satellite-links` from this address, which logs those of the satellite's own stations (the
    board shows their signal). {logged, roamed_away, applied}: roamed_away, the reported stations that roamed
    to another access point without telling the satellite, for it to forget; a report that is not one is
    refused whole (400)."""
    _own_device()
    sent = request.get_json(silent=True)
    reported = sent.get("links") if isinstance(sent, dict) else None
    if not isinstance(reported, list) or len(reported) > MAX_LINKS:
        raise ApiError(400, f'send {{"links": [...]}} with at most {MAX_LINKS} stations\' links')
    return ask_controller(services().controller.satellite_links, g.client_ip, reported)


def _checked(event: object) -> tuple[str, str, str] | str:
    """(event, mac, keyid), or why the event is refused (the controller checks them again)."""
    if not isinstance(event, dict):
        return "an event is an object {event, mac, keyid?}"
    kind, mac, keyid = event.get("event"), event.get("mac"), event.get("keyid", "")
    if kind not in ("joined", "left"):
        return "event is joined or left"
    if not isinstance(mac, str) or len(mac) > 17:
        return "mac is a MAC address"
    if keyid is None:
        keyid = ""
    if not isinstance(keyid, str) or not KEYID_RE.match(keyid):
        return "keyid is at most 32 of A-Z, a-z, 0-9, '_', '.', ':', '-' ('' for the guest passphrase)"
    return kind, mac, keyid


# --- the owner's side ------------------------------------------------------------------------------


@bp.post("/api/satellite-codes")
@access("owner")
def new_satellite_code():
    """{code, expires}: one satellite pairs with it (in 10 minutes)."""
    code, expires = services().accounts.create_satellite_code(g.user["id"])
    return no_store({"code": code, "expires": expires}, 201)


@bp.get("/api/satellites")
@access("owner")
def list_satellites():
    """{"satellites": [{id, name, mac, created, ip, state, access_port}]}: each paired satellite, and its device
    as the router knows it now (ip null: it holds no lease now)."""
    devices = {d["mac"]: d for d in services().hub.devices() if d.get("mac")}
    shown = []
    for sat in services().accounts.satellites():
        device = devices.get(sat["mac"]) or {}
        shown.append({**sat, **{field: device.get(field) for field in ("ip", "state", "access_port")}})
    return {"satellites": shown}


@bp.delete("/api/satellites/<int:account_id>")
@access("owner")
def remove_satellite(account_id):
    """The satellite's account and sessions end at once: its next request is refused (401). Its device stays
    as the household decided it."""
    try:
        services().accounts.remove_satellite(account_id)
    except KeyError:
        raise ApiError(404, "no such satellite") from None
    return {"ok": True}
