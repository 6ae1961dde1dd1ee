"""A satellite access point (issue 37): the owner makes a code, the satellite pairs with it from its own LAN
address (its device is let in), reads the keys it serves the network with (ETag: the version) and reports
its stations, which the router binds to the satellite's port; the owner lists and removes it. Against the
controller's own ws.v1 on its fake switch, with two access ports: the router's radio and the satellite's
cable. Every refusal beside its positive control."""

from __future__ import annotations

import time

import pytest
from conftest import Api, signed_in
from dhcp_frames import frame, reply_of
from fakeoftable import FakeSwitch
from stack import DHCP_OPTIONS, ROUTER_MAC, WLAN

from homework_controller import flows
from homework_controller.api import authority
from homework_controller.radio.radio_settings import RadioSettingsFile
from homework_webui.accounts import PAIRING_TTL
from homework_webui.services import services

LAN = 2  # the satellite's cable
SAT = "02:00:00:00:05:a7"
PHONE = "02:00:00:00:00:aa"
OTHER = "02:00:00:00:00:bb"
GUEST = "correct horse battery staple"
WIFI = f"ssid=Our house\npassphrase={GUEST}\ncountry=GB\nband=2.4\nchannel=6\n"


@pytest.fixture
def home(tmp_path, controller):
    """The router's radio (WLAN) and a second access port (LAN), its radio's settings file."""
    path = tmp_path / "wifi.conf"
    path.write_text(WIFI)
    controller.radio_settings = RadioSettingsFile(str(path))
    reconnected(controller, (WLAN, LAN))
    return controller


def reconnected(controller, ports) -> None:
    """The switch (re)connects with these access ports: a fresh switch, given the whole rule set."""
    with controller.lock:
        controller.switch = FakeSwitch(clock=controller.clock)
        controller._apply(controller.router.switch_ready(ports, ROUTER_MAC))


def cabled(controller, mac: str, port: int = LAN) -> str:
    """A device takes its lease on `port` (its DHCP, which the switch marks with the port): its address."""

    def dhcp(msg_type, **fields):
        sent = frame(mac, msg_type, **fields)._replace(eth_dst=flows.port_mark(port))
        with controller.lock:
            controller.dhcp_answers = []
            controller._apply(controller.router.joining.on_dhcp(sent))
            return controller.dhcp_answers

    [offer] = dhcp("discover", options=DHCP_OPTIONS)
    pkt, opts = reply_of(offer)
    dhcp("request", options=[("server_id", opts["server_id"]), ("requested_addr", pkt["BOOTP"].yiaddr), *DHCP_OPTIONS])
    return controller.status(mac)["ip"]


def paired(app, owner, controller, name="Landing") -> Api:
    """The satellite on its cable, paired with the owner's code from its own address."""
    sat = Api(app, ip=cabled(controller, SAT))
    code = owner.post("/api/satellite-codes").json["code"]
    assert sat.get("/api/satellite/pair").status_code == 200  # its CSRF token, before it holds a session
    r = sat.post("/api/satellite/pair", {"code": code, "name": name})
    assert r.status_code == 201, r.json
    assert r.json["user"]["role"] == "satellite" and r.json["mac"] == SAT
    return sat


def phone_with_its_own_key(controller) -> str:
    controller.joined(PHONE, state="permitted")
    return controller.call("wifi-key", PHONE)["keyid"]


