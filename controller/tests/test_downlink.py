"""The slice rules a household wants for its downlink, from its learnt flows: pure, and as the slicer reads them."""

import ipaddress

from os_ken.ofproto import ofproto_v1_3 as ofp
from support import serialised, wire

from homework_controller import flows
from homework_controller.flows import FiveTuple, openflow
from homework_controller.policy import downlink, qos

PUBLIC = "100.64.1.1"
PHONE, LAPTOP = "10.2.0.6", "10.2.0.10"
ZOOM, WEB = "198.51.100.7", "198.51.100.80"


def call(device=PHONE, remote=ZOOM, proto=flows.PROTO_UDP, port=8801, local_port=50000):
    return FiveTuple(proto, device, local_port, remote, port)


def queues(rules):
    """remote endpoint (proto, address, port) and public address -> the slicer queue its downlink gets."""
    out = {}
    for rule in rules:
        m = rule.match_dict
        [queue] = [a.queue_id for a in rule.actions if isinstance(a, flows.SetQueue)]
        port = m.get("tcp_src", m.get("udp_src"))
        out[(m["ip_proto"], m["ipv4_src"], port, m["ipv4_dst"])] = queue
    return out


def test_high_and_medium_flows_get_the_slicers_high_and_medium_queues_and_normal_ones_nothing():
    rules = downlink.wanted_rules(
        [
            (call(), qos.HIGH),
            (call(remote=WEB, proto=flows.PROTO_TCP, port=443), qos.MEDIUM),
            (call(remote="203.0.113.9", port=53), qos.DEFAULT),
        ],
        [PUBLIC],
    )
    assert queues(rules) == {(flows.PROTO_UDP, ZOOM, 8801, PUBLIC): 2, (flows.PROTO_TCP, WEB, 443, PUBLIC): 1}
    for rule in rules:
        assert rule.match_dict["eth_type"] == flows.ETH_IPV4 and rule.cookie == downlink.SLICE_COOKIE
        assert rule.actions[-1] == flows.Output(ofp.OFPP_NORMAL)  # the ISP's forwarding takes it on
    assert downlink.wanted_rules([(call(), qos.DEFAULT)], [PUBLIC]) == frozenset()


def test_one_rule_per_remote_endpoint_with_the_highest_priority_of_the_connections_to_it():
    # Two devices on one call server: the switch cannot tell their downlinks apart after the NAT.
    both = [(call(device=PHONE), qos.MEDIUM), (call(device=LAPTOP, local_port=50001), qos.HIGH)]
    assert queues(downlink.wanted_rules(both, [PUBLIC])) == {(flows.PROTO_UDP, ZOOM, 8801, PUBLIC): 2}
    assert queues(downlink.wanted_rules(both[:1], [PUBLIC])) == {(flows.PROTO_UDP, ZOOM, 8801, PUBLIC): 1}
    # Another port of the same server is another endpoint.
    assert len(downlink.wanted_rules([*both, (call(port=8802), qos.HIGH)], [PUBLIC])) == 2


def test_every_public_address_gets_the_rule_and_device_to_device_flows_none():
    rules = downlink.wanted_rules(
        [(call(), qos.HIGH), (call(remote=LAPTOP), qos.HIGH), (call(remote="10.2.0.1", port=53), qos.HIGH)],
        [PUBLIC, "100.64.1.2"],
    )
    assert set(queues(rules)) == {(flows.PROTO_UDP, ZOOM, 8801, PUBLIC), (flows.PROTO_UDP, ZOOM, 8801, "100.64.1.2")}


def test_a_protocol_without_ports_matches_the_remote_address_alone():
    [rule] = downlink.wanted_rules([(FiveTuple(47, PHONE, 0, ZOOM, 0), qos.HIGH)], [PUBLIC])  # GRE
    assert rule.match_dict == {"eth_type": flows.ETH_IPV4, "ip_proto": 47, "ipv4_src": ZOOM, "ipv4_dst": PUBLIC}


def test_the_rules_reach_the_slicer_as_meant_and_delete_strict_names_the_same_rule():
    [rule] = downlink.wanted_rules([(call(remote=WEB, proto=flows.PROTO_TCP, port=443), qos.HIGH)], [PUBLIC])
    add = wire(openflow.flow_mod(rule))
    assert add.command == ofp.OFPFC_ADD and add.cookie == downlink.SLICE_COOKIE < 1 << 40  # the slicer's cookie room
    assert (add.table_id, add.priority) == (downlink.SLICE_TABLE, downlink.RULE_PRIORITY)
    assert dict(add.match.items()) == {
        "eth_type": 0x0800,
        "ip_proto": 6,
        "ipv4_src": WEB,
        "tcp_src": 443,
        "ipv4_dst": PUBLIC,
    }
    [apply] = add.instructions
    assert [(type(a).__name__, getattr(a, "queue_id", None) or a.port) for a in apply.actions] == [
        ("OFPActionSetQueue", 2),
        ("OFPActionOutput", ofp.OFPP_NORMAL),
    ]
    delete = serialised(openflow.delete_strict(rule))
    assert delete.command == ofp.OFPFC_DELETE_STRICT and delete.out_port == ofp.OFPP_ANY
    assert (delete.table_id, delete.priority, delete.cookie) == (add.table_id, add.priority, add.cookie)
    assert dict(delete.match.items()) == dict(add.match.items())


# --- IPv6: the delegated prefix is the household's flowspace on the slice (no NAT66) -------------

DELEGATED = ipaddress.IPv6Network("2001:db8:100::/56")
PHONE6, LAPTOP6 = "2001:db8:100:2::10", "2001:db8:100:3::10"  # global addresses in the devices' /64s
PHONE_ULA = "fd12:3456:789a:2::10"
ZOOM6 = "2001:db8:ffff::7"


