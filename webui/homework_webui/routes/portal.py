"""The captive portal, the LAN side: a device held back (waiting to be let in, paused, out of its
allowance) is told why. Its DHCP answer names the API (RFC 8910's option 114), its DNS sends the OS's
probes here (the controller's `portal.py`), and the gate sends a probe to the page.

The device is the one at the request's source address, as the controller knows it (waitress trusts no
proxy header, and the switch lets a device send only from its own address): no parameter, header or
cookie can name another, and neither answer says anything about any other device.
"""

from __future__ import annotations

import html
from datetime import datetime

from flask import Blueprint, Response, jsonify

from ..captive import API_PATH, PORTAL_PATH, about_this_device
from ..security import PUBLIC, access

bp = Blueprint("portal", __name__)
REFRESH_S = 10  # the page asks again this often, so it changes by itself when the household decides


@bp.get(API_PATH)
@access(PUBLIC)
def api():
    """RFC 8908's API: captive while the device may not go online, with the page to open."""
    said = about_this_device()
    answer = {"captive": False} if said is None else {"captive": said["captive"]}
    if said is not None and said["captive"]:
        answer["user-portal-url"] = said["user_portal_url"]
    resp = jsonify(answer)
    resp.mimetype = "application/captive+json"
    return resp


@bp.get(PORTAL_PATH)
@access(PUBLIC)
def page():
    title, lines = what_to_say(about_this_device(), datetime.now().astimezone())
    body = "".join(f"<p>{line}</p>" for line in lines)
    text = PAGE.format(refresh=REFRESH_S, title=html.escape(title), body=body)
    return Response(text, mimetype="text/html")


def what_to_say(said: dict | None, now: datetime) -> tuple[str, list[str]]:
    """The page's heading and lines (HTML-escaped), in plain words."""
    if said is None:
        return "Home network", ["This page tells a device that waits to be let into the home network why it waits."]
    if not said["captive"]:
        return "You are online", ["This device may use the internet now."]
    reason, until = said["reason"], _when(said.get("paused_until"), now)
    code = html.escape(said.get("code") or "")
    if reason == "pending":
        return "Waiting to be let in", [
            "This device is waiting for someone at home to let it in — show them this code: "
            f'<strong class="code">{code}</strong>',
        ]
    if reason == "allowance":
        comes_back = [f"It comes back at {until}."] if until else []
        return "Allowance used up", [_used_up(said.get("allowance")), *comes_back]
    if reason == "bedtime":
        return "Bedtime", [f"Paused until {until} (bedtime)." if until else "Paused (bedtime)."]
    if reason == "denied":
        return "Not let in", ["Someone at home decided this device stays off the home network."]
    return "Paused", [f"Paused until {until}." if until else "Paused until someone at home resumes it."]


def _when(iso: str | None, now: datetime) -> str:
    """ "07:00" today, "Thu 07:00" another day; "" if none or unreadable."""
    try:
        at = datetime.fromisoformat(iso) if iso else None
    except ValueError:
        return ""
    if at is None:
        return ""
    if at.tzinfo is not None and at.date() == now.astimezone(at.tzinfo).date():
        return at.strftime("%H:%M")
    return at.strftime("%a %H:%M")


def _used_up(allowance: dict | None) -> str:
    if not allowance:
        return "Today's allowance is used up."
    if allowance.get("kind") == "minutes":
        minutes = int(allowance.get("amount") or 0)
        if minutes == 60:
            return "Today's hour is used up."
        if minutes % 60 == 0:
            return f"Today's {minutes // 60} hours are used up."
        return f"Today's {minutes} minutes are used up."
    return f"Today's {html.escape(str(allowance.get('text') or 'allowance'))} are used up."


PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta http-equiv="refresh" content="{refresh}">
<title>{title}</title>
<style>
body {{ font-family: system-ui, sans-serif; max-width: 32rem; margin: 3rem auto; padding: 0 1rem; line-height: 1.5; }}
.code {{ font-size: 2rem; letter-spacing: 0.1em; }}
.small {{ color: #666; font-size: 0.9rem; }}
</style>
</head>
<body>
<h1>{title}</h1>
{body}
<p class="small">This page checks again every {refresh} seconds.</p>
</body>
</html>
"""
