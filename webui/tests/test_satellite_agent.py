"""The satellite's own agent as the image ships it (`homework_image.satellite.RouterLink`) against this web
UI: its pairing (session, CSRF token, code), its keys kept in step (the version as ETag), its stations'
events and the router's answers, and its removal. urllib's requests are handed to the web UI's WSGI app as
from the satellite's leased address (`ToTheApp`): the client's own cookie and token handling is what runs."""

from __future__ import annotations

import email.message
import io
import urllib.request
import urllib.response

import pytest
from conftest import make_app, setup_owner
from stack import WLAN
from test_satellites import GUEST, LAN, PHONE, SAT, cabled, home, phone_with_its_own_key  # noqa: F401 (a fixture)

from homework_image import satellite
from homework_webui.services import services

ROUTER = "10.2.0.1"  # the router's LAN address, where a satellite reaches the web UI (lan.ROUTER_ADDRESS)


class ToTheApp(urllib.request.HTTPHandler):
    """urllib's HTTP requests answered by the web UI's app, as from `ip` (no cookies kept here: the client's).
    In place of urllib's own HTTP handler, so that nothing goes to the network."""

    def __init__(self, app, ip: str):
        self.client, self.ip = app.test_client(use_cookies=False), ip

    def http_open(self, req):
        r = self.client.open(
            req.selector,
            method=req.get_method(),
            headers=dict(req.header_items()),
            data=req.data,
            environ_base={"REMOTE_ADDR": self.ip},
        )
        headers = email.message.Message()
        for name, value in r.headers.items():
            headers[name] = value
        response = urllib.response.addinfourl(io.BytesIO(r.get_data()), headers, req.full_url, r.status_code)
        response.msg = r.status
        return response


@pytest.fixture
def router_app(tmp_path, controller, hwdb):
    """The web UI as the router runs it: answering to its LAN address too (`--listen 10.2.0.1:8080`)."""
    app = make_app(tmp_path, controller, hwdb, name="router", hostnames=(ROUTER,))
    yield app
    services(app).hub.stop()


def link_from(app, ip: str, tmp_path) -> satellite.RouterLink:
    opener = urllib.request.build_opener(satellite.NoRedirects, ToTheApp(app, ip))
    return satellite.RouterLink(f"http://{ROUTER}", tmp_path / "session.json", opener)


def test_the_satellite_pairs_keeps_its_keys_in_step_and_reports_its_stations(router_app, home, tmp_path):  # noqa: F811
    app, owner = router_app, setup_owner(router_app)
    keyid = phone_with_its_own_key(home)
    ip = cabled(home, SAT)
    link = link_from(app, ip, tmp_path)
    assert not link.paired
    with pytest.raises(satellite.SatelliteError, match="refused the pairing code"):
        link.pair("WRONGONE", "Landing")
    link.pair(owner.post("/api/satellite-codes").json["code"], "Landing")
    assert link.paired and (tmp_path / "session.json").stat().st_mode & 0o077 == 0  # its session: root's alone
    assert home.status(SAT)["state"] == "permitted"
    version, network = link.network("")
    assert (network.ssid, network.passphrase, network.country) == ("Our house", GUEST, "GB")
    assert [(k.mac, k.keyid) for k in network.keys] == [(PHONE, keyid)]
    assert link.network(version) is None  # unchanged: nothing sent
    home.call("revoke-wifi-key", PHONE)
    changed = link.network(version)
    assert changed is not None and changed[0] != version and changed[1].keys == ()
    # A station joins with the phone's key again issued: the router binds it to the satellite's port.
    keyid = home.call("wifi-key", PHONE)["keyid"]
    [joined, copy] = link.report(
        [{"event": "joined", "mac": PHONE, "keyid": keyid}, {"event": "joined", "mac": PHONE, "keyid": "guest"}]
    )
    assert joined["ok"] and joined["access_port"] == LAN and not joined["off_the_air"]
    assert copy["ok"] and copy["off_the_air"]  # its MAC with the guest passphrase: a copy, off the air
    # Its stations' links: the phone's, at its port, is logged; the satellite's own (its cable) is not.
    links = [
        {"mac": PHONE, "rssi": -58, "retries": 1, "packets": 30},
        {"mac": SAT, "rssi": -40, "retries": 0, "packets": 9},
    ]
    assert link.report_links(links) == []  # the phone is at the satellite: nothing for it to forget
    # The phone roams to the router's radio without telling the satellite: the next report's answer names it.
    with home.lock:
        home._apply(home.router.joining.station_joined(PHONE, keyid, WLAN))
    assert link.report_links(links) == [PHONE]
    # Another device with the satellite's session file: refused, its keys unread; the satellite itself still reads.
    thief = link_from(app, home.joined("02:00:00:00:00:bb", state="permitted")["ip"], tmp_path)
    with pytest.raises(satellite.Unpaired):
        thief.network("")
    assert link.network("") is not None
    # The owner removes it: it is told so at its next poll.
    [listed] = owner.get("/api/satellites").json["satellites"]
    owner.delete(f"/api/satellites/{listed['id']}")
    with pytest.raises(satellite.Unpaired):
        link.network(version)
    with pytest.raises(satellite.Unpaired):
        link.report_links(links)


def test_a_satellites_reports_are_taken_only_with_its_token(router_app, home, tmp_path):  # noqa: F811
    app, owner = router_app, setup_owner(router_app)
    ip = cabled(home, SAT)
    link = link_from(app, ip, tmp_path)
    link.pair(owner.post("/api/satellite-codes").json["code"], "Landing")
    link.session["csrf"] = "not its token"  # as a page of another site would send
    with pytest.raises(satellite.SatelliteError, match="did not take the stations' events"):
        link.report([{"event": "left", "mac": PHONE}])
    link.session = satellite.RouterLink(f"http://{ROUTER}", tmp_path / "session.json").session  # from its file
    assert link.report([{"event": "left", "mac": PHONE}])[0]["ok"]
