"""A byte-level fast path for the flow-mods households actually send; os-ken stays the reference.

The router's downlink rules (controller/homework_controller/policy/downlink.py, sent by slice_link.py) are
all of one shape: ADD, MODIFY_STRICT or DELETE_STRICT of `match(eth_type=0x800, ip_proto,
ipv4_src, ipv4_dst, tcp_src|udp_src)`, or its IPv6 twin `match(eth_type=0x86dd, ipv6_dst (a device's
global address, or the delegated prefix masked), ip_proto, tcp_src|udp_src, ipv6_src)`, with, but for
deletes, `apply(set_queue(q), output(NORMAL))`. Decoding such a message into os-ken's objects,
checking it and encoding its translation costs about 80 us of CPU; most of it is os-ken's object
model, not the decision.

`flow_mod(slice_, frame)` either returns the translated message, whose bytes are exactly those the
os-ken path (`codec.decode_request`, `policy.Requests.flow_mod`, `codec.encode`) would write, or None:
the message is then handed to the os-ken path, which decides it. It accepts only what it can see
the policy would accept unchanged (every field it passes is checked with the policy's own
functions and constants: ownership by `Ids.owns`, ids by `Ids.cookie`/`Ids.queue`, the rule
key by `policy.match_key`, as `policy.rule_key` has it) and declines anything unusual: masks (but on
the household's own IPv6 prefix), the other family's addresses, other fields or actions, duplicates,
odd lengths, out_port/out_group filters, buffers. So a refusal or an error always comes from the one
policy. Every byte it writes comes from os-ken's serialisers (or is the household's own match field,
as os-ken writes it), but the flow-mod's fixed part, match header and instruction header, which are
packed here with os-ken's layouts. `tests/test_fastpath.py` feeds both paths thousands of generated and mutated
messages and fails on any difference in what the slicer writes or books.

What it makes of each part of a flow-mod (the fixed part, the match, the instructions) depends on
the slice and that part's bytes alone, so each is kept per slice and bytes (`_fixed_part`, `_match`,
`_instructions`): a router sends its rules with the same cookie, priority and timeouts, a rule's
match comes back in its MODIFY_STRICT and DELETE_STRICT, and its actions are one of few. Per
message, what is left is the header, three lookups and joining the parts.
"""

from __future__ import annotations

import functools
import socket
import struct
from typing import Any, NamedTuple

from os_ken.ofproto import ofproto_common
from os_ken.ofproto import ofproto_v1_3 as ofp
from os_ken.ofproto import ofproto_v1_3_parser as parser

from . import codec, policy

_HEADER = struct.Struct(ofproto_common.OFP_HEADER_PACK_STR)
_FIXED = struct.Struct(ofp.OFP_FLOW_MOD_PACK_STR0)
_MATCH_AT = ofp.OFP_FLOW_MOD_SIZE - ofp.OFP_MATCH_SIZE  # where os-ken puts the match
_MATCH_HEADER = struct.Struct("!HH")
_INSTRUCTION_ACTIONS = struct.Struct("!HH4x")  # os-ken's OFP_INSTRUCTION_ACTIONS_PACK_STR
_SET_QUEUE = struct.Struct(ofp.OFP_ACTION_SET_QUEUE_PACK_STR)
_OUTPUT = struct.Struct(ofp.OFP_ACTION_OUTPUT_PACK_STR)
# Fixed parts, matches and instruction lists kept, per slice (keyed on its `policy.Ids`, never the slice
# itself: a replaced slice goes at once, its ids' entries age out): enough for a few rules of each of
# 1,000 households.
_KEPT = 1 << 12


def _wire(name: str, value: Any) -> bytes:
    """One exact match field as os-ken writes it."""
    buf = bytearray()
    ofp.oxm_serialize(*ofp.oxm_from_user(name, value), buf, 0)
    return bytes(buf)


# The fields the router's rules use, by their OXM header (os-ken's), with how os-ken's user value is
# read from the value bytes: exact, but for the IPv6 addresses, which the router also masks (the
# delegated prefix its rules for a port or a remote name). `socket.inet_ntop` writes IPv6 as os-ken's
# netaddr does (the differential test compares every rule key, special forms included).
def _integer(value: bytes) -> int:
    return int.from_bytes(value, "big")


def _ipv6(value: bytes) -> str:
    return socket.inet_ntop(socket.AF_INET6, value)


def _masked_ipv6(value: bytes) -> tuple[str, str]:
    return _ipv6(value[:16]), _ipv6(value[16:])


