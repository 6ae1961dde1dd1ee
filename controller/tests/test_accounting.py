"""Per-flow accounting: each flow gets a counting rule, within a per-device budget, and no
connection is too short to be counted."""

import ipaddress

from fakeoftable import FakeSwitch
from support import LAPTOP, LEARNS_FROM_COPIES, PHONE, ROUTER_MAC, WLAN, frame, join, lease, permitted_phone, up

from homework_controller import flows
from homework_controller.core.router import HomeRouter
from homework_controller.effects import InstallRules, LogRow, RemoveRules, TellHousehold
from homework_controller.policy import dhcp
from homework_controller.store import DeviceStore
from homework_controller.wire import packets

INTERNET = "198.51.100.80"


def tcp_frame(src_ip, dst_ip, sport, dport, size=100):
    return packets.Frame(
        PHONE,
        "02:48:57:00:00:01",
        0x0800,
        ip_src=src_ip,
        ip_dst=dst_ip,
        ip_proto=6,
        sport=sport,
        dport=dport,
        size=size,
    )


@LEARNS_FROM_COPIES
def test_a_new_flow_gets_its_own_counting_rule_once(router):
    ip = permitted_phone(router)
    [install] = router.flow_events.on_flow_copy(1, tcp_frame(ip, INTERNET, 40000, 80))
    [r] = install.rules
    assert r.table == flows.TABLE_ACCOUNTING and r.idle_timeout == flows.FLOW_IDLE_TIMEOUT_S and r.notify_removal
    assert r.match_dict == {
        "eth_type": 0x0800,
        "ip_proto": 6,
        "ipv4_src": ip,
        "ipv4_dst": INTERNET,
        "tcp_src": 40000,
        "tcp_dst": 80,
    }
    assert router.flow_events.on_flow_copy(1, tcp_frame(ip, INTERNET, 40000, 80)) == []  # a second copy in flight
    # The answer direction, arriving from the router's stack, is a flow of its own.
    [back] = router.flow_events.on_flow_copy(flows.LOCAL, tcp_frame(INTERNET, ip, 80, 40000))
    assert back.rules[0].match_dict["ipv4_dst"] == ip


@LEARNS_FROM_COPIES
def test_a_connection_over_before_its_rule_is_in_place_is_counted_from_what_the_controller_saw(router):
    ip = permitted_phone(router)
    for size in (74, 66, 200, 66):  # SYN, ACK, request, FIN: all copied before the rule took over
        router.flow_events.on_flow_copy(1, tcp_frame(ip, INTERNET, 40001, 80, size))
    device_up = {"eth_type": 0x0800, "ipv4_src": ip}
    # The rule came too late to see anything; the device's learning rule counted the 4 copies.
    rows = router.on_flow_stats(
        [
            (flows.AccountingPriority.LEARNT_FLOW, flows.FiveTuple(6, ip, 40001, INTERNET, 80).match(), 0, 0),
            (flows.AccountingPriority.DEVICE_SOURCE, device_up, 4, 406),
        ]
    )
    assert [(e.table, e.row) for e in rows] == [
        ("Flows", (6, ip, 40001, INTERNET, 80, 4, 406)),
        ("AppTimeseries", ("web", 406, 4)),
    ]  # not twice as the device's
    # A flow whose rule never showed up at all (deleted in between) is counted all the same.
    router.flow_events.on_flow_copy(1, tcp_frame(ip, INTERNET, 40002, 80, 60))
    [row, _] = router.on_flow_stats([])
    assert row.row == (6, ip, 40002, INTERNET, 80, 1, 60)


