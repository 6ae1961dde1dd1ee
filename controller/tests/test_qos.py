"""Application priorities acting on packets: where a flow's packets land and with which DSCP mark
(fakeoftable), as the household sets priorities, agents report programs and devices exceed their
share of the High class."""

import pytest
from fakeoftable import FakeSwitch
from support import (
    AF41,
    EF,
    LAPTOP,
    LEARNS_FROM_COPIES,
    LOCAL,
    PHONE,
    ROUTER_MAC,
    TABLET,
    WEB,
    WLAN,
    ZOOM,
    deliver,
    down,
    join,
    mark_of,
    up,
)

from homework_controller import flows
from homework_controller.concerns.agent_reports import AgentReport, AgentReportBook
from homework_controller.core.router import HomeRouter
from homework_controller.effects import LogRow, TellHousehold
from homework_controller.policy import dhcp, qos
from homework_controller.store import DeviceStore

UPLINK = qos.LinkShape("hw-wan", line_kbit=10000)  # shaped 9000 kbit/s; one device's High share: 1800


@pytest.fixture
def switch(router):
    sw = FakeSwitch()
    sw.apply(router.switch_ready(WLAN, ROUTER_MAC))
    return sw


@LEARNS_FROM_COPIES
def test_a_high_apps_packets_leave_with_dscp_46_both_ways(router, switch):
    phone = join(router, switch, PHONE)
    router.dns_answer([("us04web.zoom.us", ZOOM, 300)], phone)  # the phone looked the name up
    assert mark_of(router, switch, up(phone, ZOOM)) == (EF, 1, LOCAL)  # to the router's stack, which NATs
    assert mark_of(router, switch, down(phone, ZOOM)) == (EF, 1, WLAN)  # and the answers, towards the phone
    # The same port to a site it did not look up as Zoom is ordinary web traffic.
    assert mark_of(router, switch, up(phone, WEB, sport=40001)) == (0, 0, LOCAL)


@LEARNS_FROM_COPIES
def test_another_devices_lookup_does_not_name_this_devices_connection(router, switch):
    phone = join(router, switch, PHONE)
    laptop = join(router, switch, LAPTOP)
    router.dns_answer([("us04web.zoom.us", ZOOM, 300)], laptop)
    assert mark_of(router, switch, up(phone, ZOOM)) == (0, 0, LOCAL)
    assert mark_of(router, switch, up(laptop, ZOOM, src_mac=LAPTOP)) == (EF, 1, LOCAL)


def test_a_priority_change_re_marks_the_flows_already_running_keeping_their_rules(router, switch):
    phone = join(router, switch, PHONE)
    assert mark_of(router, switch, up(phone, WEB)) == (0, 0, LOCAL)
    assert mark_of(router, switch, down(phone, WEB)) == (0, 0, WLAN)
    counting = lambda: [r for r in switch.rules if r.table == flows.TABLE_ACCOUNTING]  # noqa: E731
    rules_before = counting()
    effects = router.set_app_priorities({"web": "high"})
    switch.apply(effects)
    assert len(counting()) == len(rules_before)  # modified in place (counters carry on), not reinstalled
    [out] = deliver(router, switch, up(phone, WEB))
    assert out.packet["ip_dscp"] == EF
    [back] = deliver(router, switch, down(phone, WEB))
    assert back.packet["ip_dscp"] == EF
    switch.apply(router.set_app_priorities({"web": "medium"}))
    [out] = deliver(router, switch, up(phone, WEB))
    assert (out.packet["ip_dscp"], out.packet["queue"]) == (AF41, 2)
    assert router.set_app_priorities({"web": "medium"}) == []  # the same again: nothing to do


def test_an_agent_labels_only_its_own_devices_connections(router, switch):
    phone = join(router, switch, PHONE)
    laptop = join(router, switch, LAPTOP)
    call = up(phone, ZOOM, flows.PROTO_UDP, 50000, 40001)  # a port no app lists
    assert mark_of(router, switch, call) == (0, 0, LOCAL)
    # Reports naming the phone's connection but with another address: the laptop's, the router's.
    forged = [
        AgentReport(17, laptop, 50000, ZOOM, 40001, "zoom"),
        AgentReport(17, "10.2.0.1", 50000, ZOOM, 40001, "zoom"),
    ]
    switch.apply(router.flow_events.agent_reported(forged))
    [out] = deliver(router, switch, call)
    assert out.packet["ip_dscp"] == 0
    assert router.counters["agent_reports_ignored"] == 1  # the router's own address is no device's
    # The same report for the phone's own address labels its connection, both ways, at once.
    switch.apply(router.flow_events.agent_reported([AgentReport(17, phone, 50000, ZOOM, 40001, "zoom")]))
    [out] = deliver(router, switch, call)
    assert out.packet["ip_dscp"] == EF
    assert mark_of(router, switch, down(phone, ZOOM, flows.PROTO_UDP, 40001, 50000)) == (EF, 1, WLAN)


