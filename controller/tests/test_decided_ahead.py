"""Marks decided ahead (issue 26): with the switch's records, a permitted device's packets never reach the
controller, and a connection carries its app's mark from its first packet where the router knows the app
before it is opened (a service port, a name the device looked up); an agent's report or the connection's
behaviour in the records gives it a rule of its own. Where packets land and with which DSCP (fakeoftable)."""

import ipaddress
from types import SimpleNamespace

import pytest
from fakeoftable import FakeSwitch
from support import AF41, EF, LAPTOP, LOCAL, PHONE, ROUTER_MAC, WLAN, ZOOM, HoldsCounted, down, join, records, up

from homework_controller import flows
from homework_controller.concerns import ahead_marks
from homework_controller.concerns.agent_reports import AgentReport
from homework_controller.core import flow_events
from homework_controller.core.router import HomeRouter
from homework_controller.edge import ofapp
from homework_controller.effects import LogRow, TellHousehold
from homework_controller.policy import dhcp, downlink, qos
from homework_controller.store import DeviceStore

UPLINK = qos.LinkShape("wan0", 10_000)
CALL_SERVER, SITE = "198.51.100.7", "198.51.100.80"


@pytest.fixture
def router(db_path, clock):
    return HomeRouter(
        DeviceStore(db_path),
        dhcp.LeasePolicy(30, 3600),
        clock=clock,
        qos_settings=qos.QosSettings(uplink=UPLINK, high_device_share=0.2, demotion_s=60),
    )


def first_packet(switch, packet):
    """Where a connection's first packet lands and with which DSCP; nothing may go to the controller."""
    deliveries = switch.send(packet)
    assert not [d for d in deliveries if d.port == flows.CONTROLLER], "a permitted device's packet was copied"
    [out] = deliveries
    return out.packet.get("ip_dscp", 0), out.port


def test_a_call_on_its_service_port_is_high_from_its_first_packet_both_ways_and_follows_the_household(router, switch):
    phone = join(router, switch, PHONE)
    call = up(phone, CALL_SERVER, flows.PROTO_UDP, 40000, 3478)
    assert first_packet(switch, call) == (EF, LOCAL)
    assert first_packet(switch, down(phone, CALL_SERVER, flows.PROTO_UDP, 3478, 40000)) == (EF, WLAN)
    assert first_packet(switch, up(phone, SITE, flows.PROTO_TCP, 40001, 443)) == (0, LOCAL)  # a page: Normal
    switch.apply(router.set_app_priorities({"video-call": "default", "web": "high"}))
    assert first_packet(switch, call) == (0, LOCAL)
    assert first_packet(switch, up(phone, SITE, flows.PROTO_TCP, 40001, 443)) == (EF, LOCAL)
    # A device's own mark never gets through: the router alone marks.
    assert first_packet(switch, {**up(phone, SITE, flows.PROTO_TCP, 40002, 9999), "ip_dscp": EF}) == (0, LOCAL)


def test_a_name_the_device_looked_up_marks_its_connections_with_those_addresses_before_they_open(router, switch):
    phone, laptop = join(router, switch, PHONE), join(router, switch, LAPTOP)
    switch.apply(router.dns_answer([("us04web.zoom.us", ZOOM, 300)], phone))
    assert first_packet(switch, up(phone, ZOOM, flows.PROTO_TCP, 40000, 443)) == (EF, LOCAL)
    assert first_packet(switch, down(phone, ZOOM, flows.PROTO_TCP, 443, 40000)) == (EF, WLAN)
    # The laptop did not look it up: its connection to the same address is Normal (names are per device).
    assert first_packet(switch, up(laptop, ZOOM, flows.PROTO_TCP, 40000, 443, src_mac=LAPTOP)) == (0, LOCAL)
    switch.apply(router.set_app_priorities({"video-call": "medium"}))
    assert first_packet(switch, up(phone, ZOOM, flows.PROTO_TCP, 40003, 443)) == (AF41, LOCAL)
    # Names beat ports: an address named for streaming (Normal) is Normal on a call's port too.
    switch.apply(router.dns_answer([("r1.googlevideo.com", SITE, 300)], phone))
    assert first_packet(switch, up(phone, SITE, flows.PROTO_UDP, 40000, 3478)) == (0, LOCAL)
    assert first_packet(switch, up(phone, CALL_SERVER, flows.PROTO_UDP, 40000, 3478)) == (AF41, LOCAL)


