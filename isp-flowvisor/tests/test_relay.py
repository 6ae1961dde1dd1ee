"""Two households on a real Open vSwitch through the slicer: isolation, translation, errors."""

from __future__ import annotations

import asyncio
import ipaddress

from os_ken.ofproto import ofproto_v1_3 as ofp
from os_ken.ofproto import ofproto_v1_3_parser as parser

from isp_flowvisor import codec, relay
from isp_flowvisor.model import Household
from isp_flowvisor.testing import socketless_slicer, wait_until

C = codec.CODEC
ALICE_HOST = "100.64.1.10"
BOB_HOST = "100.64.2.10"
MAC_OF = {ALICE_HOST: "02:00:00:00:01:01", BOB_HOST: "02:00:00:00:02:01"}  # conftest's CPE MACs


def flow(match: dict, actions: list, priority: int = 100, table: int = 0, cookie: int = 0, **kwargs):
    instructions = [parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, actions)] if actions else []
    return parser.OFPFlowMod(
        C,
        cookie=cookie,
        table_id=table,
        priority=priority,
        match=parser.OFPMatch(**match),
        instructions=instructions + kwargs.pop("extra", []),
        **kwargs,
    )


def to(host: str) -> dict:
    return {"eth_type": 0x0800, "ipv4_dst": host}


def test_features_and_port_view_are_per_household(households):
    alice, bob = households("alice"), households("bob")
    a = alice.reply_to(alice.send(parser.OFPFeaturesRequest(C)))
    b = bob.reply_to(bob.send(parser.OFPFeaturesRequest(C)))
    assert a.datapath_id != b.datapath_id and a.datapath_id & 0xFFFFFF == 1 and b.datapath_id & 0xFFFFFF == 2
    ports = {p.port_no for part in alice.request(parser.OFPPortDescStatsRequest(C, 0)) for p in part.body}
    assert ports == {1, 2}  # the shared uplink and her own port, not bob's 3


def test_queue_rule_for_own_addresses_is_installed_as_dscp_and_queue(slicer, households, ovs):
    alice = households("alice")
    xid = alice.send(
        flow(to(ALICE_HOST), [parser.OFPActionSetQueue(2), parser.OFPActionOutput(ofp.OFPP_NORMAL)], cookie=0x42)
    )
    alice.no_error_for(xid)
    rules = [r for r in ovs.flows(slicer.bridge) if "cookie=0x10000000042" in r]
    assert len(rules) == 1, ovs.flows(slicer.bridge)
    assert "metadata=0x1" in rules[0] and "nw_dst=100.64.1.10" in rules[0] and "table=1" in rules[0]
    assert "set_field:46->ip_dscp" in rules[0] or "mod_nw_tos:184" in rules[0]
    assert "set_queue:6" in rules[0]  # slot 1, queue 2
    # Alice reads her own rule back in her own terms.
    stats = [
        s
        for part in alice.request(
            parser.OFPFlowStatsRequest(C, 0, ofp.OFPTT_ALL, ofp.OFPP_ANY, ofp.OFPG_ANY, 0, 0, parser.OFPMatch())
        )
        for s in part.body
    ]
    assert len(stats) == 1 and stats[0].cookie == 0x42 and stats[0].table_id == 0 and stats[0].priority == 100
    assert "metadata" not in dict(stats[0].match.items())
    assert [type(a).__name__ for a in stats[0].instructions[0].actions] == ["OFPActionSetQueue", "OFPActionOutput"]
    assert stats[0].instructions[0].actions[0].queue_id == 2