def test_a_device_over_its_flow_budget_is_counted_as_a_whole_and_the_household_told(db_path, clock):
    # LEARNS_FROM_COPIES: its budget of learnt counting rules (with the switch's records: the flooding test below).
    router = HomeRouter(DeviceStore(db_path), clock=clock, flow_budget=10, flows_from_export=False)
    router.switch_ready(WLAN, ROUTER_MAC)
    ip = permitted_phone(router)
    for port in range(10):
        router.flow_events.on_flow_copy(1, tcp_frame(ip, INTERNET, 40000 + port, 80))
    effects = router.flow_events.on_flow_copy(1, tcp_frame(ip, INTERNET, 50000, 80))
    assert RemoveRules(flows.device_cookie(router.devices[PHONE])) in effects  # its per-flow rules go
    # Its rule set again (and its marks decided ahead, which went with its cookie), learning no more.
    new_rules = [r for e in effects if isinstance(e, InstallRules) for r in e.rules]
    learning = [
        r
        for r in new_rules
        if r.priority in (flows.AccountingPriority.DEVICE_SOURCE, flows.AccountingPriority.DEVICE_DEST)
    ]
    assert learning and all(flows.Output(flows.CONTROLLER) not in r.actions for r in learning)
    [told] = [e for e in effects if isinstance(e, TellHousehold)]
    assert told.kind == "flow-budget" and "more than 10 connections" in told.message
    assert router.flow_events.on_flow_copy(1, tcp_frame(ip, INTERNET, 50001, 80)) == []  # no more learning
    # ...until it cools down.
    clock.now += 120 + 1  # the default cool-down
    resumed = [
        r
        for e in router.tick()
        if isinstance(e, InstallRules)
        for r in e.rules
        if r.priority in (flows.AccountingPriority.DEVICE_SOURCE, flows.AccountingPriority.DEVICE_DEST)
    ]
    assert resumed and all(flows.Output(flows.CONTROLLER) in r.actions for r in resumed)


@LEARNS_FROM_COPIES
def test_flow_statistics_become_flows_rows_with_the_traffic_since_the_last_poll(router):
    ip = permitted_phone(router)
    flow = flows.FiveTuple(6, ip, 40000, INTERNET, 80).match()
    device_up = {"eth_type": 0x0800, "ipv4_src": ip}
    first = router.on_flow_stats(
        [
            (flows.AccountingPriority.LEARNT_FLOW, flow, 10, 1500),
            (flows.AccountingPriority.DEVICE_SOURCE, device_up, 2, 120),
        ]
    )
    assert [(e.table, e.row) for e in first] == [
        ("Flows", (6, ip, 40000, INTERNET, 80, 10, 1500)),
        ("Flows", (0, ip, 0, "0.0.0.0", 0, 2, 120)),
        ("AppTimeseries", ("web", 1500, 10)),
    ]
    second = router.on_flow_stats(
        [
            (flows.AccountingPriority.LEARNT_FLOW, flow, 15, 2000),
            (flows.AccountingPriority.DEVICE_SOURCE, device_up, 2, 120),
        ]
    )
    assert [e.row for e in second] == [(6, ip, 40000, INTERNET, 80, 5, 500), ("web", 500, 5)]  # idle rules add nothing
    # It idles out with 3 more packets since that poll: those are counted, once.
    assert [
        e.row for e in router.flow_events.on_flow_removed(flows.AccountingPriority.LEARNT_FLOW, flow, 18, 2300)
    ] == [
        (6, ip, 40000, INTERNET, 80, 3, 300),
        ("web", 300, 3),
    ]
    assert all(isinstance(e, LogRow) for e in first + second)


# ---- the switch's own records (flow export, issue 26)


