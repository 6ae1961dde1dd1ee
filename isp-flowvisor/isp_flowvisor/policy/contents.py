"""What a household's rules, groups and packet-outs may contain, checked against its slice and
translated into the switch's ids and tables. Nothing is ever widened or silently dropped: a message's
contents are translated exactly, or refused whole."""

from __future__ import annotations

import copy
import functools
from dataclasses import dataclass
from typing import Any

from os_ken.lib.packet import arp, icmpv6, ipv4, ipv6, packet
from os_ken.ofproto import ofproto_v1_3 as ofp
from os_ken.ofproto import ofproto_v1_3_parser as parser

from .addresses import _ADDRESS_FIELDS, _DESTINATION_FIELDS, _network
from .devices import Devices
from .ids import Ids
from .layout import DSCP_OF_QUEUE, FIRST_HOUSEHOLD_TABLE, HOUSEHOLD_TABLES
from .refused import Refused

# Neighbour discovery messages that name a router: a household is none on the ISP's segment.
_ROUTER_ICMPV6 = (icmpv6.ND_ROUTER_ADVERT, icmpv6.ND_REDIREC)  # (os-ken's spelling of redirect)
_LINK_LAYER_OPTIONS = (icmpv6.ND_OPTION_SLA, icmpv6.ND_OPTION_TLA)
_VLAN_TYPES = (0x8100, 0x88A8)


# Fields a household may rewrite. Addresses only to its own (IPv4, ARP, IPv6 and Ethernet); DSCP never (it
# is the queue choice); VLAN ids never (a household owns no VLAN on the aggregation switch).
_MAC_FIELDS = ("eth_src", "eth_dst")
_SETTABLE = {
    *_MAC_FIELDS,
    "vlan_pcp",
    "ip_ecn",
    "tcp_src",
    "tcp_dst",
    "udp_src",
    "udp_dst",
    *_ADDRESS_FIELDS,
}
_HARMLESS_ACTIONS = (
    parser.OFPActionDecNwTtl,
    parser.OFPActionSetNwTtl,
    parser.OFPActionCopyTtlOut,
    parser.OFPActionCopyTtlIn,
)


_OUTPUT_RESERVED_OK = {ofp.OFPP_CONTROLLER, ofp.OFPP_NORMAL}
# FLOOD and ALL mean "every port of the household's virtual switch": the ports of its view.
_OUTPUT_TO_VIEW = {ofp.OFPP_FLOOD, ofp.OFPP_ALL}
# How many copies of one packet one rule (apply and write actions, a group counted as its most) or
# one packet-out may make. Each output is one copy, NORMAL and a translated FLOOD included: a rule
# with thousands of outputs would flood a neighbour's port thousands-fold.
MAX_COPIES = 8
MAX_GROUP_COPIES = 4


def _link_layer_options(frame: bytes) -> list[str]:
    """The MACs of every source and target link-layer option of a neighbour discovery frame (Ethernet,
    VLAN tags, IPv6 without extension headers, ICMPv6 of 24 bytes then options); refused when the
    frame is not laid out so or an option's length is zero (a reader would stop or loop there)."""
    start = 14
    while frame[start - 2 : start] in (t.to_bytes(2, "big") for t in _VLAN_TYPES):
        start += 4
    if len(frame) < start + 40 or frame[start + 6] != 58:
        raise Refused(ofp.OFPET_BAD_REQUEST, ofp.OFPBRC_EPERM, "neighbour discovery behind extension headers")
    end = min(len(frame), start + 40 + int.from_bytes(frame[start + 4 : start + 6], "big"))
    offset, macs = start + 40 + 24, []
    while offset < end:
        if offset + 2 > end or frame[offset + 1] == 0:
            raise Refused(ofp.OFPET_BAD_REQUEST, ofp.OFPBRC_EPERM, "neighbour discovery option of length zero")
        length = frame[offset + 1] * 8
        if frame[offset] in _LINK_LAYER_OPTIONS:
            if length < 8 or offset + 8 > end:
                raise Refused(ofp.OFPET_BAD_REQUEST, ofp.OFPBRC_EPERM, "short link-layer address option")
            macs.append(frame[offset + 2 : offset + 8].hex(":"))
        offset += length
    return macs


@dataclass
class _Context:
    in_port: int | None
    to_own_address: bool  # the traffic is headed to this household: its queues may be chosen
    in_group: bool = False
    # The household's table-miss entry (rule priority 0, no match fields). On the switch it matches
    # the household's metadata, so the switch would not see a table-miss in it and would say
    # "action" in its packet-ins, where controllers such as Open vSwitch's learning switch wait
    # for "no match": its output to the controller becomes OVS's controller(reason=no_match).
    table_miss: bool = False


