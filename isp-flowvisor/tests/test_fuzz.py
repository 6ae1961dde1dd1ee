"""Seeded mutation fuzzing of the slicer's message handling: errors, never crashes, never leaks."""

from __future__ import annotations

import asyncio
import ipaddress
import random

from os_ken.ofproto import ofproto_v1_3 as ofp
from os_ken.ofproto import ofproto_v1_3_parser as parser
from test_relay import ALICE_HOST, BOB_HOST, _udp_packet, flow, to

from isp_flowvisor import codec, policy, relay
from isp_flowvisor.model import Household as Record
from isp_flowvisor.testing import Household, socketless_slicer

C = codec.CODEC
BOB = Record("bob", 2, (ipaddress.IPv4Network("100.64.2.0/24"),), ports=(3,), flow_quota=50)


def seeds() -> list[bytes]:
    """Well-formed messages of every kind a household sends, aimed at its neighbour and at itself."""
    out = []
    for host in (ALICE_HOST, BOB_HOST):
        out += [
            flow(to(host), [parser.OFPActionSetQueue(2), parser.OFPActionOutput(ofp.OFPP_NORMAL)]),
            flow(
                {"eth_type": 0x800, "ipv4_src": host},
                [parser.OFPActionSetField(ipv4_src=host), parser.OFPActionGroup(1)],
                extra=[parser.OFPInstructionMeter(1), parser.OFPInstructionGotoTable(1)],
            ),
            parser.OFPPacketOut(
                C,
                buffer_id=ofp.OFP_NO_BUFFER,
                in_port=ofp.OFPP_CONTROLLER,
                actions=[parser.OFPActionOutput(1)],
                data=_udp_packet(host, "192.0.2.1"),
            ),
            parser.OFPFlowStatsRequest(
                C, 0, 0, ofp.OFPP_ANY, ofp.OFPG_ANY, 0, 0, parser.OFPMatch(eth_type=0x800, ipv4_dst=host)
            ),
        ]
    out += [
        parser.OFPFlowMod(
            C,
            command=ofp.OFPFC_DELETE,
            table_id=ofp.OFPTT_ALL,
            out_port=ofp.OFPP_ANY,
            out_group=ofp.OFPG_ANY,
            match=parser.OFPMatch(),
        ),
        parser.OFPGroupMod(
            C,
            ofp.OFPGC_ADD,
            ofp.OFPGT_ALL,
            1,
            [parser.OFPBucket(0, ofp.OFPP_ANY, ofp.OFPG_ANY, [parser.OFPActionOutput(3)])],
        ),
        parser.OFPMeterMod(C, ofp.OFPMC_ADD, ofp.OFPMF_KBPS, 1, [parser.OFPMeterBandDrop(1000, 100)]),
        parser.OFPPortStatsRequest(C, 0, ofp.OFPP_ANY),
        parser.OFPQueueStatsRequest(C, 0, ofp.OFPP_ANY, 1),
        parser.OFPAggregateStatsRequest(C, 0, ofp.OFPTT_ALL, ofp.OFPP_ANY, ofp.OFPG_ANY, 0, 0, parser.OFPMatch()),
        parser.OFPDescStatsRequest(C, 0),
        parser.OFPPortDescStatsRequest(C, 0),
        parser.OFPTableStatsRequest(C, 0),
        parser.OFPBarrierRequest(C),
        parser.OFPEchoRequest(C, b"ping"),
        parser.OFPFeaturesRequest(C),
        parser.OFPQueueGetConfigRequest(C, 1),
        parser.OFPGetConfigRequest(C),
        parser.OFPRoleRequest(C, 2, 0),
    ]
    return [codec.encode(m, 77) for m in out]


def mutate(rng: random.Random, frame: bytes, keep_framing: bool) -> bytes:
    data = bytearray(frame)
    kind = rng.randrange(6)
    if kind == 0:  # flip bytes
        for _ in range(rng.randint(1, 8)):
            data[rng.randrange(len(data))] = rng.randrange(256)
    elif kind == 1:  # truncate
        data = data[: rng.randint(8, len(data))]
    elif kind == 2:  # extend with garbage
        data += bytes(rng.randrange(256) for _ in range(rng.randint(1, 64)))
    elif kind == 3:  # another message type
        data[1] = rng.randrange(40)
    elif kind == 4:  # an id field anywhere past the header set to an extreme
        at = rng.randrange(8, max(9, len(data) - 4))
        data[at : at + 4] = rng.choice([b"\xff\xff\xff\xff", b"\x00\x00\x00\x00", b"\xff\xff\xff\x00"])
    else:  # pure garbage after a plausible header
        data = bytearray(data[:8]) + bytes(rng.randrange(256) for _ in range(rng.randint(0, 200)))
    if keep_framing:
        data[0] = ofp.OFP_VERSION if rng.random() < 0.9 else data[0]
        data[2:4] = len(data).to_bytes(2, "big")
    return bytes(data)