def test_an_unconnected_udp_socket_report_labels_every_destination_of_that_port(router, switch):
    phone = join(router, switch, PHONE)
    switch.apply(router.flow_events.agent_reported([AgentReport(17, phone, 5004, "*", 0, "linphone")]))
    assert mark_of(router, switch, up(phone, ZOOM, flows.PROTO_UDP, 5004, 40002))[0] == EF
    assert mark_of(router, switch, up(phone, ZOOM, flows.PROTO_UDP, 5005, 40002))[0] == 0  # another socket


def flow_stats(flow_tuples, pkts, nbytes):
    return [(flows.AccountingPriority.LEARNT_FLOW, f.match(), pkts, nbytes) for f in flow_tuples]


@pytest.fixture
def capped(db_path, clock):
    r = HomeRouter(
        DeviceStore(db_path),
        dhcp.LeasePolicy(30, 3600),
        clock=clock,
        qos_settings=qos.QosSettings(uplink=UPLINK, high_device_share=0.2, demotion_s=60),
        flows_from_export=False,  # LEARNS_FROM_COPIES: the shipped path's demotion is in test_decided_ahead
    )
    return r


def test_a_device_over_its_high_share_is_demoted_to_medium_and_told_and_another_is_not(capped):
    router, switch = capped, FakeSwitch()
    switch.apply(router.switch_ready(WLAN, ROUTER_MAC))
    phone = join(router, switch, PHONE)
    laptop = join(router, switch, LAPTOP)
    router.dns_answer([("us04web.zoom.us", ZOOM, 300)], phone)
    router.dns_answer([("us04web.zoom.us", ZOOM, 300)], laptop)
    phone_call, laptop_call = up(phone, ZOOM), up(laptop, ZOOM, src_mac=LAPTOP)
    assert mark_of(router, switch, phone_call)[0] == EF and mark_of(router, switch, laptop_call)[0] == EF
    mine = flows.FiveTuple(6, phone, 40000, ZOOM, 443)
    theirs = flows.FiveTuple(6, laptop, 40000, ZOOM, 443)
    switch.apply(router.on_flow_stats(flow_stats([mine, theirs], 0, 0)))
    router.clock.now += 5
    # In 5 s: the phone sent 1.5 MB (2400 kbit/s, over its 1800), the laptop 0.5 MB (800 kbit/s).
    effects = router.on_flow_stats([*flow_stats([mine], 1000, 1_500_000), *flow_stats([theirs], 400, 500_000)])
    switch.apply(effects)
    [told] = [e for e in effects if isinstance(e, TellHousehold)]
    assert told.kind == "qos-overload" and told.mac == PHONE and "over its share of 1800 kbit/s" in told.message
    [out] = deliver(router, switch, phone_call)
    assert out.packet["ip_dscp"] == AF41  # demoted to Medium
    [out] = deliver(router, switch, laptop_call)
    assert out.packet["ip_dscp"] == EF  # within its share: untouched
    # A new High flow of the demoted phone starts Medium too; a minute later it is High again.
    assert mark_of(router, switch, up(phone, ZOOM, sport=40009))[0] == AF41
    router.clock.now += 61
    switch.apply(router.tick())
    [out] = deliver(router, switch, phone_call)
    assert out.packet["ip_dscp"] == EF


@LEARNS_FROM_COPIES
def test_without_a_shaped_link_nothing_is_capped(router, switch):
    phone = join(router, switch, PHONE)
    router.dns_answer([("us04web.zoom.us", ZOOM, 300)], phone)
    call = up(phone, ZOOM)
    mark_of(router, switch, call)
    flow = flows.FiveTuple(6, phone, 40000, ZOOM, 443)
    router.on_flow_stats(flow_stats([flow], 0, 0))
    router.clock.now += 5
    effects = router.on_flow_stats(flow_stats([flow], 10_000, 15_000_000))
    assert not [e for e in effects if isinstance(e, TellHousehold)]
    [out] = deliver(router, switch, call)
    assert out.packet["ip_dscp"] == EF


