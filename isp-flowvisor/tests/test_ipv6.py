"""A household's delegated IPv6 prefix in its flowspace (issue 22): the slicer checks ipv6_src/ipv6_dst
as strictly as IPv4 addresses. Attacks first (a neighbour's prefix, a host mask, a /0), each beside
the same household's legitimate rule, accepted; then the registry, the queues and the real switch."""

from __future__ import annotations

import ipaddress
import re

import pytest
from os_ken.lib.packet import ethernet, icmpv6, ipv6, packet, udp
from os_ken.ofproto import ofproto_v1_3 as ofp
from os_ken.ofproto import ofproto_v1_3_parser as parser

from isp_flowvisor import codec, policy
from isp_flowvisor.model import Household, InvalidHousehold, check_disjoint
from isp_flowvisor.queues import plan

C = codec.CODEC
ALICE_MAC, BOB_MAC, GATEWAY_MAC = "02:00:00:00:01:01", "02:00:00:00:02:01", "02:00:00:00:00:fe"
ALICE_PREFIX, BOB_PREFIX = "2001:db8:100::/56", "2001:db8:200::/56"  # what the ISP delegated to each
ALICE_HOST, BOB_HOST = "2001:db8:100:5::10", "2001:db8:200:5::10"  # a device's global address in each
REMOTE = "2001:db8:ffff::80"  # a server on the internet
ALICE = Household(
    "alice",
    1,
    (ipaddress.IPv4Network("100.64.1.0/24"), ipaddress.IPv6Network(ALICE_PREFIX)),
    ports=(2,),
    macs=(ALICE_MAC,),
)
BOB = Household(
    "bob", 2, (ipaddress.IPv4Network("100.64.2.0/24"), ipaddress.IPv6Network(BOB_PREFIX)), ports=(3,), macs=(BOB_MAC,)
)
NORMAL = parser.OFPActionOutput(ofp.OFPP_NORMAL)
HIGH = [parser.OFPActionSetQueue(2), NORMAL]


def slice_of(household: Household) -> policy.Slice:
    return policy.Slice(household, frozenset({1}))


def rule(match: dict, actions: list):
    return parser.OFPFlowMod(
        C,
        priority=100,
        match=parser.OFPMatch(**match),
        instructions=[parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, actions)],
    )


def downlink(dst, src=REMOTE) -> dict:
    """The router's rule for a call's downlink: from the remote endpoint to a device of the household."""
    return {"eth_type": 0x86DD, "ip_proto": 17, "ipv6_src": src, "udp_src": 3478, "ipv6_dst": dst}


def refusal(household: Household, match: dict, actions: list) -> tuple[int, int]:
    with pytest.raises(policy.Refused) as refused:
        slice_of(household).requests.flow_mod(rule(match, actions))
    return refused.value.err_type, refused.value.err_code


EPERM = (ofp.OFPET_BAD_MATCH, ofp.OFPBMC_EPERM)
BAD_MASK = (ofp.OFPET_BAD_MATCH, ofp.OFPBMC_BAD_NW_ADDR_MASK)


@pytest.mark.parametrize(
    "what, attack, refused, own",
    [
        ("a neighbour's device", downlink(ALICE_HOST), EPERM, downlink(BOB_HOST)),
        (
            "a neighbour's whole prefix",
            downlink((ALICE_PREFIX.split("/")[0], "ffff:ffff:ffff:ff00::")),
            EPERM,
            downlink((BOB_PREFIX.split("/")[0], "ffff:ffff:ffff:ff00::")),
        ),
        (
            "a /48 around both prefixes",
            downlink(("2001:db8::", "ffff:ffff:ffff::")),
            EPERM,
            downlink(("2001:db8:200:5::", "ffff:ffff:ffff:ffff::")),
        ),
        ("every address (a /0)", downlink(("::", "::")), EPERM, downlink(BOB_HOST)),
        # ipaddress would read ::ffff:ffff:ffff:ffff as a host mask (a /64 of the neighbour's); the
        # switch compares the last 64 bits only, so the rule would match every household's device ::10.
        (
            "a host mask",
            downlink((BOB_HOST, "::ffff:ffff:ffff:ffff")),
            BAD_MASK,
            downlink((BOB_HOST, "ffff:ffff:ffff:ffff::")),
        ),
        (
            "a mask with a hole",
            downlink((BOB_HOST, "ffff:ffff:ff00:ffff::")),
            BAD_MASK,
            downlink((BOB_HOST, "ffff:ffff:ffff:ff00::")),
        ),
        (
            "the neighbour's device as the source",
            {"eth_type": 0x86DD, "ipv6_src": ALICE_HOST},
            EPERM,
            {"eth_type": 0x86DD, "ipv6_src": BOB_HOST},
        ),
    ],
)
def test_bob_names_only_his_own_ipv6_prefix(what, attack, refused, own):
    assert refusal(BOB, attack, HIGH if "ipv6_dst" in attack else [NORMAL]) == refused, what
    slice_of(BOB).requests.flow_mod(rule(own, HIGH if "ipv6_dst" in own else [NORMAL]))  # his own: accepted


