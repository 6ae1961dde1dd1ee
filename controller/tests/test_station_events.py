"""What the router's radio says of its stations, as the edge hears it (`StationEvents`): hostapd's events on
its control socket, and its `STA` answers asked there from the controller's own process (no `hostapd_cli`
per join), moving each station's rules to the radio's access port with the key it proved. A fake hostapd
answers on a real Unix datagram socket; the router core and the fake switch are the real ones."""

from __future__ import annotations

import pytest
from fakeoftable import FakeSwitch
from support import PHONE, ROUTER_MAC, TABLET
from test_access_ports import join_on

from homenet.fake_hostapd import FakeHostapd
from homework_controller.api.server import TimedLock
from homework_controller.config import Config
from homework_controller.edge.switch.station_events import StationEvents
from homework_controller.edge.switch.switch_connection import SwitchConnection
from homework_controller.radio import hostapd_ctrl

RADIO, CABLE = 1, 2  # the router's radio's access port, and a satellite's cable


@pytest.fixture
def radio(tmp_path, router):
    hostapd = FakeHostapd(str(tmp_path / "wlan0"))
    switch = FakeSwitch()
    switch.apply(router.switch_ready((RADIO, CABLE), ROUTER_MAC))
    connection = SwitchConnection()
    connection.radio_port = RADIO
    config = Config(hostapd_ctrl=hostapd.path, hostapd_conf=str(tmp_path / "hostapd.conf"))
    (tmp_path / "hostapd.conf").write_text("ssid=Home\n")
    events = StationEvents(router, TimedLock(), switch.apply, None, connection, config)  # type: ignore[arg-type]
    yield events, hostapd, switch
    hostapd.close()


def test_a_station_back_from_a_roam_is_judged_from_one_sta_on_the_socket_with_the_key_it_proved(radio, router):
    """A station roaming back to the router's radio completes a handshake there without `AP-STA-CONNECTED`:
    its key comes from hostapd's `STA` answer, asked once, and its rules move back to the radio's port."""
    events, hostapd, switch = radio
    join_on(router, switch, PHONE, CABLE)  # its lease taken at the satellite's cable
    router.passphrases.network_named("Home")
    keyid = router.decisions.issue_wifi_key(PHONE)["keyid"]
    hostapd.stations[PHONE] = f"{PHONE}\nflags=[AUTH][ASSOC][AUTHORIZED]\nkeyid={keyid}\n"
    events._on_hostapd_event(f"<3>EAPOL-4WAY-HS-COMPLETED {PHONE}")
    assert hostapd.asked == [f"STA {PHONE}"]
    assert router.status(PHONE)["access_port"] == RADIO  # proven with its own key: moved
    assert router.status(PHONE)["clone_suspected"] is None


def test_a_guest_station_amid_a_new_handshake_is_not_taken_for_the_device_whose_key_hostapd_names_then(radio, router):
    """hostapd 2.10 names the key id of the station's PMK as it is now: amid a roam-back's new handshake that is
    its key list's first entry, another device's own key (`hostapd_ctrl.handshake_under_way`). Judged then, the
    guest station was put off the air as a copy of that device. It is judged once its handshake is done."""
    events, hostapd, switch = radio
    join_on(router, switch, PHONE, CABLE)
    join_on(router, switch, TABLET, CABLE)  # on the guest passphrase, at the satellite's cable
    router.passphrases.network_named("Home")
    phones_key = router.decisions.issue_wifi_key(PHONE)["keyid"]
    wpa2 = "flags=[AUTH][ASSOC][AUTHORIZED]\nAKMSuiteSelector=00-0f-ac-2\n"
    hostapd.stations[TABLET] = f"{TABLET}\n{wpa2}hostapdWPAPTKState=7\nkeyid={phones_key}\n"
    events._on_hostapd_event(f"<3>EAPOL-4WAY-HS-COMPLETED {TABLET}")
    assert router.status(TABLET)["clone_suspected"] is None and router.status(TABLET)["access_port"] == CABLE
    assert RADIO not in router.port_binding.associated.get(TABLET, set())  # not judged at all yet
    # Its handshake done, with the guest passphrase: the radio's word is heard (its frames there then move it).
    hostapd.stations[TABLET] = f"{TABLET}\n{wpa2}hostapdWPAPTKState=11\nkeyid=guest\n"
    events._on_hostapd_event(f"<3>EAPOL-4WAY-HS-COMPLETED {TABLET}")
    assert router.status(TABLET)["clone_suspected"] is None and router.port_binding.associated[TABLET] == {RADIO}


