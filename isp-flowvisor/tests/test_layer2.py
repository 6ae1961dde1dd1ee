"""Issue 21's isolation at layer 2 and in masks, first without sockets, then on a real Open vSwitch.

Each refusal has the same household's legitimate message beside it, accepted."""

from __future__ import annotations

import ipaddress

import pytest
from os_ken.ofproto import ofproto_v1_3 as ofp
from os_ken.ofproto import ofproto_v1_3_parser as parser

from isp_flowvisor import codec, policy
from isp_flowvisor.model import Household, InvalidHousehold, check_disjoint

C = codec.CODEC
ALICE_MAC = "02:00:00:00:01:01"
BOB_MAC = "02:00:00:00:02:01"
GATEWAY_MAC = "02:00:00:00:00:fe"
ALICE = Household("alice", 1, (ipaddress.IPv4Network("100.64.1.0/24"),), ports=(2,), macs=(ALICE_MAC,))
BOB = Household("bob", 2, (ipaddress.IPv4Network("100.64.2.0/24"),), ports=(3,), macs=(BOB_MAC,))
OWN = {"eth_type": 0x800, "ipv4_src": "100.64.1.10"}
NORMAL = parser.OFPActionOutput(ofp.OFPP_NORMAL)


def alice() -> policy.Slice:
    return policy.Slice(ALICE, frozenset({1}))


def rule(match: dict, actions: list, write: list | None = None, command: int = ofp.OFPFC_ADD):
    instructions = [parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, actions)]
    if write is not None:
        instructions.append(parser.OFPInstructionActions(ofp.OFPIT_WRITE_ACTIONS, write))
    return parser.OFPFlowMod(C, command=command, match=parser.OFPMatch(**match), instructions=instructions)


def refusal(call, *args) -> tuple[int, int]:
    with pytest.raises(policy.Refused) as refused:
        call(*args)
    return refused.value.err_type, refused.value.err_code


def frame(src_mac: str, src: str = "100.64.1.10", dst: str = "192.0.2.1") -> bytes:
    from os_ken.lib.packet import ethernet, ipv4, packet, udp

    pkt = packet.Packet()
    pkt.add_protocol(ethernet.ethernet(dst=GATEWAY_MAC, src=src_mac, ethertype=0x0800))
    pkt.add_protocol(ipv4.ipv4(src=src, dst=dst, proto=17))
    pkt.add_protocol(udp.udp(src_port=1000, dst_port=2000))
    pkt.serialize()
    return bytes(pkt.data)


def packet_out(in_port: int, data: bytes, actions: list | None = None):
    return parser.OFPPacketOut(C, buffer_id=ofp.OFP_NO_BUFFER, in_port=in_port, actions=actions or [NORMAL], data=data)


@pytest.mark.parametrize(
    "action",
    [
        parser.OFPActionSetField(eth_src=BOB_MAC),
        parser.OFPActionSetField(eth_src=GATEWAY_MAC),
        parser.OFPActionSetField(eth_dst=BOB_MAC),
        parser.OFPActionSetField(vlan_vid=ofp.OFPVID_PRESENT | 5),
        parser.OFPActionPushVlan(),
        parser.OFPActionPopVlan(),
    ],
)
def test_ethernet_addresses_and_vlans_are_rewritten_only_into_the_households_own(action):
    assert refusal(alice().requests.flow_mod, rule(OWN, [action, NORMAL]))[0] == ofp.OFPET_BAD_ACTION
    # Inside a group's bucket too.
    group = parser.OFPGroupMod(
        C, ofp.OFPGC_ADD, ofp.OFPGT_ALL, 1, [parser.OFPBucket(0, ofp.OFPP_ANY, ofp.OFPG_ANY, [action, NORMAL])]
    )
    assert refusal(alice().requests.group_mod, group)[0] == ofp.OFPET_BAD_ACTION


def test_the_households_own_ethernet_rewrites_are_accepted():
    out = alice().requests.flow_mod(
        rule(OWN, [parser.OFPActionSetField(eth_src=ALICE_MAC), parser.OFPActionSetField(eth_dst=ALICE_MAC), NORMAL])
    )
    assert [a.value for a in out.instructions[0].actions[:2]] == [ALICE_MAC, ALICE_MAC]


