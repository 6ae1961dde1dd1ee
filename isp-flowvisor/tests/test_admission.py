"""Which messages a household may send and what the slicer does with them (admission.py), and the one
object that holds a household (session.py): without sockets."""

from __future__ import annotations

import asyncio
import ipaddress
from types import SimpleNamespace
from typing import Any

import pytest
from os_ken.ofproto import ofproto_v1_3 as ofp
from os_ken.ofproto import ofproto_v1_3_parser as parser

from isp_flowvisor import admission, codec, policy, switchside
from isp_flowvisor.accounting import RuleBook
from isp_flowvisor.model import Household
from isp_flowvisor.testing import FrameSink, socketless_slicer

C = codec.CODEC
ALICE = Household("alice", 1, (ipaddress.IPv4Network("100.64.1.0/24"),), ports=(2,), guaranteed_mbit=20)
ALICE_SLICE = policy.Slice(ALICE, frozenset({1}))


@pytest.mark.parametrize(
    ("msg", "kind"),
    [
        (parser.OFPFlowMod(C), "flow_mod"),
        (parser.OFPPacketOut(C, in_port=2, actions=[]), "packet_out"),
        (parser.OFPMeterMod(C), "meter_mod"),
        (parser.OFPFlowStatsRequest(C), "flow"),
        (parser.OFPTableFeaturesStatsRequest(C), "table_features"),
        (codec.Bare(ofp.OFPT_FEATURES_REQUEST, 1), "features"),
        (codec.Bare(ofp.OFPT_BARRIER_REQUEST, 1), "barrier"),
        (codec.Bare(ofp.OFPT_SET_CONFIG, 1), "ignore"),
    ],
)
def test_what_a_household_may_send_is_named(msg, kind):
    assert admission.request(msg) == kind


@pytest.mark.parametrize(
    ("msg", "error"),
    [
        (codec.Bare(ofp.OFPT_PORT_MOD, 1), (ofp.OFPET_PORT_MOD_FAILED, ofp.OFPPMFC_EPERM)),
        (codec.Bare(ofp.OFPT_TABLE_MOD, 1), (ofp.OFPET_TABLE_MOD_FAILED, ofp.OFPTMFC_EPERM)),
        (codec.Bare(ofp.OFPT_ROLE_REQUEST, 1), (ofp.OFPET_ROLE_REQUEST_FAILED, ofp.OFPRRFC_UNSUP)),
        (codec.Bare(ofp.OFPT_EXPERIMENTER, 1), (ofp.OFPET_BAD_REQUEST, ofp.OFPBRC_BAD_EXPERIMENTER)),
        (codec.Bare(ofp.OFPT_PACKET_IN, 1), (ofp.OFPET_BAD_REQUEST, ofp.OFPBRC_BAD_TYPE)),
        (parser.OFPPortStatus(C), (ofp.OFPET_BAD_REQUEST, ofp.OFPBRC_BAD_TYPE)),
        (
            parser.OFPExperimenterStatsRequest(C, 0, experimenter=1, exp_type=1, data=b""),
            (ofp.OFPET_BAD_REQUEST, ofp.OFPBRC_BAD_MULTIPART),
        ),
    ],
)
def test_what_belongs_to_the_isp_or_is_no_request_is_refused_with_its_error(msg, error):
    with pytest.raises(policy.Refused) as refused:
        admission.request(msg)
    assert (refused.value.err_type, refused.value.err_code) == error


def _key(n: int) -> tuple:
    return (1, 10, (("ipv4_dst", f"100.64.1.{n}"),))


def test_a_new_rule_at_the_quota_is_refused_but_replacing_or_removing_one_is_not():
    book = RuleBook()
    admission.admit_rule(book, _key(1), ofp.OFPFC_ADD, 2)  # below the quota: taken
    book.add(_key(1), b"")
    book.add(_key(2), b"")
    with pytest.raises(policy.Refused) as refused:
        admission.admit_rule(book, _key(3), ofp.OFPFC_ADD, 2)
    assert (refused.value.err_type, refused.value.err_code) == (ofp.OFPET_FLOW_MOD_FAILED, ofp.OFPFMFC_TABLE_FULL)
    admission.admit_rule(book, _key(2), ofp.OFPFC_ADD, 2)  # the same rule again adds none
    admission.admit_rule(book, _key(3), ofp.OFPFC_DELETE_STRICT, 2)
    admission.admit_rule(book, _key(3), ofp.OFPFC_MODIFY_STRICT, 2)


