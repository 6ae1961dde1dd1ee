"""A byte-level fast path for the flow-mods households actually send; os-ken stays the reference.

The router's downlink rules (controller/homework_controller/downlink.py, sent by slice_link.py) are
all of one shape: ADD, MODIFY_STRICT or DELETE_STRICT of `match(eth_type=0x800, ip_proto,
ipv4_src, ipv4_dst, tcp_src|udp_src)` with, but for deletes, `apply(set_queue(q), output(NORMAL))`.
Decoding such a message into os-ken's objects, checking it and encoding its translation costs
about 80 us of CPU; most of it is os-ken's object model, not the decision.

`flow_mod(slice_, frame)` either returns the translated message, whose bytes are exactly those the
os-ken path (`codec.decode_request`, `policy.Slice.flow_mod`, `codec.encode`) would write, or None:
the message is then handed to the os-ken path, which decides it. It accepts only what it can see
the policy would accept unchanged (every field it passes is checked with the policy's own
functions and constants: ownership by `Slice._owns`, ids by `Slice.cookie`/`Slice.queue`, the rule
key by `policy.rule_key`) and declines anything unusual: masks, other fields or actions,
duplicates, odd lengths, out_port/out_group filters, buffers. So a refusal or an error always comes
from the one policy. Every byte it writes comes from os-ken's serialisers (kept per value), but the
flow-mod's fixed part, match header and instruction header, which are packed here with os-ken's
layouts. `tests/test_fastpath.py` feeds both paths thousands of generated and mutated messages
and fails on any difference in what the slicer writes or books.
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

_HEADER = ofproto_common.OFP_HEADER_PACK_STR
_FIXED = ofp.OFP_FLOW_MOD_PACK_STR0
_MATCH_AT = ofp.OFP_FLOW_MOD_SIZE - ofp.OFP_MATCH_SIZE  # where os-ken puts the match
_COMMANDS = (ofp.OFPFC_ADD, ofp.OFPFC_MODIFY_STRICT, ofp.OFPFC_DELETE_STRICT)
_INSTRUCTION_ACTIONS = struct.Struct("!HH4x")  # os-ken's OFP_INSTRUCTION_ACTIONS_PACK_STR
_SET_QUEUE = struct.Struct(ofp.OFP_ACTION_SET_QUEUE_PACK_STR)
_OUTPUT = struct.Struct(ofp.OFP_ACTION_OUTPUT_PACK_STR)


def _wire(name: str, value: Any) -> bytes:
    """One exact match field as os-ken writes it."""
    buf = bytearray()
    ofp.oxm_serialize(*ofp.oxm_from_user(name, value), buf, 0)
    return bytes(buf)


# The fields the router's rules use, exact (no mask), by their OXM header (os-ken's), with how
# os-ken's user value is read from the value bytes.
def _integer(value: bytes) -> int:
    return int.from_bytes(value, "big")


_FIELDS = {
    _wire(name, sample)[:4]: (name, read)
    for name, sample, read in (
        ("eth_type", 0x800, _integer),
        ("ip_proto", 6, _integer),
        ("ipv4_src", "0.0.0.0", socket.inet_ntoa),
        ("ipv4_dst", "0.0.0.0", socket.inet_ntoa),
        ("tcp_src", 1, _integer),
        ("tcp_dst", 1, _integer),
        ("udp_src", 1, _integer),
        ("udp_dst", 1, _integer),
    )
}


def _action_bytes(action: Any) -> bytes:
    buf = bytearray()
    action.serialize(buf, 0)
    return bytes(buf)


@functools.lru_cache(maxsize=1 << 12)
def _metadata(slot: int) -> bytes:
    return _wire("metadata", slot)


@functools.lru_cache(maxsize=1 << 12)
def _queue_actions(queue: int, physical: int) -> bytes:
    """What the policy turns set_queue(queue) into: the DSCP mark tc classifies on, the slot's queue."""
    return _action_bytes(parser.OFPActionSetField(ip_dscp=policy.DSCP_OF_QUEUE[queue])) + _action_bytes(
        parser.OFPActionSetQueue(physical)
    )


@functools.lru_cache(maxsize=1 << 8)
def _output(port: int, max_len: int) -> bytes:
    return _action_bytes(parser.OFPActionOutput(port, max_len))


class _Fields:
    """The translated match as policy.rule_key reads it."""

    __slots__ = ("fields",)

    def __init__(self, fields: list[tuple[str, Any]]):
        self.fields = fields

    def items(self) -> list[tuple[str, Any]]:
        return self.fields


class Request(NamedTuple):
    """What the relay reads of the household's own flow-mod."""

    command: int
    xid: int


class FastFlowMod:
    """A translated flow-mod as the relay uses os-ken's: `table_id`, `priority`, `match` (for the rule
    key) and `serialize()` as codec.encode calls it; `request` is the household's message."""

    __slots__ = ("request", "xid", "table_id", "priority", "match", "_body", "buf", "datapath")

    def __init__(self, request: Request, table_id: int, priority: int, match: _Fields, body: bytes):
        self.request, self.xid = request, 0
        self.table_id, self.priority, self.match = table_id, priority, match
        self._body = body
        self.buf = b""
        self.datapath: Any = None

    def serialize(self) -> None:
        self.buf = struct.pack(_HEADER, ofp.OFP_VERSION, ofp.OFPT_FLOW_MOD, 8 + len(self._body), self.xid) + self._body


