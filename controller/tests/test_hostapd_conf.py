"""hostapd's configuration as rendered, and real hostapd reading it (and the per-device key file).

This machine has no Wi-Fi radio, so hostapd cannot start on nl80211 here, but it parses the
whole configuration before it looks for the driver: a rendered file that reaches "Failed to
initialize driver" is one hostapd accepts, and one it does not accept says which line. The key
file (wpa_psk_file) is read when an interface comes up: hostapd with driver=wired on a veth in
a private network namespace (`qh-*`) reads it, and reloads it (`RELOAD_WPA_PSK`) on demand.
"""

import os
import shutil
import subprocess
import threading
import time

import pytest

from homework_controller.policy import wifi_keys
from homework_controller.policy.wifi_keys import WifiKey
from homework_controller.radio import hostapd_conf, hostapd_ctrl, private_files

needs_hostapd = pytest.mark.skipif(shutil.which("hostapd") is None, reason="hostapd is not installed")
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root")


def render(capsys, *args):
    hostapd_conf.main(list(args))
    return capsys.readouterr().out


def radio(capsys, *extra):
    return render(
        capsys,
        "--driver",
        "nl80211",
        "--interface",
        "wlan0",
        "--ssid",
        "home",
        "--passphrase",
        "correct horse battery",
        *extra,
    )


def settings(conf: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in conf.splitlines() if line and not line.startswith("#"))


def test_one_template_renders_the_emulated_wired_authenticator_and_the_real_radio(capsys):
    wired = render(capsys, "--driver", "wired", "--interface", "br-lan", "--eap-users", "/run/x.eap_user")
    assert "driver=wired" in wired and "ieee8021x=1" in wired and "use_pae_group_addr=0" in wired
    conf = radio(capsys)
    assert "driver=nl80211" in conf and "wpa=2" in conf and "ap_isolate=1" in conf
    assert "${" not in wired + conf


def test_the_radio_protects_management_frames_for_devices_that_can_and_can_require_it(capsys):
    optional = settings(radio(capsys))
    assert optional["ieee80211w"] == "1"  # PMF where the device can; older devices still join
    assert optional["wpa_key_mgmt"].split() == ["WPA-PSK", "WPA-PSK-SHA256", "SAE"]
    assert optional["sae_require_mfp"] == "1"  # a WPA3 device always protects them
    # A station back from a roam is let in after a short SA Query of its old association, not two 1 s ones.
    assert (optional["assoc_sa_query_max_timeout"], optional["assoc_sa_query_retry_timeout"]) == ("200", "50")
    assert settings(radio(capsys, "--pmf", "required"))["ieee80211w"] == "2"
    wpa2_only = settings(radio(capsys, "--security", "wpa2"))
    assert wpa2_only["wpa_key_mgmt"].split() == ["WPA-PSK", "WPA-PSK-SHA256"] and "sae_password" not in wpa2_only


def test_the_radio_isolates_stations_and_sends_them_multicast_as_unicast(capsys):
    conf = settings(radio(capsys))
    assert conf["ap_isolate"] == "1" and conf["multicast_to_unicast"] == "1"
    assert "bridge" not in conf  # the router's radio: a port of its switch, which the image adds
    satellite = settings(radio(capsys, "--bridge", "br0"))  # a satellite's radio, bridged onto its cable
    assert satellite["bridge"] == "br0" and satellite["ap_isolate"] == "1"


def test_the_world_domain_is_not_advertised_a_chosen_country_is_and_5_ghz_needs_one(capsys):
    world = settings(radio(capsys))
    assert "country_code" not in world and world["hw_mode"] == "g" and world["channel"] == "6"
    chosen = settings(radio(capsys, "--country", "GB", "--band", "5", "--channel", "36"))
    assert (chosen["country_code"], chosen["ieee80211d"], chosen["hw_mode"], chosen["channel"]) == (
        "GB",
        "1",
        "a",
        "36",
    )
    with pytest.raises(SystemExit, match="--band: 5 GHz needs a country"):
        radio(capsys, "--band", "5", "--channel", "36")
    for bad in ("gb", "GBR", "G1", ""):
        with pytest.raises(SystemExit, match="--country"):
            radio(capsys, "--country", bad)


