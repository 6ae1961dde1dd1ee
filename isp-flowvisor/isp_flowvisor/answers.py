"""What the slicer answers a household itself, without asking the switch: its virtual switch's
features, config, queue config, description, ports, tables, and its groups' and meters' features, all
from the household's view; nothing for what it takes without effect.

Pure: an answer is a function of the household's session, what the slicer knows of the switch and
the request, and returns the answer's frames; `relay.py` sends them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from os_ken.ofproto import ofproto_v1_3 as ofp
from os_ken.ofproto import ofproto_v1_3_parser as parser

from . import admission, codec, policy, switchside
from .session import HouseholdSession

# What every household gets, whatever its SET_ASYNC said: packet-ins for misses and actions, every
# port status and flow-removed reason (the masks of OpenFlow 1.3's default for a master).
_ASYNC_MASKS = (
    1 << ofp.OFPR_NO_MATCH | 1 << ofp.OFPR_ACTION,
    1 << ofp.OFPPR_ADD | 1 << ofp.OFPPR_DELETE | 1 << ofp.OFPPR_MODIFY,
    1 << ofp.OFPRR_IDLE_TIMEOUT | 1 << ofp.OFPRR_HARD_TIMEOUT | 1 << ofp.OFPRR_DELETE | 1 << ofp.OFPRR_GROUP_DELETE,
)
_CAPABILITIES = ofp.OFPC_FLOW_STATS | ofp.OFPC_TABLE_STATS | ofp.OFPC_PORT_STATS | ofp.OFPC_QUEUE_STATS


class Switch(NamedTuple):
    """What the slicer knows of the switch that its answers pass on to a household."""

    dpid: int
    ports: dict[int, Any]  # the switch's port descriptions, by number
    link_mbit: float  # the downlink's rate, of which the household's queues have their shares


def _features(session: HouseholdSession, msg: Any, switch: Switch) -> list[bytes]:
    dpid = admission.datapath_id(switch.dpid, session.household.slot)
    return [switchside.features_reply(msg.xid, dpid, policy.HOUSEHOLD_TABLES, _CAPABILITIES)]


def _queue_config(session: HouseholdSession, msg: Any, switch: Switch) -> list[bytes]:
    shares = admission.queue_shares(session.slice, msg.port, switch.link_mbit)
    return [switchside.queue_get_config_reply(msg.xid, msg.port, shares)]


def _desc(session: HouseholdSession, msg: Any, switch: Switch) -> list[bytes]:
    entry = switchside.desc_entry(
        "Homework ISP", "isp-flowvisor slice", "isp-flowvisor", "", f"slice of {session.household.name}"
    )
    return switchside.multipart_reply(msg.xid, ofp.OFPMP_DESC, [entry])


def _port_desc(session: HouseholdSession, msg: Any, switch: Switch) -> list[bytes]:
    ports = [switch.ports[p] for p in sorted(session.slice.view) if p in switch.ports]
    return switchside.multipart_reply(msg.xid, ofp.OFPMP_PORT_DESC, switchside.port_desc_entries(ports))


def _table_stats(session: HouseholdSession, msg: Any, switch: Switch) -> list[bytes]:
    counts = admission.rules_per_table(session.book.rules)
    entries = [switchside.table_stats_entry(t, n, 0, 0) for t, n in enumerate(counts)]
    return switchside.multipart_reply(msg.xid, ofp.OFPMP_TABLE, entries)


def _table_features(session: HouseholdSession, msg: Any, switch: Switch) -> list[bytes]:
    entries = [switchside.table_features_entry(t) for t in policy.table_features(session.household)]
    return switchside.multipart_reply(msg.xid, ofp.OFPMP_TABLE_FEATURES, entries)


def _group_features(session: HouseholdSession, msg: Any, switch: Switch) -> list[bytes]:
    entry = switchside.group_features_entry(*policy.group_features())
    return switchside.multipart_reply(msg.xid, ofp.OFPMP_GROUP_FEATURES, [entry])


def _meter_features(session: HouseholdSession, msg: Any, switch: Switch) -> list[bytes]:
    entry = switchside.meter_features_entry(*policy.meter_features())
    return switchside.multipart_reply(msg.xid, ofp.OFPMP_METER_FEATURES, [entry])


# The answers, by kind (admission.request's names).
ANSWERS: dict[str, Callable[[HouseholdSession, Any, Switch], list[bytes]]] = {
    "ignore": lambda session, msg, switch: [],
    "echo": lambda session, msg, switch: [codec.encode(parser.OFPEchoReply(codec.CODEC, msg.data), msg.xid)],
    "features": _features,
    "get_config": lambda session, msg, switch: [switchside.get_config_reply(msg.xid, 0, ofp.OFPCML_NO_BUFFER)],
    "get_async": lambda session, msg, switch: [switchside.get_async_reply(msg.xid, *_ASYNC_MASKS)],
    "queue_config": _queue_config,
    "desc": _desc,
    "port_desc": _port_desc,
    "table": _table_stats,
    "table_features": _table_features,
    "group_features": _group_features,
    "meter_features": _meter_features,
}
