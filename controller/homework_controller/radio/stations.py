"""The wireless link of each station: signal, retries, packets and bitrates, as the kernel reports them.

Three sources, one `Station` value: on a router the kernel's nl80211 station dump (`nl80211:wlan0`,
through pyroute2: `iw`'s text is not a stable interface); `iw:wlan0` runs `iw dev wlan0 station dump`
(a router without pyroute2's nl80211); in the emulated home, whose kernel has no mac80211, `homenet`
writes that text to a file from its emulated radio (`file:PATH`). `link_rows` turns two successive
dumps into Links rows (retries and packets per interval).
"""

from __future__ import annotations

import re
import socket
import subprocess
from dataclasses import dataclass

from pyroute2 import IW
from pyroute2.netlink.exceptions import NetlinkError

_STATION = re.compile(r"^Station ([0-9a-fA-F:]{17})", re.M)


@dataclass(frozen=True)
class Station:
    mac: str
    signal_dbm: int
    tx_retries: int
    packets: int  # received + sent, since the station associated
    tx_kbit: int = 0  # the bitrate of the last frame sent to it, and received from it (0: not known)
    rx_kbit: int = 0


def parse_station_dump(text: str) -> dict[str, Station]:
    stations = {}
    starts = [m.start() for m in _STATION.finditer(text)] + [len(text)]
    for start, end in zip(starts, starts[1:], strict=False):
        block = text[start:end]
        station = _STATION.match(block)
        assert station is not None  # every block starts where _STATION matched
        mac = station.group(1).lower()
        fields = dict(re.findall(r"^\s+([a-z ]+):\s+(-?\d+(?:\.\d+)?)", block, re.M))
        try:
            stations[mac] = Station(
                mac,
                int(fields["signal"]),
                int(fields.get("tx retries", 0)),
                int(fields.get("rx packets", 0)) + int(fields.get("tx packets", 0)),
                round(float(fields.get("tx bitrate", 0)) * 1000),
                round(float(fields.get("rx bitrate", 0)) * 1000),
            )
        except KeyError:
            continue  # a station without a signal reading yet: skip until it has one
    return stations


def link_rows(before: dict[str, Station], now: dict[str, Station]) -> list[tuple]:
    """(mac, rssi, retries, packets) per station, counting since the previous dump."""
    rows = []
    for mac, st in sorted(now.items()):
        prev = before.get(mac)
        if prev is None or st.packets < prev.packets or st.tx_retries < prev.tx_retries:
            prev = Station(mac, st.signal_dbm, 0, 0)  # (re)associated: its counters restarted
        rows.append((mac, st.signal_dbm, st.tx_retries - prev.tx_retries, st.packets - prev.packets))
    return rows


def stations_from_nl80211(messages) -> dict[str, Station]:
    """Stations from an nl80211 station dump (NL80211_CMD_GET_STATION's answers, as pyroute2 decodes them)."""
    stations = {}
    for msg in messages:
        mac, info = msg.get_attr("NL80211_ATTR_MAC"), msg.get_attr("NL80211_ATTR_STA_INFO")
        if mac is None or info is None:
            continue
        signal = info.get_attr("NL80211_STA_INFO_SIGNAL")
        if signal is None:
            continue  # a station without a signal reading yet: skip until it has one
        mac = mac.lower()
        stations[mac] = Station(
            mac,
            signal,
            info.get_attr("NL80211_STA_INFO_TX_RETRIES") or 0,
            (info.get_attr("NL80211_STA_INFO_RX_PACKETS") or 0) + (info.get_attr("NL80211_STA_INFO_TX_PACKETS") or 0),
            _kbit(info.get_attr("NL80211_STA_INFO_TX_BITRATE")),
            _kbit(info.get_attr("NL80211_STA_INFO_RX_BITRATE")),
        )
    return stations


def _kbit(rate) -> int:
    """A rate_info's bitrate (units of 100 kbit/s; the 32-bit field when the kernel sends it) in kbit/s."""
    if rate is None:
        return 0
    units = rate.get_attr("NL80211_RATE_INFO_BITRATE32") or rate.get_attr("NL80211_RATE_INFO_BITRATE") or 0
    return units * 100


def read_stations(source: str) -> dict[str, Station]:
    """`nl80211:IFACE` asks the kernel; `iw:IFACE` runs iw; `file:PATH` reads what an emulated radio wrote.
    OSError (or a SubprocessError from iw) when the source cannot say."""
    kind, _, where = source.partition(":")
    if kind == "nl80211":
        try:
            with IW() as iw:
                return stations_from_nl80211(iw.get_stations(socket.if_nametoindex(where)))
        except NetlinkError as exc:  # no nl80211 in this kernel, or no such wireless interface
            raise OSError(f"nl80211 station dump of {where}: {exc}") from exc
    if kind == "iw":
        return parse_station_dump(
            subprocess.run(
                ["iw", "dev", where, "station", "dump"], capture_output=True, text=True, timeout=5, check=True
            ).stdout
        )
    if kind == "file":
        with open(where, encoding="utf-8") as f:
            return parse_station_dump(f.read())
    raise ValueError(f"station source must be nl80211:IFACE, iw:IFACE or file:PATH, not {source!r}")