class Contents:
    """What a household's rules, groups and packet-outs may contain (matches, actions, instructions,
    buckets, the packet itself), checked against its addresses, ports and MACs, and translated into the
    switch's ids and tables."""

    def __init__(self, ids: Ids, view: frozenset[int], devices: Devices):
        self.ids, self.view, self.devices = ids, view, devices
        self.owns = functools.lru_cache(maxsize=1024)(ids.owns)

    # --- matches ----------------------------------------------------------------------------

    def check_match(self, match: Any) -> _Context:
        """Every household rule also matches metadata == its slot, so it sees only traffic the
        dispatch rules gave the household (to or from its addresses): a match without addresses
        (a stock controller's table-miss rule, its MAC-learning rules) stays inside the slice. A match
        that names addresses must name some of the household's: one on a neighbour's only would
        never match, and is refused rather than installed."""
        fields = dict(match.items())
        if "metadata" in fields:
            raise Refused(ofp.OFPET_BAD_MATCH, ofp.OFPBMC_EPERM, "metadata belongs to the slicer")
        in_port = fields.get("in_port")
        if in_port is not None and in_port not in self.view:
            raise Refused(ofp.OFPET_BAD_MATCH, ofp.OFPBMC_EPERM, f"in_port {in_port} is not in the slice")
        for name in _ADDRESS_FIELDS:
            if isinstance(fields.get(name), tuple) and _network(fields[name]) is None:
                raise Refused(
                    ofp.OFPET_BAD_MATCH,
                    ofp.OFPBMC_BAD_NW_ADDR_MASK,
                    f"{name} mask {fields[name][1]} is not a prefix (the switch would compare it bit by bit)",
                )
        named = [
            name for name, eth_type in _ADDRESS_FIELDS.items() if fields.get("eth_type") == eth_type and name in fields
        ]
        own_fields = {name for name in named if self.owns(fields[name])}
        if named and not own_fields:
            raise Refused(
                ofp.OFPET_BAD_MATCH,
                ofp.OFPBMC_EPERM,
                "the match names ipv4_src/ipv4_dst (or arp_spa/arp_tpa, ipv6_src/ipv6_dst) outside the household's "
                "addresses only",
            )
        return _Context(in_port=in_port, to_own_address=any(f in own_fields for f in _DESTINATION_FIELDS))

    def scoped_match(self, match: Any) -> Any:
        # Building an OFPMatch costs about a third of a relayed flow-mod (os-ken converts every
        # field), so the freshly decoded match gets the slot prepended to its field list instead.
        scoped = copy.copy(match)
        scoped._fields2 = [("metadata", self.ids.slot), *match._fields2]
        return scoped

    # --- actions and instructions -------------------------------------------------------------

    def _output(self, port: int, ctx: _Context, packet_out: bool) -> None:
        if port in _OUTPUT_RESERVED_OK or (packet_out and port == ofp.OFPP_TABLE):
            return
        if port == ofp.OFPP_IN_PORT or (ctx.in_port is not None and port == ctx.in_port):
            raise Refused(ofp.OFPET_BAD_ACTION, ofp.OFPBAC_BAD_OUT_PORT, "output back to the in_port would loop")
        if port not in self.view:
            raise Refused(ofp.OFPET_BAD_ACTION, ofp.OFPBAC_BAD_OUT_PORT, f"port {port:#x} is not in the slice")

    def actions(self, actions: list, ctx: _Context, packet_out: bool = False) -> list:
        out: list = []
        for action in actions:
            if isinstance(action, parser.OFPActionOutput) and action.port in _OUTPUT_TO_VIEW:
                ports = sorted(p for p in self.view if p != ctx.in_port)
                if len(ports) > MAX_COPIES:
                    raise Refused(ofp.OFPET_BAD_ACTION, ofp.OFPBAC_TOO_MANY, "flooding to more ports than copies")
                out += [parser.OFPActionOutput(port, action.max_len) for port in ports]
            elif isinstance(action, parser.OFPActionOutput) and action.port == ofp.OFPP_CONTROLLER and ctx.table_miss:
                out.append(parser.NXActionController(max_len=action.max_len, controller_id=0, reason=ofp.OFPR_NO_MATCH))
            elif isinstance(action, parser.OFPActionOutput):
                self._output(action.port, ctx, packet_out)
                out.append(action)
            elif isinstance(action, parser.OFPActionSetQueue):
                if not ctx.to_own_address or ctx.in_group:
                    raise Refused(
                        ofp.OFPET_BAD_ACTION,
                        ofp.OFPBAC_BAD_QUEUE,
                        "set_queue needs a rule pinning ipv4_dst or ipv6_dst inside the household's addresses",
                    )
                physical = self.ids.queue(action.queue_id)
                out += [
                    parser.OFPActionSetField(ip_dscp=DSCP_OF_QUEUE[action.queue_id]),
                    parser.OFPActionSetQueue(physical),
                ]
            elif isinstance(action, parser.OFPActionSetField):
                if action.key not in _SETTABLE:
                    raise Refused(
                        ofp.OFPET_BAD_ACTION,
                        ofp.OFPBAC_BAD_SET_TYPE if action.key != "ip_dscp" else ofp.OFPBAC_EPERM,
                        f"set_field {action.key} is not allowed (queues: use set_queue)",
                    )
                if action.key in _ADDRESS_FIELDS and not self.owns(action.value):
                    raise Refused(
                        ofp.OFPET_BAD_ACTION,
                        ofp.OFPBAC_EPERM,
                        f"set_field {action.key}={action.value} leaves the household's addresses",
                    )
                if action.key in _MAC_FIELDS and not self.devices.owns(action.value):
                    # The switch's NORMAL learns a rewritten source MAC on the packet's in_port.
                    raise Refused(
                        ofp.OFPET_BAD_ACTION,
                        ofp.OFPBAC_EPERM,
                        f"set_field {action.key}={action.value} is not a MAC of the household's",
                    )
                out.append(action)
            elif isinstance(action, parser.OFPActionGroup):
                if ctx.in_group:
                    raise Refused(ofp.OFPET_GROUP_MOD_FAILED, ofp.OFPGMFC_CHAINING_UNSUPPORTED, "no group chaining")
                out.append(parser.OFPActionGroup(self.ids.group(action.group_id)))
            elif isinstance(action, _HARMLESS_ACTIONS):
                out.append(action)
            elif isinstance(action, (parser.OFPActionPushVlan, parser.OFPActionPopVlan)):
                raise Refused(ofp.OFPET_BAD_ACTION, ofp.OFPBAC_EPERM, "VLAN tags belong to the ISP's access network")
            else:
                raise Refused(ofp.OFPET_BAD_ACTION, ofp.OFPBAC_BAD_TYPE, f"action {type(action).__name__} not offered")
        return out

    @staticmethod
    def check_copies(action_lists: list[list], limit: int) -> None:
        """Refuse actions that would copy one packet more than `limit` times (a group as its most)."""
        copies = sum(
            MAX_GROUP_COPIES if isinstance(a, parser.OFPActionGroup) else 1
            for actions in action_lists
            for a in actions
            if isinstance(a, (parser.OFPActionOutput, parser.NXActionController, parser.OFPActionGroup))
        )
        if copies > limit:
            raise Refused(ofp.OFPET_BAD_ACTION, ofp.OFPBAC_TOO_MANY, f"{copies} copies of a packet; at most {limit}")

    def instructions(self, instructions: list, table: int, ctx: _Context) -> list:
        out: list = []
        for inst in instructions:
            if isinstance(inst, parser.OFPInstructionActions):
                if inst.type == ofp.OFPIT_CLEAR_ACTIONS:
                    out.append(inst)
                else:
                    out.append(parser.OFPInstructionActions(inst.type, self.actions(inst.actions, ctx)))
            elif isinstance(inst, parser.OFPInstructionGotoTable):
                if not table < inst.table_id < HOUSEHOLD_TABLES:
                    raise Refused(
                        ofp.OFPET_BAD_INSTRUCTION,
                        ofp.OFPBIC_BAD_TABLE_ID,
                        f"goto_table {inst.table_id}: tables go forward, {table + 1}..{HOUSEHOLD_TABLES - 1}",
                    )
                out.append(parser.OFPInstructionGotoTable(inst.table_id + FIRST_HOUSEHOLD_TABLE))
            elif isinstance(inst, parser.OFPInstructionMeter):
                out.append(parser.OFPInstructionMeter(self.ids.meter(inst.meter_id), ofp.OFPIT_METER))
            elif isinstance(inst, parser.OFPInstructionWriteMetadata):
                raise Refused(ofp.OFPET_BAD_INSTRUCTION, ofp.OFPBIC_EPERM, "metadata belongs to the slicer")
            else:
                raise Refused(
                    ofp.OFPET_BAD_INSTRUCTION, ofp.OFPBIC_UNKNOWN_INST, f"instruction {type(inst).__name__} not offered"
                )
        self.check_copies([i.actions for i in out if isinstance(i, parser.OFPInstructionActions)], MAX_COPIES)
        return out

    def buckets(self, group_type: int, buckets: list) -> list:
        ctx = _Context(in_port=None, to_own_address=False, in_group=True)
        out: list = []
        for bucket in buckets:
            if bucket.watch_port != ofp.OFPP_ANY and bucket.watch_port not in self.view:
                raise Refused(ofp.OFPET_GROUP_MOD_FAILED, ofp.OFPGMFC_BAD_WATCH, "watch_port outside the slice")
            if bucket.watch_group != ofp.OFPG_ANY:
                raise Refused(ofp.OFPET_GROUP_MOD_FAILED, ofp.OFPGMFC_BAD_WATCH, "watch_group is not offered")
            out.append(
                parser.OFPBucket(
                    bucket.weight, bucket.watch_port, bucket.watch_group, self.actions(bucket.actions, ctx)
                )
            )
        # An ALL group sends a copy through every bucket; the others through one.
        if group_type == ofp.OFPGT_ALL:
            self.check_copies([b.actions for b in out], MAX_GROUP_COPIES)
        for bucket in out:
            self.check_copies([bucket.actions], MAX_GROUP_COPIES)
        return out

    # --- a packet-out's packet ----------------------------------------------------------------

    def packet_context(self, data: bytes) -> _Context:
        """A packet-out may only carry a packet to or from the household's own addresses."""
        try:
            pkt = packet.Packet(data)
        except Exception:
            pkt = None
        ip = (pkt.get_protocol(ipv4.ipv4) or pkt.get_protocol(ipv6.ipv6)) if pkt else None
        arp_pkt = pkt.get_protocol(arp.arp) if pkt else None
        eth_src = data[6:12].hex(":") if len(data) >= 12 else ""
        if not self.devices.owns(eth_src):
            raise Refused(
                ofp.OFPET_BAD_REQUEST, ofp.OFPBRC_EPERM, f"source MAC {eth_src or '(none)'} is not the household's"
            )
        if ip is not None:
            src, dst = ip.src, ip.dst
            self._check_neighbour_discovery(data, pkt.get_protocol(icmpv6.icmpv6))
        elif arp_pkt is not None:
            src, dst = arp_pkt.src_ip, arp_pkt.dst_ip
            # An ARP packet's sender is what every host that reads it learns: only the household's
            # own addresses may be announced (not "the gateway is at my MAC").
            if not self.owns(src) or not self.devices.owns(arp_pkt.src_mac):
                raise Refused(
                    ofp.OFPET_BAD_REQUEST, ofp.OFPBRC_EPERM, f"ARP for {src} at {arp_pkt.src_mac}: not the household's"
                )
        else:
            raise Refused(ofp.OFPET_BAD_REQUEST, ofp.OFPBRC_EPERM, "packet-out data must be IPv4, IPv6 or ARP")
        to_own = self.owns(dst)
        if not to_own and not self.owns(src):
            raise Refused(
                ofp.OFPET_BAD_REQUEST,
                ofp.OFPBRC_EPERM,
                f"packet {src} -> {dst} is not to or from the household's addresses",
            )
        return _Context(in_port=None, to_own_address=to_own)

    def _check_neighbour_discovery(self, data: bytes, message: Any) -> None:
        """IPv6's ARP: what a neighbour solicitation or advertisement teaches its readers (an address
        at a MAC) must be the household's own, as an ARP packet-out's sender; a router advertisement
        or a redirect (a router's word) is never the household's to send."""
        if message is None:
            return
        if message.type_ in _ROUTER_ICMPV6:
            raise Refused(ofp.OFPET_BAD_REQUEST, ofp.OFPBRC_EPERM, f"ICMPv6 type {message.type_} speaks for a router")
        if message.type_ not in (icmpv6.ND_NEIGHBOR_SOLICIT, icmpv6.ND_NEIGHBOR_ADVERT):
            return
        if message.type_ == icmpv6.ND_NEIGHBOR_ADVERT and not self.owns(message.data.dst):
            raise Refused(
                ofp.OFPET_BAD_REQUEST,
                ofp.OFPBRC_EPERM,
                f"neighbour advertisement for {message.data.dst}: not the household's",
            )
        # os-ken decodes only the first option, and stacks differ in which of two link-layer options
        # they believe: every one is read here.
        for mac in _link_layer_options(data):
            if not self.devices.owns(mac):
                raise Refused(
                    ofp.OFPET_BAD_REQUEST, ofp.OFPBRC_EPERM, f"neighbour discovery names {mac}: not the household's"
                )