def test_with_the_switchs_records_every_connection_is_a_flows_row_summed_per_poll(router):
    ip = permitted_phone(router)
    up = flows.FiveTuple(6, ip, 40000, INTERNET, 80)
    down = flows.FiveTuple(6, INTERNET, 80, ip, 40000)
    # Two batches before the poll (a long connection is reported every active timeout): summed.
    router.flow_events.on_flow_export({up: [5, 400], down: [4, 24000]})
    router.flow_events.on_flow_export({up: [1, 40]})
    # What the accounting rules counted is not counted again (the same packets). The records count IP
    # bytes; Flows counts frames (14 bytes of Ethernet header each), as the rules' counters do.
    rows = router.on_flow_stats([(flows.AccountingPriority.LEARNT_FLOW, up.match(), 6, 440)])
    assert [(e.table, e.row) for e in rows] == [
        ("Flows", (6, ip, 40000, INTERNET, 80, 6, 440 + 6 * 14)),
        ("Flows", (6, INTERNET, 80, ip, 40000, 4, 24000 + 4 * 14)),
        ("AppTimeseries", ("web", 24440 + 10 * 14, 10)),
    ]
    assert router.on_flow_stats([]) == []  # nothing since
    assert router.flow_events.on_flow_removed(flows.AccountingPriority.LEARNT_FLOW, up.match(), 9, 900) == []


def test_with_the_switchs_records_nothing_of_a_devices_traffic_is_copied_and_each_connection_is_a_row(db_path, clock):
    for exporting in (False, True):  # the control first: without the records, a new connection's packets are copied
        router = HomeRouter(
            DeviceStore(db_path), dhcp.LeasePolicy(30, 3600), clock=clock, flow_budget=2, flows_from_export=exporting
        )
        switch = FakeSwitch()
        switch.apply(router.switch_ready(WLAN, ROUTER_MAC))
        ip = join(router, switch, PHONE)
        copied = [d for d in switch.send(up(ip, INTERNET)) if d.port == flows.CONTROLLER]
        assert bool(copied) is not exporting, exporting
    # A copy still in flight from before changes nothing; however many connections it opens, each is a row.
    assert router.flow_events.on_flow_copy(1, tcp_frame(ip, INTERNET, 41000, 80)) == []
    assert router.on_flow_stats([]) == []
    router.flow_events.on_flow_export(
        {flows.FiveTuple(6, ip, 41000 + port, INTERNET, 80): [3, 180] for port in range(3)}
    )
    assert sorted(e.row for e in router.on_flow_stats([]) if e.table == "Flows") == [
        (6, ip, 41000 + port, INTERNET, 80, 3, 180 + 3 * 14) for port in range(3)
    ]


def test_records_of_no_devices_traffic_are_not_rows(router):
    ip = permitted_phone(router)
    router.flow_events.on_flow_export(
        {
            flows.FiveTuple(17, "0.0.0.0", 68, "255.255.255.255", 67): [1, 328],  # a newcomer's DHCP
            flows.FiveTuple(6, "10.2.9.10", 40000, INTERNET, 80): [2, 120],  # a lease nobody holds
            flows.FiveTuple(6, "2001:db8::10", 40000, "2001:db8::1", 80): [2, 160],
            flows.FiveTuple(6, ip, 40000, INTERNET, 80): [1, 60],  # positive control: the phone's
        }
    )
    assert [e.row for e in router.on_flow_stats([]) if e.table == "Flows"] == [(6, ip, 40000, INTERNET, 80, 1, 74)]


def test_a_flood_of_connections_between_polls_is_bounded_and_still_counted(router, monkeypatch):
    from homework_controller.concerns import accounting

    monkeypatch.setattr(accounting, "MAX_EXPORTED_FLOWS", 10)
    ip = permitted_phone(router)
    router.flow_events.on_flow_export({flows.FiveTuple(17, ip, 1000 + n, INTERNET, 53): [1, 36] for n in range(25)})
    router.flow_events.on_flow_export({flows.FiveTuple(17, INTERNET, 53, ip, 1000 + n): [1, 56] for n in range(25)})
    rows = [e.row for e in router.on_flow_stats([]) if e.table == "Flows"]
    assert len(rows) == 12  # ten connections of their own, and the device's up and down as wholes
    assert (0, ip, 0, "0.0.0.0", 0, 15, 750) in rows and (0, "0.0.0.0", 0, ip, 0, 25, 1750) in rows
    assert sum(r[5] for r in rows) == 50 and sum(r[6] for r in rows) == 25 * 50 + 25 * 70  # nothing lost