def test_queue_config_is_answered_for_the_households_ports_only():
    shares = {0: 20, 1: 20, 2: 20}  # 20 Mbit/s of 1,000, in tenths of a percent
    assert admission.queue_shares(ALICE_SLICE, 2, 1000) == shares  # its own port
    assert admission.queue_shares(ALICE_SLICE, 1, 1000) == shares  # the shared one
    assert admission.queue_shares(ALICE_SLICE, ofp.OFPP_ANY, 1000) == shares
    with pytest.raises(policy.Refused) as refused:
        admission.queue_shares(ALICE_SLICE, 3, 1000)  # a neighbour's port
    assert (refused.value.err_type, refused.value.err_code) == (ofp.OFPET_QUEUE_OP_FAILED, ofp.OFPQOFC_BAD_PORT)


def test_table_statistics_count_rules_in_the_households_tables():
    keys = [(1, 10, ()), (1, 11, ()), (4, 0, ())]
    assert admission.rules_per_table(keys) == [2, 0, 0, 1]
    assert admission.datapath_id(0xAB_0000000001, 7) == (0x0000000001 << 24) | 7


def test_a_reply_goes_to_the_connection_that_asked_never_to_a_later_one():
    async def run() -> None:
        slicer, session, first, switch = socketless_slicer(ALICE)
        slicer._serve(session, codec.encode(parser.OFPBarrierRequest(C), 11))
        await asyncio.sleep(0)
        asked_first = codec.header(switch.frames[-1])[3]
        later = FrameSink()
        session.connect(None, later)  # type: ignore[arg-type]  # the household reconnected
        slicer._serve(session, codec.encode(parser.OFPBarrierRequest(C), 22))
        await asyncio.sleep(0)
        asked_later = codec.header(switch.frames[-1])[3]
        for xid in (asked_first, asked_later):
            slicer._from_switch(codec.decode(codec.encode(parser.OFPBarrierReply(C), xid)), slicer._switch_out)
        await asyncio.sleep(0)
        # The later connection gets the answer to its own barrier only; the first one was closed.
        assert [codec.header(f)[3] for f in later.frames] == [22]
        assert first.frames == []

    asyncio.run(run())


def test_forgetting_a_household_drops_everything_the_slicer_held_for_it():
    async def run() -> None:
        slicer, session, _, _ = socketless_slicer(ALICE)
        rule = parser.OFPFlowMod(
            C,
            table_id=0,
            priority=5,
            match=parser.OFPMatch(eth_type=0x800, ipv4_dst="100.64.1.5"),
            instructions=[parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, [parser.OFPActionOutput(2)])],
        )
        slicer._serve(session, codec.encode(rule, 1))
        # Positive control: while registered, the household is connected, has its rule and counters.
        assert slicer.is_connected("alice") and len(slicer.books["alice"]) == 1
        assert slicer.counters["alice"].relayed == 1
        await slicer.apply_registry({})
        assert not slicer.is_connected("alice") and session.connection is None
        assert slicer.sessions == {} and slicer.books == {} and slicer.counters == {}
        assert len(session.book) == 0  # its rules were deleted from the switch with it

    asyncio.run(run())


