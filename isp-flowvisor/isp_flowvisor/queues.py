"""The aggregation switch's downlink queues: an HTB tree per household, classified by tc u32.

On the userspace datapath OpenFlow set_queue does nothing, so the slicer turns a household's queue
choice into a DSCP mark (policy.DSCP_OF_QUEUE) and this tree classifies on destination address and
the TOS byte (IPv6: its destination prefix and traffic class, with filters of their own):

    1:    htb root (default 1:2)
    1:1   the link, rate = ceil = link_mbit
    1:2   traffic of no household
    1:H   one household (H = slot * 4), rate = its guaranteed rate, ceil = the link: households
          borrow spare capacity in proportion to their guaranteed rates
    1:H+1 High:   rate = half the guaranteed rate, ceil = the guaranteed rate (capped), prio 0
    1:H+2 Medium: rate = 30 %, ceil = the link, prio 1
    1:H+3 Normal: rate = 20 %, ceil = the link, prio 2

`plan()` is pure (tc batch lines); `DownlinkQueues` runs them and reads the counters back.
"""

from __future__ import annotations

import logging
import re
import subprocess
import tempfile
from collections.abc import Iterable
from typing import Any

from .model import Household
from .policy import DSCP_OF_QUEUE, QUEUE_NAMES

LOG = logging.getLogger("isp_flowvisor.queues")
MAX_TC_SLOT = 0x3FFE  # class minors are 16 bits: slot * 4 + 3 must fit
_SHARES = {2: (0.5, False), 1: (0.3, True), 0: (0.2, True)}  # queue: (share of guarantee, may borrow the link)
_MINOR_OF_QUEUE = {2: 1, 1: 2, 0: 3}
# Per address family: tc's protocol, u32's words for the destination and the TOS byte, and the filter
# priorities of marked traffic and of the household's catch-all (a tc priority holds one protocol).
_FAMILY = {4: ("ip", "ip dst", "ip tos", 1, 3), 6: ("ipv6", "ip6 dst", "ip6 priority", 2, 4)}
QUEUE_OF_MINOR = {v: k for k, v in _MINOR_OF_QUEUE.items()}


def household_class(slot: int) -> int:
    if not 1 <= slot <= MAX_TC_SLOT:
        raise ValueError(f"slot {slot} does not fit a tc class id")
    return slot * 4


def _kbit(mbit: float) -> str:
    return f"{max(8, int(mbit * 1000))}kbit"


def plan(interface: str, link_mbit: float, households: Iterable[Household], leaf: str) -> list[str]:
    """tc batch lines building the whole tree from scratch."""
    dev = f"dev {interface}"
    lines = [
        f"qdisc replace {dev} root handle 1: htb default 2",
        f"class replace {dev} parent 1: classid 1:1 htb rate {_kbit(link_mbit)} ceil {_kbit(link_mbit)}",
        f"class replace {dev} parent 1:1 classid 1:2 htb rate {_kbit(min(1.0, link_mbit))} "
        f"ceil {_kbit(link_mbit)} prio 3",
    ]
    for h in sorted(households, key=lambda h: h.slot):
        base = household_class(h.slot)
        guaranteed = min(h.guaranteed_mbit, link_mbit)
        lines.append(
            f"class replace {dev} parent 1:1 classid 1:{base:x} htb rate {_kbit(guaranteed)} "
            f"ceil {_kbit(link_mbit)}"
        )
        for queue, (share, borrows) in _SHARES.items():
            minor = base + _MINOR_OF_QUEUE[queue]
            ceil = link_mbit if borrows else guaranteed
            lines.append(
                f"class replace {dev} parent 1:{base:x} classid 1:{minor:x} htb "
                f"rate {_kbit(guaranteed * share)} ceil {_kbit(ceil)} prio {2 - queue}"
            )
            lines.append(f"qdisc replace {dev} parent 1:{minor:x} handle {minor:x}: {leaf}")
        for net in h.addresses:
            protocol, dst, tos_field, marked_prio, catch_all_prio = _FAMILY[net.version]
            for queue, dscp in DSCP_OF_QUEUE.items():
                minor = base + _MINOR_OF_QUEUE[queue]
                tos = "" if queue == 0 else f" match {tos_field} {dscp << 2:#x} 0xfc"
                prio = catch_all_prio if queue == 0 else marked_prio  # marked matches first
                lines.append(
                    f"filter add {dev} parent 1: protocol {protocol} prio {prio} u32 "
                    f"match {dst} {net}{tos} flowid 1:{minor:x}"
                )
    return lines