def test_actions_keep_to_the_households_own_ipv6_prefix():
    # Rewriting his packets into a neighbour's prefix (FlowVisor's hole), over IPv6.
    into_alice = [parser.OFPActionSetField(ipv6_dst=ALICE_HOST), NORMAL]
    assert refusal(BOB, downlink(BOB_HOST), into_alice) == (ofp.OFPET_BAD_ACTION, ofp.OFPBAC_EPERM)
    slice_of(BOB).requests.flow_mod(
        rule(downlink(BOB_HOST), [parser.OFPActionSetField(ipv6_dst="2001:db8:200:6::1"), NORMAL])
    )
    # A queue only for traffic to his own: his device as the source (his upload) chooses none.
    upload = {"eth_type": 0x86DD, "ipv6_src": BOB_HOST}
    assert refusal(BOB, upload, HIGH) == (ofp.OFPET_BAD_ACTION, ofp.OFPBAC_BAD_QUEUE)
    # DSCP by hand stays the slicer's, over IPv6 as over IPv4.
    by_hand = [parser.OFPActionSetField(ip_dscp=46), NORMAL]
    assert refusal(BOB, downlink(BOB_HOST), by_hand) == (ofp.OFPET_BAD_ACTION, ofp.OFPBAC_EPERM)


def test_an_ipv6_queue_rule_becomes_the_households_dscp_and_queue():
    out = slice_of(ALICE).requests.flow_mod(rule(downlink(ALICE_HOST), HIGH))
    fields = dict(out.match.items())
    assert fields["metadata"] == 1 and fields["ipv6_dst"] == ALICE_HOST
    set_dscp, set_queue, output = out.instructions[0].actions
    assert (set_dscp.key, set_dscp.value) == ("ip_dscp", policy.DSCP_OF_QUEUE[2])
    assert set_queue.queue_id == (1 << 2) | 2 and output.port == ofp.OFPP_NORMAL


def test_ipv6_rules_are_counted_as_the_switch_stores_them():
    def key(dst) -> tuple:
        out = slice_of(ALICE).requests.flow_mod(rule(downlink(dst), HIGH))
        return policy.rule_key(out.table_id, out.priority, out.match)

    # value & mask: one rule on the switch, one in the quota.
    assert key(("2001:db8:100:5::10", "ffff:ffff:ffff:ffff::")) == key(("2001:db8:100:5::99", "ffff:ffff:ffff:ffff::"))
    assert key(("2001:db8:100:5::10", "ffff:ffff:ffff:ffff::")) != key(("2001:db8:100:6::10", "ffff:ffff:ffff:ffff::"))
    # An all-ones mask is the exact address, as the switch reports it back.
    assert key((ALICE_HOST, "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff")) == key(ALICE_HOST)


def test_dispatch_rules_hand_the_delegated_prefix_to_the_household_and_clear_its_dscp():
    rules = {
        (r.priority, tuple(sorted(dict(r.match.items()).items()))): r
        for r in policy.dispatch_rules(ALICE)
        if dict(r.match.items())["eth_type"] == 0x86DD
    }
    masked = ("2001:db8:100::", "ffff:ffff:ffff:ff00::")
    down = rules[(200, (("eth_type", 0x86DD), ("ipv6_dst", masked)))]
    assert (down.instructions[0].actions[0].key, down.instructions[0].actions[0].value) == ("ip_dscp", 0)
    assert down.instructions[1].metadata == 1
    assert (100, (("eth_type", 0x86DD), ("ipv6_src", masked))) in rules
    assert len(rules) == 2


