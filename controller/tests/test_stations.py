import pytest
from pyroute2.netlink.nl80211 import NL80211_NAMES, nl80211cmd

from homework_controller.radio.stations import (
    Station,
    link_rows,
    parse_station_dump,
    read_stations,
    stations_from_nl80211,
)

DUMP = """Station 02:5E:EC:0D:C4:19 (on wlan0)
\tinactive time:\t304 ms
\trx bytes:\t18816
\trx packets:\t75
\ttx bytes:\t5386
\ttx packets:\t21
\ttx retries:\t4
\ttx failed:\t0
\tsignal:  \t-61 [-61, -63] dBm
\tsignal avg:\t-60 dBm
Station 02:00:00:00:00:02 (on wlan0)
\trx packets:\t10
\ttx packets:\t0
\ttx retries:\t0
\tsignal:  \t-80 dBm
"""


def test_iw_station_dump_is_read_per_station():
    stations = parse_station_dump(DUMP)
    assert stations["02:5e:ec:0d:c4:19"] == Station("02:5e:ec:0d:c4:19", -61, 4, 96)
    assert stations["02:00:00:00:00:02"].signal_dbm == -80


def test_links_rows_count_retries_and_packets_per_interval():
    before = parse_station_dump(DUMP)
    later = dict(before, **{"02:5e:ec:0d:c4:19": Station("02:5e:ec:0d:c4:19", -70, 10, 196)})
    assert link_rows(before, later) == [("02:00:00:00:00:02", -80, 0, 0), ("02:5e:ec:0d:c4:19", -70, 6, 100)]
    # A station that re-associated restarts its counters: what it has now is this interval's.
    again = {"02:5e:ec:0d:c4:19": Station("02:5e:ec:0d:c4:19", -65, 1, 5)}
    assert link_rows(later, again) == [("02:5e:ec:0d:c4:19", -65, 1, 5)]


# An nl80211 station dump as the kernel answers NL80211_CMD_GET_STATION (made with pyroute2's encoder:
# this host's kernel has no mac80211; the image's boot test reads a real one from mac80211_hwsim).
# Station 02:5e:ec:0d:c4:19: signal -61 dBm, 75 packets received, 21 sent, 4 retries, sent at 65 Mbit/s
# (BITRATE32), received at 6.5 Mbit/s (only the 16-bit BITRATE).
def nl80211_station(mac, sta_info):
    msg = nl80211cmd()
    msg["cmd"] = NL80211_NAMES["NL80211_CMD_NEW_STATION"]
    msg["attrs"] = [["NL80211_ATTR_IFINDEX", 5], ["NL80211_ATTR_MAC", mac], ["NL80211_ATTR_STA_INFO", sta_info]]
    msg.encode()
    decoded = nl80211cmd(msg.data)
    decoded.decode()
    return decoded


def rate(**fields):
    return {"attrs": [[f"NL80211_RATE_INFO_{name}", value] for name, value in fields.items()]}


def test_an_nl80211_station_dump_is_read_per_station():
    dump = [
        nl80211_station(
            "02:5E:EC:0D:C4:19",
            {
                "attrs": [
                    ["NL80211_STA_INFO_SIGNAL", -61],
                    ["NL80211_STA_INFO_RX_PACKETS", 75],
                    ["NL80211_STA_INFO_TX_PACKETS", 21],
                    ["NL80211_STA_INFO_TX_RETRIES", 4],
                    ["NL80211_STA_INFO_TX_BITRATE", rate(BITRATE32=650, BITRATE=650)],
                    ["NL80211_STA_INFO_RX_BITRATE", rate(BITRATE=65)],
                ]
            },
        ),
        # Just associated: no signal reading yet (skipped until it has one), and no counters.
        nl80211_station("02:00:00:00:00:03", {"attrs": [["NL80211_STA_INFO_RX_PACKETS", 1]]}),
        # Counters the kernel leaves out count as none.
        nl80211_station("02:00:00:00:00:02", {"attrs": [["NL80211_STA_INFO_SIGNAL", -80]]}),
    ]
    assert stations_from_nl80211(dump) == {
        "02:5e:ec:0d:c4:19": Station("02:5e:ec:0d:c4:19", -61, 4, 96, tx_kbit=65000, rx_kbit=6500),
        "02:00:00:00:00:02": Station("02:00:00:00:00:02", -80, 0, 0),
    }


def test_iw_text_and_nl80211_give_the_same_station():
    text = DUMP.replace("\tsignal avg", "\ttx bitrate:\t65.0 MBit/s MCS 7 short GI\n\tsignal avg")
    from_text = parse_station_dump(text)["02:5e:ec:0d:c4:19"]
    assert from_text == Station("02:5e:ec:0d:c4:19", -61, 4, 96, tx_kbit=65000)


def test_a_source_that_cannot_say_is_an_oserror_and_an_unknown_kind_a_valueerror(tmp_path):
    with pytest.raises(OSError):
        read_stations("nl80211:no-such-radio0")  # no such interface (and this kernel has no nl80211 at all)
    with pytest.raises(OSError):
        read_stations(f"file:{tmp_path}/none")
    with pytest.raises(ValueError):
        read_stations("wext:wlan0")
