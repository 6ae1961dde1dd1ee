"""Pause for a while, bedtimes and daily allowances (issue 23): the phone page's controls.

Pausing for a while is pausing, so whoever may pause a device may (owner, wall panel). Schedules,
allowances, bonuses and the household's time settings are the owner's alone: a wall panel is in
everyone's reach, and a member must not lift their own bedtime. The controller decides who may
(homework_controller/api/authority.py: the routes that only ask it are open to every signed-in role) and
checks what is asked (a schedule's text, an amount, a zone); its refusal is passed on with its message.
A person's schedule and allowance (by account) stay the owner's here: accounts are the web UI's.

A person's schedule is their devices' schedule: the web UI knows who owns which device
(`device_owners`), the controller only devices, so a person's bedtime is set on each device the
account owns, now; a device they are given later gets it when it is set again.

A person's allowance is one allowance all their devices use together: the controller keeps it as a
shared allowance named `person-<account>`, and the web UI tells it which devices share it, when it is
set and whenever a device changes hands (`reshare`).
"""

from __future__ import annotations

import logging

from flask import Blueprint

from ..controller import ControllerDownError, ControllerError
from ..errors import ApiError, ask_controller
from ..security import SIGNED_IN, access
from ..services import services
from .common import body, changed, mac_of, seen

LOG = logging.getLogger(__name__)

bp = Blueprint("bedtime", __name__)

UNAVAILABLE = {501: ("bedtime-unavailable", "This router cannot pause for a while, keep bedtimes or allowances.")}


def _text(field: str, limit: int = 400) -> str:
    value = body().get(field, "")
    if not isinstance(value, str) or len(value) > limit:
        raise ApiError(400, f"{field} must be text of at most {limit} characters")
    return value


@bp.post("/api/devices/<mac>/pause-for")
@access(*SIGNED_IN)
def pause_for(mac):
    """{"for": "30" | "60" | "1 h" | "tomorrow"}"""
    return changed(services().controller.pause_for, mac_of(mac), _text("for", 20), meaning=UNAVAILABLE)


@bp.post("/api/devices/<mac>/schedule")
@access(*SIGNED_IN)
def set_schedule(mac):
    """{"windows": "sun-thu 21:30-07:00; fri,sat 23:00-08:00"} (empty clears it)"""
    return changed(services().controller.set_schedule, mac_of(mac), _text("windows"), meaning=UNAVAILABLE)


@bp.post("/api/devices/<mac>/allowance")
@access(*SIGNED_IN)
def set_allowance(mac):
    """{"amount": "2 h" | "500 MB"} (empty removes it)"""
    return changed(services().controller.set_allowance, mac_of(mac), _text("amount", 40), meaning=UNAVAILABLE)


@bp.post("/api/devices/<mac>/bonus")
@access(*SIGNED_IN)
def grant_bonus(mac):
    """{"amount": "30 min" | "500 MB"}: more for today, until the household's reset."""
    return changed(services().controller.grant_bonus, mac_of(mac), _text("amount", 40), meaning=UNAVAILABLE)


@bp.post("/api/accounts/<int:account_id>/schedule")
@access("owner")
def set_person_schedule(account_id):
    """{"windows": ...}: the same bedtime on every device the account owns."""
    svc = services()
    _account(account_id)
    windows = _text("windows")
    macs = _devices_of(account_id)
    if not macs:
        raise ApiError(400, "this person owns no devices yet: give them a device first")
    devices, not_seen = [], []
    for mac in macs:
        try:
            devices.append(ask_controller(svc.controller.set_schedule, mac, windows, meaning=UNAVAILABLE))
        except ControllerError as exc:
            if exc.status != 404:
                raise  # a bad schedule is refused for the first device, before any changed
            not_seen.append(mac)  # owned, but the router has not seen it (yet)
    for device in devices:
        svc.hub.update_device(device)
    return {"devices": seen(devices), "not_seen": not_seen}


def person_allowance_name(account_id: int) -> str:
    return f"person-{account_id}"


def _account(account_id: int) -> None:
    if services().accounts.get_account(account_id) is None:
        raise ApiError(404, "no such account")


def _devices_of(account_id: int) -> list[str]:
    """The devices the account owns (a device back under a new MAC is still theirs, under that MAC)."""
    svc = services()
    svc.accounts.with_owners(svc.hub.devices())
    return sorted(mac for mac, owner in svc.accounts.device_owners().items() if owner == account_id)