def rules_by_match(rules):
    """Each rule's match (as a sorted tuple) -> the slicer queue it chooses."""
    return {
        tuple(sorted(rule.match_dict.items())): [a.queue_id for a in rule.actions if isinstance(a, flows.SetQueue)][0]
        for rule in rules
    }


def test_an_ipv6_call_at_high_gets_a_rule_naming_the_devices_own_global_address():
    rules = downlink.wanted_rules(
        [
            (call(device=PHONE6, remote=ZOOM6), qos.HIGH),
            (call(device=LAPTOP6, remote=ZOOM6, local_port=50001), qos.MEDIUM),
        ],
        [PUBLIC],
        delegated=DELEGATED,
    )
    # No NAT: the switch tells the two devices' downlinks apart, so each gets its own priority.
    assert rules_by_match(rules) == {
        tuple(
            sorted({"eth_type": 0x86DD, "ip_proto": 17, "ipv6_src": ZOOM6, "udp_src": 8801, "ipv6_dst": PHONE6}.items())
        ): 2,
        tuple(
            sorted(
                {"eth_type": 0x86DD, "ip_proto": 17, "ipv6_src": ZOOM6, "udp_src": 8801, "ipv6_dst": LAPTOP6}.items()
            )
        ): 1,
    }
    assert all(r.priority == downlink.CONNECTION_PRIORITY and r.cookie == downlink.SLICE_COOKIE for r in rules)
    # The same call at Normal asks for nothing.
    assert (
        downlink.wanted_rules([(call(device=PHONE6, remote=ZOOM6), qos.DEFAULT)], [PUBLIC], delegated=DELEGATED)
        == frozenset()
    )


def test_ipv6_traffic_that_never_crosses_the_isp_gets_no_rule():
    home_only = [
        (call(device=PHONE_ULA, remote=ZOOM6), qos.HIGH),  # a ULA source: never reaches the ISP
        (call(device=PHONE6, remote=LAPTOP6), qos.HIGH),  # device to device, inside the delegated prefix
        (call(device=PHONE6, remote="2001:db8:100::1", port=53), qos.HIGH),  # the router's own /64
        (call(device=PHONE6, remote="fe80::1", port=53), qos.HIGH),  # link-local
        (call(device=PHONE_ULA, remote="fd12:3456:789a:3::10"), qos.HIGH),  # ULA to ULA
    ]
    assert downlink.wanted_rules(home_only, [PUBLIC], delegated=DELEGATED) == frozenset()
    # Positive control: the phone's global address to the call server.
    assert (
        len(downlink.wanted_rules([(call(device=PHONE6, remote=ZOOM6), qos.HIGH)], [PUBLIC], delegated=DELEGATED)) == 1
    )
    # Without a delegated prefix the devices have ULA addresses only: no IPv6 rule, the IPv4 ones as before.
    both = [(call(device=PHONE6, remote=ZOOM6), qos.HIGH), (call(), qos.HIGH)]
    [ipv4_rule] = downlink.wanted_rules(both, [PUBLIC], delegated=None)
    assert ipv4_rule.match_dict["ipv4_dst"] == PUBLIC


def test_ports_and_named_ipv6_addresses_marked_ahead_name_the_whole_delegated_prefix():
    prefix = ("2001:db8:100::", "ffff:ffff:ffff:ff00::")
    ahead = [
        downlink.Ahead(flows.PROTO_UDP, None, (3478, 0xFFFE), qos.HIGH),
        downlink.Ahead(None, ZOOM6, None, qos.HIGH),
        downlink.Ahead(None, ZOOM, None, qos.MEDIUM),
        downlink.Ahead(None, "2001:db8:100:3::10", None, qos.HIGH),  # a device of the household's: none
    ]
    rules = rules_by_match(downlink.wanted_rules([], [PUBLIC], ahead, delegated=DELEGATED))
    assert rules == {
        tuple(sorted({"eth_type": 0x800, "ip_proto": 17, "udp_src": (3478, 0xFFFE), "ipv4_dst": PUBLIC}.items())): 2,
        tuple(sorted({"eth_type": 0x86DD, "ip_proto": 17, "udp_src": (3478, 0xFFFE), "ipv6_dst": prefix}.items())): 2,
        tuple(sorted({"eth_type": 0x86DD, "ipv6_src": ZOOM6, "ipv6_dst": prefix}.items())): 2,
        tuple(sorted({"eth_type": 0x800, "ipv4_src": ZOOM, "ipv4_dst": PUBLIC}.items())): 1,
    }
    # No delegated prefix: only the IPv4 ones.
    assert {dict(m)["eth_type"] for m in rules_by_match(downlink.wanted_rules([], [PUBLIC], ahead))} == {0x800}


def test_an_ipv6_rule_reaches_the_slicer_as_the_prefix_the_switch_compares():
    [port_rule] = downlink.wanted_rules(
        [], [], [downlink.Ahead(flows.PROTO_TCP, None, 443, qos.HIGH)], delegated=DELEGATED
    )
    add = wire(openflow.flow_mod(port_rule))
    assert dict(add.match.items()) == {
        "eth_type": 0x86DD,
        "ip_proto": 6,
        "tcp_src": 443,
        "ipv6_dst": ("2001:db8:100::", "ffff:ffff:ffff:ff00::"),
    }
    [conn_rule] = downlink.wanted_rules([(call(device=PHONE6, remote=ZOOM6), qos.HIGH)], [], delegated=DELEGATED)
    assert dict(wire(openflow.flow_mod(conn_rule)).match.items())["ipv6_dst"] == PHONE6
