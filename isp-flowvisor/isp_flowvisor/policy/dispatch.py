"""The slicer's own rules on the switch: table 0's dispatch of each household's traffic to its
tables, the misses that fall through to forwarding, and their cookies."""

from __future__ import annotations

from typing import Any

from os_ken.ofproto import ofproto_v1_3 as ofp
from os_ken.ofproto import ofproto_v1_3_parser as parser

from ..codec import CODEC
from ..model import Household
from .layout import DSCP_OF_QUEUE, ETH_ARP, ETH_IPV4, ETH_IPV6, FIRST_HOUSEHOLD_TABLE, TABLE_DISPATCH, TABLE_FORWARD


def dispatch_rules(household: Household) -> list[Any]:
    """Table-0 rules that hand a household's traffic to its tables (the slicer installs them)."""
    meta = parser.OFPInstructionWriteMetadata(household.slot, (1 << 64) - 1)
    to_slice = parser.OFPInstructionGotoTable(FIRST_HOUSEHOLD_TABLE)
    # Downlink traffic starts in the Normal queue whatever DSCP it arrived with.
    clear_dscp = parser.OFPInstructionActions(
        ofp.OFPIT_APPLY_ACTIONS, [parser.OFPActionSetField(ip_dscp=DSCP_OF_QUEUE[0])]
    )
    cookie = slicer_cookie(household.slot)

    def to_household(priority: int, instructions: list[Any], **match: Any) -> Any:
        return parser.OFPFlowMod(
            CODEC,
            cookie=cookie,
            table_id=TABLE_DISPATCH,
            priority=priority,
            match=parser.OFPMatch(**match),
            instructions=instructions,
        )

    rules = []
    for net in household.addresses:
        masked = (str(net.network_address), str(net.netmask))
        # Traffic to a household belongs to it even when it comes from another household: the
        # destination's queues hold on the downlink.
        if net.version == 6:
            # As for IPv4, without ARP: a delegated prefix is routed to the household's router, never
            # on the ISP's segment, so no neighbour discovery names an address inside it.
            rules += [
                to_household(200, [clear_dscp, meta, to_slice], eth_type=ETH_IPV6, ipv6_dst=masked),
                to_household(100, [meta, to_slice], eth_type=ETH_IPV6, ipv6_src=masked),
            ]
            continue
        rules += [
            to_household(200, [clear_dscp, meta, to_slice], eth_type=ETH_IPV4, ipv4_dst=masked),
            to_household(200, [meta, to_slice], eth_type=ETH_ARP, arp_tpa=masked),
            to_household(100, [meta, to_slice], eth_type=ETH_IPV4, ipv4_src=masked),
            to_household(100, [meta, to_slice], eth_type=ETH_ARP, arp_spa=masked),
        ]
    return rules


def slicer_cookie(slot: int) -> int:
    """Cookie of the slicer's own rules for a household: slot 0's range, low bits = the household."""
    return slot


def baseline_rules() -> list[Any]:
    """The slicer's fixed rules: misses fall through to forwarding, which is L2 NORMAL."""
    to_forward = parser.OFPInstructionGotoTable(TABLE_FORWARD)
    rules = [
        parser.OFPFlowMod(
            CODEC, cookie=0, table_id=table, priority=0, match=parser.OFPMatch(), instructions=[to_forward]
        )
        for table in range(TABLE_DISPATCH, TABLE_FORWARD)
    ]
    normal = parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, [parser.OFPActionOutput(ofp.OFPP_NORMAL)])
    rules.append(
        parser.OFPFlowMod(
            CODEC, cookie=0, table_id=TABLE_FORWARD, priority=0, match=parser.OFPMatch(), instructions=[normal]
        )
    )
    return rules


def delete_slicer_rules(slot: int) -> Any:
    """Remove the dispatch rules of a household that left the registry."""
    return parser.OFPFlowMod(
        CODEC,
        cookie=slicer_cookie(slot),
        cookie_mask=(1 << 64) - 1,
        table_id=TABLE_DISPATCH,
        command=ofp.OFPFC_DELETE,
        out_port=ofp.OFPP_ANY,
        out_group=ofp.OFPG_ANY,
        match=parser.OFPMatch(),
    )
