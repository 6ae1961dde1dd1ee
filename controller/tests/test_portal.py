"""The captive portal: a device held back (pending, paused, out of its allowance) is told why. Its DHCP
answers name the portal's API (option 114), its switch rules let it reach the router's resolver and the
portal and nothing else, the resolver answers the OS probes' names with the router's address, and ws.v1
tells the web UI about the device at an address, that device only."""

import dnslib
import pytest
from dhcp_frames import frame, reply_of
from fakeoftable import ipv4
from support import LAPTOP, PHONE, ROUTER_MAC, WLAN, join, lease

from homework_controller import flows
from homework_controller.concerns import portal
from homework_controller.core.router import HomeRouter
from homework_controller.edge.lan import lan_side
from homework_controller.effects import AnswerDhcp
from homework_controller.errors import UnknownDevice
from homework_controller.policy import dns_rules
from homework_controller.store import DeviceStore
from homework_controller.wire import lan

LOCAL = flows.LOCAL
INTERNET = "198.51.100.80"
ROUTER = lan.ROUTER_ADDRESS
PROBE = "connectivitycheck.gstatic.com"


def gateway_of(router, mac):
    return router.devices[mac].subnet.gateway


def ask(router, ip, name, qtype="A"):
    return router.dns_query(ip, dns_rules.parse_query(dnslib.DNSRecord.question(name, qtype).pack()))


# ---- the code and what the portal says (pure)


def test_codes_are_short_unambiguous_and_unique_among_the_devices_known():
    drawn = {(PHONE, 0): "K7-Q2", (LAPTOP, 0): "K7-Q2", (LAPTOP, 1): "AC-34"}
    codes = portal.Portal(make_code=lambda mac, attempt: drawn[mac, attempt])
    assert codes.code_of(PHONE) == "K7-Q2"
    assert codes.code_of(LAPTOP) == "AC-34"  # the phone's code was the laptop's first draw: drawn again
    assert codes.code_of(PHONE) == "K7-Q2" and codes.status_of(PHONE) == {"portal_code": "K7-Q2"}
    codes.forget(PHONE)
    assert not codes.knows(PHONE)
    assert codes.code_of(LAPTOP) == "AC-34"
    keyed = portal.keyed_codes(bytes(16))
    made = {keyed(f"02:00:00:00:{i // 256:02x}:{i % 256:02x}", 0) for i in range(1000)}
    assert len(made) > 990  # spread over the 234,256 codes
    for code in made:
        assert len(code) == 5 and code[2] == "-" and set(code.replace("-", "")) <= set(portal.CODE_ALPHABET)
    assert not set("0O1IL2Z5S8BUVD") & set(portal.CODE_ALPHABET)


def test_a_waiting_device_keeps_its_code_when_the_router_restarts_and_another_router_gives_others(db_path, clock):
    """The phone's page and the board's label still match after a reboot: the code is the same."""
    first = HomeRouter(DeviceStore(db_path), clock=clock)
    first.switch_ready(WLAN, ROUTER_MAC)
    for mac in (PHONE, LAPTOP):
        first.joining.on_dhcp(frame(mac, "discover"))
    codes = {mac: first.status(mac)["portal_code"] for mac in (PHONE, LAPTOP)}
    assert first.store.flush()
    first.store.close()
    again = HomeRouter(DeviceStore(db_path), clock=clock)
    again.switch_ready(WLAN, ROUTER_MAC)
    for mac in (PHONE, LAPTOP):
        again.joining.on_dhcp(frame(mac, "discover"))
        assert again.status(mac)["portal_code"] == codes[mac]
    again.store.close()
    # Positive control: the code is the router's own (its key), not a function of the MAC anyone can work out.
    other = HomeRouter(DeviceStore(db_path.replace("controller.sqlite", "other.sqlite")), clock=clock)
    other.switch_ready(WLAN, ROUTER_MAC)
    other.joining.on_dhcp(frame(PHONE, "discover"))
    assert other.status(PHONE)["portal_code"] != codes[PHONE]


