"""Several access ports (the radio's and a wired one): each behaves like the air, and a device is bound
to the port it took its lease on. Where packets end up (fakeoftable), decision by decision."""

import pytest
from dhcp_frames import frame, reply_of
from fakeoftable import FakeSwitch, ipv4
from scapy.layers.inet import IP, TCP
from scapy.layers.l2 import ARP, Ether
from support import LAPTOP, PHONE, PHONE_CLIENT, ROUTER_MAC, TABLET

from homework_controller import flows
from homework_controller.__main__ import parse_args
from homework_controller.effects import AnswerDhcp, SendFrame, TellHousehold
from homework_controller.wire import packets

WLAN, LAN = 1, 2  # the radio's port, and a wired one
LOCAL = flows.LOCAL
INTERNET = "198.51.100.80"
BROADCAST_MAC = "ff:ff:ff:ff:ff:ff"


@pytest.fixture
def switch(router):
    sw = FakeSwitch()
    sw.apply(router.switch_ready((WLAN, LAN), ROUTER_MAC))
    return sw


def on_port(port, client_frame):
    """A client's DHCP frame as the DHCP socket reads it: the switch marked it with the port it came in on."""
    return client_frame._replace(eth_dst=flows.port_mark(port))


def join_on(router, switch, mac, port, permit=True, client=()):
    """A device takes its lease on `port` (and renews after a permit, as it would); returns its address."""
    [offer] = [
        e
        for e in router.joining.on_dhcp(on_port(port, frame(mac, "discover", options=list(client))))
        if isinstance(e, AnswerDhcp)
    ]
    pkt, opts = reply_of(offer.data)
    ip = pkt["BOOTP"].yiaddr
    request = frame(mac, "request", options=[("server_id", opts["server_id"]), ("requested_addr", ip), *client])
    switch.apply(router.joining.on_dhcp(on_port(port, request)))
    if permit:
        switch.apply(router.decisions.permit(mac))
        switch.apply(
            router.joining.on_dhcp(on_port(port, frame(mac, "request", ciaddr=ip, src_ip=ip, options=list(client))))
        )
    return ip


def forwarded(deliveries):
    return [d for d in deliveries if d.port != flows.CONTROLLER]


def reaches_the_internet(switch, port, mac, ip) -> bool:
    return [d.port for d in forwarded(switch.send(ipv4(port, mac, ROUTER_MAC, ip, INTERNET)))] == [LOCAL]


def clone_events(effects):
    return [e for e in effects if isinstance(e, TellHousehold) and e.kind == "mac-clone"]


def test_dhcp_from_each_access_port_reaches_the_router_marked_with_that_port_and_a_forged_mark_is_dropped(
    router, switch
):
    for port in (WLAN, LAN):
        discover = ipv4(port, TABLET, BROADCAST_MAC, "0.0.0.0", "255.255.255.255", flows.PROTO_UDP, 68, 67)
        [out] = switch.send(discover)
        assert out.port == LOCAL and flows.port_of_mark(out.packet["eth_dst"]) == port
    # A device writing a mark itself would tell the router it is on another port.
    forged = ipv4(WLAN, TABLET, flows.port_mark(LAN), "0.0.0.0", "255.255.255.255", flows.PROTO_UDP, 68, 67)
    assert switch.send(forged) == []
    assert flows.port_of_mark(BROADCAST_MAC) is None and flows.port_of_mark(ROUTER_MAC) is None


def test_a_wired_device_is_pending_and_gated_as_on_the_air_until_permitted(router, switch):
    laptop = join_on(router, switch, LAPTOP, LAN, permit=False)
    assert router.status(LAPTOP)["state"] == "pending" and router.status(LAPTOP)["access_port"] == LAN
    assert not reaches_the_internet(switch, LAN, LAPTOP, laptop)
    switch.apply(router.decisions.permit(LAPTOP))
    switch.apply(router.joining.on_dhcp(on_port(LAN, frame(LAPTOP, "request", ciaddr=laptop, src_ip=laptop))))
    assert reaches_the_internet(switch, LAN, LAPTOP, laptop)