_FIELDS = {
    _wire(name, sample)[:4]: (name, read)
    for name, sample, read in (
        ("eth_type", 0x800, _integer),
        ("ip_proto", 6, _integer),
        ("ipv4_src", "0.0.0.0", socket.inet_ntoa),
        ("ipv4_dst", "0.0.0.0", socket.inet_ntoa),
        ("ipv6_src", "::", _ipv6),
        ("ipv6_dst", "::", _ipv6),
        ("ipv6_src", ("::", "::"), _masked_ipv6),
        ("ipv6_dst", ("::", "::"), _masked_ipv6),
        ("tcp_src", 1, _integer),
        ("tcp_dst", 1, _integer),
        ("udp_src", 1, _integer),
        ("udp_dst", 1, _integer),
    )
}
# Per eth_type, its (source, destination) address fields; a match naming the other family's is declined.
_ADDRESSES = {policy.ETH_IPV4: ("ipv4_src", "ipv4_dst"), policy.ETH_IPV6: ("ipv6_src", "ipv6_dst")}
_ADDRESS_NAMES = frozenset(name for pair in _ADDRESSES.values() for name in pair)


def _action_bytes(action: Any) -> bytes:
    buf = bytearray()
    action.serialize(buf, 0)
    return bytes(buf)


def cache_lookups() -> dict[str, dict[str, int]]:
    """Per part of a flow-mod, how often it was found made before ("hit") or had to be made ("miss"),
    since the process started: a router's burst of new rules shows as match misses."""
    kept: dict[str, Any] = {"fixed part": _fixed_part, "match": _match, "instructions": _instructions}
    return {part: {"hit": cache.cache_info().hits, "miss": cache.cache_info().misses} for part, cache in kept.items()}


class FastFlowMod(NamedTuple):
    """A translated flow-mod: the household's xid and command, the rule key of the translation (as
    `policy.rule_key` has it) and the translation's bytes after the header."""

    xid: int
    command: int
    rule_key: tuple
    body: bytes

    def frame(self, xid: int) -> bytes:
        """The translation as the switch gets it, under the slicer's xid."""
        return _HEADER.pack(ofp.OFP_VERSION, ofp.OFPT_FLOW_MOD, codec.HEADER_SIZE + len(self.body), xid) + self.body


def flow_mod(slice_: policy.Slice, frame: bytes) -> FastFlowMod | None:
    """The translated flow-mod, byte for byte what the os-ken path makes of it, or None (decline)."""
    size = len(frame)
    if size < ofp.OFP_FLOW_MOD_SIZE:
        return None
    version, msg_type, length, xid = _HEADER.unpack_from(frame)
    if version != ofp.OFP_VERSION or msg_type != ofp.OFPT_FLOW_MOD or length != size:
        return None
    fixed = _fixed_part(slice_.ids, frame[codec.HEADER_SIZE : _MATCH_AT])
    if fixed is None:
        return None
    fixed_bytes, command, table_id, priority = fixed
    match_len = _MATCH_HEADER.unpack_from(frame, _MATCH_AT)[1]
    instructions_at = _MATCH_AT + (match_len + 7) // 8 * 8
    if match_len < _MATCH_HEADER.size or instructions_at > size:
        return None
    match = _match(slice_.ids, frame[_MATCH_AT:instructions_at])
    if match is None:
        return None
    match_bytes, match_key, to_own = match
    # The instructions: none for a delete; one apply-actions [set_queue(q)], output(NORMAL) otherwise.
    if command == ofp.OFPFC_DELETE_STRICT:
        instructions: bytes | None = b"" if instructions_at == size else None
    else:
        instructions = _instructions(slice_.ids, to_own, frame[instructions_at:])
    if instructions is None:
        return None
    return FastFlowMod(xid, command, (table_id, priority, match_key), fixed_bytes + match_bytes + instructions)


@functools.lru_cache(maxsize=_KEPT)
def _fixed_part(ids: policy.Ids, fixed: bytes) -> tuple[bytes, int, int, int] | None:
    """The flow-mod's fixed part (after the header, before the match) as the switch gets it, with
    the command, the table and the priority on the switch; None unless it is an ADD, MODIFY_STRICT or
    DELETE_STRICT (without out_port/out_group filters) of a household table, unbuffered, its ids in
    range."""
    (cookie, cookie_mask, table_id, command, idle, hard, priority, buffer_id, out_port, out_group, flags) = (
        _FIXED.unpack(fixed)
    )
    if buffer_id != ofp.OFP_NO_BUFFER or priority > policy.MAX_PRIORITY or table_id >= policy.HOUSEHOLD_TABLES:
        return None
    if command == ofp.OFPFC_ADD:
        if cookie > policy.COOKIE_LOW:
            return None
        cookie, cookie_mask = ids.cookie(cookie), 0
    elif command == ofp.OFPFC_MODIFY_STRICT or (
        command == ofp.OFPFC_DELETE_STRICT and out_port == ofp.OFPP_ANY and out_group == ofp.OFPG_ANY
    ):
        cookie_mask &= policy.COOKIE_LOW
        cookie, cookie_mask = ids.cookie(cookie & cookie_mask), policy.COOKIE_SLOT_MASK | cookie_mask
    else:
        return None
    table_id += policy.FIRST_HOUSEHOLD_TABLE
    priority += 1
    translated = _FIXED.pack(
        cookie,
        cookie_mask,
        table_id,
        command,
        idle,
        hard,
        priority,
        ofp.OFP_NO_BUFFER,
        ofp.OFPP_ANY,  # a delete's own (it may have no other), ignored by the switch otherwise
        ofp.OFPG_ANY,
        flags,
    )
    return translated, command, table_id, priority


