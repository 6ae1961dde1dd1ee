"""The wireless link of each station: signal, retries, packets, as `iw station dump` reports them.

One parser, two sources: on a router the text comes from `iw dev wlan0 station dump`;
in the emulated home `homenet` writes the same text to a file from its emulated radio.
`link_rows` turns two successive dumps into Links rows (retries and packets per interval).
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass

_STATION = re.compile(r"^Station ([0-9a-fA-F:]{17})", re.M)


@dataclass(frozen=True)
class Station:
    mac: str
    signal_dbm: int
    tx_retries: int
    packets: int  # received + sent, since the station associated


def parse_station_dump(text: str) -> dict[str, Station]:
    stations = {}
    starts = [m.start() for m in _STATION.finditer(text)] + [len(text)]
    for start, end in zip(starts, starts[1:], strict=False):
        block = text[start:end]
        station = _STATION.match(block)
        assert station is not None  # every block starts where _STATION matched
        mac = station.group(1).lower()
        fields = dict(re.findall(r"^\s+([a-z ]+):\s+(-?\d+)", block, re.M))
        try:
            stations[mac] = Station(
                mac,
                int(fields["signal"]),
                int(fields.get("tx retries", 0)),
                int(fields.get("rx packets", 0)) + int(fields.get("tx packets", 0)),
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


def read_stations(source: str) -> str:
    """`iw:IFACE` runs iw; `file:PATH` reads what an emulated radio wrote."""
    kind, _, where = source.partition(":")
    if kind == "iw":
        return subprocess.run(
            ["iw", "dev", where, "station", "dump"], capture_output=True, text=True, timeout=5, check=True
        ).stdout
    if kind == "file":
        with open(where, encoding="utf-8") as f:
            return f.read()
    raise ValueError(f"station source must be iw:IFACE or file:PATH, not {source!r}")
