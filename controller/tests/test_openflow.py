"""The rule values as the switch receives them: built without a switch, serialised by os-ken, read back."""

import struct

from os_ken.base import app_manager  # noqa: F401 (os-ken's controller module imports it and must not go first)
from os_ken.controller.controller import Datapath
from os_ken.ofproto import ofproto_v1_3 as ofp
from os_ken.ofproto import ofproto_v1_3_parser as ofp_parser
from support import WLAN, serialised, wire

from homenet.wait import wait_until
from homework_controller import flows
from homework_controller.edge.switch.switch_connection import SwitchConnection
from homework_controller.effects import InstallRules, RemoveRules
from homework_controller.flows import base_flows, openflow
from homework_controller.model import Device, State
from homework_controller.policy import apps, qos
from homework_controller.wire.lan import Subnet

PHONE = Device(mac="02:00:00:00:00:aa", state=State.PERMITTED, subnet=Subnet(1), lease_expires=2e9)
TABLE = apps.load_table()
# Two devices that broadcast (one on each access port), and their copies: groups, and a copy in the rule itself
# to a device of the sender's own block.
BROADCASTING = [
    PHONE,
    Device(mac="02:00:00:00:00:cc", state=State.PERMITTED, subnet=Subnet(2)),
    Device(mac="02:00:00:00:00:11", state=State.PERMITTED, subnet=Subnet(3)),
]
BROADCAST_COPIES = base_flows.BroadcastCopies(
    {PHONE.mac: (2,), "02:00:00:00:00:cc": (WLAN,), "02:00:00:00:00:11": (WLAN,)}
)


def every_rule():
    blacklisted = Device(mac="02:00:00:00:00:bb", state=State.BLACKLISTED)
    return (
        base_flows.base_rules((WLAN, 2))
        + list(flows.device_rules(PHONE, 0, (WLAN,), "02:48:57:00:00:01", dns_gated=True))
        + list(flows.device_rules(PHONE, 0, (WLAN, 2), "02:48:57:00:00:01", port=2))
        + [
            flows.dns_block_rule(PHONE, "198.51.100.81"),
            flows.learnt_flow_rule(PHONE, flows.FiveTuple(6, "10.2.0.6", 40000, "198.51.100.80", 80)),
            flows.learnt_flow_rule(
                PHONE, flows.FiveTuple(17, "10.2.0.6", 5004, "198.51.100.7", 3478), qos.mark_actions(qos.HIGH)
            ),
        ]
        + base_flows.broadcast_rules(BROADCASTING, (WLAN, 2), BROADCAST_COPIES)
        + list(flows.device_rules(PHONE, 0, (WLAN,), "02:48:57:00:00:01"))
        + list(flows.device_rules(blacklisted, 0, (WLAN, 2), "02:48:57:00:00:01"))
        # The marking table: the apps' ports as value/mask prefixes, a device's named addresses and
        # its High ports while demoted, IPv4 and IPv6.
        + list(flows.port_marks(TABLE.ports, TABLE.default_priority, qos.mark_actions, ipv6=True))
        + flows.name_marks(PHONE, "198.51.100.7", qos.mark_actions(qos.HIGH))
        + flows.socket_marks(PHONE, flows.PROTO_UDP, 5004, qos.mark_actions(qos.HIGH), ("2001:db8:0:1::/64",))
        + flows.name_marks(PHONE, "2001:db8::7", qos.mark_actions(qos.HIGH), ("2001:db8:0:1::/64",))
        + flows.demoted_port_marks(PHONE, TABLE.ports, {"video-call"}, qos.mark_actions(qos.MEDIUM), ("fd00:1::/64",))
    )


def test_every_rule_the_router_makes_reaches_the_switch_as_it_was_meant():
    for rule in every_rule():
        got = wire(openflow.flow_mod(rule))
        assert (got.table_id, got.priority, got.cookie) == (rule.table, rule.priority, rule.cookie)
        want_match = {k: openflow.port_number(v) if k == "in_port" else v for k, v in rule.match}
        assert dict(got.match.items()) == want_match, rule
        kinds = [type(i).__name__ for i in got.instructions]
        # OpenFlow 1.3's instruction order: meter, apply-actions, goto.
        assert kinds == sorted(
            kinds, key=["OFPInstructionMeter", "OFPInstructionActions", "OFPInstructionGotoTable"].index
        )
        if not rule.actions:
            assert got.instructions == []  # a drop rule


