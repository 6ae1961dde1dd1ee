"""A device's own Wi-Fi passphrase and the copied-MAC warning (issue 10, item 11), against the
controller's core behind its ws.v1 (tests/stack.py), a real hwdb, and a real hostapd (without a radio)
that reads the devices' key file the controller writes."""

import logging

from conftest import Api, signed_in, sse, wait_for
from test_api import wait_hwdb

PHONE = "02:00:00:00:00:a1"
LAPTOP = "02:00:00:00:00:a2"


def has_keys(controller) -> bool:
    return any(d["wifi_key"] for d in controller.call("status"))


def test_owner_makes_shows_and_revokes_a_devices_own_passphrase(app, owner, controller, caplog):
    caplog.set_level(logging.DEBUG)
    controller.joined(PHONE, state="permitted", name="Kid's phone")
    r = owner.post(f"/api/devices/{PHONE}/wifi-key")
    assert r.status_code == 200, r.json
    key = r.json["wifi_key"]
    passphrase = key["passphrase"]
    assert len(passphrase) == 24 and key["ssid"] == "Home Wi-Fi"
    assert (key["applied"], key["note"]) == (True, "")  # hostapd took the key file
    assert key["qr"] == f"WIFI:T:WPA;S:Home Wi-Fi;P:{passphrase};;"
    assert r.headers["Cache-Control"] == "no-store"
    # Shown again: the same passphrase, still not to be kept by the browser.
    r = owner.get(f"/api/devices/{PHONE}/wifi-key")
    assert r.status_code == 200 and r.json["wifi_key"]["passphrase"] == passphrase
    assert r.headers["Cache-Control"] == "no-store"
    # Every page learns the device has one, and no list carries the passphrase itself.
    listed = owner.get("/api/devices")
    phone = next(d for d in listed.json["devices"] if d["mac"] == PHONE)
    assert phone["wifi_key"]["keyid"] == "dev-0200000000a1"
    assert passphrase not in listed.get_data(as_text=True)
    assert passphrase not in owner.get(f"/api/devices/{PHONE}").get_data(as_text=True)
    # A new one replaces it.
    again = owner.post(f"/api/devices/{PHONE}/wifi-key").json["wifi_key"]["passphrase"]
    assert again != passphrase and controller.call("show-wifi-key", PHONE)["passphrase"] == again

    r = owner.post(f"/api/devices/{PHONE}/wifi-key/revoke")
    assert r.status_code == 200
    assert r.json["revoked"] == {"mac": PHONE, "revoked": True, "applied": True, "note": ""}
    assert controller.status(PHONE)["wifi_key"] is None
    r = owner.get(f"/api/devices/{PHONE}/wifi-key")
    assert r.status_code == 404 and r.json["code"] == "no-wifi-key"
    assert owner.post(f"/api/devices/{PHONE}/wifi-key/revoke").status_code == 404
    assert owner.get(f"/api/devices/{PHONE}").json["device"]["wifi_key"] is None
    assert passphrase not in caplog.text and again not in caplog.text


