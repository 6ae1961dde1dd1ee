"""OpenFlow 1.3 messages built from the router's rule values, without a switch.

`flows.FlowRule` and the router's effects are plain data; this module turns them into
os-ken message objects (`datapath=None`), so unit tests can build, serialise and inspect
exactly what the switch would get. The os-ken app only sets the datapath and sends.
"""

from __future__ import annotations

import functools
import struct
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


# The wire form of a flow-mod, packed here rather than through os-ken's objects: a storm's newcomers bring a dozen
# rules each, and os-ken's encoding of them (its per-field conversions above all) took 630 us of the controller's CPU
# per newcomer, most of what a forged lease costs it (controller/tools/dhcp_path.py). Each OXM field is still
# os-ken's encoding (`_oxm_tlv`, worked out once per field and value); `test_openflow.py` holds every rule the
# router makes to os-ken's bytes.
_HEADER = struct.Struct("!BBHI")  # ofp_header: version, type, length, xid
_FLOW_MOD = struct.Struct("!QQBBHHHIIIH2x")  # ofp_flow_mod after the header, up to its match
_MATCH_HEADER = struct.Struct("!HH")
_INSTRUCTION_GOTO = struct.Struct("!HHB3x")
_INSTRUCTION_METER = struct.Struct("!HHI")
_INSTRUCTION_ACTIONS = struct.Struct("!HH4x")
_ACTION_HEADER = struct.Struct("!HH")  # type, length (set_field: its OXM follows)
_ACTION_OUTPUT = struct.Struct("!HHIH6x")
_ACTION_WORD = struct.Struct("!HHI")  # set_queue, group: a type, a length and one 32-bit value
_ACTION_DEC_NW_TTL = struct.Struct("!HH4x")


def _padded(data: bytes) -> bytes:
    return data + bytes(-len(data) % 8)


@functools.lru_cache(maxsize=8192, typed=True)
def _oxm_tlv(name: str, value) -> bytes:
    """One OXM field (its header, value and any mask) as os-ken encodes it."""
    buf = bytearray()
    ofp.oxm_serialize(*ofp.oxm_from_user(name, value), buf, 0)
    return bytes(buf)


@functools.lru_cache(maxsize=8192, typed=True)
def _match_tlv(name: str, value) -> tuple[int, bytes]:
    """A rule's match field (as `FlowRule.match` holds it) -> its place in the match (`_oxm_order`) and its OXM."""
    field = _match_field(name, port_number(cast("int | str", value)) if name == "in_port" else value)
    return _oxm_order(field), _oxm_tlv(*field)


def _match_wire(rule: flows.FlowRule) -> bytes:
    tlvs = b"".join(tlv for _, tlv in sorted(_match_tlv(name, value) for name, value in rule.match))
    return _padded(_MATCH_HEADER.pack(ofp.OFPMT_OXM, _MATCH_HEADER.size + len(tlvs)) + tlvs)


def _action_wire(action) -> bytes:
    if isinstance(action, flows.Output):
        max_len = ofp.OFPCML_NO_BUFFER if action.port == flows.CONTROLLER else 0
        return _ACTION_OUTPUT.pack(ofp.OFPAT_OUTPUT, _ACTION_OUTPUT.size, port_number(action.port), max_len)
    if isinstance(action, flows.SetField):
        tlv = _oxm_tlv(*_match_field(action.field, action.value))
        unpadded = _ACTION_HEADER.size + len(tlv)
        return _padded(_ACTION_HEADER.pack(ofp.OFPAT_SET_FIELD, unpadded + -unpadded % 8) + tlv)
    if isinstance(action, flows.SetQueue):
        return _ACTION_WORD.pack(ofp.OFPAT_SET_QUEUE, _ACTION_WORD.size, action.queue_id)
    if isinstance(action, flows.DecTtl):
        return _ACTION_DEC_NW_TTL.pack(ofp.OFPAT_DEC_NW_TTL, _ACTION_DEC_NW_TTL.size)
    if isinstance(action, flows.Group):
        return _ACTION_WORD.pack(ofp.OFPAT_GROUP, _ACTION_WORD.size, action.group_id)
    raise TypeError(f"not an apply-action: {action!r}")


def flow_mod_wire(rule: flows.FlowRule, xid: int, command: int = ofp.OFPFC_ADD) -> bytes:
    """`flow_mod(rule, command)` as the switch receives it, numbered `xid`: the same bytes os-ken would send."""
    instructions = [
        _INSTRUCTION_METER.pack(ofp.OFPIT_METER, _INSTRUCTION_METER.size, a.meter_id)
        for a in rule.actions
        if isinstance(a, flows.Meter)
    ]
    applied = b"".join(_action_wire(a) for a in rule.actions if not isinstance(a, (flows.GotoTable, flows.Meter)))
    if applied:
        size = _INSTRUCTION_ACTIONS.size + len(applied)
        instructions.append(_INSTRUCTION_ACTIONS.pack(ofp.OFPIT_APPLY_ACTIONS, size) + applied)
    instructions += [
        _INSTRUCTION_GOTO.pack(ofp.OFPIT_GOTO_TABLE, _INSTRUCTION_GOTO.size, a.table)
        for a in rule.actions
        if isinstance(a, flows.GotoTable)
    ]
    body = _FLOW_MOD.pack(
        rule.cookie,
        0,
        rule.table,
        command,
        rule.idle_timeout,
        0,
        rule.priority,
        ofp.OFP_NO_BUFFER,
        0,
        0,
        ofp.OFPFF_SEND_FLOW_REM if rule.notify_removal else 0,
    )
    rest = body + _match_wire(rule) + b"".join(instructions)
    return _HEADER.pack(ofp.OFP_VERSION, ofp.OFPT_FLOW_MOD, _HEADER.size + len(rest), xid) + rest


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