@pytest.mark.parametrize(
    ("status", "reason", "until"),
    [
        ({"state": "pending"}, "pending", None),
        ({"state": "permitted", "paused": False}, None, None),
        ({"state": "permitted", "paused": True, "paused_why": "paused", "paused_until": None}, "paused", None),
        (
            {
                "state": "permitted",
                "paused": True,
                "paused_why": "bedtime",
                "paused_until": "2026-11-26T07:00:00+00:00",
            },
            "bedtime",
            "2026-11-26T07:00:00+00:00",
        ),
        (
            {
                "state": "permitted",
                "paused": True,
                "paused_why": "allowance",
                "paused_until": "x",
                "allowance": {"kind": "minutes", "used_up": True},
            },
            "allowance",
            "x",
        ),
        ({"state": "permitted", "paused": True}, "paused", None),  # a pause without a why
        ({"state": "denied"}, "denied", None),
    ],
)
def test_the_portal_says_why_a_device_waits_from_its_status(status, reason, until):
    said = portal.view({**status, "portal_code": "K7-Q2", "mac": PHONE, "name": "x"})
    assert said == {
        "captive": reason is not None,
        "reason": reason,
        "code": "K7-Q2",
        "paused_until": until,
        "allowance": status.get("allowance"),
        "user_portal_url": lan.PORTAL_URL,
    }


def test_a_device_held_by_the_allowance_it_shares_is_told_of_that_one_not_its_own():
    own, shared = {"kind": "bytes", "used_up": False}, {"kind": "minutes", "used_up": True, "name": "person-1"}
    status = {"state": "permitted", "paused": True, "paused_why": "allowance", "portal_code": "K7-Q2"}
    assert portal.view({**status, "allowance": own, "shared_allowance": shared})["allowance"] == shared
    assert portal.view({**status, "allowance": shared, "shared_allowance": None})["allowance"] == shared


# ---- DHCP option 114


def test_every_dhcp_answer_names_the_portals_api(router):
    [offer] = [e for e in router.joining.on_dhcp(frame(PHONE, "discover")) if isinstance(e, AnswerDhcp)]
    pkt, opts = reply_of(offer.data)
    assert opts["captive-portal"] == lan.API_URL.encode() == b"http://10.2.0.1/captive-portal/api"
    [ack] = [
        e
        for e in router.joining.on_dhcp(
            frame(PHONE, "request", options=[("server_id", opts["server_id"]), ("requested_addr", pkt["BOOTP"].yiaddr)])
        )
        if isinstance(e, AnswerDhcp)
    ]
    assert reply_of(ack.data)[1]["captive-portal"] == lan.API_URL.encode()
    # A permitted device's too: its API then says captive: false.
    router.decisions.permit(PHONE)
    ip = pkt["BOOTP"].yiaddr
    [ack] = [
        e for e in router.joining.on_dhcp(frame(PHONE, "request", ciaddr=ip, src_ip=ip)) if isinstance(e, AnswerDhcp)
    ]
    assert reply_of(ack.data)[1]["captive-portal"] == lan.API_URL.encode()


# ---- the switch: the portal and the resolver, nothing else


def test_a_pending_device_reaches_the_routers_resolver_and_the_portal_and_nothing_else(router, switch):
    laptop = join(router, switch, LAPTOP, permit=False)
    gateway = gateway_of(router, LAPTOP)
    for dst, proto, dport in (
        (gateway, flows.PROTO_UDP, 53),
        (gateway, flows.PROTO_TCP, 53),
        (ROUTER, flows.PROTO_TCP, 80),
    ):
        [out] = switch.send(ipv4(WLAN, LAPTOP, ROUTER_MAC, laptop, dst, proto, 40000, dport))
        assert out.port == LOCAL
        # ...and the router's answers reach it.
        [back] = switch.send(ipv4(LOCAL, ROUTER_MAC, LAPTOP, dst, laptop, proto, dport, 40000))
        assert back.port == WLAN
    # Nothing else: the internet, other ports of the router, another DNS server, the web UI's own port.
    for dst, proto, dport in (
        (INTERNET, flows.PROTO_TCP, 80),
        (INTERNET, flows.PROTO_UDP, 53),
        (ROUTER, flows.PROTO_TCP, lan_side.WEB_UI_PORT),
        (ROUTER, flows.PROTO_TCP, 22),
        (gateway, flows.PROTO_TCP, 80),
    ):
        assert switch.send(ipv4(WLAN, LAPTOP, ROUTER_MAC, laptop, dst, proto, 40000, dport)) == []
    assert switch.send(ipv4(LOCAL, ROUTER_MAC, LAPTOP, INTERNET, laptop, flows.PROTO_TCP, 80, 40000)) == []
    assert switch.send(ipv4(LOCAL, ROUTER_MAC, LAPTOP, ROUTER, laptop, flows.PROTO_TCP, 22, 40000)) == []