def test_each_devices_own_passphrase_is_its_sae_password_bound_to_its_mac_tried_before_the_guests(capsys, tmp_path):
    psk = tmp_path / "hostapd.wpa_psk"
    phone = WifiKey("02:00:00:00:00:01", "k7qm-3xhv-9bcd-efgh-jkmn", 0.0)
    psk.write_text(wifi_keys.render_psk_file("", [phone]))
    conf = radio(capsys, "--psk-file", str(psk))
    lines = [line for line in conf.splitlines() if line.startswith("sae_password=")]
    # hostapd puts each line at the head of its list and takes the first entry that fits: the
    # phone's line, read last, is tried first, so for its MAC only its own password works.
    assert lines == [
        "sae_password=correct horse battery",
        "sae_password=k7qm-3xhv-9bcd-efgh-jkmn|mac=02:00:00:00:00:01",
    ]
    # What the controller reads back of it: whose password each MAC is bound to.
    assert hostapd_conf.sae_bindings(conf) == {"02:00:00:00:00:01": "k7qm-3xhv-9bcd-efgh-jkmn"}
    # hostapd would end the password at `|`: refused, not cut short. The same passphrase is fine for WPA2 only.
    args = ["--driver", "nl80211", "--interface", "wlan0", "--ssid", "home", "--passphrase", "pass|word here"]
    with pytest.raises(SystemExit, match=r"cannot contain `\|`"):
        hostapd_conf.main(args)
    hostapd_conf.main([*args, "--security", "wpa2"])
    assert "wpa_passphrase=pass|word here" in capsys.readouterr().out


def test_a_radio_without_a_usable_passphrase_or_ssid_is_refused():
    with pytest.raises(SystemExit, match="passphrase"):
        hostapd_conf.main(["--driver", "nl80211", "--interface", "wlan0", "--ssid", "home", "--passphrase", "short"])
    with pytest.raises(SystemExit, match="passphrase"):
        hostapd_conf.main(
            ["--driver", "nl80211", "--interface", "wlan0", "--ssid", "home", "--passphrase", "tab\tinside it"]
        )
    with pytest.raises(SystemExit, match="--psk-file /nonexistent/dir/psk"):
        hostapd_conf.main(
            [
                "--driver",
                "nl80211",
                "--interface",
                "wlan0",
                "--ssid",
                "home",
                "--passphrase",
                "correct horse battery",
                "--psk-file",
                "/nonexistent/dir/psk",
            ]
        )
    with pytest.raises(SystemExit, match="ssid"):
        hostapd_conf.main(
            ["--driver", "nl80211", "--interface", "wlan0", "--ssid", "x" * 33, "--passphrase", "correct horse battery"]
        )


def test_with_a_key_file_the_guest_passphrase_is_its_wildcard_line_and_device_lines_stay(capsys, tmp_path):
    psk = tmp_path / "hostapd.wpa_psk"
    phone = WifiKey("02:00:00:00:00:01", "k7qm-3xhv-9bcd-efgh-jkmn", 0.0)
    psk.write_text(wifi_keys.render_psk_file("", [phone]))
    conf = settings(radio(capsys, "--psk-file", str(psk)))
    assert conf["wpa_psk_file"] == str(psk) and "wpa_passphrase" not in conf
    assert psk.read_text().splitlines() == [
        "keyid=guest 00:00:00:00:00:00 correct horse battery",
        "keyid=dev-020000000001 00:00:00:00:00:00 k7qm-3xhv-9bcd-efgh-jkmn",
    ]
    assert oct(psk.stat().st_mode & 0o777) == "0o600"  # passphrases: root's only
    # A new guest passphrase replaces the old one; the device's own passphrase is untouched.
    hostapd_conf.main(
        [
            "--driver",
            "nl80211",
            "--interface",
            "wlan0",
            "--ssid",
            "home",
            "--passphrase",
            "a new guest passphrase",
            "--psk-file",
            str(psk),
        ]
    )
    assert psk.read_text().splitlines()[0] == "keyid=guest 00:00:00:00:00:00 a new guest passphrase"
    assert psk.read_text().count("keyid=") == 2


def run_hostapd(conf_path, ns=None, timeout=10):
    argv = (["ip", "netns", "exec", ns] if ns else []) + ["timeout", str(timeout), "hostapd", str(conf_path)]
    return subprocess.run(argv, capture_output=True, text=True)


