"""The router's own radio settings (issue 25): the owner reads and changes them; nobody else may, and
what the controller refuses changes nothing. Against the controller's own ws.v1, which reads, checks and
writes the settings file (`radio_settings.RadioSettingsFile`)."""

import logging

import pytest
from conftest import Api, signed_in

from homework_controller.radio.radio_settings import RadioSettingsFile

GUEST = "correct horse battery staple"
FILE = f"ssid=Homework\npassphrase={GUEST}\ncountry=00\nband=2.4\nchannel=6\n"


@pytest.fixture
def wifi_conf(tmp_path, controller):
    path = tmp_path / "wifi.conf"
    path.write_text(FILE)
    controller.radio_settings = RadioSettingsFile(str(path))  # as started with --radio-settings
    return path


def radio_calls(controller) -> list:
    return [name for name, _ in controller.calls if "radio-settings" in name]


def test_the_owner_reads_and_changes_the_radio_and_is_told_every_device_rejoins(owner, controller, wifi_conf, caplog):
    caplog.set_level(logging.DEBUG)
    r = owner.get("/api/radio")
    assert r.status_code == 200 and r.headers["Cache-Control"] == "no-store"
    assert r.json["radio"] == {
        "ssid": "Homework",
        "passphrase": GUEST,
        "country": "00",
        "band": "2.4",
        "channel": 6,
        "problems": [],
    }
    assert r.json["channels"]["2.4"] == list(range(1, 14)) and r.json["world_channels"] == list(range(1, 12))
    assert r.json["restarts"] == ["ssid", "country", "band", "channel"]  # not the guest passphrase
    r = owner.put("/api/radio", {"channel": 11, "country": "gb", "ssid": "Our house"})
    assert r.status_code == 200, r.json
    assert r.json["radio"]["channel"] == 11 and r.json["radio"]["country"] == "GB"
    assert r.json["restarting"] is True and "every device joins again" in r.json["message"]
    assert r.headers["Cache-Control"] == "no-store"
    assert "channel=11\n" in wifi_conf.read_text() and "ssid=Our house\n" in wifi_conf.read_text()
    assert owner.get("/api/radio").json["radio"]["channel"] == 11
    # The choice of a country opens 5 GHz.
    r = owner.put("/api/radio", {"band": "5", "channel": 36})
    assert r.status_code == 200 and (r.json["radio"]["band"], r.json["radio"]["channel"]) == ("5", 36)
    assert GUEST not in caplog.text


def test_members_wall_panels_strangers_and_other_sites_are_refused_beside_the_owner(app, owner, controller, wifi_conf):
    member, kiosk = signed_in(app, "member", owner), signed_in(app, "kiosk", owner)
    anonymous = Api(app)
    anonymous.session()
    for api, status, code in ((member, 403, "role"), (kiosk, 403, "role"), (anonymous, 401, "signin")):
        r = api.get("/api/radio")
        assert (r.status_code, r.json.get("code")) == (status, code)
        assert GUEST not in r.get_data(as_text=True)
        r = api.put("/api/radio", {"channel": 1})
        assert (r.status_code, r.json.get("code")) == (status, code)
    # The owner's own browser, but the request made by another site's page, or without the page's token.
    r = owner.put("/api/radio", {"channel": 1}, headers={"Origin": "http://evil.example"})
    assert (r.status_code, r.json["code"]) == (403, "origin")
    r = owner.put("/api/radio", {"channel": 1}, csrf=False)
    assert (r.status_code, r.json["code"]) == (403, "csrf")
    assert wifi_conf.read_text() == FILE and radio_calls(controller) == []
    # The positive control: the same request from the owner's page.
    assert owner.put("/api/radio", {"channel": 1}).status_code == 200
    assert "channel=1\n" in wifi_conf.read_text()


@pytest.mark.parametrize(
    "changes, field",
    [
        ({"channel": 14}, "channel"),
        ({"band": "5", "channel": 36}, "band"),  # the world domain: 5 GHz needs a country
        ({"channel": 13}, "channel"),  # listen-only in the world domain
        ({"passphrase": "short"}, "passphrase"),
        ({"passphrase": "pass|word here"}, "passphrase"),
        ({"ssid": "x" * 33}, "ssid"),
        ({"ssid": "two\nlines"}, "ssid"),
        ({"country": "G1"}, "country"),
        ({"colour": "blue"}, "colour"),
    ],
)
def test_a_bad_value_is_a_clear_400_naming_its_field_and_changes_nothing(owner, wifi_conf, changes, field):
    r = owner.put("/api/radio", changes)
    assert r.status_code == 400 and r.json["code"] == "radio-settings"
    assert list(r.json["fields"]) == [field] and r.json["fields"][field] in r.json["error"]
    assert wifi_conf.read_text() == FILE


def test_a_body_that_is_not_a_settings_object_is_refused(owner, wifi_conf):
    r = owner.call("PUT", "/api/radio", ["channel", 1])
    assert r.status_code == 400 and "JSON object" in r.json["error"]
    assert wifi_conf.read_text() == FILE


def test_a_router_without_a_radio_says_so(owner, controller):
    for method in ("GET", "PUT"):
        r = owner.call(method, "/api/radio", {"channel": 1})
        assert r.status_code == 501 and r.json["code"] == "radio-unavailable", method
        assert "no radio of its own" in r.json["error"]
