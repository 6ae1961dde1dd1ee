"""Household -> switch: what each message the slicer relays becomes on the switch."""

from __future__ import annotations

from typing import Any

from os_ken.ofproto import ofproto_v1_3 as ofp
from os_ken.ofproto import ofproto_v1_3_parser as parser

from ..codec import CODEC
from .contents import _OUTPUT_RESERVED_OK, MAX_COPIES, Contents
from .layout import (
    COOKIE_LOW,
    COOKIE_SLOT_MASK,
    FIRST_HOUSEHOLD_TABLE,
    GROUPS_PER_HOUSEHOLD,
    HOUSEHOLD_TABLES,
    MAX_PRIORITY,
    METERS_PER_HOUSEHOLD,
)
from .refused import Refused

_FLOW_MOD_COMMANDS = {
    ofp.OFPFC_ADD,
    ofp.OFPFC_MODIFY,
    ofp.OFPFC_MODIFY_STRICT,
    ofp.OFPFC_DELETE,
    ofp.OFPFC_DELETE_STRICT,
}


class Requests:
    """Household -> switch: what each message the slicer relays (flow, group and meter mods,
    packet-outs, statistics requests) may ask, and what it becomes on the switch; its contents are
    `Contents`' to check."""

    def __init__(self, contents: Contents):
        self.contents, self.ids, self.view = contents, contents.ids, contents.view

    def _table(self, table_id: int, allow_all: bool) -> int:
        if allow_all and table_id == ofp.OFPTT_ALL:
            return ofp.OFPTT_ALL
        if not 0 <= table_id < HOUSEHOLD_TABLES:
            raise Refused(
                ofp.OFPET_FLOW_MOD_FAILED,
                ofp.OFPFMFC_BAD_TABLE_ID,
                f"table {table_id}: the slice has tables 0..{HOUSEHOLD_TABLES - 1}",
            )
        return table_id + FIRST_HOUSEHOLD_TABLE

    def _out_filters(self, out_port: int, out_group: int) -> tuple[int, int]:
        if out_port != ofp.OFPP_ANY and out_port not in self.view and out_port not in _OUTPUT_RESERVED_OK:
            raise Refused(ofp.OFPET_BAD_REQUEST, ofp.OFPBRC_EPERM, f"out_port {out_port} is not in the slice")
        return out_port, out_group if out_group == ofp.OFPG_ANY else self.ids.group(out_group)

    def _cookie_filter(self, cookie: int, mask: int) -> tuple[int, int]:
        mask &= COOKIE_LOW
        return self.ids.cookie(cookie & mask), COOKIE_SLOT_MASK | mask

    def flow_mod(self, msg: Any) -> Any:
        command = msg.command
        if command not in _FLOW_MOD_COMMANDS:
            raise Refused(ofp.OFPET_FLOW_MOD_FAILED, ofp.OFPFMFC_BAD_COMMAND, f"command {command}")
        if msg.buffer_id != ofp.OFP_NO_BUFFER:
            raise Refused(ofp.OFPET_BAD_REQUEST, ofp.OFPBRC_BUFFER_UNKNOWN, "the slicer keeps no buffers")
        if msg.priority > MAX_PRIORITY:
            raise Refused(ofp.OFPET_FLOW_MOD_FAILED, ofp.OFPFMFC_EPERM, f"priority above {MAX_PRIORITY}")
        deleting = command in (ofp.OFPFC_DELETE, ofp.OFPFC_DELETE_STRICT)
        table = self._table(msg.table_id, allow_all=command == ofp.OFPFC_DELETE)
        # However wide a household's rule or delete, metadata and cookie confine it to its own.
        ctx = self.contents.check_match(msg.match)
        ctx.table_miss = msg.priority == 0 and not msg.match._fields2
        if command == ofp.OFPFC_ADD:
            if msg.cookie > COOKIE_LOW:
                raise Refused(ofp.OFPET_FLOW_MOD_FAILED, ofp.OFPFMFC_EPERM, f"cookie above {COOKIE_LOW:#x}")
            cookie, cookie_mask = self.ids.cookie(msg.cookie), 0
        else:
            cookie, cookie_mask = self._cookie_filter(msg.cookie, msg.cookie_mask)
        out_port, out_group = ofp.OFPP_ANY, ofp.OFPG_ANY
        if deleting:
            out_port, out_group = self._out_filters(msg.out_port, msg.out_group)
            instructions: list = []
        else:
            instructions = self.contents.instructions(msg.instructions, msg.table_id, ctx)
        return parser.OFPFlowMod(
            CODEC,
            cookie=cookie,
            cookie_mask=cookie_mask,
            table_id=table,
            command=command,
            idle_timeout=msg.idle_timeout,
            hard_timeout=msg.hard_timeout,
            priority=msg.priority + 1,
            buffer_id=ofp.OFP_NO_BUFFER,
            out_port=out_port,
            out_group=out_group,
            flags=msg.flags,
            match=self.contents.scoped_match(msg.match),
            instructions=instructions,
        )

    def packet_out(self, msg: Any) -> Any:
        if msg.buffer_id != ofp.OFP_NO_BUFFER:
            raise Refused(ofp.OFPET_BAD_REQUEST, ofp.OFPBRC_BUFFER_UNKNOWN, "the slicer keeps no buffers")
        # The switch's NORMAL learns the packet's source MAC on its in_port: both must be the
        # household's (a shared uplink, or a neighbour's MAC, would move the neighbour's traffic).
        if msg.in_port != ofp.OFPP_CONTROLLER and msg.in_port not in self.ids.household.ports:
            raise Refused(
                ofp.OFPET_BAD_REQUEST, ofp.OFPBRC_BAD_PORT, f"in_port {msg.in_port} is not a port of the household's"
            )
        ctx = self.contents.packet_context(msg.data or b"")
        ctx.in_port = None if msg.in_port == ofp.OFPP_CONTROLLER else msg.in_port
        actions = self.contents.actions(msg.actions, ctx, packet_out=True)
        self.contents.check_copies([actions], MAX_COPIES)
        return parser.OFPPacketOut(
            CODEC, buffer_id=ofp.OFP_NO_BUFFER, in_port=msg.in_port, actions=actions, data=msg.data
        )

    def group_mod(self, msg: Any) -> list[Any]:
        if msg.command == ofp.OFPGC_DELETE and msg.group_id == ofp.OFPG_ALL:
            ids = range(1, GROUPS_PER_HOUSEHOLD + 1)
        else:
            ids = range(msg.group_id, msg.group_id + 1)
        buckets = self.contents.buckets(msg.type, msg.buckets)
        return [
            parser.OFPGroupMod(CODEC, command=msg.command, type_=msg.type, group_id=self.ids.group(g), buckets=buckets)
            for g in ids
        ]

    def meter_mod(self, msg: Any) -> list[Any]:
        for band in msg.bands:
            if band.type != ofp.OFPMBT_DROP:  # a DSCP remark would choose a queue
                raise Refused(
                    ofp.OFPET_METER_MOD_FAILED, ofp.OFPMMFC_BAD_BAND, f"meter band type {band.type}: drop only"
                )
        if msg.command == ofp.OFPMC_DELETE and msg.meter_id == ofp.OFPM_ALL:
            ids = range(1, METERS_PER_HOUSEHOLD + 1)
        else:
            ids = range(msg.meter_id, msg.meter_id + 1)
        return [
            parser.OFPMeterMod(CODEC, command=msg.command, flags=msg.flags, meter_id=self.ids.meter(m), bands=msg.bands)
            for m in ids
        ]

    def flow_stats_request(self, msg: Any) -> Any:
        """FLOW or AGGREGATE request, confined to the household's rules."""
        table = self._table(msg.table_id, allow_all=True)
        self.contents.check_match(msg.match)
        out_port, out_group = self._out_filters(msg.out_port, msg.out_group)
        cookie, cookie_mask = self._cookie_filter(msg.cookie, msg.cookie_mask)
        return type(msg)(
            CODEC, msg.flags, table, out_port, out_group, cookie, cookie_mask, self.contents.scoped_match(msg.match)
        )

    def group_stats_request(self, msg: Any) -> Any:
        """GROUP or METER / METER_CONFIG statistics: one of its ids, or all (the reply is filtered)."""
        if isinstance(msg, parser.OFPGroupStatsRequest):
            group = msg.group_id if msg.group_id == ofp.OFPG_ALL else self.ids.group(msg.group_id)
            return parser.OFPGroupStatsRequest(CODEC, msg.flags, group)
        meter = msg.meter_id if msg.meter_id == ofp.OFPM_ALL else self.ids.meter(msg.meter_id)
        return type(msg)(CODEC, msg.flags, meter)

    def port_stats_request(self, msg: Any) -> Any:
        if msg.port_no != ofp.OFPP_ANY and msg.port_no not in self.view:
            raise Refused(ofp.OFPET_BAD_REQUEST, ofp.OFPBRC_BAD_PORT, f"port {msg.port_no} is not in the slice")
        return parser.OFPPortStatsRequest(CODEC, msg.flags, msg.port_no)

    def queue_stats_request(self, msg: Any) -> Any:
        if msg.port_no != ofp.OFPP_ANY and msg.port_no not in self.view:
            raise Refused(ofp.OFPET_BAD_REQUEST, ofp.OFPBRC_BAD_PORT, f"port {msg.port_no} is not in the slice")
        queue = msg.queue_id if msg.queue_id == ofp.OFPQ_ALL else self.ids.queue(msg.queue_id)
        return parser.OFPQueueStatsRequest(CODEC, msg.flags, msg.port_no, queue)