def test_devices_on_different_ports_reach_each_other_only_through_the_router(router, switch):
    phone = join_on(router, switch, PHONE, WLAN)
    laptop = join_on(router, switch, LAPTOP, LAN)
    tablet = join_on(router, switch, TABLET, WLAN)
    [out] = forwarded(switch.send(ipv4(WLAN, PHONE, ROUTER_MAC, phone, laptop, ttl=64)))
    assert out.port == LAN and out.packet["eth_src"] == ROUTER_MAC and out.packet["eth_dst"] == LAPTOP
    assert out.packet["ip_ttl"] == 63
    [back] = forwarded(switch.send(ipv4(LAN, LAPTOP, ROUTER_MAC, laptop, phone, ttl=64)))
    assert back.port == WLAN and back.packet["eth_dst"] == PHONE and back.packet["ip_ttl"] == 63
    # On the same port: hairpinned back out of it, through the router all the same.
    [same] = forwarded(switch.send(ipv4(WLAN, PHONE, ROUTER_MAC, phone, tablet, ttl=64)))
    assert same.port == WLAN and same.packet["eth_dst"] == TABLET and same.packet["ip_ttl"] == 63
    # The router's stack reaches each device out of its own port only.
    [down] = forwarded(switch.send(ipv4(LOCAL, ROUTER_MAC, LAPTOP, INTERNET, laptop)))
    assert down.port == LAN


def test_broadcast_reaches_each_other_permitted_device_on_its_own_port(router, switch):
    phone = join_on(router, switch, PHONE, WLAN)
    join_on(router, switch, LAPTOP, LAN)
    join_on(router, switch, TABLET, WLAN)
    out = forwarded(switch.send(ipv4(WLAN, PHONE, BROADCAST_MAC, phone, "224.0.0.251", flows.PROTO_UDP, 5353, 5353)))
    assert sorted((str(d.port), d.packet["eth_dst"]) for d in out if d.port != LOCAL) == [
        (str(WLAN), TABLET),
        (str(LAN), LAPTOP),
    ]


def test_dhcp_answers_go_out_of_a_bound_devices_own_port_and_to_a_newcomer_out_of_every_access_port(router, switch):
    laptop = join_on(router, switch, LAPTOP, LAN, permit=False)
    gateway = router.devices[LAPTOP].subnet.gateway
    answer = ipv4(LOCAL, ROUTER_MAC, LAPTOP, gateway, laptop, flows.PROTO_UDP, 67, 68)
    assert [d.port for d in switch.send(answer)] == [LAN]
    offer = ipv4(LOCAL, ROUTER_MAC, TABLET, "10.2.0.9", "10.2.0.10", flows.PROTO_UDP, 67, 68)
    assert sorted(d.port for d in switch.send(offer)) == [WLAN, LAN]


def test_a_devices_mac_on_another_port_is_dropped_and_raised_as_a_clone_while_the_device_keeps_working(router, switch):
    laptop = join_on(router, switch, LAPTOP, LAN)
    # Positive control: the laptop on its own port.
    assert reaches_the_internet(switch, LAN, LAPTOP, laptop)
    assert not clone_events(router.joining.on_admission_copy(LAN, arp_request(LAPTOP, laptop, "10.2.0.1")))
    # Its MAC and address from the radio: nothing of it passes, the controller hears of it on the
    # newcomers' budget (not the laptop's own).
    copied = ipv4(WLAN, LAPTOP, ROUTER_MAC, laptop, INTERNET)
    [to_controller] = switch.send(copied)
    assert to_controller.port == flows.CONTROLLER
    [elsewhere] = [r for r in switch.hits if r.priority == flows.AdmissionPriority.ELSEWHERE]
    assert flows.Meter(flows.NEWCOMERS_METER.meter_id) in elsewhere.actions
    before = router.counters["mac_clone_suspected"]
    [event] = clone_events(router.joining.on_admission_copy(WLAN, packet_in(LAPTOP, laptop)))
    assert event.mac == LAPTOP and f"access port {WLAN}" in event.message
    assert router.counters["mac_clone_suspected"] == before + 1
    assert router.status(LAPTOP)["clone_suspected"] is not None
    assert router.status(LAPTOP)["access_port"] == LAN
    # Its DHCP there (were it to reach the socket) is not served, and the laptop keeps its port and works.
    assert not [
        e for e in router.joining.on_dhcp(on_port(WLAN, frame(LAPTOP, "discover"))) if isinstance(e, AnswerDhcp)
    ]
    assert reaches_the_internet(switch, LAN, LAPTOP, laptop)
    assert not reaches_the_internet(switch, WLAN, LAPTOP, laptop)


def packet_in(mac, ip):
    """An IPv4 frame from `mac` as the controller parses a packet-in."""
    return packets.parse(bytes(Ether(src=mac, dst=ROUTER_MAC) / IP(src=ip, dst=INTERNET) / TCP(dport=80)))


def arp_request(mac, ip, target_ip):
    return packets.parse(bytes(Ether(src=mac, dst=BROADCAST_MAC) / ARP(op=1, hwsrc=mac, psrc=ip, pdst=target_ip)))


