"""What several blueprints' views share: reading a request's body and MAC, answering a secret,
and which devices a signed-in account may act on."""

from __future__ import annotations

import re

from flask import abort, g, jsonify, request

from ..accounts import AccountError
from ..controller import ControllerDownError, ControllerError, acts_on, seen_by
from ..errors import ApiError, ask_controller
from ..services import services

MAC_RE = re.compile(r"^[0-9a-f]{2}(:[0-9a-f]{2}){5}$")


def body() -> dict:
    try:
        sent = request.get_json(silent=True)
    except RecursionError:  # nested deeper than the parser goes (within the body limit): bad input
        sent = None
    if not isinstance(sent, dict):
        raise ApiError(400, "send a JSON object")
    return sent


def mac_of(text: str) -> str:
    mac = text.strip().lower().replace("-", ":")
    if not MAC_RE.match(mac):
        abort(400, f"not a MAC address: {text!r}")
    return mac


def limited(wait: int) -> None:
    if wait:
        raise ApiError(429, f"too many attempts; try again in {wait} s", retry_after=wait)


def account_call(fn, *args):
    try:
        return fn(*args)
    except AccountError as exc:
        raise ApiError(400, str(exc)) from None


def no_store(answer: dict, status: int = 200):
    """An answer with a secret in it: no browser or proxy may keep a copy."""
    resp = jsonify(answer)
    resp.status_code = status
    resp.headers["Cache-Control"] = "no-store"
    resp.headers["Pragma"] = "no-cache"
    return resp


def seen(devices: list[dict]) -> list[dict]:
    """The devices as the signed-in session sees them (`controller.seen_by`), with their owners."""
    return seen_by(services().accounts.with_owners(devices), g.user["role"], g.user["id"])


def changed(call, *args, meaning=None, instead_of: str | None = None) -> dict:
    """A change the controller answers with the device's new status, which every page learns (instead_of:
    the MAC it had, which leaves the board); answered as the session sees it."""
    device = ask_controller(call, *args, meaning=meaning)
    services().hub.update_device(device, instead_of=instead_of)
    return {"device": seen([dict(device)])[0]}


def own_device(mac: str, what: str) -> str:
    """The device's MAC, if the signed-in owner or member may `what` for it: an owner for
    any device, a member only for the devices they signed in from or were given."""
    mac = mac_of(mac)
    if not acts_on(g.user["role"], _owner_of(mac), g.user["id"]):
        raise ApiError(403, f"members may {what} only their own devices", code="role")
    return mac


def _owner_of(mac: str) -> int | None:
    accounts, known = services().accounts, [d for d in services().hub.devices() if d["mac"] == mac]
    return accounts.with_owners(known)[0]["owner_id"] if known else accounts.device_owners().get(mac)


def refresh_device(mac: str) -> None:
    """Every page learns the device's new status. The change is made: a controller that stops
    answering just now costs only the update."""
    svc = services()
    try:
        svc.hub.update_device(svc.controller.device(mac))
    except (ControllerDownError, ControllerError):
        pass
