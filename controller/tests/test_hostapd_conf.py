import pytest

from homework_controller import hostapd_conf


def test_one_template_renders_the_emulated_wired_authenticator_and_the_real_radio(capsys):
    hostapd_conf.main(["--driver", "wired", "--interface", "br-lan", "--eap-users", "/run/x.eap_user"])
    wired = capsys.readouterr().out
    assert "driver=wired" in wired and "ieee8021x=1" in wired and "use_pae_group_addr=0" in wired
    hostapd_conf.main(["--driver", "nl80211", "--interface", "wlan0", "--ssid", "home",
                       "--passphrase", "correct horse battery"])
    radio = capsys.readouterr().out
    assert "driver=nl80211" in radio and "wpa=2" in radio and "ap_isolate=1" in radio
    assert "${" not in wired + radio


def test_a_radio_without_a_usable_passphrase_is_refused():
    with pytest.raises(SystemExit, match="passphrase"):
        hostapd_conf.main(["--driver", "nl80211", "--interface", "wlan0", "--ssid", "home", "--passphrase", "short"])