@needs_hostapd
@pytest.mark.parametrize(
    "extra", [("--pmf", "optional"), ("--pmf", "required"), ("--country", "GB", "--band", "5", "--channel", "36")]
)
def test_real_hostapd_accepts_every_line_of_the_rendered_radio_config(capsys, tmp_path, extra):
    psk = tmp_path / "psk"
    psk.write_text(wifi_keys.render_psk_file("", [WifiKey("02:00:00:00:00:01", wifi_keys.new_passphrase(), 0.0)]))
    conf = radio(capsys, *extra, "--psk-file", str(psk), "--ctrl-dir", str(tmp_path / "ctrl"))
    assert conf.count("sae_password=") == 2
    (tmp_path / "hostapd.conf").write_text(conf.replace("interface=wlan0", "interface=hwnoradio0"))
    out = run_hostapd(tmp_path / "hostapd.conf")
    assert "errors found in configuration file" not in out.stdout + out.stderr, out.stdout + out.stderr
    # It parsed it all: only the radio is missing.
    assert "Failed to initialize driver 'nl80211'" in out.stdout + out.stderr
    # Positive control for the check itself: a line hostapd does not know is reported.
    (tmp_path / "hostapd.conf").write_text(conf + "ieee80211w_typo=1\n")
    out = run_hostapd(tmp_path / "hostapd.conf")
    assert "1 errors found in configuration file" in out.stdout + out.stderr