def test_a_devices_ipv6_connections_are_flows_rows_with_its_ipv6_address_found_by_its_64(router):
    permitted_phone(router)
    global_64, ula_64 = router.ipv6.current[PHONE]
    phone = str(ipaddress.IPv6Network(global_64)[0x1234])  # a SLAAC or privacy address: any in its /64
    phone_ula = str(ipaddress.IPv6Network(ula_64)[0x99])
    server = "2001:db8:5133::80"
    router.flow_events.on_flow_export(
        {
            flows.FiveTuple(6, phone, 40000, server, 443): [5, 400],
            flows.FiveTuple(6, server, 443, phone, 40000): [4, 24000],
            flows.FiveTuple(17, phone_ula, 5353, "fd00:1::9", 53): [1, 80],
            flows.FiveTuple(6, "2001:db8:100:ff::10", 40000, server, 443): [2, 160],  # a /64 nobody holds
            flows.FiveTuple(6, "fe80::10", 40000, "fe80::1", 443): [2, 160],  # link-local: no device's
        }
    )
    assert sorted(e.row for e in router.on_flow_stats([]) if e.table == "Flows") == sorted(
        [
            (6, phone, 40000, server, 443, 5, 400 + 5 * 14),
            (6, server, 443, phone, 40000, 4, 24000 + 4 * 14),
            (17, phone_ula, 5353, "fd00:1::9", 53, 1, 80 + 14),
        ]
    )
    # once the device no longer forwards, its /64 is no longer its: its records are not rows
    router.decisions.deny(PHONE)
    router.flow_events.on_flow_export({flows.FiveTuple(6, phone, 40001, server, 443): [1, 60]})
    assert [e for e in router.on_flow_stats([]) if e.table == "Flows"] == []


def test_a_device_flooding_connections_has_its_excess_as_whole_device_rows_and_others_keep_theirs(router, monkeypatch):
    from homework_controller.concerns import accounting

    monkeypatch.setattr(accounting, "MAX_EXPORTED_PER_DEVICE", 10)
    flooder = permitted_phone(router)
    laptop = lease(router, LAPTOP)
    router.decisions.permit(LAPTOP)
    router.joining.on_dhcp(frame(LAPTOP, "request", ciaddr=laptop, src_ip=laptop))
    router.flow_events.on_flow_export(
        {flows.FiveTuple(17, flooder, 1000 + n, INTERNET, 53): [1, 36] for n in range(25)}
    )
    router.flow_events.on_flow_export({flows.FiveTuple(6, laptop, 2000 + n, INTERNET, 443): [2, 100] for n in range(5)})
    polled = router.on_flow_stats([])
    rows = [e.row for e in polled if isinstance(e, LogRow) and e.table == "Flows"]
    flooders = [r for r in rows if r[1] == flooder]
    assert len(flooders) == 11 and (0, flooder, 0, "0.0.0.0", 0, 15, 15 * 50) in flooders  # no byte lost
    # The household is told of the flooder (once a cooldown), not of the laptop.
    [told] = [e for e in polled if isinstance(e, TellHousehold)]
    assert (told.kind, told.mac) == ("flow-budget", PHONE) and "more than 10 connections" in told.message
    router.flow_events.on_flow_export(
        {flows.FiveTuple(17, flooder, 3000 + n, INTERNET, 53): [1, 36] for n in range(25)}
    )
    assert not [e for e in router.on_flow_stats([]) if isinstance(e, TellHousehold)]
    # positive control: the other device's connections are each a row, in the same poll
    assert sorted(r for r in rows if r[1] == laptop) == [(6, laptop, 2000 + n, INTERNET, 443, 2, 128) for n in range(5)]
    # the budget is per poll: the next one has rows of their own again
    router.flow_events.on_flow_export({flows.FiveTuple(17, flooder, 5000, INTERNET, 53): [1, 36]})
    assert [e.row for e in router.on_flow_stats([]) if e.table == "Flows"] == [(17, flooder, 5000, INTERNET, 53, 1, 50)]
