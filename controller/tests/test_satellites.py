"""A satellite access point's channel to the router (issue 37): ws.v1's `satellite-keys` (what it serves the
network with) and `satellite-station` (which station joined or left it), the satellite role's alone. Through
the router core and ws.v1's own path (`Ws1Service.call`) over the fake switch with two access ports: the
router's radio (WLAN) and the satellite's cable (LAN). Each refusal beside its positive control."""

from __future__ import annotations

import io
import json
from urllib.parse import quote, unquote

import pytest
from fakeoftable import FakeSwitch
from support import LAPTOP, PHONE, ROUTER_MAC, TABLET
from test_access_ports import join_on, reaches_the_internet

from homework_controller.api import api, authority, operations
from homework_controller.api.server import TimedLock
from homework_controller.api.ws_service import Ws1Service
from homework_controller.core import satellites
from homework_controller.core.router import HomeRouter
from homework_controller.effects import LogRow
from homework_controller.errors import ApiError
from homework_controller.model import BadMac
from homework_controller.policy import wifi_keys
from homework_controller.radio.radio_settings import RadioSettingsFile
from homework_controller.store import DeviceStore

WLAN, LAN = 1, 2  # the router's radio, and the satellite's cable
SATELLITE = LAPTOP  # the satellite's own device (its cable's MAC)
GUEST = "correct horse battery"
SETTINGS = f"ssid=Our house\npassphrase={GUEST}\ncountry=GB\nband=2.4\nchannel=6\n"


class Host(Ws1Service):
    """ws.v1's calls on the router core, its effects carried out by the fake switch."""

    def __init__(self, router: HomeRouter, switch: FakeSwitch, settings: str):
        self.router, self.lock, self.radio_settings = router, TimedLock(), RadioSettingsFile(settings)
        self.switch, self.switch_ready = switch, True
        self._apply = lambda effects, at_once=False: switch.apply(effects)


@pytest.fixture
def home(tmp_path, db_path, clock):
    settings = tmp_path / "wifi.conf"
    settings.write_text(SETTINGS)
    router = HomeRouter(DeviceStore(db_path), clock=clock)
    switch = FakeSwitch()
    switch.apply(router.switch_ready((WLAN, LAN), ROUTER_MAC))
    router.passphrases.network_named("Our house")
    host = Host(router, switch, str(settings))
    yield host
    router.store.close()


def own_key(router, mac) -> str:
    return router.decisions.issue_wifi_key(mac)["keyid"]


def station(host, ip, event, mac, keyid="", role=authority.SATELLITE):
    return host.call("satellite-station", ip, event, mac, keyid, role=role)


# -- satellite-keys


def test_the_version_changes_exactly_when_what_a_satellite_serves_does():
    radio = {"ssid": "Our house", "passphrase": GUEST, "country": "GB", "band": "2.4", "channel": 6, "problems": []}
    phone = wifi_keys.WifiKey(PHONE, "phone's own passphrase", created=1.0)
    tablet = wifi_keys.WifiKey(TABLET, "tablet's own passphrase", created=2.0)
    served = satellites.keys_for_satellite(radio, [phone, tablet], [])
    assert served["keys"] == [
        {"mac": PHONE, "keyid": wifi_keys.device_keyid(PHONE), "passphrase": "phone's own passphrase"},
        {"mac": TABLET, "keyid": wifi_keys.device_keyid(TABLET), "passphrase": "tablet's own passphrase"},
    ]
    assert (served["ssid"], served["passphrase"], served["channel"]) == ("Our house", GUEST, 6)
    assert "problems" not in served
    # The same content, in any order, when the key was used or not: the same version.
    used = wifi_keys.WifiKey(PHONE, "phone's own passphrase", created=1.0, used=5.0)
    assert satellites.keys_for_satellite(dict(radio, problems=["x"]), [tablet, used], []) == served
    # Any change of what it serves: another version.
    versions = {
        served["version"],
        satellites.keys_for_satellite(radio, [phone], [])["version"],  # the tablet's key revoked
        satellites.keys_for_satellite(dict(radio, channel=11), [phone, tablet], [])["version"],
        satellites.keys_for_satellite(dict(radio, passphrase="another guest one"), [phone, tablet], [])["version"],
        satellites.keys_for_satellite(radio, [wifi_keys.WifiKey(PHONE, "a new one", 3.0), tablet], [])["version"],
        satellites.keys_for_satellite(radio, [phone, tablet], [LAPTOP])["version"],  # a device blacklisted
    }
    assert len(versions) == 6