def test_the_groups_of_broadcast_copies_reach_the_switch_as_they_were_meant():
    groups = BROADCAST_COPIES.groups()
    assert {len(g.buckets) for g in groups} == {1, 2}  # PHONE and 02:00:00:00:00:11 share a block
    for group in groups:
        command, kind, group_id, buckets = _group_mod_read_back(openflow.group_mod(group))
        assert (command, kind, group_id) == (ofp.OFPGC_ADD, ofp.OFPGT_ALL, group.group_id)
        assert [[_action(a) for a in bucket.actions] for bucket in buckets] == [
            [_action(a) for a in openflow.actions(bucket)] for bucket in group.buckets
        ]
    assert _group_mod_read_back(openflow.group_mod(groups[0], replace=True))[0] == ofp.OFPGC_MODIFY
    assert _group_mod_read_back(openflow.delete_group(groups[0].group_id))[:3:2] == (
        ofp.OFPGC_DELETE,
        groups[0].group_id,
    )


def _action(action):
    return (action.key, action.value) if isinstance(action, ofp_parser.OFPActionSetField) else ("output", action.port)


def _group_mod_read_back(msg):
    """A group mod as the switch reads it (os-ken parses a switch's messages, not this one: its buckets are)."""
    buf = serialised(msg).buf
    command, kind, group_id = struct.unpack_from("!HBxI", buf, ofp.OFP_HEADER_SIZE)
    buckets, offset = [], ofp.OFP_GROUP_MOD_SIZE
    while offset < len(buf):
        bucket = ofp_parser.OFPBucket.parser(buf, offset)
        buckets.append(bucket)
        offset += bucket.len
    return command, kind, group_id, buckets


def test_every_match_is_encoded_as_os_ken_encodes_the_same_fields_given_one_by_one():
    # match_of hands OFPMatch its fields already normalised and ordered (cached per field: a storm of
    # newcomers' rules is mostly the same fields); the bytes must be what OFPMatch(**fields) makes.
    for rule in every_rule():
        fields = {k: openflow.port_number(v) if k == "in_port" else v for k, v in rule.match}
        ours, os_kens = bytearray(), bytearray()
        openflow.match_of(rule).serialize(ours, 0)
        ofp_parser.OFPMatch(**fields).serialize(os_kens, 0)
        assert ours == os_kens, rule
    eth_type_last = flows.rule(flows.TABLE_ACCOUNTING, 1, ipv4_src="10.2.0.6", eth_type=flows.ETH_IPV4)
    assert [k for k, _ in openflow.match_of(eth_type_last).items()] == ["eth_type", "ipv4_src"]  # prerequisite first


def test_every_flow_mod_packed_without_os_kens_objects_is_the_bytes_os_ken_sends():
    """`flow_mod_wire` is what the switch gets for a newcomer's rules (a storm's, a power cut's): each rule the
    router makes, added and modified, byte for byte what os-ken encodes for `flow_mod`, and the switch reads it
    back as the rule it was meant to be."""
    checked = 0
    for xid, rule in enumerate(every_rule(), start=1):
        for command in (ofp.OFPFC_ADD, ofp.OFPFC_MODIFY_STRICT):
            msg = openflow.flow_mod(rule, command)
            msg.set_xid(xid)
            ours = openflow.flow_mod_wire(rule, xid, command)
            assert ours == bytes(serialised(msg).buf), rule
            checked += 1
    assert checked > 400  # every kind of rule: matches with masks, meters, set-fields, queues, groups, gotos
    # A different rule is different bytes (the comparison above can fail).
    other = flows.learnt_flow_rule(PHONE, flows.FiveTuple(6, "10.2.0.6", 40001, "198.51.100.80", 80))
    first = flows.learnt_flow_rule(PHONE, flows.FiveTuple(6, "10.2.0.6", 40000, "198.51.100.80", 80))
    assert openflow.flow_mod_wire(other, 1) != openflow.flow_mod_wire(first, 1)


def test_a_learnt_flows_rule_counts_its_5_tuple_and_tells_the_controller_when_it_goes():
    flow = flows.FiveTuple(flows.PROTO_UDP, "10.2.0.6", 5000, "198.51.100.80", 53)
    got = wire(openflow.flow_mod(flows.learnt_flow_rule(PHONE, flow)))
    assert dict(got.match.items()) == flow.match()
    assert got.flags & ofp.OFPFF_SEND_FLOW_REM and got.idle_timeout == flows.FLOW_IDLE_TIMEOUT_S
    assert got.cookie == flows.device_cookie(PHONE)  # it goes when the device's rules go