def test_a_guest_join_asks_hostapd_whether_it_came_over_sae_and_a_station_gone_meanwhile_moves_nothing(
    radio, router, monkeypatch
):
    events, hostapd, switch = radio
    monkeypatch.setattr(hostapd_ctrl, "command", no_hostapd_cli)  # nothing started per join
    join_on(router, switch, TABLET, CABLE)
    hostapd.stations[TABLET] = f"{TABLET}\nflags=[AUTH][ASSOC][AUTHORIZED]\nAKMSuiteSelector=00-0f-ac-2\n"
    events._on_hostapd_event(f"<3>AP-STA-CONNECTED {TABLET}")  # WPA2 with the guest passphrase
    assert hostapd.asked == [f"STA {TABLET}"]
    assert router.port_binding.associated[TABLET] == {RADIO}  # the radio's word, heard with no key
    # Back from a roam, but gone before hostapd was asked (it answers FAIL): nothing is judged.
    del hostapd.stations[TABLET]
    before = router.status(TABLET)
    events._on_hostapd_event(f"<3>EAPOL-4WAY-HS-COMPLETED {TABLET}")
    assert router.status(TABLET) == before


def test_the_sta_answer_is_hostapds_and_a_refusal_or_no_hostapd_is_an_error(tmp_path):
    hostapd = FakeHostapd(str(tmp_path / "wlan0"))
    hostapd.stations[PHONE] = f"{PHONE}\nflags=[AUTHORIZED]\n"
    try:
        assert hostapd_ctrl.station(hostapd.path, PHONE) == f"{PHONE}\nflags=[AUTHORIZED]"
        with pytest.raises(hostapd_ctrl.HostapdError, match="STA"):
            hostapd_ctrl.station(hostapd.path, TABLET)
    finally:
        hostapd.close()
    with pytest.raises(hostapd_ctrl.HostapdError):
        hostapd_ctrl.station(hostapd.path, PHONE)


def no_hostapd_cli(ctrl, *words):
    raise AssertionError(f"hostapd_cli started for {words}")


def test_a_join_is_judged_once_though_hostapd_says_it_twice_and_a_completion_alone_is_a_join():
    """hostapd says `AP-STA-CONNECTED` and then `EAPOL-4WAY-HS-COMPLETED` for the same handshake: judged twice, a
    join cost a second `STA` (and at a satellite a second report). A completion that comes alone (back from a
    roam this access point did not see), long after, or after the station left, is a join of its own."""
    now = [100.0]
    handshakes = hostapd_ctrl.Handshakes(clock=lambda: now[0])
    connected, completed, left = (
        f"<3>{word} {PHONE}" for word in ("AP-STA-CONNECTED", "EAPOL-4WAY-HS-COMPLETED", "AP-STA-DISCONNECTED")
    )
    assert handshakes.heard(f"{connected} keyid=guest") and not handshakes.heard(completed)
    assert handshakes.heard(completed)  # alone: back from a roam
    handshakes.heard(connected)
    now[0] += hostapd_ctrl.Handshakes.SAME_HANDSHAKE_S
    assert handshakes.heard(completed)  # long after: a new handshake
    handshakes.heard(connected)
    assert handshakes.heard(left) and handshakes.heard(completed)
    handshakes.heard(connected)
    handshakes.untold(PHONE)  # its AP-STA-CONNECTED told nothing: its completion is judged
    assert handshakes.heard(completed)
    assert handshakes.connected == {}  # nothing kept of a station whose handshake ended or that left


def test_the_routers_radio_asks_nothing_more_at_the_end_of_a_handshake_it_judged_at_its_connection(radio, router):
    events, hostapd, switch = radio
    join_on(router, switch, PHONE, RADIO)
    hostapd.stations[PHONE] = f"{PHONE}\nflags=[AUTH][ASSOC][AUTHORIZED]\nhostapdWPAPTKState=11\nkeyid=guest\n"
    events._on_hostapd_event(f"<3>AP-STA-CONNECTED {PHONE} keyid=guest")
    events._on_hostapd_event(f"<3>EAPOL-4WAY-HS-COMPLETED {PHONE}")
    assert hostapd.asked == []  # the key id came with AP-STA-CONNECTED; its completion is the same handshake's
    assert router.status(PHONE)["access_port"] == RADIO
