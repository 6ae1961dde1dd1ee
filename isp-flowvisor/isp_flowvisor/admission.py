"""May this household send this message, and what does the slicer do with it?

Pure functions of a household's state (its `policy.Slice`, its rule book, its record) and a decoded
message; no sockets. `request(msg)` names what the slicer does with a message: relay it translated
(flow-mods, packet-outs, group and meter mods, statistics the switch must answer), answer it itself
(features, config, queue config, the household's own tables, groups and meters), take it without
effect, or refuse it (`policy.Refused`). `policy.Slice` decides what a relayed message may contain and
what it becomes on the switch; this module decides the rest: which messages a slice offers at all, the
rule quota, the queue-config port and shares. `relay.py` carries the decisions out.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from os_ken.ofproto import ofproto_v1_3 as ofp
from os_ken.ofproto import ofproto_v1_3_parser as parser

from . import codec, policy
from .accounting import RuleBook

# What the slicer does with each message a household may send, by its os-ken class. The statistics
# it relays answer under the same name as the request (the relay's reply kinds).
_REQUESTS: dict[type, str] = {
    parser.OFPFlowMod: "flow_mod",
    parser.OFPPacketOut: "packet_out",
    parser.OFPGroupMod: "group_mod",
    parser.OFPMeterMod: "meter_mod",
    parser.OFPEchoRequest: "echo",
    parser.OFPQueueGetConfigRequest: "queue_config",
    # multipart requests answered by the slicer from the household's own view
    parser.OFPDescStatsRequest: "desc",
    parser.OFPPortDescStatsRequest: "port_desc",
    parser.OFPTableStatsRequest: "table",
    parser.OFPTableFeaturesStatsRequest: "table_features",
    parser.OFPGroupFeaturesStatsRequest: "group_features",
    parser.OFPMeterFeaturesStatsRequest: "meter_features",
    # multipart requests relayed to the switch, their replies filtered to the household's own
    parser.OFPFlowStatsRequest: "flow",
    parser.OFPAggregateStatsRequest: "aggregate",
    parser.OFPPortStatsRequest: "port_stats",
    parser.OFPQueueStatsRequest: "queue",
    parser.OFPGroupDescStatsRequest: "group_desc",
    parser.OFPGroupStatsRequest: "group",
    parser.OFPMeterStatsRequest: "meter",
    parser.OFPMeterConfigStatsRequest: "meter_config",
}

# Messages whose header says all there is (codec.Bare), by type: what the slicer does with them.
_BARE: dict[int, str] = {
    ofp.OFPT_FEATURES_REQUEST: "features",
    ofp.OFPT_GET_CONFIG_REQUEST: "get_config",
    ofp.OFPT_GET_ASYNC_REQUEST: "get_async",
    ofp.OFPT_BARRIER_REQUEST: "barrier",
    # accepted and without effect: the switch's config is shared, the asynchronous masks the slicer's own
    ofp.OFPT_SET_CONFIG: "ignore",
    ofp.OFPT_SET_ASYNC: "ignore",
    ofp.OFPT_HELLO: "ignore",
    ofp.OFPT_ECHO_REPLY: "ignore",
    ofp.OFPT_ERROR: "ignore",
}
_REFUSED_BARE: dict[int, tuple[int, int, str]] = {
    ofp.OFPT_PORT_MOD: (ofp.OFPET_PORT_MOD_FAILED, ofp.OFPPMFC_EPERM, "ports belong to the ISP"),
    ofp.OFPT_TABLE_MOD: (ofp.OFPET_TABLE_MOD_FAILED, ofp.OFPTMFC_EPERM, "tables belong to the ISP"),
    ofp.OFPT_ROLE_REQUEST: (ofp.OFPET_ROLE_REQUEST_FAILED, ofp.OFPRRFC_UNSUP, "one controller per slice"),
    ofp.OFPT_EXPERIMENTER: (ofp.OFPET_BAD_REQUEST, ofp.OFPBRC_BAD_EXPERIMENTER, "no experimenter messages"),
}


def request(msg: Any) -> str:
    """What the slicer does with this message (a name of `_REQUESTS` or `_BARE`), or Refused."""
    if isinstance(msg, codec.Bare):
        kind = _BARE.get(msg.msg_type)
        if kind is not None:
            return kind
        refusal = _REFUSED_BARE.get(msg.msg_type)
        if refusal is not None:
            raise policy.Refused(*refusal)
        raise policy.Refused(ofp.OFPET_BAD_REQUEST, ofp.OFPBRC_BAD_TYPE, f"message type {msg.msg_type}")
    kind = _REQUESTS.get(type(msg)) or next((_REQUESTS[c] for c in type(msg).__mro__ if c in _REQUESTS), None)
    if kind is not None:
        return kind
    if isinstance(msg, parser.OFPMultipartRequest):
        raise policy.Refused(
            ofp.OFPET_BAD_REQUEST, ofp.OFPBRC_BAD_MULTIPART, f"{type(msg).__name__} is not offered to slices"
        )
    raise policy.Refused(
        ofp.OFPET_BAD_REQUEST, ofp.OFPBRC_BAD_TYPE, f"{type(msg).__name__} is not a controller-to-switch message"
    )


def admit_rule(book: RuleBook, key: tuple, command: int, flow_quota: int) -> None:
    """A flow-mod may add a rule only while the household is below its quota (replacing one of its
    rules adds none); other commands never add one."""
    if command == ofp.OFPFC_ADD and book.would_exceed(key, flow_quota):
        raise policy.Refused(
            ofp.OFPET_FLOW_MOD_FAILED, ofp.OFPFMFC_TABLE_FULL, f"flow-table quota of {flow_quota} rules reached"
        )


def queue_shares(slice_: policy.Slice, port: int, link_mbit: float) -> dict[int, int]:
    """A queue-config answer for one of the household's ports (or all): each of its queues' share of
    the downlink in tenths of a percent (its guaranteed rate's), by queue id."""
    if port != ofp.OFPP_ANY and port not in slice_.view:
        raise policy.Refused(ofp.OFPET_QUEUE_OP_FAILED, ofp.OFPQOFC_BAD_PORT, f"port {port} not in the slice")
    share = min(1000, int(1000 * slice_.household.guaranteed_mbit / link_mbit))
    return dict.fromkeys(policy.QUEUE_NAMES, share)


def rules_per_table(rule_keys: Iterable[tuple]) -> list[int]:
    """How many rules the household has in each of its virtual tables (its table statistics)."""
    counts = [0] * policy.HOUSEHOLD_TABLES
    for table_id, _, _ in rule_keys:
        counts[table_id - policy.FIRST_HOUSEHOLD_TABLE] += 1
    return counts


def datapath_id(switch_dpid: int, slot: int) -> int:
    """The household's virtual switch's datapath id: the switch's low 40 bits, then its slot."""
    return ((switch_dpid & 0xFFFFFFFFFF) << 24) | slot