def test_a_held_back_device_asking_for_pages_without_end_is_cut_at_the_switch_and_only_it(router, switch):
    """A held-back device asking for pages as fast as it can kept the web UI and the controller busy enough to
    triple another device's DNS p99 (issue 39's hostile bench). What it sends the portal goes through a meter of
    its own: past a page's worth the switch drops it before any process sees it. Its DNS, another held-back
    device's page and, once permitted, its own traffic are not cut."""
    laptop = join(router, switch, LAPTOP, permit=False)
    phone = join(router, switch, PHONE, permit=False)
    to_portal = ipv4(WLAN, LAPTOP, ROUTER_MAC, laptop, ROUTER, flows.PROTO_TCP, 40000, 80)
    reached = sum(bool(switch.send(to_portal)) for _ in range(1000))
    assert reached == flows.PORTAL_METER_BURST  # the switch's clock stands still: its burst and no more
    lookup = ipv4(WLAN, LAPTOP, ROUTER_MAC, laptop, gateway_of(router, LAPTOP), flows.PROTO_UDP, 40000, 53)
    assert [d.port for d in switch.send(lookup)] == [LOCAL]
    phones_page = ipv4(WLAN, PHONE, ROUTER_MAC, phone, ROUTER, flows.PROTO_TCP, 40000, 80)
    assert [d.port for d in switch.send(phones_page)] == [LOCAL]
    # Permitted, it has no budget towards the portal any more (the meter leaves with the portal's rules)...
    portal_meter = flows.portal_meter_of(router.devices[LAPTOP].subnet).meter_id
    assert portal_meter in switch.meters
    switch.apply(router.decisions.permit(LAPTOP))
    assert portal_meter not in switch.meters
    # ...and nothing it sends is cut by one.
    to_internet = ipv4(WLAN, LAPTOP, ROUTER_MAC, laptop, INTERNET, flows.PROTO_TCP, 40000, 443)
    sent = [[d.port for d in switch.send(to_internet) if d.port != flows.CONTROLLER] for _ in range(1000)]
    assert sent == [[LOCAL]] * 1000


def test_a_held_back_device_cannot_ask_the_portal_as_another_device(router, switch):
    """The portal knows a device by the address a request comes from: the switch lets a held-back device
    send only from its own MAC and leased address, so it cannot be answered about another's."""
    phone = join(router, switch, PHONE, permit=False)
    laptop = join(router, switch, LAPTOP, permit=False)
    forged = ipv4(WLAN, LAPTOP, ROUTER_MAC, phone, ROUTER, flows.PROTO_TCP, 40000, 80)  # the phone's address
    assert switch.send(forged) == []
    stranger = ipv4(WLAN, "02:00:00:00:00:ee", ROUTER_MAC, laptop, ROUTER, flows.PROTO_TCP, 40000, 80)
    assert switch.send(stranger) == []
    # Positive control: from its own address it is let through.
    assert [
        d.port for d in switch.send(ipv4(WLAN, LAPTOP, ROUTER_MAC, laptop, ROUTER, flows.PROTO_TCP, 40000, 80))
    ] == [LOCAL]