def test_neighbour_cannot_touch_anothers_traffic_directly_or_by_rewriting(slicer, households, ovs):
    alice, bob = households("alice"), households("bob")
    before = ovs.flows(slicer.bridge)
    attempts = {
        "match on alice's address": flow(to(ALICE_HOST), [parser.OFPActionOutput(ofp.OFPP_NORMAL)]),
        "rewrite into alice's address": flow(
            to(BOB_HOST), [parser.OFPActionSetField(ipv4_dst=ALICE_HOST), parser.OFPActionOutput(ofp.OFPP_NORMAL)]
        ),
        "alice's address as the source": flow(
            {"eth_type": 0x0800, "ipv4_src": ALICE_HOST}, [parser.OFPActionOutput(ofp.OFPP_NORMAL)]
        ),
        "alice's private port": flow(to(BOB_HOST), [parser.OFPActionOutput(2)]),
        "one packet copied 3,000 times": flow(to(BOB_HOST), [parser.OFPActionOutput(ofp.OFPP_NORMAL)] * 3000),
        "choose a DSCP by hand": flow(to(BOB_HOST), [parser.OFPActionSetField(ip_dscp=46)]),
        "queue for traffic from him": flow({"eth_type": 0x0800, "ipv4_src": BOB_HOST}, [parser.OFPActionSetQueue(2)]),
        "a fourth queue": flow(to(BOB_HOST), [parser.OFPActionSetQueue(3)]),
        "metadata": flow(to(BOB_HOST), [], extra=[parser.OFPInstructionWriteMetadata(1, 0xFF)]),
        "a table outside the slice": flow(to(BOB_HOST), [parser.OFPActionOutput(ofp.OFPP_NORMAL)], table=7),
        "a meter of someone else's range": flow(to(BOB_HOST), [], extra=[parser.OFPInstructionMeter(17)]),
        "a loop back out of the in_port": flow({**to(BOB_HOST), "in_port": 1}, [parser.OFPActionOutput(1)]),
    }
    for what, msg in attempts.items():
        error = bob.error_for(bob.send(msg))
        assert error.type in (
            ofp.OFPET_BAD_MATCH,
            ofp.OFPET_BAD_ACTION,
            ofp.OFPET_BAD_INSTRUCTION,
            ofp.OFPET_FLOW_MOD_FAILED,
            ofp.OFPET_METER_MOD_FAILED,
        ), what
    assert ovs.flows(slicer.bridge) == before or sorted(map(_strip_counters, ovs.flows(slicer.bridge))) == sorted(
        map(_strip_counters, before)
    )
    # Positive control: the same kinds of rule for bob's own addresses are accepted.
    for msg in (
        flow(to(BOB_HOST), [parser.OFPActionSetQueue(1), parser.OFPActionOutput(ofp.OFPP_NORMAL)]),
        flow({"eth_type": 0x0800, "ipv4_src": BOB_HOST}, [parser.OFPActionOutput(3)], priority=90),
        flow(
            {"eth_type": 0x0800, "ipv4_src": BOB_HOST, "ipv4_dst": "192.0.2.1"},
            [parser.OFPActionSetField(ipv4_src="100.64.2.11"), parser.OFPActionOutput(1)],
            priority=80,
        ),
        # No address at all: a stock controller's table-miss rule; metadata keeps it to bob's traffic.
        flow({}, [parser.OFPActionOutput(ofp.OFPP_CONTROLLER, ofp.OFPCML_NO_BUFFER)], priority=0),
    ):
        bob.no_error_for(bob.send(msg))
    # Alice keeps working throughout.
    alice.no_error_for(alice.send(flow(to(ALICE_HOST), [parser.OFPActionOutput(ofp.OFPP_NORMAL)])))


def _strip_counters(rule: str) -> str:
    volatile = ("duration=", "n_packets=", "n_bytes=", "idle_age")
    return ",".join(p for p in rule.split(", ") if not p.startswith(volatile))


def test_statistics_show_only_the_households_own_rules(households):
    alice, bob = households("alice"), households("bob")
    alice.no_error_for(alice.send(flow(to(ALICE_HOST), [parser.OFPActionOutput(ofp.OFPP_NORMAL)], cookie=1)))
    bob.no_error_for(bob.send(flow(to(BOB_HOST), [parser.OFPActionOutput(ofp.OFPP_NORMAL)], cookie=2)))
    everything = parser.OFPFlowStatsRequest(C, 0, ofp.OFPTT_ALL, ofp.OFPP_ANY, ofp.OFPG_ANY, 0, 0, parser.OFPMatch())
    seen = [s.cookie for part in bob.request(everything) for s in part.body]
    assert seen == [2]
    # Asking for alice's cookie gives bob nothing of hers, and her address in a stats match neither.
    by_cookie = parser.OFPFlowStatsRequest(
        C, 0, ofp.OFPTT_ALL, ofp.OFPP_ANY, ofp.OFPG_ANY, 1, 0xFFFFFFFFFF, parser.OFPMatch()
    )
    assert [s for part in bob.request(by_cookie) for s in part.body] == []
    aggregate = bob.request(
        parser.OFPAggregateStatsRequest(C, 0, ofp.OFPTT_ALL, ofp.OFPP_ANY, ofp.OFPG_ANY, 0, 0, parser.OFPMatch())
    )
    assert aggregate[0].body.flow_count == 1
    ports = {s.port_no for part in bob.request(parser.OFPPortStatsRequest(C, 0, ofp.OFPP_ANY)) for s in part.body}
    assert ports == {1, 3}
    bob.error_for(bob.send(parser.OFPPortStatsRequest(C, 0, 2)))  # alice's port


