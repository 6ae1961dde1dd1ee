"""The shaper: an HTB tree on one interface's egress, classifying by the controller's DSCP marks.

    root 1: htb (unclassified -> 1:30)
      1:1   rate = ceil = the shaped rate (--shaper-percent of the line rate)
        1:10  High:    prio 0, rate = ceil = --high-share of it  (LLHP: strictly first, capped)
        1:20  Medium:  prio 1, rate = what High and the floor leave, ceil = the shaped rate
        1:30  Normal:  prio 2, rate = a floor (qos.NORMAL_FLOOR), ceil = the shaped rate
      each class's leaf: the best qdisc the kernel has (cake, else fq_codel, else pfifo)
    u32 filters on the TOS byte (mask 0xfc: DSCP, whatever ECN says): EF -> 1:10, AF41 -> 1:20;
    for IPv6 the same on its traffic class (a priority of their own: tc keeps one protocol per priority)

Applied with `tc ... replace` (the root only when it is not there), so applying twice
changes nothing (the counters carry on), and applied again when the tree is gone (the
interface was recreated). It shells out to iproute2's `tc`: u32 filters with explicit
handles (what makes `replace` idempotent) and probing leaf qdiscs by kind are plain `tc`
commands, where pyroute2's u32 support needs hand-packed keys.
"""

from __future__ import annotations

import json
import logging
import re
import subprocess
from collections.abc import Sequence

from ...policy import qos

LOG = logging.getLogger(__name__)

# Leaf qdiscs, best first. cake and fq_codel keep latency low inside each class; this machine's
# kernel has neither (pfifo then), Debian's and OpenWrt's have both.
LEAVES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("cake", ("cake", "unlimited", "besteffort")),  # HTB shapes; cake only schedules within the class
    ("fq_codel", ("fq_codel",)),
    ("pfifo", ("pfifo", "limit", "1000")),
)
# Each protocol's filters: (protocol, what u32 matches) -> (their priority, their hash table). The kernel
# numbers a priority's table from 800 in the order they are made: IPv4's first, then IPv6's.
_FILTERS = {("ip", ("ip", "dsfield")): ("1", "800"), ("ipv6", ("ip6", "priority")): ("2", "801")}


class ShaperError(RuntimeError):
    pass


class Shaper:
    def __init__(self, link: qos.LinkShape, tc: Sequence[str] = ("tc",)):
        self.link = link
        self.tc = tuple(tc)  # e.g. ("ip", "netns", "exec", NS, "tc") to shape inside a namespace
        self.leaf: str | None = None  # the leaf qdisc in use, once applied
        self.error = ""

    def _run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        proc = subprocess.run([*self.tc, *args], capture_output=True, text=True, timeout=10)
        if check and proc.returncode != 0:
            raise ShaperError(f"tc {' '.join(args)}: {proc.stderr.strip() or proc.stdout.strip()}")
        return proc

    def _root_is_ours(self) -> bool:
        proc = self._run("-j", "qdisc", "show", "dev", self.link.iface)
        qdiscs = json.loads(proc.stdout or "[]")
        return any(q.get("root") and q.get("kind") == "htb" and q.get("handle") == "1:" for q in qdiscs)

    def applied(self) -> bool:
        """Whether the interface holds the tree (it is gone if the interface was recreated)."""
        try:
            if not self._root_is_ours():
                return False
            proc = self._run("class", "show", "dev", self.link.iface, "classid", qos.MARKS[qos.HIGH].classid)
            return bool(proc.stdout.strip())
        except (ShaperError, OSError, subprocess.SubprocessError, ValueError):
            return False

    def current_leaf(self) -> str | None:
        """The leaf qdisc a tree already on the interface uses (a restarted controller finds its tree)."""
        proc = self._run("qdisc", "show", "dev", self.link.iface, "parent", qos.MARKS[qos.HIGH].classid, check=False)
        kind = proc.stdout.split()[1] if proc.returncode == 0 and len(proc.stdout.split()) > 1 else None
        return kind if kind in {leaf for leaf, _ in LEAVES} else None

    def apply(self) -> str:
        """Put the tree on the interface (again: nothing changes); returns the leaf qdisc in use."""
        link, dev = self.link, self.link.iface
        high, medium, normal = (qos.MARKS[p].classid for p in (qos.HIGH, qos.MEDIUM, qos.DEFAULT))
        if not self._root_is_ours():  # (HTB's root cannot be changed in place; ours needs no change)
            self._run("qdisc", "del", "dev", dev, "root", check=False)  # whatever was there (none is fine)
            self._run("qdisc", "add", "dev", dev, "root", "handle", "1:", "htb", "default", normal.split(":")[1])
        shaped = f"{link.shaped_kbit}kbit"
        self._run(
            "class", "replace", "dev", dev, "parent", "1:", "classid", "1:1", "htb", "rate", shaped, "ceil", shaped
        )
        for classid, rate, ceil, prio in (
            (high, link.high_kbit, f"{link.high_kbit}kbit", "0"),
            (medium, link.medium_kbit, shaped, "1"),
            (normal, link.normal_kbit, shaped, "2"),
        ):
            self._run(
                "class",
                "replace",
                "dev",
                dev,
                "parent",
                "1:1",
                "classid",
                classid,
                "htb",
                "rate",
                f"{rate}kbit",
                "ceil",
                ceil,
                "prio",
                prio,
                "quantum",
                "1514",
            )
            self.leaf = self._apply_leaf(classid)
        for (protocol, field), (prio, table) in _FILTERS.items():
            for priority in (qos.HIGH, qos.MEDIUM):
                mark = qos.MARKS[priority]
                minor = mark.classid.split(":")[1]
                self._run(
                    "filter",
                    "replace",
                    "dev",
                    dev,
                    "parent",
                    "1:",
                    "protocol",
                    protocol,
                    "prio",
                    prio,
                    "handle",
                    f"{table}::{minor}",
                    "u32",
                    "match",
                    *field,
                    f"{mark.tos:#04x}",
                    "0xfc",
                    "flowid",
                    mark.classid,
                )
        self.error = ""
        assert self.leaf is not None
        return self.leaf

    def _apply_leaf(self, classid: str) -> str:
        minor = classid.split(":")[1]
        failures = []
        kinds = LEAVES if self.leaf is None else [leaf for leaf in LEAVES if leaf[0] == self.leaf]
        for kind, args in kinds:
            proc = self._run(
                "qdisc", "replace", "dev", self.link.iface, "parent", classid, "handle", f"{minor}:", *args, check=False
            )
            if proc.returncode == 0:
                return kind
            failures.append(f"{kind}: {proc.stderr.strip()}")
        raise ShaperError(f"no leaf qdisc for {classid} on {self.link.iface}: {'; '.join(failures)}")

    def class_counters(self, priority: str = qos.HIGH) -> qos.ClassCounters:
        proc = self._run("-s", "class", "show", "dev", self.link.iface, "classid", qos.MARKS[priority].classid)
        return parse_class_counters(proc.stdout)

    def health(self) -> dict:
        link = self.link
        return {
            "iface": link.iface,
            "line_kbit": link.line_kbit,
            "shaped_kbit": link.shaped_kbit,
            "high_kbit": link.high_kbit,
            "leaf_qdisc": self.leaf,
            "error": self.error,
        }