def test_a_satellite_reads_every_devices_own_key_and_a_revoked_one_is_gone_at_once(home):
    join_on(home.router, home.switch, PHONE, WLAN)
    join_on(home.router, home.switch, TABLET, WLAN)
    phone_key = home.router.decisions.issue_wifi_key(PHONE)
    own_key(home.router, TABLET)
    served = home.call("satellite-keys", role=authority.SATELLITE)
    assert (served["ssid"], served["passphrase"], served["country"], served["band"], served["channel"]) == (
        "Our house",
        GUEST,
        "GB",
        "2.4",
        6,
    )
    assert {k["mac"] for k in served["keys"]} == {PHONE, TABLET}
    assert {"mac": PHONE, "keyid": phone_key["keyid"], "passphrase": phone_key["passphrase"]} in served["keys"]
    assert home.call("satellite-keys", role=authority.SATELLITE)["version"] == served["version"]  # unchanged
    home.router.decisions.revoke_wifi_key(TABLET)
    after = home.call("satellite-keys", role=authority.SATELLITE)
    assert [k["mac"] for k in after["keys"]] == [PHONE] and after["version"] != served["version"]


def test_a_blacklisted_device_is_denied_at_the_satellite_too_and_whitelisting_it_lifts_that(home):
    """The satellite's hostapd must refuse its handshake as the router's own radio does (`AuthenticatorDeny`),
    or a blacklisted phone would complete one there (the switch drops its frames, but it would be on the air)."""
    join_on(home.router, home.switch, PHONE, WLAN)
    join_on(home.router, home.switch, TABLET, WLAN)
    home.router.decisions.permit(TABLET)
    before = home.call("satellite-keys", role=authority.SATELLITE)
    assert before["denied"] == []
    home.router.decisions.blacklist(PHONE)
    denied = home.call("satellite-keys", role=authority.SATELLITE)
    assert denied["denied"] == [PHONE] and denied["version"] != before["version"]  # the permitted tablet is not
    home.router.decisions.whitelist(PHONE)
    lifted = home.call("satellite-keys", role=authority.SATELLITE)
    assert lifted["denied"] == [] and lifted["version"] != denied["version"]


@pytest.mark.parametrize("role", [r for r in authority.ROLES if r != authority.SATELLITE])
def test_no_other_role_reads_the_keys_not_even_the_owner(home, role):
    join_on(home.router, home.switch, PHONE, WLAN)
    own_key(home.router, PHONE)
    with pytest.raises(authority.Forbidden, match="may not read the Wi-Fi keys a satellite access point serves"):
        home.call("satellite-keys", role=role)
    assert home.call("satellite-keys", role=authority.SATELLITE)["keys"]  # the positive control


def test_without_a_radio_settings_file_there_is_nothing_to_serve(home):
    home.radio_settings = RadioSettingsFile("")
    with pytest.raises(ApiError) as refused:
        home.call("satellite-keys", role=authority.SATELLITE)
    assert refused.value.status == 501


# -- satellite-station