def test_a_mac_the_slicer_saw_on_the_households_private_port_is_its_own():
    slice_ = alice()
    device = "02:00:00:00:01:99"
    assert refusal(slice_.requests.packet_out, packet_out(2, frame(device)))[0] == ofp.OFPET_BAD_REQUEST
    # A packet-in from her own downlink port (2) teaches the slicer that the device is hers ...
    seen = parser.OFPPacketIn(
        C,
        ofp.OFP_NO_BUFFER,
        60,
        ofp.OFPR_ACTION,
        policy.FIRST_HOUSEHOLD_TABLE,
        slice_.ids.cookie(0),
        parser.OFPMatch(in_port=2, metadata=1),
        frame(device),
    )
    assert slice_.reports.packet_in(seen) is not None
    slice_.requests.packet_out(packet_out(2, frame(device)))
    # ... but not one that came in on the shared uplink (1).
    stranger = "02:00:00:00:01:98"
    seen.match, seen.data = parser.OFPMatch(in_port=1, metadata=1), frame(stranger)
    slice_.reports.packet_in(seen)
    assert refusal(slice_.requests.packet_out, packet_out(2, frame(stranger)))[0] == ofp.OFPET_BAD_REQUEST


def test_a_packet_out_comes_only_from_the_households_port_and_mac():
    slice_ = alice()
    # The probe's attack: the uplink as in_port, a neighbour's MAC, NORMAL.
    assert refusal(slice_.requests.packet_out, packet_out(1, frame(BOB_MAC))) == (
        ofp.OFPET_BAD_REQUEST,
        ofp.OFPBRC_BAD_PORT,
    )
    assert refusal(slice_.requests.packet_out, packet_out(2, frame(BOB_MAC))) == (
        ofp.OFPET_BAD_REQUEST,
        ofp.OFPBRC_EPERM,
    )
    assert (
        refusal(slice_.requests.packet_out, packet_out(ofp.OFPP_CONTROLLER, frame(BOB_MAC)))[0] == ofp.OFPET_BAD_REQUEST
    )
    slice_.requests.packet_out(packet_out(2, frame(ALICE_MAC)))
    slice_.requests.packet_out(packet_out(ofp.OFPP_CONTROLLER, frame(ALICE_MAC)))


def test_an_action_list_replicates_a_packet_only_a_few_times():
    slice_ = alice()
    limit = policy.MAX_COPIES
    for apply_, write in (
        ([NORMAL] * 3000, None),  # the probe's 48 KB flow-mod
        ([NORMAL] * (limit + 1), None),
        ([NORMAL] * limit, [parser.OFPActionOutput(2)]),  # apply and write together
        ([parser.OFPActionOutput(2)] * limit, [parser.OFPActionGroup(1)]),  # a group counts as its most
    ):
        code = refusal(slice_.requests.flow_mod, rule(OWN, apply_, write))
        assert code == (ofp.OFPET_BAD_ACTION, ofp.OFPBAC_TOO_MANY), (len(apply_), write)
    big_group = [parser.OFPBucket(0, ofp.OFPP_ANY, ofp.OFPG_ANY, [NORMAL])] * (policy.MAX_GROUP_COPIES + 1)
    group = parser.OFPGroupMod(C, ofp.OFPGC_ADD, ofp.OFPGT_ALL, 1, big_group)
    assert refusal(slice_.requests.group_mod, group) == (ofp.OFPET_BAD_ACTION, ofp.OFPBAC_TOO_MANY)
    assert refusal(slice_.requests.packet_out, packet_out(2, frame(ALICE_MAC), [NORMAL] * (limit + 1)))[0] == (
        ofp.OFPET_BAD_ACTION
    )
    # What a household really sends: a copy to its controller beside NORMAL, a group of a few.
    slice_.requests.flow_mod(rule(OWN, [parser.OFPActionOutput(ofp.OFPP_CONTROLLER), NORMAL]))
    slice_.requests.flow_mod(
        rule(OWN, [parser.OFPActionOutput(2)] * (limit - policy.MAX_GROUP_COPIES), [parser.OFPActionGroup(1)])
    )
    slice_.requests.group_mod(parser.OFPGroupMod(C, ofp.OFPGC_ADD, ofp.OFPGT_ALL, 1, big_group[1:]))


def test_flood_and_all_become_the_ports_of_the_households_view():
    slice_ = alice()
    for reserved in (ofp.OFPP_FLOOD, ofp.OFPP_ALL):
        out = slice_.requests.packet_out(packet_out(2, frame(ALICE_MAC), [parser.OFPActionOutput(reserved)]))
        assert [a.port for a in out.actions] == [1]  # the view but the in_port; never bob's 3
        out = slice_.requests.flow_mod(rule(OWN, [parser.OFPActionOutput(reserved)]))
        assert sorted(a.port for a in out.instructions[0].actions) == [1, 2]


