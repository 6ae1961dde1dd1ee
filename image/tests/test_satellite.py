"""The satellite's radio, without one: what it renders from the router's network, what it tells a running
hostapd when the router's keys change, and what it tells the router of its stations. Its pairing and the
router's side are tested against the real web UI (webui/tests), and the whole on real 802.11 in the radio
boot story (test_radio_boot.py)."""

import shutil
import tempfile
import time
from pathlib import Path

import pytest

from homenet.fake_hostapd import FakeHostapd
from homework_controller.policy import wifi_keys
from homework_controller.radio import hostapd_conf
from homework_image import satellite
from homework_image.radio import RadioError

PHONE, LAPTOP = "02:00:00:00:00:01", "02:00:00:00:00:02"
PHONE_KEY = "k7qm-3xhv-9bcd-efgh-jkmn"
LAPTOP_KEY = "w2pr-8stu-vwxy-z234-5678"


def from_router(*keys: tuple[str, str], channel: int = 6, denied: tuple[str, ...] = ()) -> satellite.Network:
    return satellite.Network.from_router(
        {
            "ssid": "Homework",
            "passphrase": "correct horse battery",
            "country": "GB",
            "band": "2.4",
            "channel": channel,
            "keys": [{"mac": mac, "keyid": wifi_keys.device_keyid(mac), "passphrase": p} for mac, p in keys],
            "denied": list(denied),
            "version": "1",
        }
    )


@pytest.fixture
def radio(tmp_path, monkeypatch):
    """The satellite's radio, its hostapd's start and stop and what it is told while it runs recorded."""
    told: list[str] = []
    monkeypatch.setattr(satellite.Radio, "start", lambda self: told.append("start"))
    monkeypatch.setattr(satellite.Radio, "stop", lambda self: told.append("stop"))
    monkeypatch.setattr(satellite.hostapd_ctrl, "request", lambda ctrl, message: told.append(message) or "OK")
    # The stations on the air: none amid joining.
    monkeypatch.setattr(satellite.hostapd_ctrl, "command", lambda ctrl, *words: told.append(" ".join(words)) or "")
    (tmp_path / "state").mkdir()
    return satellite.Radio("wlan0", "br0", tmp_path / "state", tmp_path / "run", channel=1), told


def test_the_satellite_serves_the_routers_network_bridged_isolated_on_its_own_channel(radio):
    box, told = radio
    assert box.serve(from_router((PHONE, PHONE_KEY))) == "restarted" and told == ["stop", "start"]
    conf = box.access_point.conf.read_text()
    settings = dict(line.split("=", 1) for line in conf.splitlines() if "=" in line and not line.startswith("#"))
    assert (settings["ssid"], settings["bridge"], settings["channel"], settings["ap_isolate"]) == (
        "Homework",
        "br0",
        "1",  # its own channel, not the router's 6
        "1",
    )
    assert settings["multicast_to_unicast"] == "1" and settings["country_code"] == "GB"
    # The phone's own passphrase: in the key file (WPA2) and its SAE password bound to its MAC (WPA3).
    key_file = box.psk_file.read_text()
    assert f"keyid={wifi_keys.device_keyid(PHONE)} " in key_file and "keyid=guest " in key_file
    assert hostapd_conf.sae_bindings(conf) == {PHONE: PHONE_KEY}


def test_a_key_issued_or_revoked_at_the_router_reaches_the_running_hostapd_without_a_restart(radio):
    box, told = radio
    box.serve(from_router((PHONE, PHONE_KEY)))
    told.clear()
    assert box.serve(from_router((PHONE, PHONE_KEY), (LAPTOP, LAPTOP_KEY))) == "passwords"
    assert "start" not in told and f"SET sae_password {LAPTOP_KEY}|mac={LAPTOP}" in told
    # Its WPA2 passphrase is in the key file, which the running hostapd reads again (or it would refuse it).
    assert told[-1] == "RELOAD_WPA_PSK" and LAPTOP_KEY in box.psk_file.read_text()
    told.clear()
    assert box.serve(from_router((LAPTOP, LAPTOP_KEY))) == "passwords"  # the phone's key revoked
    assert "start" not in told and told[-1] == "RELOAD_WPA_PSK"  # or its WPA2 passphrase would still join
    assert PHONE_KEY not in box.psk_file.read_text() and PHONE_KEY not in box.access_point.conf.read_text()
    # Unchanged: nothing at all.
    told.clear()
    assert box.serve(from_router((LAPTOP, LAPTOP_KEY))) == "unchanged" and told == []