def test_a_device_that_joins_the_satellite_with_its_own_key_is_bound_to_the_satellites_port(home):
    satellite = join_on(home.router, home.switch, SATELLITE, LAN)  # its cable is in LAN
    phone = join_on(home.router, home.switch, PHONE, WLAN)
    keyid = own_key(home.router, PHONE)
    home.switch.apply(home.router.joining.station_joined(PHONE, keyid, WLAN))  # on the router's own radio
    assert home.router.status(PHONE)["access_port"] == WLAN
    answer = station(home, satellite, "joined", PHONE, keyid)
    assert answer == {
        "mac": PHONE,
        "event": "joined",
        "port": LAN,
        "access_port": LAN,
        "off_the_air": False,
        "applied": True,
    }
    assert home.router.status(PHONE)["access_port"] == LAN
    assert reaches_the_internet(home.switch, LAN, PHONE, phone)  # its rules followed it to the satellite's port
    assert not reaches_the_internet(home.switch, WLAN, PHONE, phone)
    # The router's radio says it left: nothing changes; it roams back, and the satellite says it left.
    home.switch.apply(home.router.joining.station_left(PHONE, WLAN))
    home.switch.apply(home.router.joining.station_joined(PHONE, keyid, WLAN))
    assert home.router.status(PHONE)["access_port"] == WLAN
    assert station(home, satellite, "left", PHONE)["access_port"] == WLAN
    assert reaches_the_internet(home.switch, WLAN, PHONE, phone)


def test_a_guest_passphrase_device_moves_to_the_satellite_on_its_word(home):
    """The radio it left says nothing yet (a roaming station need not tell it): the satellite's word moves it."""
    satellite = join_on(home.router, home.switch, SATELLITE, LAN)
    join_on(home.router, home.switch, PHONE, WLAN)
    home.switch.apply(home.router.joining.station_joined(PHONE, "", WLAN))
    assert station(home, satellite, "joined", PHONE, "")["access_port"] == LAN
    home.switch.apply(home.router.joining.station_left(PHONE, WLAN))  # minutes later
    assert home.router.status(PHONE)["access_port"] == LAN


def test_a_copy_of_a_device_with_its_own_key_is_put_off_the_satellites_air_not_the_routers(home):
    """Its MAC at the satellite with the guest passphrase: the satellite is told to put it off its air; the
    router's radio, where the phone itself is, is told nothing (its hostapd would drop the phone)."""
    satellite = join_on(home.router, home.switch, SATELLITE, LAN)
    phone = join_on(home.router, home.switch, PHONE, WLAN)
    keyid = own_key(home.router, PHONE)
    home.switch.apply(home.router.joining.station_joined(PHONE, keyid, WLAN))
    copy = station(home, satellite, "joined", PHONE, "guest")
    assert copy["off_the_air"] is True and copy["access_port"] == WLAN
    assert home.router.status(PHONE)["clone_suspected"] is not None
    assert reaches_the_internet(home.switch, WLAN, PHONE, phone)  # the phone itself keeps working
    # The phone itself roaming there with its own key: welcome (the positive control).
    assert station(home, satellite, "joined", PHONE, keyid)["off_the_air"] is False


# -- satellite-links


def logged_links(home) -> list[tuple]:
    """The Links rows the router's effects write from now on (to hwdb, at the edge)."""
    rows: list[tuple] = []
    apply = home._apply

    def recording(effects, at_once=False):
        rows.extend(e.row for e in effects if isinstance(e, LogRow) and e.table == "Links")
        apply(effects, at_once)

    home._apply = recording
    return rows


def link(mac, rssi=-52, retries=1, packets=40) -> dict:
    return {"mac": mac, "rssi": rssi, "retries": retries, "packets": packets}


def test_a_satellite_logs_the_links_of_its_own_stations_only(home):
    """The board shows a station's signal at the satellite it is on; a satellite cannot write the link of a
    station on the router's radio (or of itself)."""
    satellite = join_on(home.router, home.switch, SATELLITE, LAN)
    join_on(home.router, home.switch, PHONE, WLAN)
    join_on(home.router, home.switch, TABLET, WLAN)
    home.switch.apply(home.router.joining.station_joined(TABLET, "", WLAN))
    station(home, satellite, "joined", PHONE, "")  # the phone roamed to the satellite; the tablet did not
    rows = logged_links(home)
    report = {"links": [link(PHONE), link(TABLET.upper(), rssi=-30), link(SATELLITE)]}
    answer = home.call("satellite-links", satellite, report, role=authority.SATELLITE)
    assert answer == {"logged": 1, "roamed_away": [], "applied": True}
    assert rows == [(PHONE, -52, 1, 40)]


