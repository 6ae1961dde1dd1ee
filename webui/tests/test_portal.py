"""The captive portal's LAN side: a device held back is told why, by the address it asks from, and
learns nothing about any other device; its OS's probes are sent to the page; nothing else answers it."""

import math
import time
from datetime import UTC, datetime

import pytest
from conftest import Api

from homework_webui import captive, live
from homework_webui.routes import portal

PENDING, OTHER, PERMITTED = "02:00:00:00:00:a1", "02:00:00:00:00:b2", "02:00:00:00:00:c3"
PORTAL_URL = "http://10.2.0.1/captive-portal"


@pytest.fixture
def home(app, controller):
    """A newcomer, another newcomer and a device already let in, each asking from its own address."""
    devices = {
        mac: controller.joined(mac, state=state)
        for mac, state in ((PENDING, "pending"), (OTHER, "pending"), (PERMITTED, "permitted"))
    }
    return {mac: Api(app, ip=dev["ip"]) for mac, dev in devices.items()}


def code_of(controller, mac):
    return controller.status(mac)["portal_code"]


def test_a_pending_device_is_told_it_waits_and_shown_its_code_as_the_board_shows_it(home, controller):
    r = home[PENDING].get(captive.API_PATH)
    assert r.status_code == 200 and r.mimetype == "application/captive+json"
    assert r.json == {"captive": True, "user-portal-url": PORTAL_URL}
    page = home[PENDING].get(captive.PORTAL_PATH)
    text = page.get_data(as_text=True)
    assert page.status_code == 200 and page.mimetype == "text/html"
    assert "waiting for someone at home to let it in" in text and code_of(controller, PENDING) in text
    assert f'http-equiv="refresh" content="{portal.REFRESH_S}"' in text and "<script" not in text
    # Positive control: a device already let in is online.
    assert home[PERMITTED].get(captive.API_PATH).json == {"captive": False}
    assert "You are online" in home[PERMITTED].get(captive.PORTAL_PATH).get_data(as_text=True)


@pytest.mark.parametrize(
    "trick",
    [
        {"query": "ip"},
        {"query": "mac"},
        {"headers": "X-Forwarded-For"},
        {"headers": "X-Real-IP"},
        {"headers": "Forwarded"},
        {"headers": "Host"},
    ],
)
def test_a_pending_device_learns_nothing_about_another_device_whatever_it_sends(home, controller, trick):
    other = controller.status(OTHER)
    url = captive.PORTAL_PATH
    headers = {}
    if "query" in trick:
        url += f"?{trick['query']}={other[trick['query']]}"
    elif trick["headers"] == "Forwarded":
        headers = {"Forwarded": f"for={other['ip']}"}
    elif trick["headers"] == "Host":
        headers = {"Host": other["ip"]}  # not the router's name: refused, or sent to its own portal
    else:
        headers = {trick["headers"]: other["ip"]}
    api = home[PENDING]
    for path in (url, url.replace(captive.PORTAL_PATH, captive.API_PATH)):
        r = api.get(path, headers=headers)
        text = r.get_data(as_text=True)
        assert code_of(controller, OTHER) not in text and OTHER not in text and other["ip"] not in text
        if r.status_code == 200 and path.startswith(captive.API_PATH):
            assert r.json["captive"] is True  # its own answer
    # Positive control: asked from its own address, the other device gets its own code.
    assert code_of(controller, OTHER) in home[OTHER].get(captive.PORTAL_PATH).get_data(as_text=True)
    assert code_of(controller, PENDING) not in home[OTHER].get(captive.PORTAL_PATH).get_data(as_text=True)


def test_a_pending_device_reaches_the_portal_and_nothing_else_of_the_web_ui(home):
    for path in ("/", "/api/devices", "/api/session", f"/api/devices/{OTHER}"):
        assert home[PENDING].get(path).status_code == 403, path
    assert home[PENDING].get(captive.PORTAL_PATH).status_code == 200  # positive control
    assert home[PERMITTED].get("/api/session").status_code == 200