def test_the_switch_answers_a_devices_arp_for_its_gateway_on_its_own_port_only(router, switch):
    """Its own port: answered there (test_pipeline); not bound yet (after a restart), its ARP reaches the
    controller, whose answer binds it to the port it asked on, and the switch answers there from then on."""
    laptop = join_on(router, switch, LAPTOP, LAN)
    gateway = router.devices[LAPTOP].subnet.gateway
    asked = {"eth_src": LAPTOP, "eth_dst": BROADCAST_MAC, "eth_type": flows.ETH_ARP, "arp_op": 1}
    asked |= {"arp_sha": LAPTOP, "arp_spa": laptop, "arp_tha": "00:00:00:00:00:00", "arp_tpa": gateway}
    assert [d.port for d in switch.send({**asked, "in_port": LAN})] == [LAN]  # the answer, out of its port
    assert [d.port for d in switch.send({**asked, "in_port": WLAN})] == [flows.CONTROLLER]  # not its port
    router.port_binding.lease_ended(LAPTOP)  # as after a restart: bound to no port
    switch.apply(router.reconciler.reconcile(router.devices[LAPTOP]))
    assert [d.port for d in switch.send({**asked, "in_port": LAN})] == [flows.CONTROLLER]
    effects = router.joining.on_admission_copy(LAN, arp_request(LAPTOP, laptop, gateway))
    assert router.status(LAPTOP)["access_port"] == LAN and any(isinstance(e, SendFrame) for e in effects)
    switch.apply(effects)
    assert [d.port for d in switch.send({**asked, "in_port": LAN})] == [LAN]


def test_a_device_whose_port_lost_its_link_moves_at_its_next_frame_elsewhere(router, switch):
    laptop = join_on(router, switch, LAPTOP, LAN)
    router.access_port_link(LAN, up=False)  # the cable was pulled
    effects = router.joining.on_admission_copy(WLAN, packet_in(LAPTOP, laptop))
    assert not clone_events(effects)
    switch.apply(effects)
    assert router.status(LAPTOP)["access_port"] == WLAN
    assert reaches_the_internet(switch, WLAN, LAPTOP, laptop)
    assert not reaches_the_internet(switch, LAN, LAPTOP, laptop)


def test_a_move_the_household_confirms_binds_the_device_where_it_was_last_seen(router, switch):
    """Wi-Fi to cable while the radio stays up: the alert says where it was seen; permitting it again moves it."""
    laptop = join_on(router, switch, LAPTOP, WLAN)
    assert clone_events(router.joining.on_admission_copy(LAN, packet_in(LAPTOP, laptop)))
    assert router.status(LAPTOP)["seen_on_port"] == LAN
    switch.apply(router.decisions.permit(LAPTOP))
    assert router.status(LAPTOP)["access_port"] == LAN and router.status(LAPTOP)["clone_suspected"] is None
    assert reaches_the_internet(switch, LAN, LAPTOP, laptop)
    assert not reaches_the_internet(switch, WLAN, LAPTOP, laptop)


def test_a_device_whose_lease_ran_out_takes_its_next_lease_on_any_port(router, switch, clock):
    join_on(router, switch, PHONE, WLAN, client=PHONE_CLIENT)
    clock.now += 3601  # the permitted lease ran out: the phone was away
    switch.apply(router.tick())
    laptop_port_ip = join_on(router, switch, PHONE, LAN, permit=False, client=PHONE_CLIENT)
    assert router.status(PHONE)["access_port"] == LAN and router.status(PHONE)["clone_suspected"] is None
    assert reaches_the_internet(switch, LAN, PHONE, laptop_port_ip)


def test_with_one_access_port_nothing_is_bound(router):
    sw = FakeSwitch()
    sw.apply(router.switch_ready(WLAN, ROUTER_MAC))
    phone = join_on(router, sw, PHONE, WLAN)
    assert router.status(PHONE)["access_port"] is None
    assert not [r for r in sw.rules if r.priority == flows.AdmissionPriority.ELSEWHERE]
    assert reaches_the_internet(sw, WLAN, PHONE, phone)


def test_access_ports_are_named_on_the_command_line_and_default_to_the_radios_port():
    assert parse_args([]).access_ports == ()  # --wlan-port alone (config.access_port_names)
    assert parse_args(["--access-ports", "wlan0, lan1,wlan0,"]).access_ports == ("wlan0", "lan1")
    with pytest.raises(SystemExit):
        parse_args(["--access-ports", "wlan0,a-name-longer-than-ifnamsiz"])