def test_table_features_offer_the_ipv6_fields():
    (match_ids,) = [p.oxm_ids for p in policy.table_features(ALICE)[0].properties if p.type == ofp.OFPTFPT_MATCH]
    offered = {oxm.type: oxm.hasmask for oxm in match_ids}
    assert offered["ipv6_src"] and offered["ipv6_dst"]  # with masks (prefixes)
    (settable,) = [
        p.oxm_ids for p in policy.table_features(ALICE)[0].properties if p.type == ofp.OFPTFPT_APPLY_SETFIELD
    ]
    assert {"ipv6_src", "ipv6_dst"} <= {oxm.type for oxm in settable}


# --- packet-outs --------------------------------------------------------------------------------


def frame(src: str, dst: str, src_mac: str = BOB_MAC, icmp=None, options: bytes = b"") -> bytes:
    pkt = packet.Packet()
    pkt.add_protocol(ethernet.ethernet(dst=GATEWAY_MAC, src=src_mac, ethertype=0x86DD))
    pkt.add_protocol(ipv6.ipv6(src=src, dst=dst, nxt=58 if icmp is not None else 17))
    pkt.add_protocol(icmp if icmp is not None else udp.udp(src_port=1000, dst_port=2000))
    pkt.serialize()
    data = bytes(pkt.data) + options
    if options:  # an option os-ken does not write: the payload length grows with it
        length = int.from_bytes(data[18:20], "big") + len(options)
        data = data[:18] + length.to_bytes(2, "big") + data[20:]
    return data


def packet_out(data: bytes):
    return parser.OFPPacketOut(C, buffer_id=ofp.OFP_NO_BUFFER, in_port=3, actions=[NORMAL], data=data)


def advert(target: str, mac: str) -> icmpv6.icmpv6:
    return icmpv6.icmpv6(
        type_=icmpv6.ND_NEIGHBOR_ADVERT, data=icmpv6.nd_neighbor(dst=target, option=icmpv6.nd_option_tla(hw_src=mac))
    )


def packet_refusal(data: bytes) -> tuple[int, int]:
    with pytest.raises(policy.Refused) as refused:
        slice_of(BOB).requests.packet_out(packet_out(data))
    return refused.value.err_type, refused.value.err_code


def test_an_ipv6_packet_out_is_to_or_from_the_households_prefix_and_speaks_only_for_it():
    bob = slice_of(BOB)
    eperm = (ofp.OFPET_BAD_REQUEST, ofp.OFPBRC_EPERM)
    # Neither end his: a packet from the internet into alice's device.
    assert packet_refusal(frame(REMOTE, ALICE_HOST)) == eperm
    bob.requests.packet_out(packet_out(frame(BOB_HOST, REMOTE)))  # his device's: accepted
    bob.requests.packet_out(packet_out(frame(REMOTE, BOB_HOST)))
    # Neighbour discovery teaches its readers an address at a MAC: "the gateway is at my MAC" is not his.
    assert packet_refusal(frame(BOB_HOST, REMOTE, icmp=advert("2001:db8:ffff::1", BOB_MAC))) == eperm
    assert packet_refusal(frame(BOB_HOST, REMOTE, icmp=advert(BOB_HOST, ALICE_MAC))) == eperm
    bob.requests.packet_out(packet_out(frame(BOB_HOST, REMOTE, icmp=advert(BOB_HOST, BOB_MAC))))
    # A second link-layer option (os-ken decodes only the first) naming alice's MAC.
    second = bytes([icmpv6.ND_OPTION_TLA, 1]) + bytes.fromhex(ALICE_MAC.replace(":", ""))
    assert packet_refusal(frame(BOB_HOST, REMOTE, icmp=advert(BOB_HOST, BOB_MAC), options=second)) == eperm
    # A router advertisement is a router's word, even to his own device.
    ra = icmpv6.icmpv6(type_=icmpv6.ND_ROUTER_ADVERT, data=icmpv6.nd_router_advert())
    assert packet_refusal(frame("fe80::1", BOB_HOST, icmp=ra)) == eperm