def test_a_paused_device_gets_the_portal_and_once_resumed_everything_again(router, switch):
    phone = join(router, switch, PHONE)
    to_portal = ipv4(WLAN, PHONE, ROUTER_MAC, phone, ROUTER, flows.PROTO_TCP, 40000, 80)
    to_internet = ipv4(WLAN, PHONE, ROUTER_MAC, phone, INTERNET, flows.PROTO_TCP, 40000, 443)
    switch.apply(router.decisions.pause(PHONE))
    assert [d.port for d in switch.send(to_portal)] == [LOCAL]
    assert switch.send(to_internet) == []
    assert router.portal_of(phone)["captive"] is True
    switch.apply(router.decisions.resume(PHONE))
    assert not [r for r in switch.rules if r.priority == flows.AdmissionPriority.PORTAL]
    assert [d.port for d in switch.send(to_internet) if d.port != flows.CONTROLLER] == [LOCAL]
    assert router.portal_of(phone)["captive"] is False


def test_a_denied_device_and_a_lapsed_lease_get_no_portal(router, switch, clock):
    laptop = join(router, switch, LAPTOP, permit=False)
    switch.apply(router.decisions.deny(LAPTOP))
    assert switch.send(ipv4(WLAN, LAPTOP, ROUTER_MAC, laptop, ROUTER, flows.PROTO_TCP, 40000, 80)) == []
    phone = join(router, switch, PHONE, permit=False)
    clock.now += 31
    switch.apply(router.tick())
    assert switch.send(ipv4(WLAN, PHONE, ROUTER_MAC, phone, ROUTER, flows.PROTO_TCP, 40000, 80)) == []


# ---- the resolver


def test_a_held_back_device_gets_the_router_for_the_os_probes_and_a_refusal_for_anything_else(router, switch):
    laptop = join(router, switch, LAPTOP, permit=False)
    phone = join(router, switch, PHONE)
    for name in (PROBE, "captive.apple.com", "www.msftconnecttest.com", "CLIENTS3.google.com."):
        assert ask(router, laptop, name).action == "portal"
    assert ask(router, laptop, "www.example.test").action == "block"
    # Positive control: a permitted device's probe goes to the real internet.
    assert ask(router, phone, PROBE).action == "allow"
    switch.apply(router.decisions.pause(PHONE))
    assert ask(router, phone, PROBE).action == "portal"
    assert ask(router, phone, "www.example.test").action == "block"
    assert router.counters["dns_portal"] == 5


def test_the_probe_answer_is_the_routers_address_for_a_second():
    query = dns_rules.parse_query(dnslib.DNSRecord.question(PROBE, "A").pack())
    answer = dnslib.DNSRecord.parse(dns_rules.probe_answer(query.record))
    assert answer.header.id == query.record.header.id and answer.header.rcode == dnslib.RCODE.NOERROR
    [rr] = answer.rr
    assert str(rr.rdata) == ROUTER and rr.ttl == dns_rules.PROBE_TTL_S and str(rr.rname) == PROBE + "."
    # No IPv6 address for the name, but the name exists (an NXDOMAIN would stand for every type).
    aaaa = dnslib.DNSRecord.parse(dns_rules.probe_answer(dnslib.DNSRecord.question(PROBE, "AAAA")))
    assert aaaa.header.rcode == dnslib.RCODE.NOERROR and aaaa.rr == []


# ---- ws.v1: the device at an address, that device only


def test_the_portal_answers_about_the_device_at_the_address_only(router):
    phone = lease(router, PHONE)
    laptop = lease(router, LAPTOP)
    router.decisions.permit(LAPTOP)
    said = router.portal_of(phone)
    assert said["captive"] is True and said["reason"] == "pending"
    assert said["code"] == router.status(PHONE)["portal_code"] != router.status(LAPTOP)["portal_code"]
    assert PHONE not in str(said) and LAPTOP not in str(said)  # no MAC, no other device
    assert router.portal_of(laptop)["captive"] is False
    for nobody in ("10.2.0.1", router.devices[PHONE].subnet.gateway, "10.2.9.2", "198.51.100.1", "garbage"):
        with pytest.raises(UnknownDevice):
            router.portal_of(nobody)