def test_a_device_looking_names_up_by_the_thousand_has_a_bounded_number_of_marks(router, switch, monkeypatch):
    monkeypatch.setattr(ahead_marks, "MAX_NAMED_PER_DEVICE", 3)
    phone = join(router, switch, PHONE)
    addresses = [f"198.51.100.{n}" for n in range(10, 16)]
    for n, address in enumerate(addresses):
        switch.apply(router.dns_answer([(f"h{n}.zoom.us", address, 300)], phone))
    marks = [r for r in switch.rules if r.cookie == flows.marks_cookie(PHONE)]
    assert len(marks) == 3 * 2  # the three most recent addresses, both ways
    assert first_packet(switch, up(phone, addresses[-1], flows.PROTO_TCP, 40000, 443)) == (EF, LOCAL)
    assert first_packet(switch, up(phone, addresses[0], flows.PROTO_TCP, 40000, 443)) == (0, LOCAL)


def test_an_agents_report_gives_its_connection_a_rule_of_its_own_at_once(router, switch):
    phone = join(router, switch, PHONE)
    named = up(phone, SITE, flows.PROTO_TCP, 40000, 443)
    assert first_packet(switch, named) == (0, LOCAL)
    switch.apply(router.flow_events.agent_reported([AgentReport(6, phone, 40000, SITE, 443, "zoom")]))
    assert first_packet(switch, named) == (EF, LOCAL)
    assert first_packet(switch, down(phone, SITE, flows.PROTO_TCP, 443, 40000)) == (EF, WLAN)
    # The positive control: a program whose app is Normal anyway needs no rule of its own.
    before = len(switch.rules)
    switch.apply(router.flow_events.agent_reported([AgentReport(6, phone, 40001, SITE, 443, "firefox")]))
    assert len(switch.rules) == before


def test_a_connection_judged_by_its_behaviour_in_the_records_is_re_marked(router, switch, clock):
    phone = join(router, switch, PHONE)
    game = flows.FiveTuple(flows.PROTO_UDP, phone, 40000, SITE, 9999)  # a port no app lists
    download = flows.FiveTuple(flows.PROTO_TCP, phone, 40001, SITE, 9998)
    assert first_packet(switch, up(phone, SITE, flows.PROTO_UDP, 40000, 9999)) == (0, LOCAL)
    for _ in range(3):  # steady small packets over two polls: interactive (Medium); a bulk one stays Normal
        switch.apply(records(router, clock, {game: [100, 100 * 120], download: [5000, 5000 * 1400]}))
    assert first_packet(switch, up(phone, SITE, flows.PROTO_UDP, 40000, 9999)) == (AF41, LOCAL)
    assert first_packet(switch, up(phone, SITE, flows.PROTO_TCP, 40001, 9998)) == (0, LOCAL)


def test_a_device_over_its_high_share_has_its_ports_and_names_demoted_and_another_does_not(router, switch, clock):
    phone, laptop = join(router, switch, PHONE), join(router, switch, LAPTOP)
    switch.apply(router.dns_answer([("us04web.zoom.us", ZOOM, 300)], phone))
    mine = flows.FiveTuple(flows.PROTO_UDP, phone, 40000, CALL_SERVER, 3478)
    theirs = flows.FiveTuple(flows.PROTO_UDP, laptop, 40000, CALL_SERVER, 3478)
    switch.apply(records(router, clock, {mine: [1, 100], theirs: [1, 100]}))
    # In 5 s: the phone sent 1.5 MB (2400 kbit/s, over its 1800), the laptop 0.5 MB (800 kbit/s).
    effects = records(router, clock, {mine: [1000, 1_500_000], theirs: [400, 500_000]})
    switch.apply(effects)
    [told] = [e for e in effects if isinstance(e, TellHousehold)]
    assert (told.kind, told.mac) == ("qos-overload", PHONE)
    assert first_packet(switch, up(phone, CALL_SERVER, flows.PROTO_UDP, 40000, 3478)) == (AF41, LOCAL)
    assert first_packet(switch, down(phone, CALL_SERVER, flows.PROTO_UDP, 3478, 40000)) == (AF41, WLAN)
    assert first_packet(switch, up(phone, ZOOM, flows.PROTO_TCP, 40002, 443)) == (AF41, LOCAL)
    assert first_packet(switch, up(laptop, CALL_SERVER, flows.PROTO_UDP, 40000, 3478, src_mac=LAPTOP)) == (EF, LOCAL)
    clock.now += 61
    switch.apply(router.tick())
    assert first_packet(switch, up(phone, CALL_SERVER, flows.PROTO_UDP, 40000, 3478)) == (EF, LOCAL)
    assert first_packet(switch, up(phone, ZOOM, flows.PROTO_TCP, 40002, 443)) == (EF, LOCAL)