def test_macs_are_validated_and_never_shared():
    with pytest.raises(InvalidHousehold):
        Household.from_dict({"name": "eve", "addresses": ["100.64.9.0/24"], "macs": ["01:00:5e:00:00:01"]})
    with pytest.raises(InvalidHousehold):
        check_disjoint([ALICE, Household("eve", 3, (ipaddress.IPv4Network("100.64.9.0/24"),), macs=(ALICE_MAC,))])
    assert Household.from_dict({"name": "eve", "addresses": ["100.64.9.0/24"], "macs": ["02-00-00-00-09-01"]}).macs == (
        "02:00:00:00:09:01",
    )


# --- masks ------------------------------------------------------------------------------------


def test_a_mask_the_switch_reads_bit_by_bit_is_not_taken_for_a_prefix():
    host_mask = rule({"eth_type": 0x800, "ipv4_dst": ("100.64.1.5", "0.0.0.255")}, [NORMAL])
    assert refusal(alice().requests.flow_mod, host_mask) == (ofp.OFPET_BAD_MATCH, ofp.OFPBMC_BAD_NW_ADDR_MASK)
    odd = rule({"eth_type": 0x800, "ipv4_src": ("100.64.1.5", "255.255.0.255")}, [NORMAL])
    assert refusal(alice().requests.flow_mod, odd) == (ofp.OFPET_BAD_MATCH, ofp.OFPBMC_BAD_NW_ADDR_MASK)
    alice().requests.flow_mod(rule({"eth_type": 0x800, "ipv4_dst": ("100.64.1.5", "255.255.255.0")}, [NORMAL]))


def test_rules_are_counted_as_the_switch_stores_them():
    def key(match: dict) -> tuple:
        out = alice().requests.flow_mod(rule(match, [NORMAL]))
        return policy.rule_key(out.table_id, out.priority, out.match)

    # The switch keeps value & mask: these are one rule there, and one in the quota.
    assert key({**OWN, "eth_dst": ("02:00:00:00:00:05", "ff:ff:ff:00:00:00")}) == key(
        {**OWN, "eth_dst": ("02:00:00:00:00:06", "ff:ff:ff:00:00:00")}
    )
    assert key({**OWN, "tcp_dst": (0x1234, 0xFF00), "ip_proto": 6}) == key(
        {**OWN, "tcp_dst": (0x12FF, 0xFF00), "ip_proto": 6}
    )
    # Values that differ where the mask looks are different rules.
    assert key({**OWN, "eth_dst": ("02:00:00:00:00:05", "ff:ff:ff:00:00:00")}) != key(
        {**OWN, "eth_dst": ("02:00:01:00:00:05", "ff:ff:ff:00:00:00")}
    )
    # An all-ones mask is the exact value, as the switch reports it back.
    assert key({**OWN, "eth_dst": ("02:00:00:00:00:05", "ff:ff:ff:ff:ff:ff")}) == key(
        {**OWN, "eth_dst": "02:00:00:00:00:05"}
    )


# --- on the switch ----------------------------------------------------------------------------


def _appctl(ovs, *args: str) -> str:
    return ovs.run("ovs-appctl", "-t", str(ovs.dir / "vswitchd.ctl"), *args)


def _learnt(ovs, bridge: str) -> dict[str, set[int]]:
    """fdb/show: each MAC with the ports the switch's NORMAL has learnt it on."""
    ports: dict[str, set[int]] = {}
    for line in _appctl(ovs, "fdb/show", bridge).splitlines()[1:]:
        port, _vlan, mac, _age = line.split()
        ports.setdefault(mac, set()).add(int(port))
    return ports


def _datapath_port(ovs, bridge: str, port: int) -> str:
    """The datapath's number for an OpenFlow port (ofproto/trace speaks the datapath's)."""
    for line in _appctl(ovs, "dpif/show").splitlines():
        name, _, numbers = line.strip().partition(" ")
        if name == f"{bridge}p{port}":
            return numbers.split(":")[0].split("/")[1]
    raise AssertionError(f"no port {port} on {bridge}")


def _arrives(ovs, bridge: str, port: int, data: bytes) -> None:
    """A packet comes in on `port` and goes through the switch's tables (NORMAL learns from it)."""
    ovs.ofctl(bridge, "packet-out", f"in_port={port} packet={data.hex()} actions=table")