def flow_mod(slice_: policy.Slice, frame: bytes) -> FastFlowMod | None:
    """The translated flow-mod, byte for byte what the os-ken path makes of it, or None (decline)."""
    size = len(frame)
    if size < ofp.OFP_FLOW_MOD_SIZE or frame[0] != ofp.OFP_VERSION or frame[1] != ofp.OFPT_FLOW_MOD:
        return None
    _, _, length, xid = struct.unpack_from(_HEADER, frame)
    (cookie, cookie_mask, table_id, command, idle, hard, priority, buffer_id, out_port, out_group, flags) = (
        struct.unpack_from(_FIXED, frame, codec.HEADER_SIZE)
    )
    if (
        length != size
        or command not in _COMMANDS
        or buffer_id != ofp.OFP_NO_BUFFER
        or priority > policy.MAX_PRIORITY
        or table_id >= policy.HOUSEHOLD_TABLES
    ):
        return None
    deleting = command == ofp.OFPFC_DELETE_STRICT
    if command == ofp.OFPFC_ADD:
        if cookie > policy.COOKIE_LOW:
            return None
        cookie, cookie_mask = slice_.cookie(cookie), 0
    else:
        cookie_mask &= policy.COOKIE_LOW
        cookie, cookie_mask = slice_.cookie(cookie & cookie_mask), policy.COOKIE_SLOT_MASK | cookie_mask
    if deleting and (out_port != ofp.OFPP_ANY or out_group != ofp.OFPG_ANY):
        return None

    # The match: OXM, only the router's fields, each exact and once, filling it to the byte.
    match_type, match_len = struct.unpack_from("!HH", frame, _MATCH_AT)
    end = _MATCH_AT + match_len
    instructions_at = _MATCH_AT + (match_len + 7) // 8 * 8
    if match_type != ofp.OFPMT_OXM or instructions_at > size:
        return None
    fields: dict[str, Any] = {}
    at = _MATCH_AT + 4
    while at < end:
        known = _FIELDS.get(frame[at : at + 4])
        if known is None:
            return None
        name, read = known
        field_end = at + 4 + frame[at + 3]
        if field_end > end or name in fields:
            return None
        fields[name] = read(frame[at + 4 : field_end])
        at = field_end
    if fields.get("eth_type") != policy.ETH_IPV4:
        return None
    to_own = "ipv4_dst" in fields and slice_._owns(fields["ipv4_dst"])
    if not to_own and not ("ipv4_src" in fields and slice_._owns(fields["ipv4_src"])):
        return None
    match_fields = _metadata(slice_.slot) + frame[_MATCH_AT + 4 : end]

    # The instructions: none for a delete; one apply-actions [set_queue(q)], output(NORMAL) otherwise.
    instructions = b"" if deleting else _apply_actions(slice_, frame, instructions_at, to_own)
    if instructions is None or (deleting and instructions_at != size):
        return None

    out_match_len = 4 + len(match_fields)
    body = (
        struct.pack(
            _FIXED,
            cookie,
            cookie_mask,
            table_id + policy.FIRST_HOUSEHOLD_TABLE,
            command,
            idle,
            hard,
            priority + 1,
            ofp.OFP_NO_BUFFER,
            out_port if deleting else ofp.OFPP_ANY,
            out_group if deleting else ofp.OFPG_ANY,
            flags,
        )
        + struct.pack("!HH", ofp.OFPMT_OXM, out_match_len)
        + match_fields
        + bytes(-out_match_len % 8)
        + instructions
    )
    match = _Fields([("metadata", slice_.slot), *fields.items()])
    return FastFlowMod(Request(command, xid), table_id + policy.FIRST_HOUSEHOLD_TABLE, priority + 1, match, body)


def _apply_actions(slice_: policy.Slice, frame: bytes, at: int, to_own: bool) -> bytes | None:
    if len(frame) - at < 8:
        return None
    inst_type, inst_len = struct.unpack_from("!HH", frame, at)
    if inst_type != ofp.OFPIT_APPLY_ACTIONS or at + inst_len != len(frame):
        return None
    actions = b""
    at += 8
    if inst_len == 8 + _SET_QUEUE.size + _OUTPUT.size:
        action_type, action_len, queue = _SET_QUEUE.unpack_from(frame, at)
        if action_type != ofp.OFPAT_SET_QUEUE or action_len != _SET_QUEUE.size:
            return None
        if not to_own or queue not in policy.QUEUE_NAMES:
            return None
        actions = _queue_actions(queue, slice_.queue(queue))
        at += _SET_QUEUE.size
    elif inst_len != 8 + _OUTPUT.size:
        return None
    action_type, action_len, port, max_len = _OUTPUT.unpack_from(frame, at)
    if action_type != ofp.OFPAT_OUTPUT or action_len != _OUTPUT.size or port != ofp.OFPP_NORMAL:
        return None
    actions += _output(port, max_len)
    return _INSTRUCTION_ACTIONS.pack(ofp.OFPIT_APPLY_ACTIONS, 8 + len(actions)) + actions