def test_wide_delete_removes_only_the_households_rules(slicer, households, ovs):
    alice, bob = households("alice"), households("bob")
    alice.no_error_for(alice.send(flow(to(ALICE_HOST), [parser.OFPActionOutput(ofp.OFPP_NORMAL)], cookie=7)))
    bob.no_error_for(bob.send(flow(to(BOB_HOST), [parser.OFPActionOutput(ofp.OFPP_NORMAL)], cookie=8)))
    delete_all = parser.OFPFlowMod(
        C,
        table_id=ofp.OFPTT_ALL,
        command=ofp.OFPFC_DELETE,
        out_port=ofp.OFPP_ANY,
        out_group=ofp.OFPG_ANY,
        match=parser.OFPMatch(),
    )
    bob.no_error_for(bob.send(delete_all))
    rules = ovs.flows(slicer.bridge)
    assert any("cookie=0x10000000007" in r for r in rules) and not any("cookie=0x20000000008" in r for r in rules)


def test_flow_quota_refuses_the_rule_too_many_and_frees_on_delete(households):
    alice, bob = households("alice"), households("bob")
    for n in range(5):  # bob's quota
        bob.no_error_for(bob.send(flow(to(f"100.64.2.{n + 1}"), [parser.OFPActionOutput(ofp.OFPP_NORMAL)])))
    error = bob.error_for(bob.send(flow(to("100.64.2.99"), [parser.OFPActionOutput(ofp.OFPP_NORMAL)])))
    assert (error.type, error.code) == (ofp.OFPET_FLOW_MOD_FAILED, ofp.OFPFMFC_TABLE_FULL)
    # Replacing an existing rule is not a new one; deleting one makes room.
    bob.no_error_for(bob.send(flow(to("100.64.2.1"), [parser.OFPActionSetQueue(1)])))
    bob.no_error_for(
        bob.send(
            parser.OFPFlowMod(
                C,
                table_id=0,
                priority=100,
                command=ofp.OFPFC_DELETE_STRICT,
                out_port=ofp.OFPP_ANY,
                out_group=ofp.OFPG_ANY,
                match=parser.OFPMatch(**to("100.64.2.1")),
            )
        )
    )
    bob.no_error_for(bob.send(flow(to("100.64.2.99"), [parser.OFPActionOutput(ofp.OFPP_NORMAL)])))
    # Alice's larger quota is hers alone.
    for n in range(8):
        alice.no_error_for(alice.send(flow(to(f"100.64.1.{n + 1}"), [parser.OFPActionOutput(ofp.OFPP_NORMAL)])))


def test_packet_in_reaches_only_the_household_whose_rule_sent_it(slicer, households, ovs):
    alice, bob = households("alice"), households("bob")
    to_controller = [parser.OFPActionOutput(ofp.OFPP_CONTROLLER, ofp.OFPCML_NO_BUFFER)]
    alice.no_error_for(alice.send(flow({**to(ALICE_HOST), "ip_proto": 17}, to_controller, cookie=5)))
    bob.no_error_for(bob.send(flow({**to(BOB_HOST), "ip_proto": 17}, to_controller, cookie=6)))
    packet = _udp_packet("100.64.9.9", ALICE_HOST)
    ovs.ofctl(slicer.bridge, "packet-out", f"in_port=1 packet={packet.hex()} actions=resubmit(,0)")
    seen = alice.expect(lambda m: isinstance(m, parser.OFPPacketIn), 30, "alice's packet-in")
    assert seen.cookie == 5 and seen.table_id == 0 and "metadata" not in dict(seen.match.items())
    assert seen.data == packet
    bob.barrier()
    assert not [m for m in bob.received if isinstance(m, parser.OFPPacketIn)]