# --- the registry -------------------------------------------------------------------------------


def test_a_delegated_prefix_is_kept_with_the_households_record_and_never_shared():
    record = ALICE.to_dict()
    assert record["addresses"] == ["100.64.1.0/24", ALICE_PREFIX]
    assert Household.from_dict(record) == ALICE
    # A neighbour's prefix inside alice's (a /64 of her /56) is refused; his own beside it is not.
    eve = Household("eve", 3, (ipaddress.IPv6Network("2001:db8:100:ff::/64"),))
    with pytest.raises(InvalidHousehold, match="overlaps alice's 2001:db8:100::/56"):
        check_disjoint([ALICE, eve])
    check_disjoint([ALICE, BOB])
    # Link-local and multicast addresses are every household's: nobody's flowspace.
    for shared in ("fe80::/64", "ff02::/16", "::/0"):
        with pytest.raises(InvalidHousehold, match="global unicast"):
            Household.from_dict({**record, "addresses": ["100.64.1.0/24", shared]})


# --- the downlink's queues ----------------------------------------------------------------------


def test_the_downlink_tree_classifies_ipv6_by_prefix_and_traffic_class():
    lines = plan("down0", 100, [ALICE], "pfifo limit 1000")
    assert any(
        "protocol ipv6 prio 2 u32 match ip6 dst 2001:db8:100::/56 match ip6 priority 0xb8 0xfc flowid 1:5" in line
        for line in lines
    )
    assert any("protocol ipv6 prio 4 u32 match ip6 dst 2001:db8:100::/56 flowid 1:7" in line for line in lines)


# --- on the switch ------------------------------------------------------------------------------


def lands(ovs, bridge: str, dst: str, dscp: int = 0) -> tuple[int, int | None]:
    """(DSCP, datapath queue) a UDP packet from the call server to `dst`, arriving with `dscp`, leaves
    the switch with."""
    trace = ovs.run(
        "ovs-appctl",
        "-t",
        str(ovs.dir / "vswitchd.ctl"),
        "ofproto/trace",
        bridge,
        f"in_port=1,udp6,ipv6_src={REMOTE},udp_src=3478,ipv6_dst={dst},udp_dst=61000,nw_tos={dscp << 2}",
    )
    final = re.search(r"^Final flow: (.*)$", trace, re.M)
    assert final, trace
    tos = re.search(r"\bnw_tos=(\d+)", final.group(1))
    queue = re.search(r"\bskb_priority=(0x[0-9a-f]+)", final.group(1))
    return (int(tos.group(1)) >> 2 if tos else 0), (int(queue.group(1), 16) if queue else None)


def test_on_the_switch_an_ipv6_call_lands_in_its_households_high_queue_and_a_neighbour_cannot_put_it_there(
    slicer, households, ovs
):
    from test_relay import flow

    alice, bob = households("alice"), households("bob")
    call = {**downlink(ALICE_HOST)}
    # Bob names alice's device, then her whole prefix: refused, and nothing of his reaches her traffic.
    for attack in (call, downlink(("2001:db8:100::", "ffff:ffff:ffff:ff00::"))):
        error = bob.error_for(bob.send(flow(attack, HIGH)))
        assert (error.type, error.code) == EPERM
    assert lands(ovs, slicer.bridge, ALICE_HOST) == (0, None)
    # Alice's own rule: her call's downlink leaves in her High queue (slot 1, queue 2), DSCP 46.
    alice.no_error_for(alice.send(flow(call, HIGH)))
    assert lands(ovs, slicer.bridge, ALICE_HOST) == (46, 1 << 2 | 2)
    # Her other devices' downlink and bob's stay in their Normal queues, DSCP cleared: the internet's
    # own DSCP 46 chooses nothing.
    assert lands(ovs, slicer.bridge, "2001:db8:100:6::10", dscp=46) == (0, None)
    assert lands(ovs, slicer.bridge, BOB_HOST, dscp=46) == (0, None)