def test_a_device_the_household_blacklists_is_denied_and_put_off_the_satellites_air_and_whitelisting_lifts_it(
    radio,
):
    box, told = radio
    box.serve(from_router())
    box.deny(from_router(denied=(PHONE.upper(),)).denied)
    assert told[-2:] == [f"DENY_ACL ADD_MAC {PHONE}", f"DEAUTHENTICATE {PHONE}"]
    told.clear()
    box.deny(from_router(denied=(PHONE,)).denied)  # every poll: nothing new, nothing told
    assert told == []
    box.deny(from_router(denied=(LAPTOP,)).denied)  # the phone whitelisted, the laptop blacklisted
    assert told == [f"DENY_ACL DEL_MAC {PHONE}", f"DENY_ACL ADD_MAC {LAPTOP}", f"DEAUTHENTICATE {LAPTOP}"]
    # hostapd restarted (this satellite moved to another channel): its deny list is empty, so told again.
    box.channel = 11
    assert box.serve(from_router()) == "restarted"
    told.clear()
    box.deny(from_router(denied=(LAPTOP,)).denied)
    assert told == [f"DENY_ACL ADD_MAC {LAPTOP}", f"DEAUTHENTICATE {LAPTOP}"]


def test_a_deny_hostapd_did_not_take_is_tried_again_at_the_next_poll(radio, monkeypatch):
    box, told = radio
    box.serve(from_router())

    def refused(ctrl, message):
        raise satellite.hostapd_ctrl.HostapdError("hostapd did not take `DENY_ACL ADD_MAC`")

    monkeypatch.setattr(satellite.hostapd_ctrl, "request", refused)
    box.deny(frozenset({PHONE}))
    monkeypatch.setattr(satellite.hostapd_ctrl, "request", lambda ctrl, message: told.append(message) or "OK")
    # The stations on the air: none amid joining.
    monkeypatch.setattr(satellite.hostapd_ctrl, "command", lambda ctrl, *words: told.append(" ".join(words)) or "")
    told.clear()
    box.deny(frozenset({PHONE}))
    assert told == [f"DENY_ACL ADD_MAC {PHONE}", f"DEAUTHENTICATE {PHONE}"]


def test_a_network_the_satellite_cannot_serve_is_refused_with_its_reason_and_the_radio_keeps_its_own(radio):
    box, told = radio
    box.serve(from_router())
    before = box.access_point.conf.read_text()
    bad = satellite.Network("Homework", "correct horse battery", "00", "5", 36, ())
    box.channel = None  # the router's channel: 5 GHz in the world domain, which may not start a network
    with pytest.raises(RadioError, match="cannot be served here"):
        box.serve(bad)
    assert box.access_point.conf.read_text() == before


def test_a_document_that_is_not_the_routers_network_is_refused():
    with pytest.raises(satellite.SatelliteError):
        satellite.Network.from_router({"ssid": "Homework"})
    with pytest.raises(satellite.SatelliteError):
        satellite.Network.from_router({**vars(from_router()), "keys": [{"mac": PHONE}]})
    with pytest.raises(satellite.SatelliteError):
        satellite.Network.from_router({**vars(from_router()), "keys": [], "denied": ["not a mac"]})