def test_a_satellite_is_told_to_forget_the_stations_that_roamed_away_from_it_without_a_word(home):
    """A station that left the satellite for the router's radio did not tell the satellite, which still lists it
    (and would question its stale association at its next visit, keeping it waiting): the answer to the
    satellite's next links report names it, to forget. A station that is at the satellite, or that the satellite
    never said joined it, is not named."""
    satellite = join_on(home.router, home.switch, SATELLITE, LAN)
    join_on(home.router, home.switch, PHONE, WLAN)
    join_on(home.router, home.switch, TABLET, WLAN)
    home.switch.apply(home.router.joining.station_joined(TABLET, "", WLAN))
    station(home, satellite, "joined", PHONE, "")  # the phone roamed to the satellite
    report = {"links": [link(PHONE), link(TABLET)]}
    assert home.call("satellite-links", satellite, report, role=authority.SATELLITE)["roamed_away"] == []
    home.switch.apply(home.router.joining.station_joined(PHONE, "", WLAN))  # and back to the router's radio
    answer = home.call("satellite-links", satellite, report, role=authority.SATELLITE)
    assert answer == {"logged": 0, "roamed_away": [PHONE], "applied": True}
    station(home, satellite, "left", PHONE)  # the satellite forgot it: hostapd says it left
    assert home.call("satellite-links", satellite, report, role=authority.SATELLITE)["roamed_away"] == []


@pytest.mark.parametrize(
    "report",
    [
        {"links": [link(PHONE)] * 33},
        {"links": {"mac": PHONE}},
        {"links": [link(PHONE, rssi=12)]},
        {"links": [link(PHONE, packets=-1)]},
        {"links": [link(PHONE, retries=True)]},
        {"links": [link("not a mac")]},
        {"links": ["02:00:00:00:00:01"]},
        {},
    ],
)
def test_a_link_report_that_is_not_one_is_refused_whole_and_logs_nothing(home, report):
    satellite = join_on(home.router, home.switch, SATELLITE, LAN)
    join_on(home.router, home.switch, PHONE, WLAN)
    home.switch.apply(home.router.joining.station_joined(PHONE, "", WLAN))
    station(home, satellite, "joined", PHONE, "")  # it roamed to the satellite
    rows = logged_links(home)
    with pytest.raises(ApiError) as refused:
        home.call("satellite-links", satellite, report, role=authority.SATELLITE)
    assert refused.value.status == 400 and rows == []
    assert home.call("satellite-links", satellite, {"links": [link(PHONE)]}, role=authority.SATELLITE)["logged"] == 1


def test_a_satellite_the_router_cannot_place_is_told_why_and_nothing_changes(home, tmp_path, clock):
    join_on(home.router, home.switch, PHONE, WLAN)
    keyid = own_key(home.router, PHONE)
    home.switch.apply(home.router.joining.station_joined(PHONE, keyid, WLAN))
    pending = join_on(home.router, home.switch, SATELLITE, LAN, permit=False)

    def refused(ip, why, host=home):
        before = host.router.status(PHONE)["access_port"], sorted(map(repr, host.switch.rules))
        with pytest.raises(ApiError, match=why) as exc:
            station(host, ip, "joined", PHONE, keyid)
        assert exc.value.status == 409
        assert (host.router.status(PHONE)["access_port"], sorted(map(repr, host.switch.rules))) == before

    refused("10.2.200.10", "no device holds 10.2.200.10")
    refused("not an address", "no device holds")
    refused(pending, "is pending: only a permitted device reports as a satellite")
    home.switch.apply(home.router.decisions.permit(SATELLITE))
    assert station(home, pending, "joined", PHONE, keyid)["access_port"] == LAN  # the positive control
    # A router with one access port has no satellite port to bind a station to.
    one_port = HomeRouter(DeviceStore(str(tmp_path / "one.sqlite")), clock=clock)
    switch = FakeSwitch()
    switch.apply(one_port.switch_ready(WLAN, ROUTER_MAC))
    alone = Host(one_port, switch, str(tmp_path / "wifi.conf"))
    satellite = join_on(one_port, switch, SATELLITE, WLAN)
    join_on(one_port, switch, PHONE, WLAN)
    one_port.passphrases.network_named("Our house")
    keyid = own_key(one_port, PHONE)
    refused(satellite, "on no access port of its own: the router has one access port only", host=alone)
    one_port.store.close()


