"""Application priorities acting on packets: where a flow's packets land and with which DSCP mark
(fakeoftable), as the household sets priorities, agents report programs and devices exceed their
share of the High class."""

import pytest
from fakeoftable import FakeSwitch
from support import (
    AF41,
    EF,
    LAPTOP,
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
    records,
    up,
)

from homework_controller import flows
from homework_controller.concerns.agent_reports import AgentReport, AgentReportBook
from homework_controller.core.router import HomeRouter
from homework_controller.effects import LogRow, TellHousehold
from homework_controller.policy import dhcp, qos
from homework_controller.store import DeviceStore

UPLINK = qos.LinkShape("hw-wan", line_kbit=10000)  # shaped 9000 kbit/s; one device's High share: 1800


def test_a_priority_change_re_marks_the_flows_already_running_keeping_their_rules(router, switch):
    phone = join(router, switch, PHONE)
    assert mark_of(switch, up(phone, WEB)) == (0, 0, LOCAL)
    assert mark_of(switch, down(phone, WEB)) == (0, 0, WLAN)
    counting = lambda: [r for r in switch.rules if r.table == flows.TABLE_ACCOUNTING]  # noqa: E731
    rules_before = counting()
    effects = router.set_app_priorities({"web": "high"})
    switch.apply(effects)
    assert len(counting()) == len(rules_before)  # modified in place (counters carry on), not reinstalled
    [out] = deliver(switch, up(phone, WEB))
    assert out.packet["ip_dscp"] == EF
    [back] = deliver(switch, down(phone, WEB))
    assert back.packet["ip_dscp"] == EF
    switch.apply(router.set_app_priorities({"web": "medium"}))
    [out] = deliver(switch, up(phone, WEB))
    assert (out.packet["ip_dscp"], out.packet["queue"]) == (AF41, 2)
    assert router.set_app_priorities({"web": "medium"}) == []  # the same again: nothing to do


def test_an_agent_labels_only_its_own_devices_connections(router, switch):
    phone = join(router, switch, PHONE)
    laptop = join(router, switch, LAPTOP)
    call = up(phone, ZOOM, flows.PROTO_UDP, 50000, 40001)  # a port no app lists
    assert mark_of(switch, call) == (0, 0, LOCAL)
    # Reports naming the phone's connection but with another address: the laptop's, the router's.
    forged = [
        AgentReport(17, laptop, 50000, ZOOM, 40001, "zoom"),
        AgentReport(17, "10.2.0.1", 50000, ZOOM, 40001, "zoom"),
    ]
    switch.apply(router.flow_events.agent_reported(forged))
    [out] = deliver(switch, call)
    assert out.packet["ip_dscp"] == 0
    assert router.counters["agent_reports_ignored"] == 1  # the router's own address is no device's
    # The same report for the phone's own address labels its connection, both ways, at once.
    switch.apply(router.flow_events.agent_reported([AgentReport(17, phone, 50000, ZOOM, 40001, "zoom")]))
    [out] = deliver(switch, call)
    assert out.packet["ip_dscp"] == EF
    assert mark_of(switch, down(phone, ZOOM, flows.PROTO_UDP, 40001, 50000)) == (EF, 1, WLAN)


def test_an_unconnected_udp_socket_report_labels_every_destination_of_that_port(router, switch):
    phone = join(router, switch, PHONE)
    switch.apply(router.flow_events.agent_reported([AgentReport(17, phone, 5004, "*", 0, "linphone")]))
    assert mark_of(switch, up(phone, ZOOM, flows.PROTO_UDP, 5004, 40002))[0] == EF
    assert mark_of(switch, up(phone, ZOOM, flows.PROTO_UDP, 5005, 40002))[0] == 0  # another socket


def flow_stats(flow_tuples, pkts, nbytes):
    return [(flows.AccountingPriority.LEARNT_FLOW, f.match(), pkts, nbytes) for f in flow_tuples]


def test_without_a_shaped_link_nothing_is_capped(router, switch, clock):
    """The shipped router shapes no link unless the deployment names one: a device's call far over any share
    of High stays High (with a shaped link it is demoted: test_decided_ahead)."""
    phone = join(router, switch, PHONE)
    switch.apply(router.dns_answer([("us04web.zoom.us", ZOOM, 300)], phone))
    call = flows.FiveTuple(6, phone, 40000, ZOOM, 443)
    switch.apply(records(router, clock, {call: [1, 100]}))
    effects = records(router, clock, {call: [10_000, 15_000_000]})
    assert not [e for e in effects if isinstance(e, TellHousehold)]
    switch.apply(effects)
    assert mark_of(switch, up(phone, ZOOM)) == (EF, 1, LOCAL)


def app_rows(effects):
    return [e.row for e in effects if isinstance(e, LogRow) and e.table == "AppTimeseries"]


def test_an_unnamed_flows_traffic_is_counted_under_what_its_behaviour_shows(router, switch, clock):
    phone = join(router, switch, PHONE)
    game = flows.FiveTuple(17, phone, 50000, WEB, 40005)  # a port no app lists; 120-byte frames
    for _ in range(2):  # the first poll has no rate yet, the second the first
        assert app_rows(records(router, clock, {game: [150, 150 * 106]})) == [("other", 18000, 150)]
    # 30 small packets a second over two polls: interactive (Medium), marked so from then on. This poll's
    # traffic is counted under what it was until now.
    effects = records(router, clock, {game: [150, 150 * 106]})
    switch.apply(effects)
    assert app_rows(effects) == [("other", 18000, 150)]
    assert mark_of(switch, up(phone, WEB, flows.PROTO_UDP, 50000, 40005))[0] == AF41
    assert app_rows(records(router, clock, {game: [150, 150 * 106]})) == [("interactive", 18000, 150)]


def test_app_timeseries_names_the_app_the_classifier_found(router, switch, clock):
    phone = join(router, switch, PHONE)
    switch.apply(router.dns_answer([("us04web.zoom.us", ZOOM, 300)], phone))
    call, page = flows.FiveTuple(6, phone, 40000, ZOOM, 443), flows.FiveTuple(6, phone, 40001, WEB, 443)
    moved = {call: [10, 1000], page: [5, 500]}
    # Counted as frames: the records' IP bytes and 14 bytes of Ethernet header a packet.
    assert app_rows(records(router, clock, moved)) == [("video-call", 1140, 10), ("web", 570, 5)]


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
    assert mark_of(switch, up(phone, WEB))[0] == EF
    # Ahead of any flow: a connection on web's port is High from its first packet, without the controller.
    [out] = [d for d in switch.send(up(phone, WEB, sport=40999)) if d.port != flows.CONTROLLER]
    assert out.packet["ip_dscp"] == EF


def test_the_api_lists_each_apps_priority_and_who_chose_it(router):
    router.set_app_priorities({"web": "high", "backup-tool": "medium"})
    listed = {a["app"]: (a["priority"], a["set_by"]) for a in router.app_priorities()}
    assert listed["web"] == ("high", "household") and listed["backup-tool"] == ("medium", "household")
    assert listed["video-call"] == ("high", "table") and listed["email"] == ("default", "table")


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
    assert mark_of(switch, call)[0] == EF  # linphone's call is still High
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