def test_no_neighbours_mac_is_learnt_on_the_wrong_port_and_the_households_own_works(slicer, households, ovs):
    from test_relay import flow

    bridge = slicer.bridge
    bob_mac, alice_mac = "02:00:00:00:02:01", "02:00:00:00:01:01"  # conftest's CPE MACs
    alice = households("alice")
    _arrives(ovs, bridge, 3, frame(bob_mac, src="100.64.2.10"))  # bob's CPE talks on his port
    assert _learnt(ovs, bridge)[bob_mac] == {3}
    her_uplink_traffic = {"eth_type": 0x800, "ipv4_src": "100.64.1.10"}
    attacks = {
        "rewrite her packets' source to bob's MAC": flow(
            her_uplink_traffic, [parser.OFPActionSetField(eth_src=bob_mac), NORMAL], priority=50
        ),
        "tag her packets into another VLAN": flow(
            her_uplink_traffic,
            [parser.OFPActionPushVlan(), parser.OFPActionSetField(vlan_vid=ofp.OFPVID_PRESENT | 5), NORMAL],
            priority=51,
        ),
        "one packet 3,000 times": flow(her_uplink_traffic, [NORMAL] * 3000, priority=52),
        "a packet-out from the uplink with bob's MAC": packet_out(1, frame(bob_mac)),
        "a packet-out from her port with bob's MAC": packet_out(2, frame(bob_mac)),
    }
    for what, msg in attacks.items():
        error = alice.error_for(alice.send(msg))
        assert error.type in (ofp.OFPET_BAD_ACTION, ofp.OFPET_BAD_REQUEST), what
    _arrives(ovs, bridge, 2, frame("02:00:00:00:01:77", src="100.64.1.10"))  # her traffic meets her rules
    learnt = _learnt(ovs, bridge)
    assert learnt[bob_mac] == {3}, learnt
    trace = _appctl(
        ovs,
        "ofproto/trace",
        bridge,
        f"in_port=1,dl_src={GATEWAY_MAC},dl_dst={bob_mac},dl_type=0x800,nw_src=192.0.2.1,nw_dst=100.64.2.10",
    )
    assert f"Datapath actions: {_datapath_port(ovs, bridge, 3)}" in trace, trace  # bob's traffic reaches bob
    # Her own: a rule writing her CPE's MAC, a packet-out from her port with it.
    alice.no_error_for(
        alice.send(flow(her_uplink_traffic, [parser.OFPActionSetField(eth_src=alice_mac), NORMAL], priority=60))
    )
    _arrives(ovs, bridge, 2, frame("02:00:00:00:01:77", src="100.64.1.10"))
    alice.no_error_for(alice.send(packet_out(2, frame(alice_mac, src="100.64.1.11"))))
    learnt = _learnt(ovs, bridge)
    assert learnt[alice_mac] == {2} and learnt[bob_mac] == {3}, learnt


def _arp(op: int, src_mac: str, src_ip: str, dst_mac: str, dst_ip: str) -> bytes:
    from os_ken.lib.packet import arp, ethernet, packet

    pkt = packet.Packet()
    pkt.add_protocol(ethernet.ethernet(dst=dst_mac, src=src_mac, ethertype=0x0806))
    pkt.add_protocol(arp.arp(opcode=op, src_mac=src_mac, src_ip=src_ip, dst_mac=dst_mac, dst_ip=dst_ip))
    pkt.serialize()
    return bytes(pkt.data)


def test_a_packet_out_arp_speaks_only_for_the_households_addresses():
    slice_ = alice()
    # "The gateway (100.64.0.1) is at alice's MAC", sent to bob: it would move bob's traffic to her.
    poison = _arp(2, ALICE_MAC, "100.64.0.1", BOB_MAC, "100.64.1.10")
    assert refusal(slice_.requests.packet_out, packet_out(2, poison)) == (ofp.OFPET_BAD_REQUEST, ofp.OFPBRC_EPERM)
    # Her own ARP, a question and an answer for her addresses, go out.
    slice_.requests.packet_out(packet_out(2, _arp(1, ALICE_MAC, "100.64.1.10", "ff:ff:ff:ff:ff:ff", "100.64.0.1")))
    slice_.requests.packet_out(packet_out(2, _arp(2, ALICE_MAC, "100.64.1.10", GATEWAY_MAC, "100.64.0.1")))


def test_reserved_ports_filter_deletes_and_statistics_as_on_a_switch():
    slice_ = alice()
    for port in (ofp.OFPP_CONTROLLER, ofp.OFPP_NORMAL):
        delete = parser.OFPFlowMod(
            C, command=ofp.OFPFC_DELETE, table_id=ofp.OFPTT_ALL, out_port=port, out_group=ofp.OFPG_ANY
        )
        assert slice_.requests.flow_mod(delete).out_port == port
    foreign = parser.OFPFlowMod(C, command=ofp.OFPFC_DELETE, table_id=ofp.OFPTT_ALL, out_port=3, out_group=ofp.OFPG_ANY)
    assert refusal(slice_.requests.flow_mod, foreign)[0] == ofp.OFPET_BAD_REQUEST  # bob's port