# A new remote address misses `_match`: what the rest of the match holds (the household's own
# address, its slot's metadata field) is kept apart, so a miss costs reading the fields and the rule key.
@functools.lru_cache(maxsize=_KEPT)
def _owns(ids: policy.Ids, value: Any) -> bool:
    return ids.owns(value)


@functools.lru_cache(maxsize=_KEPT)
def _metadata(slot: int) -> bytes:
    return _wire("metadata", slot)


@functools.lru_cache(maxsize=_KEPT)
def _match(ids: policy.Ids, match: bytes) -> tuple[bytes, tuple, bool] | None:
    """The household's match (with its padding) as the switch gets it, its rule key's fields and
    whether it is traffic to the household's own address; None if it is not the router's kind:
    OXM, IPv4 or IPv6, only the router's fields (each exact but the IPv6 addresses, and once), its
    family's addresses only, filling it to the byte."""
    match_type, match_len = _MATCH_HEADER.unpack_from(match)
    if match_type != ofp.OFPMT_OXM:
        return None
    fields: dict[str, Any] = {}
    at = 4
    while at < match_len:
        known = _FIELDS.get(match[at : at + 4])
        if known is None:
            return None
        name, read = known
        field_end = at + 4 + match[at + 3]
        if field_end > match_len or name in fields:
            return None
        fields[name] = read(match[at + 4 : field_end])
        at = field_end
    family = _ADDRESSES.get(fields.get("eth_type", -1))
    if family is None or not _ADDRESS_NAMES.intersection(fields).issubset(family):
        return None
    source, destination = family
    if any(isinstance(value, tuple) and not _owns(ids, value) for value in fields.values()):
        return None  # a mask only on the household's own prefix (the policy checks any other's)
    to_own = destination in fields and _owns(ids, fields[destination])
    if not to_own and not (source in fields and _owns(ids, fields[source])):
        return None
    translated = _metadata(ids.slot) + match[4:match_len]
    out_match_len = 4 + len(translated)
    return (
        _MATCH_HEADER.pack(ofp.OFPMT_OXM, out_match_len) + translated + bytes(-out_match_len % 8),
        policy.match_key((("metadata", ids.slot), *fields.items())),
        to_own,
    )


@functools.lru_cache(maxsize=_KEPT)
def _instructions(ids: policy.Ids, to_own: bool, instructions: bytes) -> bytes | None:
    """The translation of one apply-actions [set_queue(q)], output(NORMAL) (set_queue only on traffic
    to the household's own address), or None."""
    if len(instructions) < 8:
        return None
    inst_type, inst_len = _MATCH_HEADER.unpack_from(instructions)
    if inst_type != ofp.OFPIT_APPLY_ACTIONS or inst_len != len(instructions):
        return None
    actions = b""
    at = 8
    if inst_len == 8 + _SET_QUEUE.size + _OUTPUT.size:
        action_type, action_len, queue = _SET_QUEUE.unpack_from(instructions, at)
        if action_type != ofp.OFPAT_SET_QUEUE or action_len != _SET_QUEUE.size:
            return None
        if not to_own or queue not in policy.QUEUE_NAMES:
            return None
        # What the policy turns set_queue(queue) into: the DSCP mark tc classifies on, the slot's queue.
        actions = _action_bytes(parser.OFPActionSetField(ip_dscp=policy.DSCP_OF_QUEUE[queue])) + _action_bytes(
            parser.OFPActionSetQueue(ids.queue(queue))
        )
        at += _SET_QUEUE.size
    elif inst_len != 8 + _OUTPUT.size:
        return None
    action_type, action_len, port, max_len = _OUTPUT.unpack_from(instructions, at)
    if action_type != ofp.OFPAT_OUTPUT or action_len != _OUTPUT.size or port != ofp.OFPP_NORMAL:
        return None
    actions += _action_bytes(parser.OFPActionOutput(port, max_len))
    return _INSTRUCTION_ACTIONS.pack(ofp.OFPIT_APPLY_ACTIONS, 8 + len(actions)) + actions