def test_the_router_is_told_which_key_a_station_joined_with_and_when_it_left(radio, monkeypatch):
    box, _ = radio
    joined = satellite.station_event(box, f"<3>AP-STA-CONNECTED {PHONE} keyid={wifi_keys.device_keyid(PHONE)}")
    assert joined == {"event": "joined", "mac": PHONE, "keyid": wifi_keys.device_keyid(PHONE)}
    assert satellite.station_event(box, f"<3>AP-STA-DISCONNECTED {PHONE}") == {"event": "left", "mac": PHONE}
    assert satellite.station_event(box, "<3>CTRL-EVENT-EAP-STARTED 02:00:00:00:00:01") is None
    # Back from a roam this access point never saw: a handshake, no AP-STA-CONNECTED; hostapd says the key.
    asked = []
    sta = f"{PHONE}\nflags=[AUTH][ASSOC][AUTHORIZED]\nkeyid={wifi_keys.device_keyid(PHONE)}\n"
    monkeypatch.setattr(satellite.hostapd_ctrl, "request", lambda ctrl, message: asked.append(message) or sta)
    monkeypatch.setattr(satellite.hostapd_ctrl, "command", no_hostapd_cli)
    back = satellite.station_event(box, f"<3>EAPOL-4WAY-HS-COMPLETED {PHONE}")
    assert back == {"event": "joined", "mac": PHONE, "keyid": wifi_keys.device_keyid(PHONE)}
    assert asked == [f"STA {PHONE}"]  # once, on hostapd's socket: no process started per join
    # Over SAE hostapd names no key: the password its configuration binds to the MAC says which.
    box.serve(from_router((PHONE, PHONE_KEY)))
    sae = f"{PHONE}\nflags=[AUTH][ASSOC][AUTHORIZED]\nAKMSuiteSelector=00-0f-ac-8\n"
    monkeypatch.setattr(satellite.hostapd_ctrl, "request", lambda ctrl, message: sae)
    over_sae = satellite.station_event(box, f"<3>AP-STA-CONNECTED {PHONE}")
    assert over_sae == {"event": "joined", "mac": PHONE, "keyid": wifi_keys.device_keyid(PHONE)}
    # With the guest passphrase: a join with no key; one that left before hostapd was asked: nothing.
    guest = f"{LAPTOP}\nflags=[AUTH][ASSOC][AUTHORIZED]\nAKMSuiteSelector=00-0f-ac-2\n"
    monkeypatch.setattr(satellite.hostapd_ctrl, "request", lambda ctrl, message: guest)
    assert satellite.station_event(box, f"<3>AP-STA-CONNECTED {LAPTOP}") == {
        "event": "joined",
        "mac": LAPTOP,
        "keyid": "",
    }
    monkeypatch.setattr(satellite.hostapd_ctrl, "request", lambda ctrl, message: f"{LAPTOP}\nflags=[AUTH]\n")
    assert satellite.station_event(box, f"<3>AP-STA-CONNECTED {LAPTOP}") is None


def no_hostapd_cli(ctrl, *words):
    raise AssertionError(f"hostapd_cli started for {words}")


@pytest.mark.skipif(shutil.which("hostapd") is None, reason="hostapd is not installed")
def test_real_hostapd_reads_the_satellites_whole_configuration(tmp_path):
    """This machine has no radio: hostapd reads the whole file before it looks for the driver, so reaching
    "Failed to initialize driver" means it took every line (one it refuses is named instead)."""
    box = satellite.Radio("wlan0", "br0", tmp_path / "state", tmp_path / "run", channel=1)
    (tmp_path / "state").mkdir()
    box.access_point.write_conf(box.render(from_router((PHONE, PHONE_KEY))))
    with pytest.raises(RadioError, match="Failed to initialize driver") as refused:
        box.start()
    assert "Line " not in str(refused.value)


def test_a_session_file_that_is_not_one_means_pairing_again(tmp_path):
    (tmp_path / "session.json").write_text('{"cookie": "hw_sess')  # damaged: not JSON
    assert not satellite.RouterLink("http://10.2.0.1", tmp_path / "session.json").paired
    (tmp_path / "session.json").write_text('["not", "a", "session"]')
    assert not satellite.RouterLink("http://10.2.0.1", tmp_path / "session.json").paired
    (tmp_path / "session.json").write_text('{"cookie": "hw_session=x", "csrf": "y"}')
    assert satellite.RouterLink("http://10.2.0.1", tmp_path / "session.json").paired  # the positive control