OVERLOAD_EVENT_S = 300  # at most one qos-overload Event per shaped link in this long


class Watch:
    """Keeps each shaped link's tree in place (a router restart recreates interfaces) and says when
    its High class dropped packets or ran at its cap since the last check, at most once per link
    every OVERLOAD_EVENT_S. Runs off the controller's lock (it only runs tc)."""

    def __init__(self, shapers: dict[str, Shaper]):
        self.shapers = shapers
        self._last: dict[str, tuple[float, qos.ClassCounters]] = {}
        self._told: dict[str, float] = {}

    def check(self, now: float) -> list[str]:
        """One pass (now: a monotonic clock); the overload messages to tell the household."""
        messages = []
        for way, s in self.shapers.items():
            try:
                if not s.applied():
                    leaf = s.apply()
                    LOG.info(
                        "%s (%s) shaped at %d kbit/s, High capped at %d, leaf qdisc %s",
                        way,
                        s.link.iface,
                        s.link.shaped_kbit,
                        s.link.high_kbit,
                        leaf,
                    )
                    self._last.pop(way, None)
                elif s.leaf is None:
                    s.leaf = s.current_leaf()
                counters = s.class_counters()
            except (ShaperError, OSError, subprocess.SubprocessError) as exc:
                if s.error != str(exc):
                    LOG.error("shaper %s: %s", way, exc)
                s.error = str(exc)
                continue
            before = self._last.get(way)
            self._last[way] = (now, counters)
            why = (
                None
                if before is None
                else qos.high_class_overload(before[1], counters, now - before[0], s.link.high_kbit)
            )
            if why and now - self._told.get(way, -OVERLOAD_EVENT_S) >= OVERLOAD_EVENT_S:
                self._told[way] = now
                messages.append(f"high-priority traffic {way} ({s.link.iface}) {why}")
        return messages


_SENT = re.compile(r"Sent (\d+) bytes \d+ pkt \(dropped (\d+), overlimits (\d+)")


def parse_class_counters(text: str) -> qos.ClassCounters:
    """`tc -s class show` of one class -> its counters."""
    found = _SENT.search(text)
    if found is None:
        raise ShaperError(f"no counters in {text!r}")
    sent, dropped, overlimits = (int(x) for x in found.groups())
    return qos.ClassCounters(sent, dropped, overlimits)
