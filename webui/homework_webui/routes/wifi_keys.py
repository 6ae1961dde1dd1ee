"""A device's own Wi-Fi passphrase. Owners and members on their own devices, never a wall
panel's kiosk session: a passphrase on the panel is read by every guest in the room (an owner
who signs in on the panel may, and sees it there by choice). The answers are never logged nor
cached. The controller refuses the wall panel (its authority table); the web UI keeps a member to
their own devices (`own_device`: it knows who owns which)."""

from __future__ import annotations

from flask import Blueprint

from ..controller import ControllerError
from ..errors import ask_controller
from ..security import SIGNED_IN, access
from ..services import services
from .common import no_store, own_device, refresh_device

bp = Blueprint("wifi_keys", __name__)

WIFI_KEYS_UNAVAILABLE = (
    "Own passphrases are not available on this router: it has no Wi-Fi network name "
    "configured (the controller's --wifi-ssid)."
)
WIFI_KEY_MEANING = {501: ("wifi-keys-unavailable", WIFI_KEYS_UNAVAILABLE), 404: ("no-wifi-key", None)}
WIFI_KEY_FIELDS = ("mac", "keyid", "ssid", "passphrase", "qr", "created")


@bp.post("/api/devices/<mac>/wifi-key")
@access(*SIGNED_IN)
def issue_wifi_key(mac):
    mac = own_device(mac, "make a Wi-Fi passphrase")
    issued = ask_controller(services().controller.issue_wifi_key, mac, meaning=WIFI_KEY_MEANING)
    refresh_device(mac)
    return no_store({"wifi_key": _fields(issued, WIFI_KEY_FIELDS + ("applied", "note"))})


@bp.get("/api/devices/<mac>/wifi-key")
@access(*SIGNED_IN)
def show_wifi_key(mac):
    mac = own_device(mac, "see the Wi-Fi passphrase of")
    shown = ask_controller(services().controller.show_wifi_key, mac, meaning=WIFI_KEY_MEANING)
    return no_store({"wifi_key": _fields(shown, WIFI_KEY_FIELDS)})


@bp.post("/api/devices/<mac>/wifi-key/revoke")
@access(*SIGNED_IN)
def revoke_wifi_key(mac):
    mac = own_device(mac, "revoke the Wi-Fi passphrase of")
    revoked = ask_controller(services().controller.revoke_wifi_key, mac, meaning=WIFI_KEY_MEANING)
    refresh_device(mac)
    return no_store({"revoked": _fields(revoked, ("mac", "revoked", "applied", "note"))})


def _fields(answer, fields: tuple[str, ...]) -> dict:
    if not isinstance(answer, dict):
        raise ControllerError(502, "the controller's answer about the passphrase is not an object")
    return {f: answer.get(f) for f in fields}