def test_a_satellite_that_cannot_reach_the_router_yet_pairs_once_it_can_and_a_refused_code_stops_it(
    tmp_path, monkeypatch
):
    """At first boot the agent may start before the box has its address: it asks again until the router
    answers. A code the router refuses is final: it says why and stops."""
    tries: list[str] = []

    def pair(self, code, name):
        tries.append(code)
        if len(tries) < 3:
            raise satellite.Unreachable("the router at http://10.2.0.1 did not answer: Network is unreachable")
        self.session = {"cookie": "hw_session=s", "csrf": "t"}

    monkeypatch.setattr(satellite.RouterLink, "pair", pair)
    monkeypatch.setattr(satellite.time, "sleep", lambda seconds: None)
    monkeypatch.setattr(satellite.Satellite, "run_forever", lambda self: None)
    monkeypatch.setattr(satellite.Radio, "stop", lambda self: None)
    dirs = ["--state", str(tmp_path / "state"), "--run", str(tmp_path / "run")]
    assert satellite.main(["--code", "ABCD-EFGH", *dirs]) == 0
    assert tries == ["ABCD-EFGH"] * 3

    def refused(self, code, name):
        raise satellite.SatelliteError("the router refused the pairing code (403): wrong or expired")

    monkeypatch.setattr(satellite.RouterLink, "pair", refused)
    dirs = ["--state", str(tmp_path / "another"), "--run", str(tmp_path / "run")]
    assert satellite.main(["--code", "WRONG-ONE", *dirs]) == 1


def sta_answer(mac: str, ptk_state: int, keyid: str) -> str:
    """hostapd 2.10's `STA <mac>` answer for a WPA2 station with protected management frames (the radio boot
    story's roamer), its PTK state machine in `ptk_state` (src/ap/wpa_auth_i.h: 7 PTKSTART, 11 PTKINITDONE)."""
    return (
        f"{mac}\nflags=[AUTH][ASSOC][AUTHORIZED][SHORT_PREAMBLE][WMM][MFP][HT]\naid=1\n"
        f"dot11RSNAStatsSTAAddress={mac}\ndot11RSNAStatsVersion=1\nwpa=2\nAKMSuiteSelector=00-0f-ac-2\n"
        f"hostapdWPAPTKState={ptk_state}\nhostapdWPAPTKGroupState=0\nrx_packets=17\nconnected_time=14\n"
        f"keyid={keyid}\n"
    )


def first_entry_in_hostapds_list(psk_file_text: str) -> str:
    """The key id of the entry hostapd 2.10 tries first for any station: it puts each line of wpa_psk_file at
    the head of its list (ap_config.c, hostapd_config_read_wpa_psk), so the file's last line. At a (re)association
    its INITPSK state copies that entry's PSK into the station's PMK (wpa_auth.c, SM_STATE(WPA_PTK, INITPSK));
    `STA` names the key id of the first entry whose PSK equals the PMK (sta_info.c, ap_sta_wpa_get_keyid), and
    the PMK becomes the key the station proved only once its message 2/4 is checked (PTKCALCNEGOTIATING)."""
    return psk_file_text.strip().splitlines()[-1].split(" ", 1)[0].removeprefix("keyid=")


ROAMER, OWN_KEY_DEVICE = "02:00:00:00:05:00", "06:11:22:33:44:55"