@pytest.fixture
def wired_hostapd(tmp_path):
    """Start real hostapd (driver=wired) on one end of a veth pair in a private namespace with the
    given settings; returns its control socket. The other end (qh-b) is where a station would be."""
    if shutil.which("hostapd") is None or os.geteuid() != 0:
        pytest.skip("needs root and hostapd")
    ns = f"qh-{os.getpid()}"
    subprocess.run(["ip", "netns", "del", ns], capture_output=True)  # left by a killed run
    subprocess.run(["ip", "netns", "add", ns], check=True)
    started = []

    def start(settings: str) -> str:
        if subprocess.run(["ip", "-n", ns, "link", "show", "qh-a"], capture_output=True).returncode != 0:
            subprocess.run(["ip", "-n", ns, "link", "add", "qh-a", "type", "veth", "peer", "name", "qh-b"], check=True)
            for dev in ("qh-a", "qh-b"):
                subprocess.run(["ip", "-n", ns, "link", "set", dev, "up"], check=True)
        ctrl = tmp_path / "ctrl"
        conf = tmp_path / "hostapd.conf"
        conf.write_text(f"interface=qh-a\ndriver=wired\nctrl_interface={ctrl}\n{settings}")
        proc = subprocess.Popen(
            ["ip", "netns", "exec", ns, "hostapd", str(conf)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        started.append(proc)
        wait_for(lambda: (ctrl / "qh-a").exists() or proc.poll() is not None)
        assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
        return str(ctrl / "qh-a")

    def stop():
        for proc in started:
            proc.terminate()
            proc.wait(10)

    start.ns, start.stop = ns, stop  # type: ignore[attr-defined]
    try:
        yield start
    finally:
        stop()
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def wait_for(condition, timeout=15.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_real_hostapd_reloads_the_device_keys_the_controller_writes_and_refuses_a_broken_file(wired_hostapd, tmp_path):
    psk = str(tmp_path / "hostapd.wpa_psk")
    private_files.write(psk, wifi_keys.render_guest_line("", "correct horse battery"))
    ctrl = wired_hostapd(
        "ssid=home\nwpa=2\nwpa_key_mgmt=WPA-PSK WPA-PSK-SHA256\nieee80211w=1\n"
        f"rsn_pairwise=CCMP\nwpa_psk_file={psk}\n"
    )
    phone = WifiKey("02:00:00:00:00:01", wifi_keys.new_passphrase(), 0.0)
    private_files.write(psk, wifi_keys.render_psk_file(private_files.read_text(psk), [phone]))
    assert hostapd_ctrl.reload_keys(ctrl) == []  # no station on the air: none joining
    # The check is real: a line hostapd cannot read makes it refuse the reload, and the controller hears so.
    with open(psk, "a") as f:
        f.write("keyid=dev-x not-a-mac somepassphrase\n")
    with pytest.raises(hostapd_ctrl.HostapdError, match="RELOAD_WPA_PSK"):
        hostapd_ctrl.reload_keys(ctrl)


def test_the_controller_hears_a_station_join_from_real_hostapd_even_after_hostapd_restarts(wired_hostapd, tmp_path):
    """hostapd's AP-STA-CONNECTED, from a real 802.1X supplicant (a radio would add keyid=...)."""
    if shutil.which("wpa_supplicant") is None:
        pytest.skip("wpa_supplicant is not installed")
    users = tmp_path / "eap_user"
    users.write_text('"phone" MD5 "phone-secret"\n')
    settings = f"ieee8021x=1\neap_server=1\neap_user_file={users}\nuse_pae_group_addr=0\neapol_version=2\n"
    ctrl = wired_hostapd(settings)
    heard: list[str] = []
    events = hostapd_ctrl.Events(ctrl, heard.append, keepalive_s=0.5)
    threading.Thread(target=events.run_forever, daemon=True).start()
    assert events.attached.wait(10)
    # hostapd restarts (an upgrade, a crash): it has forgotten its listeners; the controller notices.
    wired_hostapd.stop()
    wait_for(lambda: not events.attached.is_set())
    assert wired_hostapd(settings) == ctrl
    assert events.attached.wait(15)
    station = (
        subprocess.run(
            ["ip", "-n", wired_hostapd.ns, "-j", "link", "show", "qh-b"], capture_output=True, text=True, check=True
        )
        .stdout.split('"address":"')[1]
        .split('"')[0]
    )
    conf = tmp_path / "supplicant.conf"
    conf.write_text(
        'ap_scan=0\nnetwork={\n key_mgmt=IEEE8021X\n eap=MD5\n identity="phone"\n'
        ' password="phone-secret"\n eapol_flags=0\n}\n'
    )
    supplicant = subprocess.Popen(
        ["ip", "netns", "exec", wired_hostapd.ns, "wpa_supplicant", "-D", "wired", "-i", "qh-b", "-c", str(conf)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for(lambda: any(hostapd_ctrl.station_joined(e) for e in heard), 30)
    finally:
        events.stop()
        supplicant.terminate()
        supplicant.wait(10)
    assert [hostapd_ctrl.station_joined(e) for e in heard if hostapd_ctrl.station_joined(e)][0] == (station, "")


def test_station_joined_events_are_read_with_their_key_id():
    assert hostapd_ctrl.station_joined("<3>AP-STA-CONNECTED 02:00:00:00:00:01 keyid=dev-020000000001") == (
        "02:00:00:00:00:01",
        "dev-020000000001",
    )
    assert hostapd_ctrl.station_joined("<3>AP-STA-CONNECTED 02:00:00:00:00:01") == ("02:00:00:00:00:01", "")
    assert hostapd_ctrl.station_joined("<3>AP-STA-DISCONNECTED 02:00:00:00:00:01") is None
    assert hostapd_ctrl.station_joined("<3>AP-STA-CONNECTED") is None


def test_station_left_events_are_read():
    assert hostapd_ctrl.station_left("<3>AP-STA-DISCONNECTED 02:00:00:00:00:01") == "02:00:00:00:00:01"
    assert hostapd_ctrl.station_left("<3>AP-STA-CONNECTED 02:00:00:00:00:01") is None
    assert hostapd_ctrl.station_left("<3>AP-STA-DISCONNECTED") is None
    completed = "<3>EAPOL-4WAY-HS-COMPLETED 02:00:00:00:00:01"
    assert hostapd_ctrl.handshake_completed(completed) == "02:00:00:00:00:01"
    assert hostapd_ctrl.handshake_completed("<3>AP-STA-CONNECTED 02:00:00:00:00:01") is None


def test_the_network_name_is_read_from_real_hostapd(wired_hostapd):
    """The QR code of a device's passphrase names the network hostapd serves, asked of hostapd itself."""
    assert hostapd_ctrl.served_ssid(wired_hostapd("ssid=Home of the Smiths\n")) == "Home of the Smiths"
    wired_hostapd.stop()
    # A hostapd that serves no network name (802.1X on a wired port) answers none: no QR code is offered.
    assert hostapd_ctrl.served_ssid(wired_hostapd("")) == ""


def test_rendering_again_leaves_an_unchanged_key_file_alone(capsys, tmp_path):
    """The image restarts hostapd when the key file changes (homework-radio-refresh.path), and renders
    the configuration when it does: a render that rewrote the same file would wake it again forever."""
    psk = tmp_path / "hostapd.wpa_psk"
    radio(capsys, "--psk-file", str(psk))
    written = psk.stat()
    radio(capsys, "--psk-file", str(psk))
    assert (psk.stat().st_ino, psk.stat().st_mtime_ns) == (written.st_ino, written.st_mtime_ns)
    # A new guest passphrase is written.
    render(
        capsys,
        *("--driver", "nl80211", "--interface", "wlan0", "--ssid", "home"),
        *("--passphrase", "another one here", "--psk-file", str(psk)),
    )
    assert psk.stat().st_ino != written.st_ino
    assert wifi_keys.psk_line(wifi_keys.GUEST_KEYID, wifi_keys.WILDCARD_MAC, "another one here") in psk.read_text()


# hostapd's `STA` answer for a station, as far as the key it used goes (hostapd 2.10).
STA_WPA2 = "02:00:00:00:00:01\nflags=[AUTH][ASSOC][AUTHORIZED]\nAKMSuiteSelector=00-0f-ac-2\nkeyid=guest\n"
STA_SAE = "02:00:00:00:00:01\nflags=[AUTH][ASSOC][AUTHORIZED][MFP]\nAKMSuiteSelector=00-0f-ac-8\nsae_group=19\n"


def test_an_sae_join_is_told_from_a_wpa2_one_by_the_akm_hostapd_reports():
    assert hostapd_ctrl.joined_over_sae(STA_SAE)
    assert not hostapd_ctrl.joined_over_sae(STA_WPA2)
    assert not hostapd_ctrl.joined_over_sae("")  # a station hostapd no longer knows


def test_an_sae_join_under_a_mac_bound_to_the_devices_current_password_is_that_devices_key():
    phone = WifiKey("02:00:00:00:00:01", "k7qm-3xhv-9bcd-efgh-jkmn", 0.0)
    laptop = WifiKey("02:00:00:00:00:02", "p2rt-4wxy-8bcd-efgh-jkmn", 0.0)
    conf = "\n".join(
        ["ssid=home", "sae_password=correct horse battery", f"sae_password={phone.passphrase}|mac={phone.mac}"]
    )
    assert hostapd_ctrl.sae_keyid(conf, phone.mac, [phone, laptop]) == phone.keyid
    assert hostapd_ctrl.sae_keyid(conf, phone.mac.upper(), [phone, laptop]) == phone.keyid
    # The laptop's key is not in the configuration hostapd runs with (issued since): over SAE it
    # could only have used the guest password, so nothing says it is the laptop.
    assert hostapd_ctrl.sae_keyid(conf, laptop.mac, [phone, laptop]) == ""
    # The phone's key issued again since: hostapd still holds the old password, not the device's key now.
    reissued = WifiKey(phone.mac, "z9zz-4wxy-8bcd-efgh-jkmn", 1.0)
    assert hostapd_ctrl.sae_keyid(conf, phone.mac, [reissued, laptop]) == ""


def test_the_stations_already_on_the_air_are_read_with_the_key_each_used():
    """What the controller judges when it attaches to hostapd: joins it did not hear."""
    half_joined = "02:00:00:00:00:03\nflags=[AUTH][ASSOC]\nAKMSuiteSelector=00-0f-ac-2\n"  # mid-handshake
    answer = STA_WPA2 + STA_SAE.replace("00:01", "00:02") + half_joined
    assert hostapd_ctrl.stations_present(answer) == [
        ("02:00:00:00:00:01", "guest", False),
        ("02:00:00:00:00:02", "", True),
    ]
    assert hostapd_ctrl.stations_present("") == []


# What hostapd's ALL_STA shows of stations at each step of joining, and of one leaving (the slowed radio story's).
AUTHENTICATED_ONLY = "02:00:00:00:00:04\nflags=[AUTH]\n"  # no association yet, so no key at all
AMID_HANDSHAKE = "02:00:00:00:00:05\nflags=[AUTH][ASSOC][WMM]\nhostapdWPAPTKState=7\nkeyid=dev-aabbcc\n"
BACK_FROM_A_ROAM = "02:00:00:00:00:06\nflags=[AUTH][ASSOC][AUTHORIZED]\nhostapdWPAPTKState=5\nkeyid=guest\n"
LEAVING = "02:00:00:00:00:07\nflags=\nhostapdWPAPTKState=0\ntimeout_next=REMOVE\n"
JOINED = "02:00:00:00:00:08\nflags=[AUTH][ASSOC][AUTHORIZED]\nhostapdWPAPTKState=11\nkeyid=guest\n"


def test_the_stations_amid_joining_are_told_from_those_joined_and_those_leaving():
    answer = AUTHENTICATED_ONLY + AMID_HANDSHAKE + BACK_FROM_A_ROAM + LEAVING + JOINED + STA_SAE
    assert hostapd_ctrl.joining(answer) == ["02:00:00:00:00:04", "02:00:00:00:00:05", "02:00:00:00:00:06"]
    assert hostapd_ctrl.joining(JOINED + STA_SAE + LEAVING) == [] and hostapd_ctrl.joining("") == []


@pytest.fixture
def hostapd_asked(monkeypatch):
    """hostapd's socket as reload_keys uses it: ALL_STA answered in turn from `answers` (the last one kept), and
    every request recorded with the stations' answer it came after."""
    answers: list[str] = []
    asked: list[str] = []

    def command(ctrl, *words):
        asked.append(" ".join(words))
        return answers.pop(0) if len(answers) > 1 else answers[0]

    monkeypatch.setattr(hostapd_ctrl, "command", command)
    monkeypatch.setattr(hostapd_ctrl, "request", lambda ctrl, message: asked.append(message) or "OK")
    monkeypatch.setattr(hostapd_ctrl, "RELOAD_POLL_S", 0.01)
    return answers, asked


def test_the_key_file_is_read_again_only_once_a_station_amid_joining_has_joined(hostapd_asked):
    """hostapd 2.10 puts off the air, at RELOAD_WPA_PSK, a station amid its handshake: the reload waits for it."""
    answers, asked = hostapd_asked
    joined_too = AMID_HANDSHAKE.replace("[WMM]", "[AUTHORIZED][WMM]").replace("=7", "=11")
    answers += [JOINED + AMID_HANDSHAKE, JOINED + AMID_HANDSHAKE, JOINED + joined_too]
    assert hostapd_ctrl.reload_keys("ctrl") == []
    assert asked == ["all_sta", "all_sta", "all_sta", "RELOAD_WPA_PSK"]
    # With nobody joining: at once.
    asked.clear()
    answers[:] = [JOINED]
    assert hostapd_ctrl.reload_keys("ctrl") == [] and asked == ["all_sta", "RELOAD_WPA_PSK"]


def test_a_station_that_never_finishes_joining_holds_the_key_file_back_only_so_long(hostapd_asked):
    answers, asked = hostapd_asked
    answers.append(AMID_HANDSHAKE)  # a wrong passphrase, tried again and again
    started = time.monotonic()
    assert hostapd_ctrl.reload_keys("ctrl", wait_s=0.2) == ["02:00:00:00:00:05"]
    assert 0.2 <= time.monotonic() - started < 2 and asked[-1] == "RELOAD_WPA_PSK"


def test_real_hostapd_takes_an_sae_password_set_while_it_runs_and_a_refusal_names_no_secret(wired_hostapd):
    """How the image gives hostapd a device's SAE password without a restart (`homework_image.radio`): one
    request straight on the socket, so the password is on no process's command line."""
    ctrl = wired_hostapd("")
    assert hostapd_ctrl.request(ctrl, "SET sae_password own secret|mac=02:00:00:00:00:01") == "OK"
    with pytest.raises(hostapd_ctrl.HostapdError, match="SET sae_password") as refused:
        hostapd_ctrl.request(ctrl, "SET sae_password own secret|mac=not-a-mac")
    assert "secret" not in str(refused.value)
    assert hostapd_ctrl.request(ctrl, "PING") == "PONG"  # still serving
