"""The slice policy: what a household may ask of the switch, and how its ids map onto it.

Pure functions of a household record and an os-ken message; no sockets. `Refused` carries the
OpenFlow error that answers a message outside the household's slice. Nothing is ever widened or
silently dropped: a message is translated exactly, or refused whole.

Layout on the physical switch (see README, "How slices share the switch"):

- table 0 (the slicer's): one rule per household address block (IPv4 or IPv6) sends its traffic,
  tagged with the household's slot in the metadata register, to table 1; traffic to a household has
  its DSCP cleared there, so only a slice rule can choose a queue. Traffic of no household goes to
  the forwarding table.
- tables 1..HOUSEHOLD_TABLES: the households' virtual tables 0..HOUSEHOLD_TABLES-1. Every household
  rule also matches metadata == its slot, so it only ever sees its own traffic; a miss goes on to
- the forwarding table (the slicer's): NORMAL.
"""

from __future__ import annotations

import copy
import functools
import ipaddress
import socket
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from os_ken.lib.packet import arp, icmpv6, ipv4, ipv6, packet
from os_ken.ofproto import ofproto_v1_3 as ofp
from os_ken.ofproto import ofproto_v1_3_parser as parser

from . import codec
from .codec import CODEC
from .model import Household

HOUSEHOLD_TABLES = 4
TABLE_DISPATCH = 0
FIRST_HOUSEHOLD_TABLE = 1
TABLE_FORWARD = FIRST_HOUSEHOLD_TABLE + HOUSEHOLD_TABLES
COOKIE_BITS = 40
COOKIE_LOW = (1 << COOKIE_BITS) - 1
COOKIE_SLOT_MASK = ((1 << 64) - 1) ^ COOKIE_LOW
MAX_PRIORITY = 0xFFFE  # a household's rule priority p is p + 1 on the switch: the slicer's misses sit at 0
METERS_PER_HOUSEHOLD = 16
GROUPS_PER_HOUSEHOLD = 16
ID_SHIFT = 4  # meters and groups: (slot << 4) | (id - 1)
QUEUE_SHIFT = 2  # physical queue ids: (slot << 2) | queue
QUEUE_NAMES = {0: "normal", 1: "medium", 2: "high"}
# The DSCP a household's queue choice becomes on the downlink: tc classifies on it (queues.py).
DSCP_OF_QUEUE = {0: 0, 1: 18, 2: 46}
ETH_IPV4 = 0x0800
ETH_ARP = 0x0806
ETH_IPV6 = 0x86DD
_IPV4_FIELDS = {"ipv4_src": ETH_IPV4, "ipv4_dst": ETH_IPV4, "arp_spa": ETH_ARP, "arp_tpa": ETH_ARP}
_ADDRESS_FIELDS = {**_IPV4_FIELDS, "ipv6_src": ETH_IPV6, "ipv6_dst": ETH_IPV6}
_DESTINATION_FIELDS = ("ipv4_dst", "arp_tpa", "ipv6_dst")
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
# What the household's virtual switch offers, as TABLE_FEATURES, GROUP_FEATURES and METER_FEATURES
# tell a controller: the fields its rules may match (IPv4, ARP and IPv6 flowspace; metadata is the
# slicer's), the instructions and actions the checks below let through.
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
_OUTPUT_RESERVED_OK = {ofp.OFPP_CONTROLLER, ofp.OFPP_NORMAL}
# FLOOD and ALL mean "every port of the household's virtual switch": the ports of its view.
_OUTPUT_TO_VIEW = {ofp.OFPP_FLOOD, ofp.OFPP_ALL}
# How many copies of one packet one rule (apply and write actions, a group counted as its most) or
# one packet-out may make. Each output is one copy, NORMAL and a translated FLOOD included: a rule
# with thousands of outputs would flood a neighbour's port thousands-fold.
MAX_COPIES = 8
MAX_GROUP_COPIES = 4
# MACs the slicer learns per household from packet-ins on its private ports (its devices).
LEARNT_MACS = 256
_FLOW_MOD_COMMANDS = {
    ofp.OFPFC_ADD,
    ofp.OFPFC_MODIFY,
    ofp.OFPFC_MODIFY_STRICT,
    ofp.OFPFC_DELETE,
    ofp.OFPFC_DELETE_STRICT,
}


