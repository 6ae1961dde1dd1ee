"""The router's own access point, its pure parts: which radio serves, the household's settings,
and hostapd's configuration rendered from them (real hostapd reads it). The radio itself is
tested in the VM (tests/test_radio_boot.py, mac80211_hwsim)."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from homework_controller.radio import radio_settings
from homework_controller.radio.radio_settings import RESTARTING_FIELDS, RadioSettings
from homework_image import radio
from homework_image.radio import Radio


def test_the_first_radio_that_can_be_an_access_point_serves_in_the_kernels_order():
    wiphys = [
        {"index": 1, "name": "phy1", "iftypes": ["station", "ap", "monitor"]},
        {"index": 0, "name": "phy0", "iftypes": ["station", "monitor"]},  # a client-only card
        {"index": 2, "name": "phy2", "iftypes": ["station", "ap"]},
        {"index": 1, "name": "phy1"},  # a split dump repeats a radio without its iftypes
    ]
    interfaces = [
        {"wiphy": 2, "ifname": "wlan2"},
        {"wiphy": 1, "ifname": "wlp1s0"},
        {"wiphy": 0, "ifname": "wlan0"},
    ]
    assert radio.ap_radios(wiphys, interfaces) == [Radio("phy1", "wlp1s0"), Radio("phy2", "wlan2")]


def test_a_radio_without_an_interface_or_a_box_without_radios_has_no_access_point():
    assert radio.ap_radios([{"index": 0, "name": "phy0", "iftypes": ["ap"]}], []) == []
    assert radio.ap_radios([], []) == []


def test_this_machine_has_no_nl80211_so_no_radio_and_the_wired_setup_stays():
    # The host kernel has no mac80211 (docs: DESIGN.md): pyroute2 finds no nl80211 family.
    assert radio.read_radios() == []


def test_at_first_boot_the_settings_file_is_made_with_a_guest_passphrase_root_only(tmp_path, monkeypatch):
    # The parsing and checking are the controller's (controller/tests/test_radio_settings.py).
    monkeypatch.setattr(radio, "WIFI_CONFIG", tmp_path / "config" / "wifi.conf")
    made = radio.wifi_settings()
    assert len(made.passphrase) == 24 and made == RadioSettings(passphrase=made.passphrase)
    assert oct((tmp_path / "config" / "wifi.conf").stat().st_mode & 0o777) == "0o600"
    assert radio.wifi_settings() == made  # kept
    # A household's file without one (or a bad one) gets one; its other lines stay.
    (tmp_path / "config" / "wifi.conf").write_text("# ours\nssid=Our house\npassphrase=short\ncolour=blue\n")
    again = radio.wifi_settings()
    assert again.ssid == "Our house" and again.passphrase not in ("short", made.passphrase)
    assert (tmp_path / "config" / "wifi.conf").read_text().splitlines()[:4] == [
        "# ours",
        "ssid=Our house",
        f"passphrase={again.passphrase}",
        "colour=blue",
    ]


@pytest.mark.skipif(shutil.which("hostapd") is None, reason="hostapd is not installed")
def test_real_hostapd_reads_the_radios_configuration_rendered_from_the_settings(tmp_path, monkeypatch):
    monkeypatch.setattr(radio, "PSK_FILE", tmp_path / "psk")
    monkeypatch.setattr(radio, "HOSTAPD_CTRL", tmp_path / "ctrl")
    settings = RadioSettings("Our house", "correct horse battery", "GB", "2.4", 11)
    conf = subprocess.run(
        [sys.executable, "-m", "homework_controller.radio.hostapd_conf", *radio.hostapd_args(settings)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    lines = conf.splitlines()
    for wanted in ("interface=wlan0", "driver=nl80211", "ssid=Our house", "country_code=GB", "channel=11"):
        assert wanted in lines
    assert f"wpa_psk_file={tmp_path / 'psk'}" in lines and "sae_password=correct horse battery" in lines
    (tmp_path / "hostapd.conf").write_text(conf.replace("interface=wlan0", "interface=hwnoradio0"))
    out = subprocess.run(["timeout", "10", "hostapd", str(tmp_path / "hostapd.conf")], capture_output=True, text=True)
    assert "errors found in configuration file" not in out.stdout + out.stderr, out.stdout
    assert "Failed to initialize driver 'nl80211'" in out.stdout + out.stderr


@pytest.mark.parametrize(
    ("ssid", "passphrase"),
    [("-home", "correct horse battery"), ("Our house", "--channel 13 is mine"), ("--help", "-h-h-h-h-h")],
)
def test_a_name_or_passphrase_starting_with_a_dash_is_rendered_as_it_is(tmp_path, monkeypatch, ssid, passphrase):
    """Issue 39 finding 8: a name or passphrase starting with `-` was read as an option by the renderer's
    command line, so the next boot rendered nothing (or another setting). Each value is now one argument."""
    monkeypatch.setattr(radio, "PSK_FILE", tmp_path / "psk")
    settings = RadioSettings(ssid, passphrase, "GB", "2.4", 11)
    conf = subprocess.run(
        [sys.executable, "-m", "homework_controller.radio.hostapd_conf", *radio.hostapd_args(settings)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    assert f"ssid={ssid}" in conf and f"sae_password={passphrase}" in conf and "channel=11" in conf


@pytest.fixture
def served_radio(tmp_path, monkeypatch):
    """A radio being served (hostapd's socket alias in place), and what refresh would do: the commands
    it runs (each with the configuration file as it is then) and what it tells the running hostapd."""
    monkeypatch.setattr(radio, "RUN", tmp_path)
    monkeypatch.setattr(radio, "HOSTAPD_CTRL", tmp_path / "hostapd")
    monkeypatch.setattr(radio, "WIFI_CONFIG", tmp_path / "wifi.conf")
    monkeypatch.setattr(radio, "PSK_FILE", tmp_path / "hostapd.wpa_psk")
    (tmp_path / "wifi.conf").write_text("passphrase=correct horse battery\n")
    (tmp_path / "hostapd").mkdir()
    (tmp_path / "hostapd" / radio.BRIDGE).symlink_to(radio.RADIO_PORT)
    ran: list[tuple[str, ...]] = []

    def conf() -> str:
        return (tmp_path / "hostapd.conf").read_text() if (tmp_path / "hostapd.conf").exists() else ""

    def run(*cmd: str) -> str:
        ran.append((*cmd, conf()))
        return ""

    def request(ctrl: str, message: str) -> str:
        assert ctrl == str(tmp_path / "hostapd" / radio.BRIDGE)
        ran.append(("hostapd", message, conf()))
        return "OK"

    def command(ctrl: str, *words: str) -> str:  # the stations on the air: none amid joining
        request(ctrl, " ".join(words).upper())
        return ""

    monkeypatch.setattr(radio, "run", run)
    monkeypatch.setattr(radio.hostapd_ctrl, "request", request)
    monkeypatch.setattr(radio.hostapd_ctrl, "command", command)
    return tmp_path, ran


RUNNING = "ssid=Home\nchannel=6\nsae_password=guest pass\nsae_password=old|mac=02:00:00:00:00:01\n"


def test_a_changed_password_is_given_to_the_running_hostapd_in_the_files_order_and_nothing_restarts(
    served_radio, monkeypatch
):
    """A device's key issued, one moved to a new MAC: hostapd is given the configuration's SAE passwords
    while it runs (no station dropped for it), in the file's order, and only then is the file written."""
    run_dir, ran = served_radio
    (run_dir / "hostapd.conf").write_text(RUNNING)
    issued = "ssid=Home\nchannel=6\nsae_password=guest pass\nsae_password=new|mac=06:00:00:00:00:01\n"
    monkeypatch.setattr(radio, "render_hostapd_conf", lambda settings: issued)
    assert radio.refresh() == "passwords"
    assert ran == [
        ("hostapd", "SET sae_password guest pass", RUNNING),
        ("hostapd", "SET sae_password new|mac=06:00:00:00:00:01", RUNNING),
    ]  # the key file is the controller's to have read again: the guest's line did not change
    assert (run_dir / "hostapd.conf").read_text() == issued
    # Rendered again to the same: nothing at all (the key file rewritten as it was wakes it too).
    ran.clear()
    assert radio.refresh() == "unchanged" and ran == []


def test_a_new_guest_passphrase_is_given_to_the_running_hostapd_and_its_key_file_read_again(served_radio, monkeypatch):
    run_dir, ran = served_radio
    (run_dir / "hostapd.conf").write_text(RUNNING)
    (run_dir / "hostapd.wpa_psk").write_text("keyid=guest 00:00:00:00:00:00 guest pass\n")
    changed = RUNNING.replace("guest pass", "new guest pass")

    def render(settings):
        (run_dir / "hostapd.wpa_psk").write_text("keyid=guest 00:00:00:00:00:00 new guest pass\n")
        return changed

    monkeypatch.setattr(radio, "render_hostapd_conf", render)
    assert radio.refresh() == "passwords"
    assert [cmd[:-1] for cmd in ran] == [
        ("hostapd", "SET sae_password new guest pass"),
        ("hostapd", "SET sae_password old|mac=02:00:00:00:00:01"),  # ahead of the new guest line again
        ("hostapd", "ALL_STA"),  # none amid joining (the reload would put it off the air)
        ("hostapd", "RELOAD_WPA_PSK"),
    ]


def test_a_changed_setting_restarts_only_hostapd_with_it(served_radio, monkeypatch):
    run_dir, ran = served_radio
    (run_dir / "hostapd.conf").write_text(RUNNING)
    moved = RUNNING.replace("channel=6", "channel=11")
    monkeypatch.setattr(radio, "render_hostapd_conf", lambda settings: moved)
    assert radio.refresh() == "restarted"
    # Stopped with the old configuration, started with the new one: never running with another than the file's.
    assert ran == [
        ("systemctl", "stop", "homework-hostapd.service", RUNNING),
        ("systemctl", "start", "homework-hostapd.service", moved),
    ]


# A change of each setting (a band with a channel it has).
CHANGES = {
    "ssid": {"ssid": "Our house 2"},
    "passphrase": {"passphrase": "a new guest passphrase"},
    "country": {"country": "FR"},
    "band": {"band": "5", "channel": 36},
    "channel": {"channel": 11},
}


@pytest.mark.parametrize("field", [*RESTARTING_FIELDS, "passphrase"])
def test_the_radio_restarts_for_the_settings_the_controller_says_restart_it_and_for_no_other(
    served_radio, monkeypatch, field
):
    """The web UI tells the owner before saving whether the Wi-Fi restarts, from the controller's list
    (`RESTARTING_FIELDS`): the refresh, rendering with the real renderer, does what that list says."""
    run_dir, ran = served_radio

    def render(settings: RadioSettings) -> str:
        argv = [sys.executable, "-m", "homework_controller.radio.hostapd_conf", *radio.hostapd_args(settings)]
        return subprocess.run(argv, capture_output=True, text=True, check=True).stdout

    monkeypatch.setattr(radio, "render_hostapd_conf", render)
    before = RadioSettings("Our house", "correct horse battery", "GB", "2.4", 6)
    (run_dir / "wifi.conf").write_text(radio_settings.render(before, ""))
    assert radio.refresh() == "restarted"  # the first configuration: hostapd starts with it
    after = radio_settings.changed(before, CHANGES[field])
    assert getattr(after, field) != getattr(before, field)
    (run_dir / "wifi.conf").write_text(radio_settings.render(after, ""))
    ran.clear()
    assert radio.refresh() == ("restarted" if field in RESTARTING_FIELDS else "passwords"), ran


def test_a_password_hostapd_refuses_leaves_the_file_as_hostapd_runs_it(served_radio, monkeypatch):
    run_dir, _ = served_radio
    (run_dir / "hostapd.conf").write_text(RUNNING)
    monkeypatch.setattr(radio, "render_hostapd_conf", lambda settings: RUNNING.replace("old|", "new|"))

    def refuse(ctrl, message):
        raise radio.hostapd_ctrl.HostapdError("hostapd did not take `SET sae_password`: FAIL")

    monkeypatch.setattr(radio.hostapd_ctrl, "request", refuse)
    with pytest.raises(radio.RadioError, match="runs with the passwords it had"):
        radio.refresh()
    assert (run_dir / "hostapd.conf").read_text() == RUNNING


def test_without_a_radio_there_is_nothing_to_refresh(served_radio, monkeypatch):
    run_dir, ran = served_radio
    (run_dir / "hostapd" / radio.BRIDGE).unlink()
    monkeypatch.setattr(radio, "render_hostapd_conf", lambda settings: pytest.fail("rendered for the wired setup"))
    assert radio.refresh() == "unchanged" and ran == []


def test_settings_hostapd_cannot_start_with_leave_the_radio_on_with_the_ones_that_ran(served_radio, monkeypatch):
    run_dir, ran = served_radio
    (run_dir / "hostapd.conf").write_text("channel=6\n")
    monkeypatch.setattr(radio, "render_hostapd_conf", lambda settings: "channel=144\n")
    starts = []

    def run(*cmd: str) -> str:
        ran.append(cmd)
        if cmd[1] == "start":
            starts.append((run_dir / "hostapd.conf").read_text())
            if starts[-1] == "channel=144\n":
                raise radio.RadioError("hostapd failed")
        return ""

    monkeypatch.setattr(radio, "run", run)
    with pytest.raises(radio.RadioError, match="runs with the earlier ones"):
        radio.refresh()
    assert starts == ["channel=144\n", "channel=6\n"]
    assert (run_dir / "hostapd.conf").read_text() == "channel=6\n"
