"""OpenFlow 1.3 messages built from the router's rule values, without a switch.

`flows.FlowRule` and the router's effects are plain data; this module turns them into
os-ken message objects (`datapath=None`), so unit tests can build, serialise and inspect
exactly what the switch would get. The os-ken app only sets the datapath and sends.
"""

from __future__ import annotations

import functools
from typing import cast

from os_ken.ofproto import ofproto_v1_3 as ofp
from os_ken.ofproto import ofproto_v1_3_parser as parser

from .. import flows

_SYMBOLIC_PORTS = {flows.IN_PORT: ofp.OFPP_IN_PORT, flows.LOCAL: ofp.OFPP_LOCAL, flows.CONTROLLER: ofp.OFPP_CONTROLLER}


def port_number(port: int | str) -> int:
    return _SYMBOLIC_PORTS[port] if isinstance(port, str) else port


def actions(values) -> list:
    out = []
    for action in values:
        if isinstance(action, flows.Output):
            max_len = ofp.OFPCML_NO_BUFFER if action.port == flows.CONTROLLER else 0
            out.append(parser.OFPActionOutput(port_number(action.port), max_len))
        elif isinstance(action, flows.SetField):
            out.append(parser.OFPActionSetField(**{action.field: action.value}))
        elif isinstance(action, flows.SetQueue):
            out.append(parser.OFPActionSetQueue(action.queue_id))
        elif isinstance(action, flows.DecTtl):
            out.append(parser.OFPActionDecNwTtl())
        elif isinstance(action, flows.Group):
            out.append(parser.OFPActionGroup(action.group_id))
        else:
            raise TypeError(f"not an apply-action: {action!r}")
    return out


def flow_mod(rule: flows.FlowRule, command: int = ofp.OFPFC_ADD):
    """The rule as an OFPFC_ADD (or, with command=OFPFC_MODIFY_STRICT, new actions for the rule of the same
    match and rule priority if the switch still holds it: its counters and timeouts carry on)."""
    # OpenFlow 1.3's order: meter, then apply-actions, then goto.
    instructions = [
        parser.OFPInstructionMeter(a.meter_id, ofp.OFPIT_METER) for a in rule.actions if isinstance(a, flows.Meter)
    ]
    applied = actions([a for a in rule.actions if not isinstance(a, (flows.GotoTable, flows.Meter))])
    if applied:
        instructions.append(parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, applied))
    instructions += [parser.OFPInstructionGotoTable(a.table) for a in rule.actions if isinstance(a, flows.GotoTable)]
    return parser.OFPFlowMod(
        None,
        cookie=rule.cookie,
        command=command,
        table_id=rule.table,
        priority=rule.priority,
        idle_timeout=rule.idle_timeout,
        flags=ofp.OFPFF_SEND_FLOW_REM if rule.notify_removal else 0,
        match=match_of(rule),
        instructions=instructions,
    )


def delete_cookie(cookie: int, mask: int = flows.DEVICE_COOKIE_MASK):
    """Every rule carrying the cookie, in every table."""
    return parser.OFPFlowMod(
        None,
        cookie=cookie,
        cookie_mask=mask,
        command=ofp.OFPFC_DELETE,
        table_id=ofp.OFPTT_ALL,
        out_port=ofp.OFPP_ANY,
        out_group=ofp.OFPG_ANY,
    )


def match_of(rule: flows.FlowRule):
    return parser.OFPMatch(
        _ordered_fields=sorted(
            (_match_field(k, port_number(cast("int | str", v)) if k == "in_port" else v) for k, v in rule.match),
            key=_oxm_order,
        )
    )


@functools.lru_cache(maxsize=4096, typed=True)
def _match_field(name: str, value) -> tuple[str, object]:
    """One field as OFPMatch(**fields) keeps it: os-ken's value normalised, converted to the wire form and
    back. Worked out once per field and value (a device's four rules share its MAC, every device's rules
    the same ports and types): os-ken's conversions, MACs through netaddr, cost more than the FlowMod."""
    return ofp.oxm_to_user(*ofp.oxm_from_user(*ofp.oxm_normalize_user(name, value)))


def _oxm_order(field: tuple[str, object]) -> int:
    """OFPMatch's order (by OXM field number: prerequisites such as eth_type come first)."""
    return _oxm_number(field[0])


@functools.cache
def _oxm_number(name: str) -> int:
    """A field's OXM header, looked up once per name, not once per field of every rule sent."""
    return ofp.oxm_from_user_header(name)


def delete_strict(rule: flows.FlowRule):
    """The one rule of the same table, match and rule priority, whatever its actions."""
    return parser.OFPFlowMod(
        None,
        cookie=rule.cookie,
        cookie_mask=flows.DEVICE_COOKIE_MASK,
        command=ofp.OFPFC_DELETE_STRICT,
        table_id=rule.table,
        priority=rule.priority,
        out_port=ofp.OFPP_ANY,
        out_group=ofp.OFPG_ANY,
        match=match_of(rule),
    )


def delete_everything() -> list:
    return [
        parser.OFPFlowMod(
            None, command=ofp.OFPFC_DELETE, table_id=ofp.OFPTT_ALL, out_port=ofp.OFPP_ANY, out_group=ofp.OFPG_ANY
        ),
        parser.OFPMeterMod(None, command=ofp.OFPMC_DELETE, meter_id=ofp.OFPM_ALL),
        parser.OFPGroupMod(None, command=ofp.OFPGC_DELETE, group_id=ofp.OFPG_ALL),
    ]


def group_mod(group: flows.CopyGroup, replace: bool = False):
    """The group as an OFPGC_ADD (replace: OFPGC_MODIFY, new buckets for the group the switch holds)."""
    return parser.OFPGroupMod(
        None,
        command=ofp.OFPGC_MODIFY if replace else ofp.OFPGC_ADD,
        type_=ofp.OFPGT_ALL,
        group_id=group.group_id,
        buckets=[parser.OFPBucket(actions=actions(bucket)) for bucket in group.buckets],
    )


def delete_group(group_id: int):
    return parser.OFPGroupMod(None, command=ofp.OFPGC_DELETE, group_id=group_id)


def add_meter(band: flows.MeterBand):
    return parser.OFPMeterMod(
        None,
        command=ofp.OFPMC_ADD,
        flags=ofp.OFPMF_PKTPS | ofp.OFPMF_BURST,
        meter_id=band.meter_id,
        bands=[parser.OFPMeterBandDrop(rate=band.rate_pps, burst_size=band.burst)],
    )


def delete_meter(meter_id: int):
    return parser.OFPMeterMod(None, command=ofp.OFPMC_DELETE, meter_id=meter_id)


def packet_out(port: int | str, data: bytes):
    return parser.OFPPacketOut(
        None,
        buffer_id=ofp.OFP_NO_BUFFER,
        in_port=ofp.OFPP_CONTROLLER,
        actions=[parser.OFPActionOutput(port_number(port))],
        data=data,
    )


def flow_counters_request():
    return parser.OFPFlowStatsRequest(None, table_id=flows.TABLE_ACCOUNTING)