def test_a_poll_of_many_connections_is_read_a_few_hundred_at_a_hold_and_still_sums_a_device_over_the_whole(
    router, switch, clock
):
    """Issue 39, measured in `make bench` (hostile.json): a flow-stats poll of the switch's records held the lock
    for all its connections at once (60 ms for 6,000 directions), while every other device's DHCP and DNS waited.
    The edge now reads a poll a few hundred directions a hold. Positive control: what spans the parts still
    counts whole: the phone's 600 call connections are over its High share only together (each part's
    alone is under it), and it is demoted; every direction has its Flows row."""
    phone, laptop = join(router, switch, PHONE), join(router, switch, LAPTOP)
    calls = [flows.FiveTuple(flows.PROTO_UDP, phone, 40000 + n, CALL_SERVER, 3478) for n in range(600)]
    pages = [flows.FiveTuple(flows.PROTO_TCP, laptop, 40000 + n, SITE, 443) for n in range(400)]
    switch.apply(records(router, clock, {flow: [1, 100] for flow in calls + pages}))  # the first poll: no rates
    edge = ofapp.HomeworkController.__new__(ofapp.HomeworkController)  # the I/O edge without its sockets
    edge.router, edge.lock, edge.stats_parts, applied = router, HoldsCounted(), [], []
    edge.fair = SimpleNamespace(apply=lambda effects: applied.extend(effects))  # fair serving: carried out at once
    router.priorities._device_and_side = edge.lock.counting(router.priorities._device_and_side)
    # In 5 s: 2,500 bytes a call connection, 1.5 MB in all (2,400 kbit/s, over the phone's 1,800).
    router.flow_events.on_flow_export({flow: [10, 2500] for flow in calls} | {flow: [10, 1000] for flow in pages})
    clock.now += 5
    reply = SimpleNamespace(body=[], flags=0, datapath=SimpleNamespace(ofproto=SimpleNamespace(OFPMPF_REPLY_MORE=1)))
    edge._on_flow_stats(SimpleNamespace(msg=reply))
    assert 0 < max(edge.lock.per_hold) <= flow_events.POLL_PART < len(calls + pages)
    switch.apply(applied)
    [told] = [e for e in applied if isinstance(e, TellHousehold)]
    assert (told.kind, told.mac) == ("qos-overload", PHONE)
    assert first_packet(switch, up(phone, CALL_SERVER, flows.PROTO_UDP, 40000, 3478)) == (AF41, LOCAL)
    assert first_packet(switch, up(laptop, CALL_SERVER, flows.PROTO_UDP, 40000, 3478, src_mac=LAPTOP)) == (EF, LOCAL)
    rows = {e.row[:5] for e in applied if isinstance(e, LogRow) and e.table == "Flows"}
    assert rows == {tuple(flow) for flow in calls + pages}


def test_the_isp_slice_marks_ahead_as_the_router_does_by_port_and_by_named_address(router, switch):
    phone = join(router, switch, PHONE)
    switch.apply(router.dns_answer([("us04web.zoom.us", ZOOM, 300)], phone))

    def slice_rules():
        return downlink.wanted_rules([], ["203.0.113.9"], router.priorities.ahead.slice_ahead())

    def from_port(rules, port):  # the rules for the downlink from a service port (ranges are value/mask)
        return [r for r in rules if (v := dict(r.match).get("udp_src")) is not None and covers(v, port)]

    def from_address(rules, address):
        return [r for r in rules if dict(r.match).get("ipv4_src") == address]

    rules = slice_rules()
    [call_port], [named] = from_port(rules, 3478), from_address(rules, ZOOM)
    assert flows.SetQueue(downlink.SLICE_QUEUES[qos.HIGH]) in call_port.actions and call_port.actions == named.actions
    assert named.priority > call_port.priority  # names beat ports, there as here
    assert not from_address(rules, SITE) and not [r for r in rules if dict(r.match).get("tcp_src") == 443]
    assert len(rules) < 60  # the ports as prefixes: a household's quota is 1,000 rules
    switch.apply(router.set_app_priorities({"video-call": "default"}))
    rules = slice_rules()
    assert not from_port(rules, 3478) and not from_address(rules, ZOOM)