def test_a_guest_station_back_from_a_roam_amid_its_handshake_is_not_taken_for_another_devices_key(
    tmp_path, monkeypatch
):
    """A station roaming back to this access point, which never heard it leave, keeps its [AUTHORIZED] entry
    there: hostapd 2.10 starts a new 4-way handshake on it (WPA_REAUTH) with the PMK set to its key list's first
    entry, another device's own key. A `STA` asked before the station's message 2/4 names that device's key id
    (the radio boot story's roam saw `keyid=dev-061122334455` for a guest station, and the router took the
    station for a copy of that device). Only a completed handshake's key id is told (hostapdWPAPTKState=11)."""
    run = Path(tempfile.mkdtemp(prefix="sat-", dir="/tmp"))  # a short path: a Unix socket's is at most 107 bytes
    monkeypatch.setattr(satellite.Radio, "start", lambda self: None)
    monkeypatch.setattr(satellite.Radio, "stop", lambda self: None)
    box = satellite.Radio("wlan0", "br0", tmp_path, run, channel=1)
    box.serve(from_router((LAPTOP, LAPTOP_KEY), (OWN_KEY_DEVICE, PHONE_KEY)))
    head = first_entry_in_hostapds_list(box.psk_file.read_text())
    assert head == wifi_keys.device_keyid(OWN_KEY_DEVICE)  # another device's own key: what the story saw
    hostapd = FakeHostapd(str(box.access_point.ctrl))
    agent = satellite.Satellite(None, box)  # type: ignore[arg-type]  # no router: what it would be told, queued
    try:
        # Amid the new handshake (PTKSTART): hostapd's answer names the first entry's key id.
        hostapd.stations[ROAMER] = sta_answer(ROAMER, 7, head)
        agent._on_event(f"<3>EAPOL-4WAY-HS-COMPLETED {ROAMER}")
        assert hostapd.asked == [f"STA {ROAMER}"]
        told = [agent.events.get_nowait()[1] for _ in range(agent.events.qsize())]
        assert told == [], "a handshake in progress was told as a join with another device's key"
        assert box.told_joined(sta_answer(ROAMER, 7, head)) == []  # nor at an attach (ALL_STA)
        # The handshake done, with the guest passphrase: that is the join the router is told of.
        hostapd.stations[ROAMER] = sta_answer(ROAMER, 11, wifi_keys.GUEST_KEYID)
        agent._on_event(f"<3>EAPOL-4WAY-HS-COMPLETED {ROAMER}")
        told = [agent.events.get_nowait()[1] for _ in range(agent.events.qsize())]
        assert told == [{"event": "joined", "mac": ROAMER, "keyid": wifi_keys.GUEST_KEYID}]
        # The device itself, with its own key, is still told as itself (the positive control).
        hostapd.stations[OWN_KEY_DEVICE] = sta_answer(OWN_KEY_DEVICE, 11, head)
        agent._on_event(f"<3>EAPOL-4WAY-HS-COMPLETED {OWN_KEY_DEVICE}")
        told = [agent.events.get_nowait()[1] for _ in range(agent.events.qsize())]
        assert told == [{"event": "joined", "mac": OWN_KEY_DEVICE, "keyid": head}]
    finally:
        hostapd.close()
        shutil.rmtree(run, ignore_errors=True)


def with_inactivity(sta: str, ms: int) -> str:
    return sta + f"inactive_msec={ms}\n"