def test_a_wall_panel_never_gets_a_passphrase_a_member_gets_their_own_devices(app, owner, controller):
    mine = controller.joined(PHONE, state="permitted")
    controller.joined(LAPTOP, state="permitted")
    kiosk = signed_in(app, "kiosk", owner)
    anonymous = Api(app)
    anonymous.session()
    for method, url in (
        ("POST", f"/api/devices/{PHONE}/wifi-key"),
        ("GET", f"/api/devices/{PHONE}/wifi-key"),
        ("POST", f"/api/devices/{PHONE}/wifi-key/revoke"),
    ):
        r = kiosk.call(method, url, {})
        assert r.status_code == 403 and r.json["code"] == "role", (method, url)
        assert anonymous.call(method, url, {}).status_code == 401
    assert not has_keys(controller) and not any(m.endswith("wifi-key") for m, _ in controller.calls)

    # A member signed in on their phone: the phone is theirs, the laptop is not.
    assert owner.post("/api/accounts", {"username": "kid", "password": "kid password"}).status_code == 201
    member = Api(app, ip=mine["ip"])
    member.session()
    assert member.post("/api/login", {"username": "kid", "password": "kid password"}).status_code == 200
    r = member.post(f"/api/devices/{PHONE}/wifi-key")
    assert (
        r.status_code == 200
        and r.json["wifi_key"]["passphrase"] == controller.call("show-wifi-key", PHONE)["passphrase"]
    )
    assert member.get(f"/api/devices/{PHONE}/wifi-key").status_code == 200
    for method, url in (("POST", f"/api/devices/{LAPTOP}/wifi-key"), ("GET", f"/api/devices/{LAPTOP}/wifi-key")):
        r = member.call(method, url, {})
        assert r.status_code == 403 and r.json["code"] == "role"
    assert controller.status(LAPTOP)["wifi_key"] is None
    # The owner may for any device; the kiosk still may not see the phone's.
    assert owner.post(f"/api/devices/{LAPTOP}/wifi-key").status_code == 200
    assert kiosk.get(f"/api/devices/{PHONE}/wifi-key").status_code == 403


def test_only_a_permitted_device_gets_one_and_bad_input_costs_only_itself(app, owner, controller):
    controller.joined(PHONE, state="pending")
    r = owner.post(f"/api/devices/{PHONE}/wifi-key")
    assert r.status_code == 400 and "only a permitted device" in r.json["error"]
    assert owner.post("/api/devices/not-a-mac/wifi-key").status_code == 400
    r = owner.post("/api/devices/02:00:00:00:00:ff/wifi-key")
    assert r.status_code == 404 and "has asked to join" in r.json["error"]
    assert not has_keys(controller)
    assert owner.post(f"/api/devices/{PHONE}/permit").status_code == 200
    assert owner.post(f"/api/devices/{PHONE}/wifi-key").status_code == 200


def test_without_a_wifi_name_own_passphrases_are_not_available(app, owner, controller):
    controller.joined(PHONE, state="permitted")
    controller.radio_named("")  # hostapd serves no network
    r = owner.post(f"/api/devices/{PHONE}/wifi-key")
    assert r.status_code == 501 and r.json["code"] == "wifi-keys-unavailable"
    assert "not available" in r.json["error"]
    controller.radio_named("Home Wi-Fi")
    assert owner.post(f"/api/devices/{PHONE}/wifi-key").status_code == 200


def test_a_copied_mac_reaches_the_wall_panel_live_and_a_decision_clears_it(app, owner, controller):
    controller.joined(PHONE, state="permitted", hostname="phone", name="Kid's phone")
    controller.joined(LAPTOP, state="permitted")
    kiosk = signed_in(app, "kiosk", owner)
    stream = sse(kiosk)
    wait_for(stream, lambda e, d: e == "devices", 5)
    wait_hwdb(app)
    controller.copied(PHONE, "intruder")  # another DHCP client asks with the phone's MAC
    alert = wait_for(stream, lambda e, d: e == "alert" and d["kind"] == "mac-clone", 5)
    assert alert["mac"] == PHONE and "Kid's phone" in alert["message"] and "'intruder'" in alert["message"]
    devices = wait_for(stream, lambda e, d: e == "devices" and any(x["clone_suspected"] for x in d), 5)
    by_mac = {d["mac"]: d for d in devices}
    assert by_mac[PHONE]["clone_suspected"]["differs"] == ["host name 'phone' -> 'intruder'"]
    assert by_mac[LAPTOP]["clone_suspected"] is None
    # Letting it in again is the household's "I have seen it".
    assert kiosk.post(f"/api/devices/{PHONE}/permit").status_code == 200
    phone = next(d for d in kiosk.get("/api/devices").json["devices"] if d["mac"] == PHONE)
    assert phone["clone_suspected"] is None and phone["state"] == "permitted"
