"""The connection to the switch (os-ken's datapath): which switch is connected now, and what is sent to it,
serialised by the sender and handed to os-ken in the order decided by a thread of its own (`outbox.py`)."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, assert_never

from os_ken.ofproto import ofproto_v1_3

from ...effects import (
    InstallGroup,
    InstallMeter,
    InstallRules,
    ModifyRules,
    RemoveExactRules,
    RemoveGroup,
    RemoveMeter,
    RemoveRules,
    RuleChange,
)
from ...flows import openflow
from ..outbox import Outbox, call

if TYPE_CHECKING:  # os-ken's controller module and its app manager import each other: only the latter goes first
    from os_ken.controller.controller import Datapath


class _Numbered:
    """What `Datapath.set_xid` numbers: a message's xid, for one os-ken does not build (`openflow.flow_mod_wire`)."""

    xid: int = 0

    def set_xid(self, xid: int) -> None:
        self.xid = xid


def _next_xid(dp: Datapath) -> int:
    """The switch connection's next xid, as os-ken numbers the messages it sends."""
    numbered = _Numbered()
    dp.set_xid(numbered)
    return numbered.xid


class SwitchConnection:
    def __init__(self) -> None:
        self.datapath: Datapath | None = None  # the switch connected now (the os-ken app's handlers say)
        # The access port that is the router's own radio (None: it has none): where the stations hostapd
        # reports are, and the only access point the router's hostapd puts a station off.
        self.radio_port: int | None = None
        # What goes to the switch, handed to os-ken in the order decided; an answer that must follow its rules is
        # handed to the DHCP socket from there (`EdgeSink.answer_dhcp`).
        self.to_switch: Outbox[Callable[[], object]] = Outbox(call, "to-switch")

    def send(self, dp: Datapath, msg) -> None:
        """A message to the switch, serialised here (os-ken's `send_msg` without the send) and sent in order."""
        msg.datapath = dp
        if msg.xid is None:
            dp.set_xid(msg)
        msg.serialize()
        self.send_encoded((dp, msg.buf))

    def encode_rules(self, change: RuleChange) -> tuple[Datapath | None, bytes]:
        """The change's OpenFlow messages for the switch connected now, serialised as `send_msg` would and joined
        (pure: `FairServer` runs it off the lock), and that switch (None: none is connected)."""
        dp = self.datapath
        if dp is None:
            return None, b""  # the switch gets the whole rule set from the router's state when it reconnects
        match change:
            case InstallRules():  # most of what is sent (a newcomer's dozen rules): packed without os-ken's objects
                return dp, b"".join(openflow.flow_mod_wire(r, _next_xid(dp)) for r in change.rules)
            case ModifyRules():
                modify = ofproto_v1_3.OFPFC_MODIFY_STRICT
                return dp, b"".join(openflow.flow_mod_wire(r, _next_xid(dp), modify) for r in change.rules)
            case RemoveRules():
                msgs = [openflow.delete_cookie(change.cookie)]
            case RemoveExactRules():
                msgs = [openflow.delete_strict(r) for r in change.rules]
            case InstallMeter():
                msgs = [openflow.add_meter(change.band)]
            case RemoveMeter():
                msgs = [openflow.delete_meter(change.meter_id)]
            case InstallGroup():
                msgs = [openflow.group_mod(change.group, change.replace)]
            case RemoveGroup():
                msgs = [openflow.delete_group(change.group_id)]
            case _:
                assert_never(change)
        for msg in msgs:
            msg.datapath = dp
            dp.set_xid(msg)
            msg.serialize()
        return dp, b"".join(msg.buf for msg in msgs)

    def send_encoded(self, *changes: tuple[Datapath | None, bytes]) -> None:
        """Send changes' encoded messages, in order, to their switch (`to_switch`), if it is still the one connected
        then (else its successor gets the whole rule set). One buffer for them all: os-ken's send queue holds 16 and
        a sender blocks on it until os-ken's thread has written the oldest out. And one hand-over: each wakes the
        outbox's thread, which costs more than handing os-ken a buffer (a storm's held changes handed over one by
        one cost 50-60 us of CPU per newcomer, `tools/dhcp_path.py`)."""
        buffers: dict[Datapath, list[bytes]] = {}
        for dp, data in changes:
            if dp is not None and data:
                buffers.setdefault(dp, []).append(data)
        for dp, parts in buffers.items():  # one switch, unless it reconnected while they were encoded
            self.to_switch.put(functools.partial(self._hand_to_os_ken, dp, b"".join(parts)))

    def _hand_to_os_ken(self, dp: Datapath, data: bytes) -> None:
        if dp is self.datapath:
            dp.send(data)

    def room(self) -> int:
        """How many buffers os-ken's send queue to the switch takes now before a sender waits for its thread to
        write (to a switch that reads them slowly), less those still on their way to it; none connected: any
        number (they are dropped)."""
        dp = self.datapath
        queue = dp.send_q if dp is not None else None
        return queue.maxsize - queue.qsize() - len(self.to_switch) if queue is not None else sys.maxsize