@pytest.mark.parametrize(
    "event, mac, keyid, error",
    [
        ("roamed", PHONE, "", ApiError),
        ("JOINED", PHONE, "", ApiError),
        ("joined", "not a mac", "", BadMac),
        ("joined", "01:00:5e:00:00:01", "", BadMac),  # multicast: no station
        ("joined", PHONE, "dev key with spaces", ApiError),
        ("joined", PHONE, "x" * 33, ApiError),
        ("joined", PHONE, "dev-\n", ApiError),
        ("joined", SATELLITE, "", ApiError),  # the satellite itself
    ],
)
def test_bad_input_is_refused_before_anything_changes(home, event, mac, keyid, error):
    satellite = join_on(home.router, home.switch, SATELLITE, LAN)
    join_on(home.router, home.switch, PHONE, WLAN)
    before = home.router.status(), sorted(map(repr, home.switch.rules))
    with pytest.raises(error):
        station(home, satellite, event, mac, keyid)
    assert (home.router.status(), sorted(map(repr, home.switch.rules))) == before
    assert station(home, satellite, "joined", PHONE, "guest")["mac"] == PHONE  # the positive control


@pytest.mark.parametrize("role", [r for r in authority.ROLES if r != authority.SATELLITE])
def test_no_other_role_reports_a_station_not_even_the_owner(home, role):
    satellite = join_on(home.router, home.switch, SATELLITE, LAN)
    join_on(home.router, home.switch, PHONE, WLAN)
    keyid = own_key(home.router, PHONE)
    with pytest.raises(authority.Forbidden, match="may not say which station joined or left a satellite"):
        station(home, satellite, "joined", PHONE, keyid, role=role)
    assert home.router.status(PHONE)["access_port"] == WLAN
    assert station(home, satellite, "joined", PHONE, keyid)["access_port"] == LAN  # the positive control


def test_a_station_is_reported_through_ws_v1s_routes(home):
    """The path's arguments as a client sends them (a MAC's colons escaped), the key id in the query."""
    satellite = join_on(home.router, home.switch, SATELLITE, LAN)
    join_on(home.router, home.switch, PHONE, WLAN)
    keyid = own_key(home.router, PHONE)
    app = api.make_app(home.call)

    def post(path, query, role):
        environ = {
            "REQUEST_METHOD": "POST",
            "PATH_INFO": unquote(path),  # as the server decodes it
            "QUERY_STRING": query,
            "HTTP_HOST": "127.0.0.1:8081",
            "SERVER_PORT": "8081",
            "HTTP_X_HOMEWORK_ROLE": role,
            "wsgi.input": io.BytesIO(b""),
        }
        said = []
        body = b"".join(app(environ, lambda status, headers: said.append(status)))
        return int(said[0].split()[0]), json.loads(body)

    path = f"{operations.PREFIX}satellite-station/{satellite}/joined/{quote(PHONE, safe='')}"
    assert post(path, f"keyid={keyid}", "owner")[0] == 403
    assert post(path.replace("joined", "roamed"), f"keyid={keyid}", "satellite")[0] == 400
    assert post(path.replace(quote(PHONE, safe=""), "zz"), "keyid=", "satellite")[0] == 400
    status, answer = post(path, f"keyid={keyid}", "satellite")
    assert status == 200 and answer["access_port"] == LAN