def test_a_marked_flow_sets_its_dscp_and_queue_and_a_re_mark_modifies_the_rule_in_place():
    flow = flows.FiveTuple(flows.PROTO_UDP, "10.2.0.6", 5004, "198.51.100.7", 3478)
    rule = flows.learnt_flow_rule(PHONE, flow, qos.mark_actions(qos.HIGH))
    added = wire(openflow.flow_mod(rule))
    [apply_actions, goto] = added.instructions
    assert [
        (type(a).__name__, a.key, a.value) if hasattr(a, "key") else (type(a).__name__, a.queue_id)
        for a in apply_actions.actions
    ] == [("OFPActionSetField", "ip_dscp", 46), ("OFPActionSetQueue", 1)]
    assert goto.table_id == flows.TABLE_ROUTING and added.command == ofp.OFPFC_ADD
    modified = wire(openflow.flow_mod(rule, ofp.OFPFC_MODIFY_STRICT))
    assert modified.command == ofp.OFPFC_MODIFY_STRICT and not modified.flags & ofp.OFPFF_RESET_COUNTS
    assert dict(modified.match.items()) == flow.match() and modified.priority == flows.AccountingPriority.LEARNT_FLOW


def test_symbolic_ports_become_openflow_ports():
    out = serialised(openflow.packet_out(flows.LOCAL, b"\x00" * 60))
    assert out.actions[0].port == ofp.OFPP_LOCAL and out.in_port == ofp.OFPP_CONTROLLER
    assert openflow.port_number(flows.IN_PORT) == ofp.OFPP_IN_PORT and openflow.port_number(7) == 7


def test_device_and_meter_deletes_name_exactly_what_they_delete():
    delete = wire(openflow.delete_cookie(flows.device_cookie(PHONE)))
    assert delete.command == ofp.OFPFC_DELETE and delete.table_id == ofp.OFPTT_ALL
    assert (delete.cookie, delete.cookie_mask) == (flows.device_cookie(PHONE), flows.DEVICE_COOKIE_MASK)
    meter = serialised(openflow.add_meter(flows.device_meter(PHONE)))
    assert meter.meter_id == flows.device_meter(PHONE).meter_id and meter.bands[0].rate == flows.DEVICE_METER_PPS


class RecordingDatapath:
    """os-ken's datapath as far as sending goes (its own `set_xid` and `send_msg`), writing into a list."""

    ofproto, ofproto_parser = ofp, ofp_parser
    set_xid, send_msg = Datapath.set_xid, Datapath.send_msg

    def __init__(self):
        self.xid, self.written = 0, []

    def send(self, buf, close_socket=False):
        self.written.append(bytes(buf))
        return True


def test_a_devices_rules_reach_the_switch_as_one_write_of_the_bytes_os_ken_sends_one_by_one():
    """The edge encodes a rule change off the lock and queues it as one buffer (`SwitchConnection.encode_rules`,
    `send_encoded`): os-ken's send queue holds 16 messages, and a newcomer's ten queued one by one under the lock
    waited on os-ken's sender thread (issue 39). The bytes are those `send_msg` writes message by message; a change
    encoded for a switch that has since reconnected goes to neither (the new one gets the whole rule set)."""
    switch = SwitchConnection()
    switch.datapath = RecordingDatapath()
    change = InstallRules(flows.device_rules(PHONE, 0, (WLAN,), "02:48:57:00:00:01"))
    switch.send_encoded(switch.encode_rules(change))  # as the edge's sink changes rules
    wait_until("the change to be handed to os-ken", lambda: len(switch.to_switch) == 0, 5)
    by_os_ken = RecordingDatapath()
    for rule in change.rules:
        msg = openflow.flow_mod(rule)
        msg.datapath = by_os_ken
        by_os_ken.send_msg(msg)
    assert len(by_os_ken.written) == len(list(change.rules)) > 5
    assert switch.datapath.written == [b"".join(by_os_ken.written)]
    encoded = switch.encode_rules(RemoveRules(flows.device_cookie(PHONE)))
    before, switch.datapath = switch.datapath, RecordingDatapath()  # the switch reconnected meanwhile
    switch.send_encoded(encoded)
    # Positive control: encoded for the switch connected now, it goes.
    switch.send_encoded(switch.encode_rules(RemoveRules(flows.device_cookie(PHONE))))
    wait_until("both to be handed over", lambda: len(switch.to_switch) == 0, 5)
    assert len(before.written) == 1 and len(switch.datapath.written) == 1