def test_a_station_that_roamed_away_without_a_word_is_forgotten_here_only_when_it_is_gone(tmp_path, monkeypatch):
    """The router names, in its answer to a links report, a station bound at another access point since it joined
    here (it roamed without telling this one): hostapd drops it without a frame (`tx=0`), so its next visit here
    is not kept waiting by a stale protected association. Not a station amid a handshake here, nor one that has
    sent something a moment ago, nor one whose latest join here the router had not answered when it
    was asked: the router's word is older than that."""
    run = Path(tempfile.mkdtemp(prefix="sat-", dir="/tmp"))
    monkeypatch.setattr(satellite.Radio, "start", lambda self: None)
    box = satellite.Radio("wlan0", "br0", tmp_path, run, channel=1)
    box.serve(from_router())
    hostapd = FakeHostapd(str(box.access_point.ctrl))
    agent = satellite.Satellite(None, box)  # type: ignore[arg-type]  # the router's answers are given below
    deauthentications = lambda: [a for a in hostapd.asked if a.startswith("DEAUTHENTICATE")]  # noqa: E731
    try:
        # Heard nothing from it for a while and its handshake done: gone, forgotten without a frame.
        hostapd.stations[ROAMER] = with_inactivity(sta_answer(ROAMER, 11, wifi_keys.GUEST_KEYID), 900)
        agent._forget([ROAMER], asked=time.monotonic(), unanswered=set())
        assert deauthentications() == [f"DEAUTHENTICATE {ROAMER} tx=0"] and ROAMER not in hostapd.stations
        hostapd.asked.clear()
        # Active here a moment ago, or amid a handshake here: it is here (back already), kept.
        hostapd.stations[ROAMER] = with_inactivity(sta_answer(ROAMER, 11, wifi_keys.GUEST_KEYID), 50)
        agent._forget([ROAMER], asked=time.monotonic(), unanswered=set())
        hostapd.stations[ROAMER] = with_inactivity(sta_answer(ROAMER, 7, wifi_keys.GUEST_KEYID), 900)
        agent._forget([ROAMER], asked=time.monotonic(), unanswered=set())
        assert deauthentications() == [] and ROAMER in hostapd.stations
        # Gone by hostapd's count, but the router's word is older than its latest join here: kept.
        hostapd.stations[ROAMER] = with_inactivity(sta_answer(ROAMER, 11, wifi_keys.GUEST_KEYID), 900)
        agent._forget([ROAMER], asked=time.monotonic(), unanswered={ROAMER})  # its join not answered yet
        asked = time.monotonic()
        agent._heard(time.monotonic(), {"event": "joined", "mac": ROAMER, "keyid": ""})  # a join heard since
        agent._forget([ROAMER], asked=asked, unanswered=set())
        assert deauthentications() == [] and ROAMER in hostapd.stations
        # Once the router has answered that join, its word at the next report is newer: forgotten.
        agent._answered({"event": "joined", "mac": ROAMER})
        agent._forget([ROAMER], asked=time.monotonic(), unanswered=set(agent.joins_unanswered))
        assert deauthentications() == [f"DEAUTHENTICATE {ROAMER} tx=0"]
        # What hostapd then says: it left. Nothing is kept of it (a guest cycling MACs grows nothing here).
        agent._heard(time.monotonic(), {"event": "left", "mac": ROAMER})
        assert agent.joins_unanswered == {} and agent.last_join_heard == {}
    finally:
        hostapd.close()
        shutil.rmtree(run, ignore_errors=True)


def test_a_join_is_told_to_the_router_once_though_hostapd_says_it_twice(tmp_path, monkeypatch):
    """hostapd says `AP-STA-CONNECTED` and then `EAPOL-4WAY-HS-COMPLETED` for the same handshake: the router is
    told of the join once (it was told twice: two reports, and a `STA` asked for the second)."""
    run = Path(tempfile.mkdtemp(prefix="sat-", dir="/tmp"))
    monkeypatch.setattr(satellite.Radio, "start", lambda self: None)
    box = satellite.Radio("wlan0", "br0", tmp_path, run, channel=1)
    box.serve(from_router())
    hostapd = FakeHostapd(str(box.access_point.ctrl))
    agent = satellite.Satellite(None, box)  # type: ignore[arg-type]  # no router: what it would be told, queued
    try:
        hostapd.stations[ROAMER] = sta_answer(ROAMER, 11, wifi_keys.GUEST_KEYID)
        agent._on_event(f"<3>AP-STA-CONNECTED {ROAMER} keyid={wifi_keys.GUEST_KEYID}")
        agent._on_event(f"<3>EAPOL-4WAY-HS-COMPLETED {ROAMER}")
        told = [agent.events.get_nowait()[1] for _ in range(agent.events.qsize())]
        assert told == [{"event": "joined", "mac": ROAMER, "keyid": wifi_keys.GUEST_KEYID}]
        assert hostapd.asked == []
        # Back from a roam this access point did not see: a completion alone, told.
        agent._on_event(f"<3>EAPOL-4WAY-HS-COMPLETED {ROAMER}")
        told = [agent.events.get_nowait()[1] for _ in range(agent.events.qsize())]
        assert told == [{"event": "joined", "mac": ROAMER, "keyid": wifi_keys.GUEST_KEYID}]
    finally:
        hostapd.close()
        shutil.rmtree(run, ignore_errors=True)
