"""Devices' own Wi-Fi passphrases: made from `secrets`, kept like decisions, shown as a QR code."""

import math

import pytest
from support import PHONE, PHONE_CLIENT, ROUTER_MAC, WLAN, lease

from homework_controller.core.router import HomeRouter
from homework_controller.errors import ApiError, NotConfigured, UnknownDevice
from homework_controller.policy import dhcp, wifi_keys
from homework_controller.radio import hostapd_ctrl
from homework_controller.store import DeviceStore


def test_a_passphrase_is_typeable_and_strong_enough_for_offline_guessing():
    made = {wifi_keys.new_passphrase() for _ in range(200)}
    assert len(made) == 200
    for p in made:
        groups = p.split("-")
        assert len(groups) == 5 and all(len(g) == 4 and set(g) <= set(wifi_keys.ALPHABET) for g in groups)
        wifi_keys.check_passphrase(p)
    assert not set("01ilo") & set(wifi_keys.ALPHABET)  # nothing to misread
    assert pytest.approx(20 * math.log2(31)) == wifi_keys.PASSPHRASE_BITS
    assert wifi_keys.PASSPHRASE_BITS > 96


def test_the_qr_payload_escapes_what_the_wifi_qr_format_reserves():
    assert wifi_keys.qr_payload("home", "k7qm-3xhv") == "WIFI:T:WPA;S:home;P:k7qm-3xhv;;"
    assert (
        wifi_keys.qr_payload('Cafe;"A":B,\\', 'p;a:s,s\\w"d') == r"WIFI:T:WPA;S:Cafe\;\"A\"\:B\,\\;P:p\;a\:s\,s\\w\"d;;"
    )


def test_the_key_file_keeps_lines_it_does_not_own():
    phone = wifi_keys.WifiKey("02:00:00:00:00:aa", "k7qm-3xhv-9bcd-efgh-jkmn", 0.0)
    current = "keyid=guest 00:00:00:00:00:00 correct horse battery\nkeyid=dev-0200000000bb 02:00:00:00:00:bb old\n"
    assert wifi_keys.render_psk_file(current, [phone]).splitlines() == [
        "keyid=guest 00:00:00:00:00:00 correct horse battery",
        # A device's line fits any MAC (a phone's next private address); its key id says whose it is.
        "keyid=dev-0200000000aa 00:00:00:00:00:00 k7qm-3xhv-9bcd-efgh-jkmn",
    ]
    assert wifi_keys.mac_of_keyid("dev-0200000000aa") == "02:00:00:00:00:aa"
    not_a_device = ("guest", "dev-0200", "dev-02000000zzaa", "0200000000aa", "dev-0100000000aa")  # the last: multicast
    assert [wifi_keys.mac_of_keyid(k) for k in not_a_device] == [None] * 5


def test_a_permitted_device_gets_its_own_passphrase_replaced_or_revoked_and_it_survives_a_restart(db_path, clock):
    made = iter(["aaaa-bbbb-cccc-dddd-eeee", "ffff-gggg-hhhh-jjjj-kkkk"])
    router = HomeRouter(
        DeviceStore(db_path),
        dhcp.LeasePolicy(30, 3600),
        clock=clock,
        wifi_ssid="home",
        new_passphrase=lambda: next(made),
    )
    router.switch_ready(WLAN, ROUTER_MAC)
    lease(router, PHONE, PHONE_CLIENT)
    with pytest.raises(ApiError, match="only a permitted device"):
        router.decisions.issue_wifi_key(PHONE)  # a pending device: the household has not said yes
    router.decisions.permit(PHONE)
    assert router.decisions.issue_wifi_key(PHONE) == {
        "mac": PHONE,
        "keyid": "dev-0200000000aa",
        "ssid": "home",
        "passphrase": "aaaa-bbbb-cccc-dddd-eeee",
        "qr": "WIFI:T:WPA;S:home;P:aaaa-bbbb-cccc-dddd-eeee;;",
        "created": clock.now,
    }
    assert router.decisions.issue_wifi_key(PHONE)["passphrase"] == "ffff-gggg-hhhh-jjjj-kkkk"  # replaced
    # The status shows that it has one, never the passphrase itself.
    assert router.status(PHONE)["wifi_key"] == {"keyid": "dev-0200000000aa", "created": clock.now, "used": 0.0}
    router.store.close()

    again = HomeRouter(DeviceStore(db_path), dhcp.LeasePolicy(30, 3600), clock=clock, wifi_ssid="home")
    assert again.decisions.wifi_key_of(PHONE)["passphrase"] == "ffff-gggg-hhhh-jjjj-kkkk"
    assert again.decisions.revoke_wifi_key(PHONE) == {"mac": PHONE, "revoked": True}
    assert again.status(PHONE)["wifi_key"] is None
    with pytest.raises(UnknownDevice, match="no passphrase of its own"):
        again.decisions.revoke_wifi_key(PHONE)
    again.store.close()
    assert not HomeRouter(DeviceStore(db_path), clock=clock).passphrases.knows(PHONE)


def test_without_a_wifi_network_a_passphrase_is_a_clear_501(router):
    lease(router, PHONE, PHONE_CLIENT)
    router.decisions.permit(PHONE)
    with pytest.raises(NotConfigured, match="--wifi-ssid"):
        router.decisions.issue_wifi_key(PHONE)
    with pytest.raises(UnknownDevice):
        router.decisions.issue_wifi_key("02:00:00:00:00:99")


def test_publishing_unchanged_keys_leaves_the_key_file_alone_and_a_new_key_rewrites_it(tmp_path):
    """Every controller start publishes the keys. The image watches the file (homework-radio-refresh.path:
    hostapd's configuration rendered again, hostapd restarted, every station dropped), so a write with
    nothing new in it would cost each boot a restart of the radio."""
    path = tmp_path / "hostapd.wpa_psk"
    path.write_text(wifi_keys.render_guest_line("", "guest passphrase"))
    keys = [wifi_keys.WifiKey(PHONE, "correct horse battery", 0.0)]
    authenticator = hostapd_ctrl.Authenticator("", str(path), lambda: keys)
    authenticator.publish_keys()
    written = path.stat()
    assert "correct horse battery" in path.read_text() and "guest passphrase" in path.read_text()
    authenticator.publish_keys()  # the next start: the same keys
    assert (path.stat().st_ino, path.stat().st_mtime_ns) == (written.st_ino, written.st_mtime_ns)
    keys.append(wifi_keys.WifiKey("02:00:00:00:00:99", "another passphrase", 0.0))
    authenticator.publish_keys()
    assert path.stat().st_ino != written.st_ino and "another passphrase" in path.read_text()