def test_the_isp_slice_marks_ipv6_ahead_for_the_households_delegated_prefix(router, switch):
    delegated = ipaddress.IPv6Network("2001:db8:100::/56")
    zoom6 = "2001:db8:ffff::7"
    phone = join(router, switch, PHONE)
    switch.apply(router.dns_answer([("us04web.zoom.us", zoom6, 300)], phone))
    rules = downlink.wanted_rules([], ["203.0.113.9"], router.priorities.ahead.slice_ahead(), delegated)
    masked = (str(delegated.network_address), str(delegated.netmask))
    [named] = [r for r in rules if dict(r.match).get("ipv6_src") == zoom6]
    assert dict(named.match)["ipv6_dst"] == masked and flows.SetQueue(downlink.SLICE_QUEUES[qos.HIGH]) in named.actions
    v6_ports = [r for r in rules if dict(r.match).get("eth_type") == 0x86DD and "udp_src" in dict(r.match)]
    assert v6_ports and all(dict(r.match)["ipv6_dst"] == masked for r in v6_ports)
    # At Normal the household wants neither.
    switch.apply(router.set_app_priorities({"video-call": "default"}))
    rules = downlink.wanted_rules([], ["203.0.113.9"], router.priorities.ahead.slice_ahead(), delegated)
    assert not [r for r in rules if dict(r.match).get("ipv6_src") == zoom6]


def covers(match, port: int) -> bool:
    value, mask = match if isinstance(match, tuple) else (match, 0xFFFF)
    return port & mask == value & mask


def test_a_forgotten_devices_marks_leave_the_switch_and_a_reconnected_switch_gets_them_all_again(router, switch):
    phone = join(router, switch, PHONE)
    switch.apply(router.dns_answer([("us04web.zoom.us", ZOOM, 300)], phone))
    again = FakeSwitch()
    again.apply(router.switch_ready(WLAN, ROUTER_MAC))
    join(router, again, LAPTOP)
    assert first_packet(again, up(phone, ZOOM, flows.PROTO_TCP, 40000, 443)) == (EF, LOCAL)
    assert first_packet(again, up(phone, CALL_SERVER, flows.PROTO_UDP, 40000, 3478)) == (EF, LOCAL)
    cookies = (flows.marks_cookie(PHONE), flows.device_cookie(router.devices[PHONE]))
    again.apply(router.reconciler.forget(router.devices[PHONE]))
    assert not [r for r in again.rules if r.cookie in cookies]
    assert [r for r in again.rules if r.cookie == flows.device_cookie(router.devices[LAPTOP])]  # the control


def test_a_connection_nothing_names_is_normal_ahead_and_gets_a_rule_when_the_household_raised_other(
    router, switch, clock
):
    """ "other" is what nothing names: the switch cannot mark it ahead (a miss is Normal), so when the
    household puts it above Normal, its connections get rules of their own from the records."""
    phone = join(router, switch, PHONE)
    switch.apply(router.set_app_priorities({"other": "high"}))
    unnamed = flows.FiveTuple(flows.PROTO_TCP, phone, 40000, SITE, 9998)
    assert first_packet(switch, up(phone, SITE, flows.PROTO_TCP, 40000, 9998)) == (0, LOCAL)
    for _ in range(2):
        switch.apply(records(router, clock, {unnamed: [10, 10 * 1400]}))
    assert first_packet(switch, up(phone, SITE, flows.PROTO_TCP, 40000, 9998)) == (EF, LOCAL)


def test_a_socket_an_agent_named_without_a_far_end_is_marked_whatever_it_talks_to(router, switch):
    """A call's media from an unconnected UDP socket (the agent reports no far end): marked from the report
    on, both ways, to any server; the device's other sockets are not."""
    phone = join(router, switch, PHONE)
    assert first_packet(switch, up(phone, SITE, flows.PROTO_UDP, 5004, 9999)) == (0, LOCAL)
    switch.apply(router.flow_events.agent_reported([AgentReport(flows.PROTO_UDP, phone, 5004, "*", 0, "linphone")]))
    for server in (SITE, CALL_SERVER, ZOOM):
        assert first_packet(switch, up(phone, server, flows.PROTO_UDP, 5004, 9999)) == (EF, LOCAL)
        assert first_packet(switch, down(phone, server, flows.PROTO_UDP, 9999, 5004)) == (EF, WLAN)
    assert first_packet(switch, up(phone, SITE, flows.PROTO_UDP, 5005, 9999)) == (0, LOCAL)  # another socket
    switch.apply(router.set_app_priorities({"video-call": "medium"}))
    assert first_packet(switch, up(phone, SITE, flows.PROTO_UDP, 5004, 9999)) == (AF41, LOCAL)