@pytest.mark.parametrize(
    ("host", "path"),
    [
        ("connectivitycheck.gstatic.com", "/generate_204"),
        ("clients3.google.com", "/generate_204"),
        ("captive.apple.com", "/hotspot-detect.html"),
        ("www.msftconnecttest.com", "/connecttest.txt"),
    ],
)
def test_an_os_probe_from_a_held_back_device_is_sent_to_the_portal(home, controller, host, path):
    r = home[PENDING].get(path, headers={"Host": host})
    assert r.status_code == 302 and r.headers["Location"] == PORTAL_URL
    # A permitted device's probe never comes here (its DNS answers truly); one that did is refused as ever.
    assert home[PERMITTED].get(path, headers={"Host": host}).status_code == 400
    controller.call("pause", PERMITTED)  # ...until it is paused
    assert home[PERMITTED].get(path, headers={"Host": host}).status_code == 302


def test_a_paused_device_is_told_until_when(home, controller):
    controller.call("pause", PERMITTED)
    page = home[PERMITTED].get(captive.PORTAL_PATH).get_data(as_text=True)
    assert "Paused until someone at home resumes it." in page
    assert home[PERMITTED].get(captive.API_PATH).json == {"captive": True, "user-portal-url": PORTAL_URL}
    until = datetime.fromisoformat(controller.call("pause-for", PERMITTED, "5")["paused_until"]).astimezone()
    now = datetime.now().astimezone()
    # An end on another day than today is named with its day (the controller's clock is the test's).
    said = f"{until:%H:%M}" if until.date() == now.date() else f"{until:%a %H:%M}"
    assert f"Paused until {said}." in home[PERMITTED].get(captive.PORTAL_PATH).get_data(as_text=True)
    controller.call("resume", PERMITTED)
    assert home[PERMITTED].get(captive.API_PATH).json == {"captive": False}


def test_what_the_page_says_for_each_reason():
    now = datetime(2026, 11, 25, 22, 0, tzinfo=UTC)
    said = {"captive": True, "code": "K7-Q2", "paused_until": "2026-11-26T07:00:00+00:00", "allowance": None}
    assert portal.what_to_say({**said, "reason": "bedtime"}, now)[1] == ["Paused until Thu 07:00 (bedtime)."]
    today = {**said, "paused_until": "2026-11-25T23:30:00+00:00"}
    assert portal.what_to_say({**today, "reason": "paused"}, now)[1] == ["Paused until 23:30."]
    two_hours = {"kind": "minutes", "amount": 120, "text": "120 min"}
    assert portal.what_to_say({**today, "reason": "allowance", "allowance": two_hours}, now)[1] == [
        "Today's 2 hours are used up.",
        "It comes back at 23:30.",
    ]
    data = {"kind": "bytes", "amount": 5 * 10**9, "text": "5 GB"}
    assert portal.what_to_say({**said, "reason": "allowance", "allowance": data}, now)[1][0] == (
        "Today's 5 GB are used up."
    )
    assert "K7-Q2" in portal.what_to_say({**said, "reason": "pending", "code": "K7-Q2"}, now)[1][0]
    # What the controller sends is escaped, never markup.
    assert "<b>" not in portal.what_to_say({**said, "reason": "pending", "code": "<b>x</b>"}, now)[1][0]


def test_a_held_back_devices_requests_ask_the_controller_about_it_alone(home, controller):
    """Issue 39 finding 4: every request from a device held back had the web UI ask the controller for
    every device's status (175 KB with 50 permitted and 256 pending devices, per request, unsigned in).
    Each is now one small question about the asking device; a device let in gets in at once."""
    assert home[PERMITTED].get("/api/session").status_code == 200  # the board's picture is fresh
    before, started = len(controller.calls), time.monotonic()
    requests = 40
    for _ in range(requests // 2):
        assert home[PENDING].get(captive.PORTAL_PATH).status_code == 200
        assert home[PENDING].get("/api/devices").status_code == 403
    asked = [name for name, _ in controller.calls[before:]]
    # The hub's own reads fall in too: one at its start, one at a change, and its heartbeat's, which a slow
    # machine's 40 requests outlast more often. A few, however long the requests took; never one a request.
    heartbeats = math.ceil((time.monotonic() - started) / live.HEARTBEAT_S)
    assert asked.count("status") <= 2 + heartbeats < requests, asked
    assert asked.count("portal") <= 2 * requests  # the gate's question, and the portal page's own
    # Positive control: let in now, its very next request is served as a permitted device's.
    controller.call("permit", PENDING)
    assert home[PENDING].get("/api/session").status_code == 200
    # And an address no device holds is refused, as before.
    assert Api(home[PENDING].client.application, ip="10.2.9.9").get("/api/session").status_code == 403