class Refused(Exception):
    """A message outside the slice, with the OpenFlow error type and code that answer it."""

    def __init__(self, err_type: int, err_code: int, reason: str):
        super().__init__(reason)
        self.err_type = err_type
        self.err_code = err_code


# Address checks and rule keys convert the same few values over and over (a household's own
# addresses in every rule): each conversion is kept by value.
_VALUE_CACHE = 1 << 14


@functools.lru_cache(maxsize=_VALUE_CACHE)
def _network(value: Any) -> ipaddress.IPv4Network | ipaddress.IPv6Network | None:
    """The prefix an address field (IPv4 or IPv6; address, or address and mask) selects as the
    switch reads it (value & mask, bit by bit), or None when its mask is not a prefix. `ipaddress`
    would take a mask such as 0.0.0.255 (or ::ffff:ffff:ffff:ffff) for a host mask (a /24, a /64),
    while the switch compares the last bits only."""
    if not isinstance(value, tuple):
        return ipaddress.ip_network(str(value))
    mask = ipaddress.ip_address(value[1])
    all_ones = (1 << mask.max_prefixlen) - 1
    inverted = int(mask) ^ all_ones
    if inverted & (inverted + 1):
        return None
    return ipaddress.ip_network(f"{value[0]}/{mask.max_prefixlen - inverted.bit_length()}", strict=False)


def slot_of_cookie(cookie: int) -> int:
    return cookie >> COOKIE_BITS


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


def rule_key(table_id: int, priority: int, match: Any) -> tuple:
    """Identity of a flow entry as OpenFlow defines it (table, priority, match), normalised so a
    flow-mod and the switch's own flow-stats entry for it compare equal."""
    return (table_id, priority, match_key(tuple(match.items())))


# Few whole matches are kept: a household repeats a rule soon or never, and thousands of distinct
# matches kept alive made every garbage collection, and so the relay, slower (measured: 23 -> 21 us
# per distinct flow-mod with 256 instead of 16,384).
@functools.lru_cache(maxsize=1 << 8)
def match_key(items: tuple) -> tuple:
    """A match's (name, value) fields as `rule_key` has them (kept per match: households repeat
    whole rules)."""
    return tuple(sorted(_key_field(name, value) for name, value in items))


@functools.lru_cache(maxsize=_VALUE_CACHE)
def _key_field(name: str, value: Any) -> tuple[str, str]:
    """A match field as the switch stores it: a masked value as (value & mask, mask), an all-ones
    mask as the plain value (IPv6 addresses so too, as os-ken writes them)."""
    if name in _IPV4_FIELDS:
        return (name, _address_key(value))
    if not isinstance(value, tuple):
        return (name, str(value))
    wire = codec.field_to_wire(name, value)
    size = wire[3] // 2
    field_value, mask = wire[4 : 4 + size], wire[4 + size :]
    if mask == b"\xff" * size:
        return _key_field(name, value[0])
    return (name, f"{bytes(v & m for v, m in zip(field_value, mask, strict=True)).hex()}/{mask.hex()}")


# A prefix mask as an integer -> its length.
_PREFIX_LENGTHS = {(0xFFFFFFFF << (32 - length)) & 0xFFFFFFFF: length for length in range(33)}
_PREFIX_MASKS = {length: mask for mask, length in _PREFIX_LENGTHS.items()}


def _address_key(value: Any) -> str:
    """An address field (address, or address and mask) as "network/length", the text of the
    `_network` it selects, worked out on integers (ipaddress costs about 8 us a value); a mask
    that is no prefix (which the policy refuses) as the value itself."""
    if isinstance(value, tuple):
        length = _PREFIX_LENGTHS.get(_address_int(value[1]))
        if length is None:
            return str(value)
        address = _address_int(value[0]) & _PREFIX_MASKS[length]
    else:
        address, length = _address_int(value), 32
    return f"{socket.inet_ntoa(address.to_bytes(4, 'big'))}/{length}"