def test_a_paired_satellite_reads_the_keys_and_its_stations_roam_to_its_port(app, owner, home):
    keyid = phone_with_its_own_key(home)
    sat = paired(app, owner, home)
    assert home.status(SAT)["state"] == "permitted"  # the owner's code let it in
    assert home.status(SAT)["access_port"] == LAN
    r = sat.get("/api/satellite/keys")
    assert r.status_code == 200 and r.headers["Cache-Control"] == "no-store"
    assert (r.json["ssid"], r.json["passphrase"], r.json["country"], r.json["channel"]) == ("Our house", GUEST, "GB", 6)
    [key] = r.json["keys"]
    assert key["mac"] == PHONE and key["keyid"] == keyid and key["passphrase"]
    assert r.headers["ETag"] == f'"{r.json["version"]}"'
    # Polled with the version it has: nothing changed, nothing sent.
    unchanged = sat.get("/api/satellite/keys", headers={"If-None-Match": r.headers["ETag"]})
    assert unchanged.status_code == 304 and unchanged.get_data() == b""
    assert unchanged.headers["ETag"] == r.headers["ETag"]
    # A revoked key is gone at the next poll.
    home.call("revoke-wifi-key", PHONE)
    revoked = sat.get("/api/satellite/keys", headers={"If-None-Match": r.headers["ETag"]})
    assert revoked.status_code == 200 and revoked.json["keys"] == [] and revoked.headers["ETag"] != r.headers["ETag"]
    keyid = home.call("wifi-key", PHONE)["keyid"]
    home.station_joined(PHONE, keyid)  # on the router's own radio (no port: where it took its lease)
    # The phone joins the satellite with its own passphrase: it is bound to the satellite's port.
    events = [
        {"event": "joined", "mac": PHONE, "keyid": keyid},
        {"event": "roamed", "mac": PHONE},
        {"event": "joined", "mac": "not a mac"},
        {"event": "joined", "mac": SAT},  # the satellite itself: refused by the controller
    ]
    r = sat.post("/api/satellite/stations", events)
    assert r.status_code == 200, r.json
    ok, roamed, bad_mac, itself = r.json["results"]
    assert ok == {
        "ok": True,
        "mac": PHONE,
        "event": "joined",
        "port": LAN,
        "access_port": LAN,
        "off_the_air": False,
        "applied": True,
    }
    assert (roamed["ok"], roamed["status"], bad_mac["ok"], bad_mac["status"]) == (False, 400, False, 400)
    assert (itself["ok"], itself["status"]) == (False, 400)
    assert home.status(PHONE)["access_port"] == LAN
    # It leaves the satellite: said as {"events": [...]} too.
    r = sat.post("/api/satellite/stations", {"events": [{"event": "left", "mac": PHONE}]})
    assert r.status_code == 200 and r.json["results"][0]["ok"] is True
    assert ("satellite-station", f"{sat.ip}/joined/{PHONE}") in home.calls


def test_the_owner_lists_and_removes_a_satellite_and_its_access_ends_at_once(app, owner, home):
    sat = paired(app, owner, home)
    [listed] = owner.get("/api/satellites").json["satellites"]
    assert (listed["name"], listed["mac"], listed["ip"], listed["state"]) == ("Landing", SAT, sat.ip, "permitted")
    assert sat.get("/api/satellite/keys").status_code == 200  # the positive control
    assert owner.delete(f"/api/satellites/{listed['id']}").status_code == 200
    assert sat.get("/api/satellite/keys").status_code == 401
    # Its POST: refused first for the token of a session that is no more (403 csrf), as any signed-out one.
    r = sat.post("/api/satellite/stations", [{"event": "left", "mac": PHONE}])
    assert (r.status_code, r.json["code"]) == (403, "csrf")
    assert owner.get("/api/satellites").json["satellites"] == []
    assert owner.delete(f"/api/satellites/{listed['id']}").status_code == 404
    # Only a satellite is removed here: an owner's own account is not.
    assert owner.delete(f"/api/satellites/{owner.session().json['user']['id']}").status_code == 404


def test_only_the_owner_makes_codes_and_sees_satellites(app, owner, home):
    member, kiosk = signed_in(app, "member", owner), signed_in(app, "kiosk", owner)
    sat = paired(app, owner, home)
    for api in (member, kiosk, sat):
        assert api.post("/api/satellite-codes").status_code == 403
        assert api.get("/api/satellites").status_code == 403
        assert api.delete("/api/satellites/1").status_code == 403
    assert owner.post("/api/satellite-codes").status_code == 201  # the positive control


