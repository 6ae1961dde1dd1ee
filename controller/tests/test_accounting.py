"""Accounting: every connection a device's traffic makes is a Flows row, from the switch's own records
(flow export, issue 26), however short and however many; connections that need a mark of their own get a
rule of their own, within a per-device budget."""

import ipaddress

from fakeoftable import FakeSwitch
from support import EF, LAPTOP, PHONE, ROUTER_MAC, WLAN, deliver, frame, join, lease, permitted_phone, up

from homework_controller import flows
from homework_controller.concerns.agent_reports import AgentReport
from homework_controller.core.router import HomeRouter
from homework_controller.effects import LogRow, TellHousehold
from homework_controller.policy import dhcp
from homework_controller.store import DeviceStore

INTERNET = "198.51.100.80"


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


def test_nothing_of_a_devices_connections_reaches_the_controller_and_each_is_a_row(db_path, clock):
    router = HomeRouter(DeviceStore(db_path), dhcp.LeasePolicy(30, 3600), clock=clock, flow_budget=2)
    switch = FakeSwitch()
    switch.apply(router.switch_ready(WLAN, ROUTER_MAC))
    ip = join(router, switch, PHONE)
    for port in range(3):  # more connections than its flow budget: each forwarded, none copied
        assert [d.port for d in switch.send(up(ip, INTERNET, sport=41000 + port))] == [flows.LOCAL]
    # Positive control: what the controller must hear of the device, its ARP, does reach it.
    arp = {
        "in_port": WLAN,
        "eth_src": PHONE,
        "eth_dst": "ff:ff:ff:ff:ff:ff",
        "eth_type": flows.ETH_ARP,
        "arp_op": 1,
        "arp_sha": PHONE,
        "arp_spa": ip,
        "arp_tpa": "10.2.0.99",
    }
    assert [d.port for d in switch.send(arp)] == [flows.CONTROLLER]
    router.flow_events.on_flow_export(
        {flows.FiveTuple(6, ip, 41000 + port, INTERNET, 80): [3, 180] for port in range(3)}
    )
    assert sorted(e.row for e in router.on_flow_stats([]) if e.table == "Flows") == [
        (6, ip, 41000 + port, INTERNET, 80, 3, 180 + 3 * 14) for port in range(3)
    ]


def test_a_device_has_rules_of_its_own_within_its_flow_budget_and_more_as_they_idle_out(db_path, clock):
    """Connection directions an agent names (an app whose priority differs from the mark ahead) get rules of
    their own up to the device's flow budget; beyond it a connection keeps its mark ahead (and is counted all
    the same, by the records) until rules of the device's idle out."""
    router = HomeRouter(DeviceStore(db_path), dhcp.LeasePolicy(30, 3600), clock=clock, flow_budget=4)
    switch = FakeSwitch()
    switch.apply(router.switch_ready(WLAN, ROUTER_MAC))
    ip = join(router, switch, PHONE)
    calls = [AgentReport(17, ip, 50000 + n, INTERNET, 9999, "zoom") for n in range(3)]  # a port no app lists

    def mark(n):
        [out] = deliver(switch, up(ip, INTERNET, flows.PROTO_UDP, 50000 + n, 9999))
        return out.packet.get("ip_dscp", 0)

    switch.apply(router.flow_events.agent_reported(calls))
    assert [mark(n) for n in range(3)] == [EF, EF, 0]  # two connections, both ways: the budget of 4
    # The first call ends: its rules idle out, both ways.
    for gone in (flows.FiveTuple(17, ip, 50000, INTERNET, 9999), flows.FiveTuple(17, INTERNET, 9999, ip, 50000)):
        switch.apply(router.flow_events.on_flow_removed(flows.AccountingPriority.LEARNT_FLOW, gone.match(), 1, 100))
    switch.apply(router.flow_events.agent_reported(calls[2:]))
    assert mark(2) == EF


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