def _assert_confined(frame: bytes) -> None:
    """What reaches the switch for bob stays in bob's slice, whatever he sent."""
    msg = codec.decode(frame) if codec.header(frame)[1] in parser._MSG_PARSERS else codec.decode_request(frame)
    if isinstance(msg, parser.OFPFlowMod):
        assert dict(msg.match.items()).get("metadata") == BOB.slot, msg
        assert policy.slot_of_cookie(msg.cookie) == BOB.slot, msg
        if msg.command != ofp.OFPFC_ADD:
            assert msg.cookie_mask & policy.COOKIE_SLOT_MASK == policy.COOKIE_SLOT_MASK, msg
        for inst in msg.instructions:
            for action in getattr(inst, "actions", []):
                if isinstance(action, parser.OFPActionSetField) and action.key in ("ipv4_src", "ipv4_dst"):
                    assert ipaddress.IPv4Address(action.value) in BOB.addresses[0], msg
                if isinstance(action, parser.OFPActionOutput):
                    assert action.port in (1, 3, ofp.OFPP_NORMAL, ofp.OFPP_CONTROLLER), msg
    elif isinstance(msg, (parser.OFPGroupMod, parser.OFPMeterMod)):
        ident = msg.group_id if isinstance(msg, parser.OFPGroupMod) else msg.meter_id
        assert ident >> policy.ID_SHIFT == BOB.slot, msg


def test_a_barrier_reply_is_not_lost_behind_many_flow_mods(monkeypatch):
    # Found by the bench: replies were looked up in a window that flow-mod traffic pushed them out of.
    monkeypatch.setattr(relay, "_RECENT_LIMIT", 50)

    async def run() -> None:
        slicer, session, household, switch = socketless_slicer(BOB)
        slicer._serve(session, codec.encode(parser.OFPBarrierRequest(C), 4242))
        await asyncio.sleep(0)
        relayed_xid = codec.header(switch.frames[-1])[3]
        rule = codec.encode(flow(to(BOB_HOST), [parser.OFPActionOutput(ofp.OFPP_NORMAL)]), 1)
        for _ in range(200):
            slicer._serve(session, rule)
        slicer._from_switch(codec.decode(codec.encode(parser.OFPBarrierReply(C), relayed_xid)), slicer._switch_out)
        await asyncio.sleep(0)
        replies = [codec.header(f) for f in household.frames]
        assert replies[-1][:2] == (ofp.OFP_VERSION, ofp.OFPT_BARRIER_REPLY) and replies[-1][3] == 4242

    asyncio.run(run())


def test_pure_handler_survives_thousands_of_mutated_messages():
    async def run() -> tuple[int, int]:
        slicer, session, household, switch = socketless_slicer(BOB)
        rng = random.Random(20261122)
        corpus = seeds()
        answered = 0
        for _ in range(4000):
            frame = mutate(rng, rng.choice(corpus), keep_framing=True)
            before_h, before_s = len(household.frames), len(switch.frames)
            slicer._serve(session, frame)
            await asyncio.sleep(0)  # what the slicer wrote goes out
            answered += len(household.frames) > before_h or len(switch.frames) > before_s
            for out in switch.frames[before_s:]:
                _assert_confined(out)
        return answered, slicer.counters["bob"].malformed + slicer.counters["bob"].refused

    answered, errors = asyncio.run(run())
    assert errors > 1000  # the mutations mostly break things, and each one got its error
    assert answered > 3000


def test_live_slicer_survives_mutated_messages_and_the_neighbour_keeps_working(slicer, households):
    alice = households("alice")
    rng = random.Random(7)
    corpus = seeds()
    bob = households("bob")
    for i in range(300):
        frame = mutate(rng, rng.choice(corpus), keep_framing=True)
        try:
            bob.send_raw(frame)
        except OSError:
            bob = households("bob")  # a mutation that made his stream unreadable ends only his session
        if i % 50 == 0:
            alice.barrier()
    assert slicer.alive()
    alice.no_error_for(alice.send(flow(to(ALICE_HOST), [parser.OFPActionOutput(ofp.OFPP_NORMAL)])))
    Household(slicer.household_port, source="127.0.0.12").barrier()