class DownlinkQueues:
    def __init__(self, interface: str, link_mbit: float, tc: tuple[str, ...] = ("tc",)):
        self.interface = interface
        self.link_mbit = link_mbit
        self.tc = tc  # the command, e.g. prefixed by `ip netns exec NS` for a downlink in a namespace
        self.leaf: str | None = None
        self._slots: dict[int, str] = {}

    @classmethod
    def from_config(cls, spec: dict[str, Any]) -> DownlinkQueues:
        return cls(str(spec["interface"]), float(spec.get("link_mbit", 1000)))

    def _run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run([*self.tc, *args], capture_output=True, text=True, check=check)

    def _best_leaf(self) -> str:
        """fq_codel where the kernel has it (Debian's does), else a plain FIFO (this build machine).
        Probed on the downlink itself, whose root qdisc `apply` replaces anyway."""
        probe = self._run("qdisc", "replace", "dev", self.interface, "root", "fq_codel", check=False)
        return "fq_codel" if probe.returncode == 0 else "pfifo limit 1000"

    def apply(self, households: Iterable[Household]) -> None:
        households = [h for h in households if h.slot <= MAX_TC_SLOT]
        if self.leaf is None:
            self.leaf = self._best_leaf()
        # Filters cannot be replaced one by one; drop them and the stale classes by rebuilding the root.
        self._run("qdisc", "del", "dev", self.interface, "root", check=False)
        with tempfile.NamedTemporaryFile("w", suffix=".tc") as batch:
            batch.write("\n".join(plan(self.interface, self.link_mbit, households, self.leaf)) + "\n")
            batch.flush()
            result = self._run("-batch", batch.name, check=False)
        if result.returncode != 0:
            LOG.error("tc batch on %s failed: %s", self.interface, result.stderr.strip())
            raise RuntimeError(f"tc: {result.stderr.strip()}")
        self._slots = {h.slot: h.name for h in households}

    def stats_by_household(self) -> dict[str, dict[str, dict[str, int]]]:
        """{household: {"high"|"medium"|"normal": {"bytes": n, "drops": n}}} from `tc -s class show`."""
        result = self._run("-s", "class", "show", "dev", self.interface, check=False)
        if result.returncode != 0:
            return {}
        out: dict[str, dict[str, dict[str, int]]] = {}
        for minor, counters in parse_class_stats(result.stdout).items():
            name = self._slots.get(minor // 4)
            queue = QUEUE_OF_MINOR.get(minor % 4)
            if name is not None and queue is not None:
                out.setdefault(name, {})[QUEUE_NAMES[queue]] = counters
        return out


_CLASS = re.compile(r"^class htb 1:([0-9a-f]+) ")
_SENT = re.compile(r"Sent (\d+) bytes \d+ pkt \(dropped (\d+),")


def parse_class_stats(text: str) -> dict[int, dict[str, int]]:
    """Class minor -> bytes sent and packets dropped, from `tc -s class show` (iproute2 prints
    HTB class statistics as text only, even with -j)."""
    out: dict[int, dict[str, int]] = {}
    minor = None
    for line in text.splitlines():
        head = _CLASS.match(line)
        if head:
            minor = int(head.group(1), 16)
            continue
        sent = _SENT.search(line)
        if sent and minor is not None:
            out[minor] = {"bytes": int(sent.group(1)), "drops": int(sent.group(2))}
            minor = None
    return out
