"""What several blueprints' views share: reading a request's body and MAC, answering a secret,
and which devices a signed-in account may act on."""

from __future__ import annotations

import re

from flask import abort, g, jsonify, request

from ..accounts import AccountError
from ..controller import ControllerDownError, ControllerError
from ..errors import ApiError
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


def with_owners(devices: list[dict]) -> list[dict]:
    """Each device with its owner's account (`owner_id`). A device the router knows under a new MAC
    (it joined with its own passphrase: `earlier_macs`) keeps the owner it had, moved to its MAC now."""
    accounts = services().accounts
    owners = accounts.device_owners()
    for d in devices:
        owner = owners.get(d["mac"])
        if owner is None and any(m in owners for m in d.get("earlier_macs", ())):
            # Moved on the disk in a transaction of its own; one that nobody owned before costs no write.
            owner = accounts.follow_device(d["mac"], d["earlier_macs"])
        d["owner_id"] = owner
    return devices


def own_device(mac: str, what: str) -> str:
    """The device's MAC, if the signed-in owner or member may `what` for it: an owner for
    any device, a member only for the devices they signed in from or were given."""
    mac = mac_of(mac)
    if g.user["role"] == "member" and _owner_of(mac) != g.user["id"]:
        raise ApiError(403, f"members may {what} only their own devices", code="role")
    return mac


def _owner_of(mac: str) -> int | None:
    known = [d for d in services().hub.devices() if d["mac"] == mac]
    return with_owners(known)[0]["owner_id"] if known else services().accounts.device_owners().get(mac)


def refresh_device(mac: str) -> None:
    """Every page learns the device's new status. The change is made: a controller that stops
    answering just now costs only the update."""
    svc = services()
    try:
        svc.hub.update_device(svc.controller.device(mac))
    except (ControllerDownError, ControllerError):
        pass
