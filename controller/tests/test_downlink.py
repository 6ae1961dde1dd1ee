"""The slice rules a household wants for its downlink, from its learnt flows: pure, and as the slicer reads them."""

from os_ken.ofproto import ofproto_v1_3 as ofp
from support import serialised, wire

from homework_controller import downlink, flows, openflow, qos
from homework_controller.flows import FiveTuple

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
