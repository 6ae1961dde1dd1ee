"""The router's own radio (issue 25): its network name, guest passphrase, country (regulatory domain),
band and channel. The owner's alone: a wall panel is in everyone's reach and would show the guest
passphrase to the room, and a change makes every device join again. The controller checks the
settings (`homework_controller.radio.radio_settings`, the model the image reads too) and writes its file;
the radio restarts with them. Who may is the controller's word (its authority table: the owner alone).
The answers carry the guest passphrase: never logged nor cached."""

from __future__ import annotations

from flask import Blueprint

from ..controller import ControllerError
from ..errors import ApiError, ask_controller
from ..security import SIGNED_IN, access
from ..services import services
from .common import body, no_store

bp = Blueprint("radio", __name__)

NO_RADIO = {
    501: (
        "radio-unavailable",
        "This router has no radio of its own: its Wi-Fi is set up on the access point that serves it.",
    )
}
SETTINGS = ("ssid", "passphrase", "country", "band", "channel", "problems")
# What the controller takes, for the form to offer no other, and the settings whose change restarts the
# radio (the controller's word), for the form to say so before the owner saves.
CHOICES = ("channels", "world_channels", "restarts")


@bp.get("/api/radio")
@access(*SIGNED_IN)
def radio_object():
    """{"radio": {ssid, passphrase, country, band, channel, problems}, "channels": {band: [...]},
    "world_channels": [...], "restarts": [the settings whose change restarts the radio]}"""
    shown = _object(ask_controller(services().controller.radio_settings, meaning=NO_RADIO))
    return no_store({"radio": {f: shown.get(f) for f in SETTINGS}, **{c: shown.get(c) for c in CHOICES}})


@bp.put("/api/radio")
@access(*SIGNED_IN)
def set_radio_object():
    """Any of {ssid, passphrase, country, band, channel}: checked together by the controller; a refusal
    is 400 with `fields`, each refused setting's reason, and changes nothing."""
    try:
        saved = ask_controller(services().controller.set_radio_settings, body(), meaning=NO_RADIO)
    except ControllerError as exc:
        fields = exc.details.get("fields")
        if exc.status != 400 or not isinstance(fields, dict):
            raise
        why = {str(field): str(reason) for field, reason in fields.items()}
        raise ApiError(400, str(exc), code="radio-settings", fields=why) from None
    saved = _object(saved)
    return no_store(
        {
            "radio": {f: saved.get(f) for f in SETTINGS},
            "restarting": bool(saved.get("restarting")),
            "message": saved.get("message", ""),
        }
    )


def _object(answer) -> dict:
    if not isinstance(answer, dict):
        raise ControllerError(502, "the controller's answer about the radio is not an object")
    return answer
