"""Priorities as packet marks, the shaper's shape, and the caps that keep High honest: pure.

A priority (`high | medium | default`) becomes a DSCP mark that the controller sets on each
learnt flow's rules (both directions) and an OpenFlow queue number (for routers on OVS's
kernel datapath, whose QoS table maps queues to tc classes). The shaper (`shaper.py`) puts
packets in its HTB classes by that mark:

  priority  DSCP       TOS byte  queue  HTB class  what it gets
  high      46 (EF)    0xb8      1      1:10       first, up to --high-share of the shaped rate (LLHP)
  medium    34 (AF41)  0x88      2      1:20       before default (MP)
  default   0          0x00      0      1:30       a floor of NORMAL_FLOOR of the rate, and what is left
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import flows

HIGH, MEDIUM, DEFAULT = "high", "medium", "default"


@dataclass(frozen=True)
class Mark:
    priority: str
    dscp: int
    queue: int
    classid: str  # the shaper's HTB class

    @property
    def tos(self) -> int:
        return self.dscp << 2


MARKS = {HIGH: Mark(HIGH, 46, 1, "1:10"), MEDIUM: Mark(MEDIUM, 34, 2, "1:20"), DEFAULT: Mark(DEFAULT, 0, 0, "1:30")}
NORMAL_FLOOR = 0.1  # the default class's guaranteed share of the shaped rate: nothing starves it


def mark_actions(priority: str) -> tuple:
    """The actions that mark a flow's packets: DSCP for the shaper, the queue for the kernel datapath."""
    mark = MARKS[priority]
    return (flows.SetField("ip_dscp", mark.dscp), flows.SetQueue(mark.queue))


@dataclass(frozen=True)
class LinkShape:
    """One shaped interface: where, its line rate, and the HTB tree's rates (kbit/s)."""

    iface: str
    line_kbit: int
    shaper_percent: float = 90.0
    high_share: float = 0.3

    @property
    def shaped_kbit(self) -> int:
        return max(8, int(self.line_kbit * self.shaper_percent / 100))

    @property
    def high_kbit(self) -> int:
        return max(8, int(self.shaped_kbit * self.high_share))

    @property
    def normal_kbit(self) -> int:
        return max(8, int(self.shaped_kbit * NORMAL_FLOOR))

    @property
    def medium_kbit(self) -> int:
        return max(8, self.shaped_kbit - self.high_kbit - self.normal_kbit)


@dataclass(frozen=True)
class QosSettings:
    """What the command line asked for; no shaped link: marks only, nothing capped."""

    uplink: LinkShape | None = None
    downlink: LinkShape | None = None
    high_device_share: float = 0.2  # of each shaped rate, per device, for its High-marked traffic
    demotion_s: float = 60.0  # how long a device over its High share stays demoted to Medium


def over_device_share(settings: QosSettings, up_bytes: int, down_bytes: int, seconds: float) -> str | None:
    """Whether one device's High-marked traffic over an interval exceeded its share, and how (None: it did not).

    An agent speaks for its own device only, but could call its bulk transfer a video call: whatever
    it claims, a device gets at most this share of High; beyond, its High flows are demoted.
    """
    if seconds <= 0:
        return None
    for link, nbytes, way in ((settings.uplink, up_bytes, "up"), (settings.downlink, down_bytes, "down")):
        if link is None:
            continue
        kbit_s = nbytes * 8 / 1000 / seconds
        allowed = link.shaped_kbit * settings.high_device_share
        if kbit_s > allowed:
            return f"{kbit_s:.0f} kbit/s {way} in the High class, over its share of {allowed:.0f} kbit/s"
    return None


@dataclass(frozen=True)
class ClassCounters:
    """An HTB class's counters as `tc -s class show` reports them."""

    sent_bytes: int
    dropped: int
    overlimits: int


AT_CAP = 0.9  # a High class sending at 90% of its ceiling or more is at its cap


def high_class_overload(before: ClassCounters, after: ClassCounters, seconds: float, ceil_kbit: int) -> str | None:
    """Why the High class is overloaded over an interval (drops, or running at its cap), or None."""
    if seconds <= 0:
        return None
    dropped = after.dropped - before.dropped
    kbit_s = max(0, after.sent_bytes - before.sent_bytes) * 8 / 1000 / seconds
    if dropped > 0:
        return f"dropped {dropped} packets ({kbit_s:.0f} of {ceil_kbit} kbit/s)"
    if kbit_s >= AT_CAP * ceil_kbit:
        return f"at its cap ({kbit_s:.0f} of {ceil_kbit} kbit/s)"
    return None
