"""Switch -> household: what the switch says, as the household sees it."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from os_ken.ofproto import ofproto_v1_3 as ofp
from os_ken.ofproto import ofproto_v1_3_parser as parser

from .devices import Devices
from .ids import Ids
from .layout import COOKIE_LOW, FIRST_HOUSEHOLD_TABLE, TABLE_FORWARD


class Reports:
    """Switch -> household: what the switch says (packet-ins, flow-removeds, statistics) as the
    household sees it, its ids and tables its own, or None when it is not the household's."""

    def __init__(self, ids: Ids, view: frozenset[int], devices: Devices):
        self.ids, self.view, self.devices = ids, view, devices

    @staticmethod
    def _own_match(match: Any) -> Any:
        return parser.OFPMatch(**{k: v for k, v in match.items() if k != "metadata"})

    def _back_actions(self, actions: list) -> list:
        out: list = []
        for action in actions:
            if isinstance(action, parser.OFPActionSetQueue):
                if out and isinstance(out[-1], parser.OFPActionSetField) and out[-1].key == "ip_dscp":
                    out.pop()  # the slicer's own mark for this queue
                out.append(parser.OFPActionSetQueue(action.queue_id & 3))
            elif isinstance(action, parser.OFPActionGroup):
                out.append(parser.OFPActionGroup(self.ids.unscoped(action.group_id)))
            elif isinstance(action, parser.NXActionController):  # its table-miss entry's
                out.append(parser.OFPActionOutput(ofp.OFPP_CONTROLLER, action.max_len))
            else:
                out.append(action)
        return out

    def _back_instructions(self, instructions: list) -> list:
        out: list = []
        for inst in instructions:
            if isinstance(inst, parser.OFPInstructionGotoTable):
                out.append(parser.OFPInstructionGotoTable(inst.table_id - FIRST_HOUSEHOLD_TABLE))
            elif isinstance(inst, parser.OFPInstructionMeter):
                out.append(parser.OFPInstructionMeter(self.ids.unscoped(inst.meter_id), ofp.OFPIT_METER))
            elif isinstance(inst, parser.OFPInstructionActions) and inst.type != ofp.OFPIT_CLEAR_ACTIONS:
                out.append(parser.OFPInstructionActions(inst.type, self._back_actions(inst.actions)))
            else:
                out.append(inst)
        return out

    def _owns_rule(self, table_id: int, cookie: int) -> bool:
        return FIRST_HOUSEHOLD_TABLE <= table_id < TABLE_FORWARD and self.ids.owns_cookie(cookie)

    def packet_in(self, msg: Any) -> Any | None:
        """The packet-in as this household sees it (its devices learnt from it)."""
        if not self._owns_rule(msg.table_id, msg.cookie):
            return None
        self.devices.learn(msg.match.get("in_port"), msg.data or b"")
        return SimpleNamespace(
            buffer_id=ofp.OFP_NO_BUFFER,
            total_len=msg.total_len,
            reason=msg.reason,
            table_id=msg.table_id - FIRST_HOUSEHOLD_TABLE,
            cookie=msg.cookie & COOKIE_LOW,
            match=self._own_match(msg.match),
            data=msg.data,
        )

    def flow_removed(self, msg: Any) -> Any | None:
        if not self._owns_rule(msg.table_id, msg.cookie):
            return None
        return SimpleNamespace(
            cookie=msg.cookie & COOKIE_LOW,
            priority=msg.priority - 1,
            reason=msg.reason,
            table_id=msg.table_id - FIRST_HOUSEHOLD_TABLE,
            duration_sec=msg.duration_sec,
            duration_nsec=msg.duration_nsec,
            idle_timeout=msg.idle_timeout,
            hard_timeout=msg.hard_timeout,
            packet_count=msg.packet_count,
            byte_count=msg.byte_count,
            match=self._own_match(msg.match),
        )

    def flow_stats(self, stats: Any) -> Any | None:
        if not self._owns_rule(stats.table_id, stats.cookie):
            return None
        return SimpleNamespace(
            table_id=stats.table_id - FIRST_HOUSEHOLD_TABLE,
            duration_sec=stats.duration_sec,
            duration_nsec=stats.duration_nsec,
            priority=stats.priority - 1,
            idle_timeout=stats.idle_timeout,
            hard_timeout=stats.hard_timeout,
            flags=stats.flags,
            cookie=stats.cookie & COOKIE_LOW,
            packet_count=stats.packet_count,
            byte_count=stats.byte_count,
            match=self._own_match(stats.match),
            instructions=self._back_instructions(stats.instructions),
        )

    def group_stats(self, stats: Any) -> Any | None:
        if not self.ids.owns_scoped(stats.group_id):
            return None
        return SimpleNamespace(**{**vars(stats), "group_id": self.ids.unscoped(stats.group_id)})

    def group_desc(self, desc: Any) -> tuple[int, int, list] | None:
        """(type, its group id, buckets in its own terms), or None when the group is not its own."""
        if not self.ids.owns_scoped(desc.group_id):
            return None
        buckets = [
            parser.OFPBucket(b.weight, b.watch_port, b.watch_group, self._back_actions(b.actions)) for b in desc.buckets
        ]
        return desc.type, self.ids.unscoped(desc.group_id), buckets

    def meter_stats(self, stats: Any) -> Any | None:
        if not self.ids.owns_scoped(stats.meter_id):
            return None
        return SimpleNamespace(**{**vars(stats), "meter_id": self.ids.unscoped(stats.meter_id)})

    def meter_config(self, config: Any) -> tuple[int, int, list] | None:
        if not self.ids.owns_scoped(config.meter_id):
            return None
        return config.flags, self.ids.unscoped(config.meter_id), config.bands

    def queue_stats(self, stats: Any) -> tuple | None:
        if stats.port_no not in self.view or not self.ids.owns_queue(stats.queue_id):
            return None
        return (
            stats.port_no,
            stats.queue_id & 3,
            stats.tx_bytes,
            stats.tx_packets,
            stats.tx_errors,
            stats.duration_sec,
            stats.duration_nsec,
        )