def _address_int(text: str) -> int:
    return int.from_bytes(socket.inet_aton(text), "big")


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


class Ids:
    """How a household's ids and addresses map onto the switch's, both ways: its cookies, queues, meters
    and groups, and which addresses are its own. It reads the household (its slot, its addresses) and
    nothing of the slice's state (its learnt MACs, its caches). The fast path's caches are keyed on it
    (by identity: a new slice, a new one), so they keep no replaced slice alive."""

    __slots__ = ("household", "slot")

    def __init__(self, household: Household):
        self.household, self.slot = household, household.slot

    def owns(self, value: Any) -> bool:
        """Is this match or set_field value (an address, or address and mask) inside the household's?"""
        network = _network(value)
        return network is not None and self.household.owns(network)

    def cookie(self, cookie: int) -> int:
        return (self.slot << COOKIE_BITS) | (cookie & COOKIE_LOW)

    def owns_cookie(self, cookie: int) -> bool:
        return slot_of_cookie(cookie) == self.slot

    def queue(self, queue_id: int) -> int:
        if queue_id not in QUEUE_NAMES:
            raise Refused(ofp.OFPET_BAD_ACTION, ofp.OFPBAC_BAD_QUEUE, f"queue {queue_id}: only 0, 1, 2")
        return (self.slot << QUEUE_SHIFT) | queue_id

    def owns_queue(self, physical_queue: int) -> bool:
        return physical_queue >> QUEUE_SHIFT == self.slot and physical_queue & 3 in QUEUE_NAMES

    def _scoped(self, count: int, value: int, what: str, err: tuple[int, int]) -> int:
        if not 1 <= value <= count:
            raise Refused(*err, f"{what} {value} outside 1..{count}")
        return (self.slot << ID_SHIFT) | (value - 1)

    def meter(self, meter_id: int) -> int:
        return self._scoped(
            METERS_PER_HOUSEHOLD, meter_id, "meter", (ofp.OFPET_METER_MOD_FAILED, ofp.OFPMMFC_INVALID_METER)
        )

    def group(self, group_id: int) -> int:
        return self._scoped(
            GROUPS_PER_HOUSEHOLD, group_id, "group", (ofp.OFPET_GROUP_MOD_FAILED, ofp.OFPGMFC_INVALID_GROUP)
        )

    def owns_scoped(self, physical_id: int) -> bool:
        """Is this meter or group id on the switch one of the household's?"""
        return physical_id >> ID_SHIFT == self.slot

    @staticmethod
    def unscoped(physical_id: int) -> int:
        return (physical_id & ((1 << ID_SHIFT) - 1)) + 1


class Devices:
    """The MACs a household owns at layer 2: its CPE's (the registry's) and its devices', learnt as the
    source of packets that came in on its private ports, most recent last. The relay carries the learnt
    ones over when the record changes and the ports stay."""

    def __init__(self, household: Household):
        self.household = household
        self.learnt: dict[str, None] = {}

    def owns(self, mac: str) -> bool:
        mac = mac.lower()
        return mac in self.household.macs or mac in self.learnt

    def learn(self, in_port: int | None, data: bytes) -> None:
        if in_port not in self.household.ports or len(data) < 12:
            return
        mac = data[6:12].hex(":")
        if data[6] & 1:
            return  # a group address is never a device's own
        self.learnt.pop(mac, None)
        self.learnt[mac] = None
        if len(self.learnt) > LEARNT_MACS:
            del self.learnt[next(iter(self.learnt))]


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


class Slice:
    """One household's view of the switch: its ids, its ports (the shared ones and its own), its
    devices, and the checks and translations both ways: `requests` (household -> switch) and
    `reports` (switch -> household)."""

    def __init__(self, household: Household, shared_ports: frozenset[int]):
        self.household = household
        self.ids = Ids(household)
        self.view = frozenset(shared_ports) | frozenset(household.ports)
        self.devices = Devices(household)
        self.contents = Contents(self.ids, self.view, self.devices)
        self.requests = Requests(self.contents)
        self.reports = Reports(self.ids, self.view, self.devices)


# --- the household's virtual switch, as it describes itself ------------------------------------


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
