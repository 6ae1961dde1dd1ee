"""The agent report book: which program owns each connection, as end-host agents said (AppTuples).

Agents report from the LAN, so one device may report as fast as it likes. The book is bounded
in total and per device, and a device over its share only ever loses its own reports: each device
keeps at most `per_device` (its least recently reported go first), and when the whole book is
over `total`, the device holding the most gives one up. A device that reports its real
connections (a few hundred) keeps them all whatever another device sends.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from ..model import Device

MAX_REPORTS = 50000
MAX_REPORTS_PER_DEVICE = 2048  # a busy computer has a few hundred connections open


@dataclass(frozen=True)
class AgentReport:
    """One end-host agent's AppTuples row, already parsed and checked (`hwdb_feed`): the program
    (process) owning a connection of the device at saddr. daddr "*" and dport 0: an unconnected
    UDP socket, for every destination."""

    proto: int
    saddr: str
    sport: int
    daddr: str
    dport: int
    process: str

    @property
    def connection(self) -> tuple:
        return (self.proto, self.saddr, self.sport, self.daddr, self.dport)


class AgentReportBook:
    def __init__(self, per_device: int = MAX_REPORTS_PER_DEVICE, total: int = MAX_REPORTS):
        self.per_device, self.total = per_device, total
        self._by_device: dict[str, OrderedDict[tuple, str]] = {}
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def record_all(
        self, reports: Iterable[AgentReport], device_at: Callable[[str], Device | None]
    ) -> tuple[list[Device], int]:
        """Each report recorded as the device's whose lease address is its saddr (`device_at`: the
        forwarding device at an address), and only those: an agent speaks for its own device. The
        devices spoken for, and how many reports spoke for none."""
        spoken_for: dict[str, Device] = {}
        ignored = 0
        for report in reports:
            device = device_at(report.saddr)
            if device is None:
                ignored += 1
                continue
            self.record(device.mac, report)
            spoken_for[device.mac] = device
        return list(spoken_for.values()), ignored

    def record(self, mac: str, report: AgentReport) -> None:
        """Remember the report as the device's most recent one, making room from the device's own first."""
        book = self._by_device.setdefault(mac, OrderedDict())
        key = report.connection
        if book.pop(key, None) is None:
            self._count += 1
        book[key] = report.process
        if len(book) > self.per_device:
            book.popitem(last=False)
            self._count -= 1
        if self._count > self.total:
            fullest = max(self._by_device.values(), key=len)
            if len(book) >= len(fullest):
                fullest = book  # of the fullest, the one reporting now gives way
            fullest.popitem(last=False)
            self._count -= 1

    def process_of(self, mac: str, connection: tuple) -> str | None:
        """The program owning a connection (proto, saddr, sport, daddr, dport) of the device, if its
        agent said: that connection, else its unconnected UDP socket at that port."""
        book = self._by_device.get(mac)
        if not book:
            return None
        proto, saddr, sport, _, _ = connection
        return book.get(connection) or book.get((proto, saddr, sport, "*", 0))

    def reports_of(self, mac: str) -> int:
        return len(self._by_device.get(mac, ()))

    def knows(self, mac: str) -> bool:
        return mac in self._by_device

    def forget(self, mac: str) -> None:
        self._count -= len(self._by_device.pop(mac, ()))
