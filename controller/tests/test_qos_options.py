"""The shaping and app-table options: none given is today's behaviour (no shaping); bad ones are
refused with a message that says which."""

import pytest

from homework_controller.__main__ import parse_args
from homework_controller.config import Config
from homework_controller.policy import qos


def settings_of(argv):
    args = parse_args(argv)
    config = Config(
        upstream_iface=args.upstream_iface,
        uplink_kbit=args.uplink_kbit,
        downlink_iface=args.downlink_iface,
        downlink_kbit=args.downlink_kbit,
        shaper_percent=args.shaper_percent,
        high_share=args.high_share,
        high_device_share=args.high_device_share,
    )
    return config.qos_settings()


def test_no_options_no_shaping_and_both_links_when_asked():
    assert settings_of([]) == qos.QosSettings()
    # A deployment may name the interfaces always: rate 0 means not shaped.
    assert settings_of(["--upstream-iface", "hw-wan", "--uplink-kbit", "0"]) == qos.QosSettings()
    s = settings_of(
        [
            "--upstream-iface",
            "hw-wan",
            "--uplink-kbit",
            "20000",
            "--downlink-iface",
            "wlan0",
            "--downlink-kbit",
            "50000",
            "--shaper-percent",
            "85",
            "--high-share",
            "0.4",
            "--high-device-share",
            "0.25",
        ]
    )
    assert s.uplink == qos.LinkShape("hw-wan", 20000, 85, 0.4) and s.uplink.shaped_kbit == 17000
    assert s.downlink == qos.LinkShape("wlan0", 50000, 85, 0.4) and s.high_device_share == 0.25


@pytest.mark.parametrize(
    "argv, complaint",
    [
        (["--uplink-kbit", "1000"], "--uplink-kbit needs the interface to shape"),
        (["--downlink-kbit", "-5"], "--downlink-kbit needs the interface"),
        (["--downlink-iface", "wlan0", "--downlink-kbit", "-5"], "must be positive"),
        (["--shaper-percent", "120"], "--shaper-percent"),
        (["--high-share", "0.1", "--high-device-share", "0.2"], "--high-device-share <= --high-share"),
        (["--apps", "/nonexistent/apps.toml"], "--apps /nonexistent/apps.toml"),
    ],
)
def test_bad_options_are_refused_saying_which(argv, complaint, capsys):
    with pytest.raises(SystemExit):
        parse_args(argv)
    assert complaint in capsys.readouterr().err


def test_a_bad_app_table_is_refused_at_start_with_what_is_wrong(tmp_path, capsys):
    path = tmp_path / "apps.toml"
    path.write_text("[apps.x]\npriority = 'urgent'\n")
    with pytest.raises(SystemExit):
        parse_args(["--apps", str(path)])
    assert "priority must be one of" in capsys.readouterr().err
    path.write_text("[apps.x]\npriority = 'high'\n")
    assert parse_args(["--apps", str(path)]).apps == str(path)