def test_packet_out_only_for_own_traffic(households):
    bob = households("bob")
    bad = parser.OFPPacketOut(
        C,
        buffer_id=ofp.OFP_NO_BUFFER,
        in_port=ofp.OFPP_CONTROLLER,
        actions=[parser.OFPActionOutput(1)],
        data=_udp_packet("100.64.9.9", ALICE_HOST),
    )
    bob.error_for(bob.send(bad))
    good = parser.OFPPacketOut(
        C,
        buffer_id=ofp.OFP_NO_BUFFER,
        in_port=ofp.OFPP_CONTROLLER,
        actions=[parser.OFPActionOutput(1)],
        data=_udp_packet(BOB_HOST, "192.0.2.1"),
    )
    bob.no_error_for(bob.send(good))


def test_unknown_and_malformed_messages_get_errors_and_cost_only_themselves(slicer, households):
    alice, bob = households("alice"), households("bob")
    unknown_type = bytes([4, 99, 0, 8, 0, 0, 0, 7])
    bob.send_raw(unknown_type)
    error = bob.error_for(7)
    assert (error.type, error.code) == (ofp.OFPET_BAD_REQUEST, ofp.OFPBRC_BAD_TYPE)
    wrong_version = bytes([1, 14, 0, 8, 0, 0, 0, 8])
    bob.send_raw(wrong_version)
    assert bob.error_for(8).code == ofp.OFPBRC_BAD_VERSION
    truncated_flow_mod = codec.encode(flow(to(BOB_HOST), [parser.OFPActionOutput(1)]), 9)[:60]
    bob.send_raw(truncated_flow_mod[:2] + len(truncated_flow_mod).to_bytes(2, "big") + truncated_flow_mod[4:])
    assert bob.error_for(9).type == ofp.OFPET_BAD_REQUEST
    bob.barrier()  # his session is alive
    # A frame shorter than a header cannot be framed: only that session ends.
    bob.send_raw(bytes([4, 0, 0, 2, 0, 0, 0, 0]))
    wait_until(lambda: _closed(bob), 30, "bob's session to end")
    alice.barrier()
    assert slicer.alive()


def _closed(household) -> bool:
    try:
        household.read_frame(0.2)
    except ConnectionError:
        return True
    except (TimeoutError, OSError):
        return False
    return False


def _udp_packet(src: str, dst: str) -> bytes:
    """A UDP packet from `src`, from its household's CPE MAC when it is one of theirs."""
    from os_ken.lib.packet import ethernet, ipv4, packet, udp

    pkt = packet.Packet()
    src_mac = MAC_OF.get(src, "02:00:00:00:00:01")
    pkt.add_protocol(ethernet.ethernet(dst="02:00:00:00:00:02", src=src_mac, ethertype=0x0800))
    pkt.add_protocol(ipv4.ipv4(src=src, dst=dst, proto=17))
    pkt.add_protocol(udp.udp(src_port=1000, dst_port=2000))
    pkt.add_protocol(b"payload")
    pkt.serialize()
    return bytes(pkt.data)


def test_a_switch_error_goes_back_to_the_sender_of_a_recent_message_only():
    """Flow-mods have no reply: the slicer remembers those of its most recent xids to map the
    switch's error back to the household (under its own xid, with its message) and to take the rule
    out of its book; an error for one relayed longer ago is dropped."""
    alice = Household("alice", 1, (ipaddress.IPv4Network("100.64.1.0/24"),), flow_quota=10)
    rule = codec.encode(flow(to(ALICE_HOST), [parser.OFPActionOutput(ofp.OFPP_NORMAL)]), 7)

    async def run() -> None:
        slicer, session, household_end, switch = socketless_slicer(alice)

        def switch_refuses(relayed: bytes) -> None:
            error = codec.error(ofp.OFPET_FLOW_MOD_FAILED, ofp.OFPFMFC_TABLE_FULL, relayed, codec.header(relayed)[3])
            slicer._from_switch(codec.decode(error), slicer._switch_out)

        slicer._serve(session, rule)
        await asyncio.sleep(0)
        (first,) = switch.frames
        for _ in range(relay._RECENT_LIMIT):
            slicer._serve(session, rule)
        await asyncio.sleep(0)
        assert len(session.book) == 1
        switch_refuses(first)  # too long ago: nobody to tell
        await asyncio.sleep(0)
        assert household_end.frames == [] and len(session.book) == 1
        switch_refuses(switch.frames[-1])
        await asyncio.sleep(0)
        (error,) = [codec.decode(frame) for frame in household_end.frames]
        assert isinstance(error, parser.OFPErrorMsg) and error.xid == 7 and error.data == rule[:64]
        assert len(session.book) == 0

    asyncio.run(run())