def _shared_answer(standing: dict | None, account_id: int) -> dict:
    """The person's allowance, and the devices they own that the router has not seen (so share nothing yet)."""
    sharing = set(standing["devices"]) if standing else set()
    return {"allowance": standing, "not_seen": [m for m in _devices_of(account_id) if standing and m not in sharing]}


def reshare(*account_ids: int | None) -> None:
    """Devices changed hands: each person's allowance is shared by the devices they own now. A person
    without one is left alone; a controller that does not answer learns it when the allowance is next set."""
    svc = services()
    for account_id in {a for a in account_ids if a is not None}:
        try:
            svc.controller.share_allowance(person_allowance_name(account_id), _devices_of(account_id))
        except ControllerError as exc:
            if exc.status != 404:  # 404: this person has no allowance
                LOG.warning("person %d's allowance keeps its devices: %s", account_id, exc)
        except ControllerDownError as exc:
            LOG.warning("person %d's allowance keeps its devices: %s", account_id, exc)


def forget_person_allowance(account_id: int) -> None:
    """The account is gone, and with it the allowance its devices shared (they are let go)."""
    try:
        services().controller.set_shared_allowance(person_allowance_name(account_id), "")
    except (ControllerError, ControllerDownError) as exc:
        LOG.warning("person %d's allowance stays on the router: %s", account_id, exc)


@bp.get("/api/accounts/<int:account_id>/allowance")
@access("owner")
def person_allowance(account_id):
    """{"allowance": its standing today and the devices sharing it, or null; "not_seen": [...]}"""
    _account(account_id)
    try:
        standing = services().controller.shared_allowance(person_allowance_name(account_id))
    except ControllerError as exc:
        if exc.status != 404:
            raise
        standing = None
    return _shared_answer(standing, account_id)


@bp.post("/api/accounts/<int:account_id>/allowance")
@access("owner")
def set_person_allowance(account_id):
    """{"amount": "2 h" | "5 GB"}: one daily allowance all the person's devices use together (empty removes it)."""
    _account(account_id)
    svc, name, amount = services(), person_allowance_name(account_id), _text("amount", 40)
    if not amount.strip():
        sharing = person_allowance(account_id)["allowance"]
        ask_controller(svc.controller.set_shared_allowance, name, "", meaning=UNAVAILABLE)
        _refresh(sharing["devices"] if sharing else [])  # let go
        return _shared_answer(None, account_id)
    ask_controller(svc.controller.set_shared_allowance, name, amount, meaning=UNAVAILABLE)
    standing = ask_controller(svc.controller.share_allowance, name, _devices_of(account_id), meaning=UNAVAILABLE)
    _refresh(standing["devices"])
    return _shared_answer(standing, account_id)


@bp.post("/api/accounts/<int:account_id>/bonus")
@access("owner")
def grant_person_bonus(account_id):
    """{"amount": "30 min" | "500 MB"}: more of the person's allowance for today."""
    _account(account_id)
    standing = ask_controller(
        services().controller.grant_shared_bonus,
        person_allowance_name(account_id),
        _text("amount", 40),
        meaning=UNAVAILABLE,
    )
    _refresh(standing["devices"])
    return _shared_answer(standing, account_id)


def _refresh(macs: list[str]) -> None:
    """The live pages see these devices as they are now (held by the allowance, or let go)."""
    svc = services()
    for mac in macs:
        svc.hub.update_device(svc.controller.device(mac))


@bp.get("/api/household-time")
@access(*SIGNED_IN)
def household_time():
    return ask_controller(services().controller.household_time, meaning=UNAVAILABLE)


@bp.post("/api/household-time")
@access(*SIGNED_IN)
def set_household_time():
    """{"time_zone": "Europe/London", "reset_time": "04:00"} (either or both)."""
    sent = body()
    answer = None
    if "time_zone" in sent:
        answer = ask_controller(services().controller.set_time_zone, _text("time_zone", 64), meaning=UNAVAILABLE)
    if "reset_time" in sent:
        answer = ask_controller(services().controller.set_reset_time, _text("reset_time", 5), meaning=UNAVAILABLE)
    if answer is None:
        raise ApiError(400, "send time_zone and/or reset_time")
    return answer