@LEARNS_FROM_COPIES
def test_an_unnamed_flow_is_judged_by_its_behaviour_and_marked_for_it(router, switch):
    phone = join(router, switch, PHONE)
    game = up(phone, WEB, flows.PROTO_UDP, 50000, 40005)
    assert mark_of(router, switch, game)[0] == 0
    flow = flows.FiveTuple(17, phone, 50000, WEB, 40005)
    router.on_flow_stats(flow_stats([flow], 0, 0))
    for polls in range(1, 3):  # 30 small packets a second, two polls running: interactive (Medium)
        router.clock.now += 5
        effects = router.on_flow_stats(flow_stats([flow], 150 * polls, 150 * polls * 120))
        switch.apply(effects)
    assert [e.row for e in effects if isinstance(e, LogRow) and e.table == "AppTimeseries"] == [
        ("other", 18000, 150)
    ]  # this poll's traffic counted under what it was until now
    [out] = deliver(router, switch, game)
    assert out.packet["ip_dscp"] == AF41
    router.clock.now += 5
    effects = router.on_flow_stats(flow_stats([flow], 450, 450 * 120))
    assert [e.row for e in effects if isinstance(e, LogRow) and e.table == "AppTimeseries"] == [
        ("interactive", 18000, 150)
    ]


@LEARNS_FROM_COPIES
def test_app_timeseries_names_the_app_the_classifier_found(router, switch):
    phone = join(router, switch, PHONE)
    router.dns_answer([("us04web.zoom.us", ZOOM, 300)], phone)
    mark_of(router, switch, up(phone, ZOOM))
    mark_of(router, switch, up(phone, WEB, sport=40001))
    rows = router.on_flow_stats(
        [
            *flow_stats([flows.FiveTuple(6, phone, 40000, ZOOM, 443)], 10, 1000),
            *flow_stats([flows.FiveTuple(6, phone, 40001, WEB, 443)], 5, 500),
        ]
    )
    # Each with the first packet, which the controller counted from its copy.
    assert [e.row for e in rows if e.table == "AppTimeseries"] == [("video-call", 1100, 11), ("web", 600, 6)]


def test_priorities_read_back_after_a_restart_mark_flows_as_before(db_path, clock):
    first = HomeRouter(DeviceStore(db_path), dhcp.LeasePolicy(30, 3600), clock=clock)
    switch = FakeSwitch()
    switch.apply(first.switch_ready(WLAN, ROUTER_MAC))
    phone = join(first, switch, PHONE)
    assert first.store.flush()
    # The controller restarts: devices come back from its store, priorities from hwdb's history.
    again = HomeRouter(DeviceStore(db_path), dhcp.LeasePolicy(30, 3600), clock=clock)
    # No flows yet, nothing to re-mark: only the ports' marks change (for a switch that is not there yet).
    changed = again.set_app_priorities({"web": "high"})
    assert {r.table for e in changed for r in getattr(e, "rules", ())} == {flows.TABLE_MARKING}
    switch = FakeSwitch()
    switch.apply(again.switch_ready(WLAN, ROUTER_MAC))
    assert mark_of(again, switch, up(phone, WEB))[0] == EF
    # Ahead of any flow: a connection on web's port is High from its first packet, without the controller.
    [out] = [d for d in switch.send(up(phone, WEB, sport=40999)) if d.port != flows.CONTROLLER]
    assert out.packet["ip_dscp"] == EF


def test_the_api_lists_each_apps_priority_and_who_chose_it(router):
    router.set_app_priorities({"web": "high", "backup-tool": "medium"})
    listed = {a["app"]: (a["priority"], a["set_by"]) for a in router.app_priorities()}
    assert listed["web"] == ("high", "household") and listed["backup-tool"] == ("medium", "household")
    assert listed["video-call"] == ("high", "table") and listed["email"] == ("default", "table")


def own_mark(packet, dscp=EF):
    return {**packet, "ip_dscp": dscp}


