"""The household's virtual switch, as it describes itself: its tables', groups' and meters' features."""

from __future__ import annotations

from typing import Any

from os_ken.ofproto import ofproto_v1_3 as ofp
from os_ken.ofproto import ofproto_v1_3_parser as parser

from ..model import Household
from .contents import _SETTABLE
from .layout import GROUPS_PER_HOUSEHOLD, HOUSEHOLD_TABLES, METERS_PER_HOUSEHOLD

# What the household's virtual switch offers, as TABLE_FEATURES, GROUP_FEATURES and METER_FEATURES
# tell a controller: the fields its rules may match (IPv4, ARP and IPv6 flowspace; metadata is the
# slicer's), the instructions and actions `contents` lets through.
_MATCHABLE = {
    "in_port": False,
    "eth_dst": True,
    "eth_src": True,
    "eth_type": False,
    "vlan_vid": True,
    "vlan_pcp": False,
    "ip_dscp": False,
    "ip_ecn": False,
    "ip_proto": False,
    "ipv4_src": True,
    "ipv4_dst": True,
    "ipv6_src": True,
    "ipv6_dst": True,
    # Ports by value/mask as the switch compares them: a household's router marks an app's port ranges
    # as prefixes (controller/homework_controller/policy/downlink.py); no address is in a port.
    "tcp_src": True,
    "tcp_dst": True,
    "udp_src": True,
    "udp_dst": True,
    "sctp_src": False,
    "sctp_dst": False,
    "icmpv4_type": False,
    "icmpv4_code": False,
    "icmpv6_type": False,
    "icmpv6_code": False,
    "arp_op": False,
    "arp_spa": True,
    "arp_tpa": True,
    "arp_sha": True,
    "arp_tha": True,
}
_INSTRUCTIONS = (ofp.OFPIT_WRITE_ACTIONS, ofp.OFPIT_APPLY_ACTIONS, ofp.OFPIT_CLEAR_ACTIONS, ofp.OFPIT_METER)
_ACTIONS = (
    ofp.OFPAT_OUTPUT,
    ofp.OFPAT_COPY_TTL_OUT,
    ofp.OFPAT_COPY_TTL_IN,
    ofp.OFPAT_SET_NW_TTL,
    ofp.OFPAT_DEC_NW_TTL,
    ofp.OFPAT_SET_QUEUE,
    ofp.OFPAT_GROUP,
    ofp.OFPAT_SET_FIELD,
)
_GROUP_TYPES = (ofp.OFPGT_ALL, ofp.OFPGT_SELECT, ofp.OFPGT_INDIRECT, ofp.OFPGT_FF)


def table_features(household: Household) -> list[Any]:
    """Its four tables: what each matches and does under the slice's rules."""
    oxm = [parser.OFPOxmId(name, hasmask=mask) for name, mask in _MATCHABLE.items()]
    settable = [parser.OFPOxmId(name) for name in sorted(_SETTABLE)]
    actions = [parser.OFPActionId(a) for a in _ACTIONS]
    tables = []
    for table in range(HOUSEHOLD_TABLES):
        goto = [ofp.OFPIT_GOTO_TABLE] if table < HOUSEHOLD_TABLES - 1 else []
        properties = [
            parser.OFPTableFeaturePropInstructions(
                ofp.OFPTFPT_INSTRUCTIONS,
                instruction_ids=[parser.OFPInstructionId(i) for i in goto + list(_INSTRUCTIONS)],
            ),
            parser.OFPTableFeaturePropNextTables(
                ofp.OFPTFPT_NEXT_TABLES, table_ids=list(range(table + 1, HOUSEHOLD_TABLES))
            ),
            parser.OFPTableFeaturePropActions(ofp.OFPTFPT_WRITE_ACTIONS, action_ids=actions),
            parser.OFPTableFeaturePropActions(ofp.OFPTFPT_APPLY_ACTIONS, action_ids=actions),
            parser.OFPTableFeaturePropOxm(ofp.OFPTFPT_MATCH, oxm_ids=oxm),
            parser.OFPTableFeaturePropOxm(ofp.OFPTFPT_WILDCARDS, oxm_ids=oxm),
            parser.OFPTableFeaturePropOxm(ofp.OFPTFPT_WRITE_SETFIELD, oxm_ids=settable),
            parser.OFPTableFeaturePropOxm(ofp.OFPTFPT_APPLY_SETFIELD, oxm_ids=settable),
        ]
        tables.append(
            parser.OFPTableFeaturesStats(
                table_id=table,
                name=f"slice table {table}",
                metadata_match=0,
                metadata_write=0,
                config=0,
                max_entries=household.flow_quota,
                properties=properties,
            )
        )
    return tables


def group_features() -> tuple[int, int, list[int], list[int]]:
    """(types, capabilities, max groups per type, actions per type) of its 16 groups."""
    types = sum(1 << t for t in _GROUP_TYPES)
    capabilities = ofp.OFPGFC_SELECT_WEIGHT | ofp.OFPGFC_SELECT_LIVENESS  # no chaining
    actions = sum(1 << a for a in _ACTIONS if a != ofp.OFPAT_GROUP)
    return types, capabilities, [GROUPS_PER_HOUSEHOLD] * 4, [actions] * 4


def meter_features() -> tuple[int, int, int, int, int]:
    """(max meter, band types, capabilities, max bands, max colour) of its 16 meters."""
    capabilities = ofp.OFPMF_KBPS | ofp.OFPMF_PKTPS | ofp.OFPMF_BURST | ofp.OFPMF_STATS
    return METERS_PER_HOUSEHOLD, 1 << ofp.OFPMBT_DROP, capabilities, 1, 0