def test_without_a_satellite_session_nobody_reads_the_keys_or_reports_stations(app, owner, home):
    """A LAN device signed in as nobody, a member's browser, the wall panel, the owner: 401/403; the paired
    satellite: 200. And a hostile page in a member's or the owner's browser gets neither (no satellite session,
    and a POST from another site's page or without the page's token is refused first)."""
    keyid = phone_with_its_own_key(home)
    lan = Api(app, ip=home.joined(OTHER, state="permitted")["ip"])
    lan.session()
    member, kiosk = signed_in(app, "member", owner), signed_in(app, "kiosk", owner)
    for api, status in ((lan, 401), (member, 403), (kiosk, 403), (owner, 403)):
        r = api.get("/api/satellite/keys")
        assert r.status_code == status and GUEST not in r.get_data(as_text=True), (api.ip, r.status_code)
        r = api.post("/api/satellite/stations", [{"event": "joined", "mac": PHONE, "keyid": keyid}])
        assert r.status_code == status
    hostile = {"Origin": "http://evil.example"}
    assert member.post("/api/satellite/stations", [], headers=hostile).json["code"] == "origin"
    assert member.post("/api/satellite/stations", [], csrf=False).json["code"] == "csrf"
    assert home.status(PHONE)["access_port"] != LAN
    assert not [call for call in home.calls if call[0].startswith("satellite")]
    sat = paired(app, owner, home)
    assert sat.get("/api/satellite/keys").status_code == 200
    r = sat.post("/api/satellite/stations", [{"event": "joined", "mac": PHONE, "keyid": keyid}])
    assert r.json["results"][0]["ok"] is True and home.status(PHONE)["access_port"] == LAN
    # The satellite's own POST, made without its token or from another site's page: refused as any other.
    assert sat.post("/api/satellite/stations", [], csrf=False).json["code"] == "csrf"
    assert sat.post("/api/satellite/stations", [], headers=hostile).json["code"] == "origin"


def test_a_satellites_session_used_from_another_device_is_refused(app, owner, home):
    sat = paired(app, owner, home)
    thief = Api(app, ip=home.joined(OTHER, state="permitted")["ip"])
    thief.client.set_cookie("hw_session", sat.client.get_cookie("hw_session").value)
    thief.csrf = sat.csrf
    r = thief.get("/api/satellite/keys")
    assert (r.status_code, r.json["code"]) == (403, "satellite-device") and GUEST not in r.get_data(as_text=True)
    r = thief.post("/api/satellite/stations", [{"event": "joined", "mac": OTHER}])
    assert (r.status_code, r.json["code"]) == (403, "satellite-device")
    assert sat.get("/api/satellite/keys").status_code == 200  # the positive control: from its own address


def test_the_controller_refuses_the_satellite_role_every_household_verb(app, owner, home):
    """What a satellite's session reaches of the web UI: none of the household's pages."""
    sat = paired(app, owner, home)
    for path in ("/api/devices", "/api/radio", "/api/accounts", "/api/apps"):
        assert sat.get(path).status_code == 403, path
    assert sat.post(f"/api/devices/{PHONE}/permit").status_code == 403
    assert authority.refusal("satellite", "permit", frozenset()) is not None  # and the controller's table says so


def test_a_wrong_or_expired_code_costs_a_guess_and_guesses_are_limited(app, owner, home):
    sat = Api(app, ip=cabled(home, SAT))
    sat.get("/api/satellite/pair")
    assert sat.post("/api/satellite/pair", {"code": "WRONGONE"}).status_code == 400
    # A wall panel's code pairs no satellite (nor a satellite's code a panel).
    panel_code = owner.post("/api/pairing-codes").json["code"]
    assert sat.post("/api/satellite/pair", {"code": panel_code}).status_code == 400
    panel = Api(app)
    panel.session()
    assert panel.post("/api/pair", {"code": owner.post("/api/satellite-codes").json["code"]}).status_code == 400
    # An expired code.
    accounts = services(app).accounts
    expired = owner.post("/api/satellite-codes").json["code"]
    accounts._tx("update satellite_codes set expires = expires - ?", (PAIRING_TTL + 1,))
    assert sat.post("/api/satellite/pair", {"code": expired}).status_code == 400
    # A bad name spends neither the code nor a guess.
    code = owner.post("/api/satellite-codes").json["code"]
    assert sat.post("/api/satellite/pair", {"code": code, "name": "x" * 40}).status_code == 400
    assert home.status(SAT)["state"] == "pending"  # nothing let it in
    assert sat.post("/api/satellite/pair", {"code": "WRONGTWO"}).status_code == 400  # the 4th guess
    assert sat.post("/api/satellite/pair", {"code": "WRONGTRE"}).status_code == 400  # the 5th
    r = sat.post("/api/satellite/pair", {"code": code})
    assert r.status_code == 429 and int(r.headers["Retry-After"]) > 0  # even the right code, now
    assert home.status(SAT)["state"] == "pending"
    # The positive control: from another satellite's address, the unspent code pairs.
    other = Api(app, ip=cabled(home, OTHER))
    other.get("/api/satellite/pair")
    assert other.post("/api/satellite/pair", {"code": code}).status_code == 201
    assert other.post("/api/satellite/pair", {"code": code}).status_code == 400  # a code works once