@LEARNS_FROM_COPIES
def test_a_devices_own_ef_mark_never_reaches_the_shaper(router, switch):
    """A device marking its bulk traffic EF itself would jump the queue: the router sets every
    packet's DSCP, the first packet of a flow (before its rule exists) included."""
    phone = join(router, switch, PHONE)
    [first] = deliver(router, switch, own_mark(up(phone, WEB, sport=41000)))
    assert first.packet["ip_dscp"] == 0 and first.port == LOCAL
    [later] = deliver(router, switch, own_mark(up(phone, WEB, sport=41000)))
    assert later.packet["ip_dscp"] == 0
    # Positive control: what the household chose still marks the same device's call.
    router.dns_answer([("us04web.zoom.us", ZOOM, 300)], phone)
    assert mark_of(router, switch, own_mark(up(phone, ZOOM), dscp=0))[0] == EF


def test_a_device_over_its_flow_budget_cannot_mark_its_own_packets_ef(db_path, clock):
    router = HomeRouter(DeviceStore(db_path), dhcp.LeasePolicy(30, 3600), clock=clock, flow_budget=3)
    switch = FakeSwitch()
    switch.apply(router.switch_ready(WLAN, ROUTER_MAC))
    phone = join(router, switch, PHONE)
    for port in range(5):  # over the budget: the device is counted as a whole, no per-flow rules
        deliver(router, switch, up(phone, WEB, sport=42000 + port))
    [out] = deliver(router, switch, own_mark(up(phone, WEB, sport=43000)))
    assert out.packet["ip_dscp"] == 0 and out.port == LOCAL
    [back] = deliver(router, switch, own_mark(down(phone, WEB, dport=43000)))
    assert back.packet["ip_dscp"] == 0 and back.port == WLAN


@pytest.fixture
def small_book(db_path, clock):
    """A router whose agent report book holds 100 reports a device and 250 in all, on a ready switch."""
    router = HomeRouter(
        DeviceStore(db_path),
        dhcp.LeasePolicy(30, 3600),
        clock=clock,
        agent_reports=AgentReportBook(per_device=100, total=250),
    )
    switch = FakeSwitch()
    switch.apply(router.switch_ready(WLAN, ROUTER_MAC))
    return router, switch


def test_one_devices_flood_of_agent_reports_leaves_another_devices_reports_and_their_app(small_book):
    """From the LAN an agent may insert AppTuples as fast as it likes: a flooding device evicts its own
    reports, never another device's, so the other device's call is still classified by its agent."""
    router, switch = small_book
    phone = join(router, switch, PHONE)
    laptop = join(router, switch, LAPTOP)
    tablet = join(router, switch, TABLET)
    switch.apply(router.flow_events.agent_reported([AgentReport(17, laptop, 5004, "*", 0, "linphone")]))
    # The phone and the tablet flood: each many times the whole book's size, in batches as hwdb sends them.
    for batch in range(20):
        for ip in (phone, tablet):
            switch.apply(
                router.flow_events.agent_reported(
                    [AgentReport(6, ip, 1024 + batch * 50 + i, WEB, 443, "flood") for i in range(50)]
                )
            )
    assert router.agent_reports.reports_of(PHONE) == router.agent_reports.reports_of(TABLET) == 100
    assert router.agent_reports.reports_of(LAPTOP) == 1
    call = up(laptop, ZOOM, flows.PROTO_UDP, 5004, 40002, src_mac=LAPTOP)
    assert mark_of(router, switch, call)[0] == EF  # linphone's call is still High
    # The flooders kept their most recent reports: the book answers for them as it does for anyone.
    assert router.agent_reports.process_of(PHONE, (6, phone, 1024 + 19 * 50 + 49, WEB, 443)) == "flood"
    assert router.agent_reports.process_of(PHONE, (6, phone, 1024, WEB, 443)) is None


def test_a_device_under_its_cap_keeps_every_report(small_book):
    router, switch = small_book
    laptop = join(router, switch, LAPTOP)
    reports = [AgentReport(6, laptop, 2000 + i, WEB, 443, f"app{i}") for i in range(100)]
    switch.apply(router.flow_events.agent_reported(reports))
    assert router.agent_reports.reports_of(LAPTOP) == 100
    assert all(router.agent_reports.process_of(LAPTOP, r.connection) == r.process for r in reports)
