"""The codec's cached match conversions against os-ken's own, byte for byte, and frame splitting."""

from __future__ import annotations

import random
import signal
import struct

import pytest
import test_policy
from os_ken.ofproto import ofproto_v1_3 as ofp
from os_ken.ofproto import ofproto_v1_3_parser as parser
from test_fuzz import BOB, mutate, seeds
from test_policy import add, slice_of

from isp_flowvisor import codec, policy

C = codec.CODEC


def queue_rules(rng: random.Random, count: int) -> list[bytes]:
    """Rules like the router's (and wider): other remote addresses, ports, masks and commands each time."""
    out = []
    for _ in range(count):
        host = f"100.64.{rng.choice([1, 2, 2])}.{rng.randrange(256)}"
        remote = ".".join(str(rng.randrange(1, 255)) for _ in range(4))
        proto = rng.choice([6, 17])
        match = {
            "eth_type": 0x800,
            "ip_proto": proto,
            "ipv4_src": remote,
            "ipv4_dst": host,
            ("tcp_src" if proto == 6 else "udp_src"): rng.randrange(65536),
        }
        if rng.random() < 0.3:
            match["ipv4_dst"] = (host, rng.choice(["255.255.255.0", "255.255.255.128", "255.255.0.0"]))
        if rng.random() < 0.2:
            match["eth_src"] = "02:00:00:" + ":".join(f"{rng.randrange(256):02x}" for _ in range(3))
        if rng.random() < 0.1:
            match = {"eth_type": 0x806, "arp_tpa": host, "arp_op": 1}
        actions = [parser.OFPActionSetQueue(rng.choice([0, 1, 2])), parser.OFPActionOutput(ofp.OFPP_NORMAL)]
        command = rng.choice([ofp.OFPFC_ADD, ofp.OFPFC_DELETE_STRICT, ofp.OFPFC_MODIFY_STRICT, ofp.OFPFC_DELETE])
        out.append(
            codec.encode(
                add(
                    match,
                    actions,
                    command=command,
                    cookie=0x486F6D65,
                    priority=rng.randrange(100),
                    out_port=ofp.OFPP_ANY,
                    out_group=ofp.OFPG_ANY,
                ),
                rng.randrange(1 << 32),
            )
        )
    return out


def policy_test_messages() -> list[bytes]:
    """The policy tests' refused rules, as sent by their owner and by the neighbour."""
    out = []
    for mark in test_policy.test_anything_outside_the_slice_is_refused.pytestmark:
        for match, actions, _ in mark.args[1]:
            out.append(codec.encode(add(match, actions), 5))
            neighbour = {k: v.replace("100.64.1.", "100.64.2.") if isinstance(v, str) else v for k, v in match.items()}
            out.append(codec.encode(add(neighbour, actions), 5))
    return out


def corpus() -> list[bytes]:
    rng = random.Random(20261123)
    base = seeds() + policy_test_messages() + queue_rules(rng, 500)
    return base + [mutate(rng, rng.choice(base), keep_framing=True) for _ in range(6000)]


def _match_offset(frame: bytes) -> int | None:
    _, msg_type, _, _ = codec.header(frame)
    if msg_type == ofp.OFPT_FLOW_MOD:
        return ofp.OFP_FLOW_MOD_SIZE - ofp.OFP_MATCH_SIZE
    if msg_type == ofp.OFPT_MULTIPART_REQUEST and len(frame) >= ofp.OFP_MULTIPART_REQUEST_SIZE:
        mp_type = struct.unpack_from("!H", frame, codec.HEADER_SIZE)[0]
        if mp_type in (ofp.OFPMP_FLOW, ofp.OFPMP_AGGREGATE):
            return ofp.OFP_MULTIPART_REQUEST_SIZE + ofp.OFP_FLOW_STATS_REQUEST_0_SIZE
    return None


def _outcome(decoder, *args):
    try:
        return decoder(*args), None
    except Exception as exc:
        return None, exc


def _wire(match) -> bytes:
    buf = bytearray()
    match.serialize(buf, 0)
    return bytes(buf)


def test_matches_decode_and_encode_exactly_as_os_ken_does():
    both_decoded = both_refused = 0
    for frame in corpus():
        offset = _match_offset(frame)
        if offset is None or len(frame) < offset + 4:
            continue
        cached, cached_error = _outcome(codec.match_from_wire, frame, offset)
        reference, reference_error = _outcome(parser.OFPMatch.parser, frame, offset)
        assert (cached_error is None) == (reference_error is None), (frame.hex(), cached_error, reference_error)
        if reference is None:
            both_refused += 1
            continue
        both_decoded += 1
        assert (cached.type, cached.length, cached.items()) == (reference.type, reference.length, reference.items())
        fields, _ = _outcome(_wire, reference)
        assert fields is not None and _wire(cached) == fields, frame.hex()
        # ... and as the slicer sends them on: with its metadata field in front.
        scoped = slice_of(BOB).contents.scoped_match(cached)
        plain = parser.OFPMatch(_ordered_fields=[("metadata", BOB.slot), *reference.items()])
        assert _wire(scoped) == _wire(plain), frame.hex()
    assert both_decoded > 1000 and both_refused > 100  # the corpus exercises both outcomes