def test_a_held_back_device_reaches_the_pairing_and_nothing_else(app, owner, home):
    sat = Api(app, ip=cabled(home, SAT))
    assert sat.get("/api/satellite/pair").status_code == 200
    for path in ("/api/session", "/api/satellite/keys", "/api/devices"):
        assert sat.get(path).status_code == 403, path  # the gate: a device not let in
    sat.get("/api/satellite/pair")
    assert sat.post("/api/satellite/pair", {"code": owner.post("/api/satellite-codes").json["code"]}).status_code == 201
    assert sat.get("/api/satellite/keys").status_code == 200


def test_a_satellite_the_router_cannot_place_is_told_why(app, owner, home):
    """No address of a device's (the router's own loopback), or a blocked device: 409, and the code kept."""
    loopback = Api(app)
    loopback.get("/api/satellite/pair")
    code = owner.post("/api/satellite-codes").json["code"]
    r = loopback.post("/api/satellite/pair", {"code": code})
    assert r.status_code == 409 and "no device" in r.json["error"]
    blocked = Api(app, ip=cabled(home, OTHER))
    home.call("blacklist", OTHER)
    blocked.get("/api/satellite/pair")
    assert blocked.post("/api/satellite/pair", {"code": code}).status_code == 409
    assert home.status(OTHER)["state"] == "blacklisted"
    # With one access port only, a paired satellite's stations cannot be placed: each event says so.
    sat = paired(app, owner, home)
    reconnected(home, WLAN)
    r = sat.post("/api/satellite/stations", [{"event": "left", "mac": PHONE}])
    [result] = r.json["results"]
    assert (result["ok"], result["status"]) == (False, 409) and "one access port only" in result["error"]


def test_at_most_64_events_in_one_report(app, owner, home):
    sat = paired(app, owner, home)
    assert sat.post("/api/satellite/stations", [{"event": "left", "mac": PHONE}] * 65).status_code == 400
    assert sat.post("/api/satellite/stations", {"not": "a list"}).status_code == 400
    r = sat.post("/api/satellite/stations", [{"event": "left", "mac": PHONE}] * 64)
    assert r.status_code == 200 and len(r.json["results"]) == 64


def test_the_board_shows_a_satellite_stations_signal_and_the_access_point_it_is_on(app, owner, home):
    """The satellite reports its stations' links: the board shows the phone's signal there and names the
    satellite; a station the satellite does not hold (on the router's radio) gets no figures from it."""
    keyid = phone_with_its_own_key(home)
    home.joined(OTHER, state="permitted")
    sat = paired(app, owner, home)
    home.station_joined(PHONE, keyid)
    home.station_joined(OTHER, "")
    assert sat.post("/api/satellite/stations", [{"event": "joined", "mac": PHONE, "keyid": keyid}]).json["results"][0][
        "ok"
    ]
    links = [
        {"mac": PHONE, "rssi": -61, "retries": 2, "packets": 50},
        {"mac": OTHER, "rssi": -20, "retries": 0, "packets": 50},  # on the router's radio: not the satellite's
    ]
    r = sat.post("/api/satellite/links", {"links": links})
    assert r.status_code == 200 and r.json == {"logged": 1, "roamed_away": [], "applied": True}, r.json
    hub = services(app).hub
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        board = {d["mac"]: d for d in hub.devices()}
        if board.get(PHONE, {}).get("rssi") is not None:
            break
        time.sleep(0.1)
    assert (board[PHONE]["rssi"], board[PHONE]["access_point"]) == (-61, "Landing")
    assert board[OTHER]["rssi"] is None and board[OTHER]["access_point"] is None
    # Refused whole: too many, or not a report; nobody but the satellite's session reports.
    assert sat.post("/api/satellite/links", {"links": links * 17}).status_code == 400
    assert sat.post("/api/satellite/links", [links]).status_code == 400
    assert sat.post("/api/satellite/links", {"links": [{"mac": PHONE, "rssi": "loud"}]}).status_code == 400
    assert owner.post("/api/satellite/links", {"links": links}).status_code == 403