@pytest.mark.parametrize(
    ("msg", "reply_type"),
    [
        (parser.OFPEchoRequest(C, data=b"ping"), ofp.OFPT_ECHO_REPLY),
        (parser.OFPFeaturesRequest(C), ofp.OFPT_FEATURES_REPLY),
        (parser.OFPGetConfigRequest(C), ofp.OFPT_GET_CONFIG_REPLY),
        (parser.OFPGetAsyncRequest(C), ofp.OFPT_GET_ASYNC_REPLY),
        (parser.OFPQueueGetConfigRequest(C, port=2), ofp.OFPT_QUEUE_GET_CONFIG_REPLY),
        (parser.OFPDescStatsRequest(C, 0), ofp.OFPT_MULTIPART_REPLY),
        (parser.OFPPortDescStatsRequest(C, 0), ofp.OFPT_MULTIPART_REPLY),
        (parser.OFPTableStatsRequest(C, 0), ofp.OFPT_MULTIPART_REPLY),
        (parser.OFPTableFeaturesStatsRequest(C, 0), ofp.OFPT_MULTIPART_REPLY),
        (parser.OFPGroupFeaturesStatsRequest(C, 0), ofp.OFPT_MULTIPART_REPLY),
        (parser.OFPMeterFeaturesStatsRequest(C, 0), ofp.OFPT_MULTIPART_REPLY),
        (parser.OFPSetConfig(C), None),  # taken without effect: no answer
    ],
)
def test_the_slicer_answers_what_it_answers_itself_without_asking_the_switch(msg, reply_type):
    async def run() -> None:
        slicer, session, household_end, switch = socketless_slicer(ALICE)
        slicer._serve(session, codec.encode(msg, 77))
        await asyncio.sleep(0)
        assert switch.frames == []
        answers = [codec.header(f)[1:4:2] for f in household_end.frames]
        assert answers == ([] if reply_type is None else [(reply_type, 77)])
        assert session.counters.refused == session.counters.malformed == 0

    asyncio.run(run())


def test_every_message_admission_offers_a_slice_is_relayed_or_answered_by_the_slicer():
    slicer, _, _, _ = socketless_slicer(ALICE)
    offered = {*admission._REQUESTS.values(), *admission._BARE.values()}
    # A kind the relay does not know would be refused as BAD_TYPE although admission offers it.
    assert offered == set(slicer._handlers)


def _switch_port(port_no: int) -> Any:
    return parser.OFPPort(port_no, f"02:00:00:00:00:{port_no:02x}", f"p{port_no}".encode(), 0, 0, 0, 0, 0, 0, 0, 0)


def test_the_switchs_own_messages_reach_the_household_they_concern_and_its_echoes_are_answered():
    async def run() -> None:
        slicer, session, household_end, switch = socketless_slicer(ALICE)
        match = {"eth_type": 0x800, "ipv4_dst": "100.64.1.5"}
        rule = parser.OFPFlowMod(C, table_id=0, priority=5, match=parser.OFPMatch(**match))
        slicer._serve(session, codec.encode(rule, 1))
        assert len(session.book) == 1
        removed = SimpleNamespace(
            cookie=ALICE.slot << policy.COOKIE_BITS,
            priority=6,
            reason=ofp.OFPRR_IDLE_TIMEOUT,
            table_id=policy.FIRST_HOUSEHOLD_TABLE,
            duration_sec=1,
            duration_nsec=0,
            idle_timeout=10,
            hard_timeout=0,
            packet_count=0,
            byte_count=0,
            match=parser.OFPMatch(metadata=ALICE.slot, **match),
        )
        from_switch = [
            switchside.flow_removed(0, removed),
            switchside.port_status(0, ofp.OFPPR_ADD, _switch_port(2)),  # alice's own port
            switchside.port_status(0, ofp.OFPPR_ADD, _switch_port(3)),  # a neighbour's
            codec.encode(parser.OFPEchoRequest(C, b"ping"), 99),
        ]
        for frame in from_switch:
            slicer._from_switch(codec.decode(frame), slicer._switch_out)
        await asyncio.sleep(0)
        # Her rule's removal reaches her and leaves her rule book; of the ports, only her own's status.
        assert len(session.book) == 0
        told = [codec.decode(f) for f in household_end.frames]
        assert [type(m) for m in told] == [parser.OFPFlowRemoved, parser.OFPPortStatus]
        assert told[0].priority == 5 and told[0].table_id == 0 and told[1].desc.port_no == 2
        assert 2 in slicer.ports and 3 in slicer.ports
        # The switch's echo is answered on the switch's connection, under its xid.
        assert [codec.header(f)[1:4:2] for f in switch.frames[-1:]] == [(ofp.OFPT_ECHO_REPLY, 99)]

    asyncio.run(run())