def test_flow_mods_reach_the_switch_as_os_kens_full_decode_would_send_them():
    translated = refused = 0
    bob = slice_of(BOB)
    for frame in corpus():
        if codec.header(frame)[1] != ofp.OFPT_FLOW_MOD:
            continue
        fast, fast_error = _outcome(codec.decode_request, frame)
        if _outcome(codec.check_flow_mod, frame)[1] is not None:
            assert fast_error is not None  # os-ken's parsers would loop forever on some of these
            continue
        reference, reference_error = _outcome(codec.decode, frame)  # os-ken's own parser, whole message
        assert (fast_error is None) == (reference_error is None), (frame.hex(), fast_error, reference_error)
        if fast_error is not None:
            continue
        outputs = []
        for msg in (fast, reference):
            out, error = _outcome(bob.requests.flow_mod, msg)
            outputs.append(codec.encode(out, 9) if out is not None else (type(error), getattr(error, "err_code", 0)))
        assert outputs[0] == outputs[1], frame.hex()
        if isinstance(outputs[0], bytes):
            translated += 1
        else:
            refused += 1
    assert translated > 300 and refused > 100


def test_frames_are_split_where_their_lengths_say_and_a_partial_one_waits():
    first, second = codec.encode(parser.OFPBarrierRequest(C), 1), codec.encode(parser.OFPEchoRequest(C, b"hi"), 2)
    unread = bytearray(first + second[:5])
    assert codec.split_frames(unread) == [first] and unread == second[:5]
    unread += second[5:]
    assert codec.split_frames(unread) == [second] and unread == b""
    with pytest.raises(ValueError):
        codec.split_frames(bytearray(first[:2] + b"\x00\x04" + first[4:]))  # shorter than a header


@pytest.mark.parametrize(
    "msg", [parser.OFPBarrierRequest(C), parser.OFPBarrierReply(C), parser.OFPEchoRequest(C, b"hi")]
)
def test_a_message_renumbered_is_os_kens_encoding_under_that_xid(msg):
    template = codec.encode(msg, 0)
    for xid in (1, 7, 0x12345678, 0xFFFFFFFF):
        assert codec.renumbered(template, xid) == codec.encode(msg, xid)


def test_rule_keys_and_address_checks_are_the_same_through_their_caches():
    match = parser.OFPMatch(eth_type=0x800, ipv4_dst=("100.64.2.0", "255.255.255.0"), tcp_src=443, ip_proto=6)
    key = policy.rule_key(1, 2, match)
    assert (
        key
        == policy.rule_key(1, 2, match)
        == (1, 2, (("eth_type", "2048"), ("ip_proto", "6"), ("ipv4_dst", "100.64.2.0/24"), ("tcp_src", "443")))
    )
    bob = slice_of(BOB)
    assert bob.contents.owns("100.64.2.9") and bob.contents.owns("100.64.2.9")
    assert not bob.contents.owns("100.64.1.9") and not bob.contents.owns(("100.64.0.0", "255.255.0.0"))


class _Hung(BaseException):
    """Not an Exception: the codec turns those into OpenFlow errors."""


def _within(seconds: float, call, *args):
    def give_up(*_):
        raise _Hung

    previous = signal.signal(signal.SIGALRM, give_up)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        return _outcome(call, *args)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def test_an_action_longer_than_its_type_is_refused_not_followed_into_an_endless_loop():
    # os-ken steps over an output action by its type's 16 bytes, whatever its length field says; a
    # 24-byte one with a set_field of length zero in its tail kept its parser (and so the whole
    # slicer, every household with it) in a loop forever.
    output = parser.OFPActionOutput(ofp.OFPP_NORMAL)
    rule = add({"eth_type": 0x800, "ipv4_dst": "100.64.2.7"}, [output, output])
    frame = bytearray(codec.encode(rule, 1))
    actions_at = len(frame) - 32
    frame[actions_at + 2 : actions_at + 4] = (24).to_bytes(2, "big")
    frame[actions_at + 16 : actions_at + 16] = bytes.fromhex("0019000080000a02")  # set_field, length 0
    frame[actions_at - 6 : actions_at - 4] = (8 + 24 + 16).to_bytes(2, "big")  # the instruction's length
    frame[2:4] = len(frame).to_bytes(2, "big")
    msg, error = _within(5, codec.decode_request, bytes(frame))
    assert isinstance(error, codec.Malformed) and error.err_type == ofp.OFPET_BAD_REQUEST, error
    # The same rule with its true lengths is read as sent.
    msg, error = _within(5, codec.decode_request, codec.encode(rule, 1))
    assert error is None and len(msg.instructions[0].actions) == 2


def test_a_group_mod_with_buckets_is_decoded_as_os_ken_encodes_it():
    # A bucket's length is its first field (not its second, as in actions): every group with a
    # bucket was answered BAD_LEN before (found by ovs-ofctl add-group through a slice).
    bucket = parser.OFPBucket(0, ofp.OFPP_ANY, ofp.OFPG_ANY, [parser.OFPActionOutput(3)])
    frame = codec.encode(parser.OFPGroupMod(C, ofp.OFPGC_ADD, ofp.OFPGT_ALL, 1, [bucket, bucket]), 9)
    msg = codec.decode_request(frame)
    assert [b.actions[0].port for b in msg.buckets] == [3, 3]
    assert codec.encode(msg, 9) == frame
    with pytest.raises(codec.Malformed):  # a bucket claiming length 0 still stops at the check
        codec.decode_request(frame[:16] + bytes(2) + frame[18:])
