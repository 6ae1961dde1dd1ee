"""Which device a request comes from, for the captive portal (`routes/portal.py`) and the gate: the one at
the request's source address, as the controller knows it. waitress trusts no proxy header, and the
switch lets a device send only from its own address, so no parameter, header or cookie names another."""

from __future__ import annotations

from flask import g, redirect
from werkzeug.wrappers import Response

from .controller import DEVICE, ControllerError
from .services import services

PORTAL_PATH = "/captive-portal"
API_PATH = f"{PORTAL_PATH}/api"
PATHS = frozenset({PORTAL_PATH, API_PATH})  # what a held-back device may ask for (the gate lets it)


def about_this_device() -> dict | None:
    """What the controller's portal says about the device the request came from; None if the address
    is no device's (the router itself, a stranger). Asked as the device itself, whoever is signed in."""
    try:
        return services().controller.acting_as(DEVICE).portal(g.client_ip)
    except ControllerError as exc:
        if exc.status in (400, 404):
            return None
        raise


def probe_answer() -> Response | None:
    """A request under another site's name (the gate refuses those): an OS probing for a captive portal
    (generate_204, hotspot-detect.html, connecttest.txt), sent here by the router's DNS while its device
    is held back, is sent on to the portal's page; None for anyone else."""
    said = about_this_device()
    if said is None or not said["captive"]:
        return None
    return redirect(said["user_portal_url"], 302)
