"""Where packets end up through the rules the router computes (fakeoftable), decision by decision."""

import pytest
from dhcp_frames import frame
from fakeoftable import FakeSwitch, ipv4
from support import LAPTOP, PHONE, ROUTER_MAC, TABLET, WLAN, join, lease

from homework_controller import flows
from homework_controller.effects import AddGatewayAddress
from homework_controller.policy import dns_rules

INTERNET = "198.51.100.80"
LOCAL = flows.LOCAL
BROADCAST_MAC = "ff:ff:ff:ff:ff:ff"


@pytest.fixture
def switch(router, clock):
    sw = FakeSwitch(clock=clock)  # the router's clock fills the switch's meters
    sw.apply(router.switch_ready(WLAN, ROUTER_MAC))
    return sw


def ports(deliveries):
    return sorted(str(d.port) for d in deliveries)


def forwarded(deliveries):
    """Where the packet went, which is never the controller (nothing of a device's traffic is copied to it)."""
    assert not [d for d in deliveries if d.port == flows.CONTROLLER], "a packet was copied to the controller"
    return deliveries


def test_a_permitted_device_reaches_the_internet_and_a_pending_one_nothing(router, switch):
    phone = join(router, switch, PHONE)
    laptop = join(router, switch, LAPTOP, permit=False)
    [out] = forwarded(switch.send(ipv4(WLAN, PHONE, ROUTER_MAC, phone, INTERNET)))
    assert out.port == LOCAL and out.packet["ipv4_dst"] == INTERNET  # to the router's stack, which NATs
    assert switch.send(ipv4(WLAN, LAPTOP, ROUTER_MAC, laptop, INTERNET)) == []
    # ...but the pending laptop's DHCP still reaches the controller's DHCP socket on the router.
    dhcp = ipv4(WLAN, LAPTOP, BROADCAST_MAC, "0.0.0.0", "255.255.255.255", flows.PROTO_UDP, 68, 67)
    assert ports(switch.send(dhcp)) == [LOCAL]


def test_dhcp_reaches_the_routers_dhcp_socket_only_when_sent_to_a_dhcp_servers_address(router, switch):
    laptop = join(router, switch, LAPTOP, permit=False)
    gateway = lease_gateway(router, LAPTOP)
    newcomer = "02:00:00:00:00:ee"
    for mac, src, dst in (
        (newcomer, "0.0.0.0", "255.255.255.255"),
        (LAPTOP, laptop, "255.255.255.255"),
        (LAPTOP, laptop, gateway),
    ):
        assert ports(switch.send(ipv4(WLAN, mac, BROADCAST_MAC, src, dst, flows.PROTO_UDP, 68, 67))) == [LOCAL]
    # Port 67 of anywhere else is not DHCP: the router's stack would route it out, and a pending
    # device (or a stranger) reaches nothing.
    for mac, src in ((newcomer, "0.0.0.0"), (LAPTOP, laptop)):
        assert switch.send(ipv4(WLAN, mac, ROUTER_MAC, src, INTERNET, flows.PROTO_UDP, 68, 67)) == []


def test_the_routers_dhcp_answers_reach_the_air_and_nothing_else_it_sends_a_pending_device(router, switch):
    laptop = join(router, switch, LAPTOP, permit=False)
    gateway = lease_gateway(router, LAPTOP)
    for dst_mac, dst in ((BROADCAST_MAC, "255.255.255.255"), (LAPTOP, laptop)):
        answer = ipv4(LOCAL, ROUTER_MAC, dst_mac, gateway, dst, flows.PROTO_UDP, 67, 68)
        assert ports(switch.send(answer)) == [str(WLAN)]
    # (Its DNS answers and the captive portal's are let through: test_portal.py.)
    assert switch.send(ipv4(LOCAL, ROUTER_MAC, LAPTOP, gateway, laptop, flows.PROTO_UDP, 123, 40000)) == []


def lease_gateway(router, mac) -> str:
    subnet = router.devices[mac].subnet
    assert subnet is not None
    return subnet.gateway


def test_a_forged_source_address_is_dropped_and_the_real_one_passes(router, switch):
    phone = join(router, switch, PHONE)
    laptop = join(router, switch, LAPTOP)
    assert switch.send(ipv4(WLAN, PHONE, ROUTER_MAC, laptop, INTERNET)) == []  # the phone claims the laptop's IP
    assert switch.send(ipv4(WLAN, "02:66:66:66:66:66", ROUTER_MAC, phone, INTERNET)) == []  # a MAC claims the phone's
    assert ports(forwarded(switch.send(ipv4(WLAN, PHONE, ROUTER_MAC, phone, INTERNET)))) == [LOCAL]


def test_device_to_device_is_routed_back_out_of_the_air_with_the_routers_mac(router, switch):
    phone = join(router, switch, PHONE)
    laptop = join(router, switch, LAPTOP)
    [out] = forwarded(switch.send(ipv4(WLAN, PHONE, ROUTER_MAC, phone, laptop, ttl=64)))
    assert out.port == WLAN
    assert (out.packet["eth_src"], out.packet["eth_dst"], out.packet["ip_ttl"]) == (ROUTER_MAC, LAPTOP, 63)
    [back] = forwarded(switch.send(ipv4(LOCAL, ROUTER_MAC, PHONE, INTERNET, phone, sport=80, dport=40000)))
    assert back.port == WLAN and back.packet["eth_dst"] == PHONE


def test_deny_cuts_the_device_off_at_once(router, switch):
    phone = join(router, switch, PHONE)
    fetch = ipv4(WLAN, PHONE, ROUTER_MAC, phone, INTERNET)
    switch.send(fetch)
    assert ports(forwarded(switch.send(fetch))) == [LOCAL]
    switch.apply(router.decisions.deny(PHONE))
    assert switch.send(fetch) == []
    assert switch.send(ipv4(LOCAL, ROUTER_MAC, PHONE, INTERNET, phone, sport=80, dport=40000)) == []
    assert not [
        r
        for r in switch.rules
        if r.cookie == flows.device_cookie(router.devices[PHONE]) and r.table != flows.TABLE_ADMISSION
    ]  # its learnt flows too


def test_a_blacklisted_device_gets_not_even_eapol_through_while_others_do(router, switch):
    join(router, switch, PHONE)
    join(router, switch, LAPTOP)
    switch.apply(router.decisions.blacklist(PHONE))
    eapol = {"eth_type": flows.ETH_EAPOL, "eth_dst": "01:80:c2:00:00:03"}
    assert switch.send({"in_port": WLAN, "eth_src": PHONE, **eapol}) == []
    assert ports(switch.send({"in_port": WLAN, "eth_src": LAPTOP, **eapol})) == [LOCAL]
    assert switch.send({"in_port": LOCAL, "eth_src": ROUTER_MAC, **eapol, "eth_dst": PHONE}) == []


def test_an_address_learnt_for_a_blocked_name_is_dropped_for_that_device_only(router, switch):
    import dnslib

    phone = join(router, switch, PHONE)
    laptop = join(router, switch, LAPTOP)
    switch.apply(router.decisions.deny_dns(PHONE, "games.example.test"))
    answer = dnslib.DNSRecord.question("games.example.test").reply()
    answer.add_answer(dnslib.RR("games.example.test", rdata=dnslib.A("198.51.100.81"), ttl=300))
    switch.apply(router.dns_answer(dns_rules.inspect_answer(answer.pack(), "games.example.test").learnt))
    assert switch.send(ipv4(WLAN, PHONE, ROUTER_MAC, phone, "198.51.100.81")) == []
    assert ports(forwarded(switch.send(ipv4(WLAN, LAPTOP, ROUTER_MAC, laptop, "198.51.100.81")))) == [LOCAL]
    assert ports(forwarded(switch.send(ipv4(WLAN, PHONE, ROUTER_MAC, phone, INTERNET)))) == [LOCAL]


def test_broadcast_reaches_the_other_permitted_devices_and_the_router_and_no_one_else(router, switch):
    phone = join(router, switch, PHONE)
    join(router, switch, LAPTOP)
    join(router, switch, TABLET, permit=False)  # pending: shares the radio, hears nothing
    for dst in ("255.255.255.255", "224.0.0.251", router.devices[PHONE].subnet.broadcast):
        out = forwarded(switch.send(ipv4(WLAN, PHONE, BROADCAST_MAC, phone, dst, flows.PROTO_UDP, 5353, 5353)))
        heard = {d.packet["eth_dst"] for d in out if d.port == WLAN}
        assert heard == {LAPTOP}, dst  # not the pending tablet, not the phone itself
        [to_router] = [d for d in out if d.port == LOCAL]
        assert to_router.packet["ipv4_dst"] == ("224.0.0.251" if dst.startswith("224") else "255.255.255.255")
    # Who hears it follows the household's decisions.
    switch.apply(router.decisions.permit(TABLET))
    switch.apply(router.decisions.deny(LAPTOP))
    out = forwarded(switch.send(ipv4(WLAN, PHONE, BROADCAST_MAC, phone, "224.0.0.251", flows.PROTO_UDP, 5353, 5353)))
    assert {d.packet["eth_dst"] for d in out if d.port == WLAN} == {TABLET}


def test_vlan_tagged_frames_from_the_air_are_dropped_and_untagged_ones_pass(router, switch):
    phone = join(router, switch, PHONE)
    tagged = ipv4(WLAN, PHONE, ROUTER_MAC, phone, INTERNET) | {"vlan_vid": flows.VLAN_PRESENT | 7}
    assert switch.send(tagged) == []
    assert ports(forwarded(switch.send(ipv4(WLAN, PHONE, ROUTER_MAC, phone, INTERNET)))) == [LOCAL]


def test_a_device_with_blocked_names_cannot_use_encrypted_dns_and_others_can(router, switch):
    phone = join(router, switch, PHONE)
    laptop = join(router, switch, LAPTOP)
    switch.apply(router.decisions.deny_dns(PHONE, "games.example.test"))
    for proto in (flows.PROTO_TCP, flows.PROTO_UDP):
        assert switch.send(ipv4(WLAN, PHONE, ROUTER_MAC, phone, "9.9.9.9", proto, 40000, 853)) == []
        assert ports(forwarded(switch.send(ipv4(WLAN, LAPTOP, ROUTER_MAC, laptop, "9.9.9.9", proto, 40000, 853)))) == [
            LOCAL
        ]
    assert ports(forwarded(switch.send(ipv4(WLAN, PHONE, ROUTER_MAC, phone, INTERNET, dport=443)))) == [LOCAL]


def test_eapol_from_anyone_is_metered_and_a_known_device_has_its_own_budget(router, switch):
    join(router, switch, PHONE)
    eapol = {"eth_type": flows.ETH_EAPOL, "eth_dst": "01:80:c2:00:00:03"}
    newcomer_rule = switch._lookup(flows.TABLE_ADMISSION, {"in_port": WLAN, "eth_src": "02:66:66:66:66:66", **eapol})
    phone_rule = switch._lookup(flows.TABLE_ADMISSION, {"in_port": WLAN, "eth_src": PHONE, **eapol})
    assert flows.Meter(flows.NEWCOMERS_METER.meter_id) in newcomer_rule.actions
    assert flows.Meter(flows.device_meter(router.devices[PHONE]).meter_id) in phone_rule.actions
    assert ports(switch.send({"in_port": WLAN, "eth_src": PHONE, **eapol})) == [LOCAL]


def test_a_devices_dhcp_flood_is_held_to_its_own_budget_and_other_devices_still_reach_the_router(router, switch, clock):
    """What a device sends the router (DHCP here) goes through its own meter: a flood gets its burst through,
    then its rate; another device's, and a newcomer's, get through all the same (DESIGN: fairness)."""
    join(router, switch, PHONE)
    join(router, switch, LAPTOP)

    def reaching(mac, count):
        """How many of count DHCP requests from mac, sent at once, reach the router's DHCP socket."""
        request = ipv4(WLAN, mac, BROADCAST_MAC, "0.0.0.0", flows.ALL_HOSTS, flows.PROTO_UDP, 68, 67)
        return sum(ports(switch.send(request)) == [LOCAL] for _ in range(count))

    assert reaching(PHONE, 200) == flows.DEVICE_METER_BURST
    assert reaching(LAPTOP, 5) == 5  # its own budget, untouched by the phone's flood
    assert reaching("02:66:66:66:66:66", 5) == 5  # the newcomers' too
    clock.now += 1  # a second later the phone has a second's worth again, no more
    assert reaching(PHONE, 200) == flows.DEVICE_METER_PPS
    # Newcomers share one budget: a storm of forged MACs gets its burst through, a known device still its own.
    # (The five of before were made up in that second.)
    storm = sum(reaching(f"02:66:66:66:{n >> 8:02x}:{n & 0xFF:02x}", 1) for n in range(400))
    assert storm == flows.NEWCOMERS_METER.burst
    assert reaching(LAPTOP, 1) == 1


# How each DHCP client the suite has sends its DHCPRELEASE (their sources): once, never again, unicast from
# its address (ciaddr) to the server it names (option 54) through the kernel's UDP socket, no broadcast
# flag; ISC dhclient with its `send` options (the host name), dhcpcd with its DUID client identifier, busybox
# udhcpc with a client identifier of its MAC.
RELEASE_SHAPES = {
    "isc-dhclient": lambda mac: [("hostname", b"annaphone")],
    "dhcpcd": lambda mac: [
        ("client_id", b"\xff\x00\x00\x00\x01\x00\x03\x00\x01" + bytes.fromhex(mac.replace(":", "")))
    ],
    "udhcpc": lambda mac: [("client_id", b"\x01" + bytes.fromhex(mac.replace(":", "")))],
}


@pytest.mark.parametrize("client", RELEASE_SHAPES)
def test_each_dhcp_clients_release_reaches_the_router_and_ends_its_lease_and_no_other_device_can(
    router, switch, client
):
    phone, laptop = join(router, switch, PHONE), join(router, switch, LAPTOP)
    gateway = router.devices[PHONE].subnet.gateway

    def release(mac, ciaddr, src_ip, chaddr=None):
        """The release through the switch (as the kernel sends it: to the gateway's MAC, which proxy ARP gave);
        what the router's DHCP socket reads of it, served."""
        sent = ipv4(WLAN, mac, ROUTER_MAC, src_ip, gateway, flows.PROTO_UDP, 68, 67)
        reached = [d.packet["eth_dst"] for d in switch.send(sent) if d.port == LOCAL]
        options = [("server_id", gateway), *RELEASE_SHAPES[client](mac)]
        for port_mark in reached:
            switch.apply(
                router.joining.on_dhcp(
                    frame(
                        mac,
                        "release",
                        ciaddr=ciaddr,
                        src_ip=src_ip,
                        dst_ip=gateway,
                        dst_mac=port_mark,
                        chaddr=chaddr,
                        options=options,
                    )
                )
            )
        return reached

    # Neither another device naming the phone's address nor one claiming to be the phone ends its lease.
    assert release(LAPTOP, phone, laptop) and release(LAPTOP, phone, laptop, chaddr=PHONE)
    assert router.status(PHONE)["lease_seconds_left"] > 0
    assert release(PHONE, phone, phone) == [flows.port_mark(WLAN)]
    assert router.status(PHONE)["lease_seconds_left"] == 0
    assert router.status(LAPTOP)["lease_seconds_left"] > 0


def arp_request(mac, sender_ip, target_ip):
    return {
        "in_port": WLAN,
        "eth_src": mac,
        "eth_dst": BROADCAST_MAC,
        "eth_type": flows.ETH_ARP,
        "arp_op": 1,
        "arp_sha": mac,
        "arp_spa": sender_ip,
        "arp_tha": "00:00:00:00:00:00",
        "arp_tpa": target_ip,
    }


def test_a_forwarding_devices_arp_for_its_gateway_is_answered_by_the_switch_at_once(router, switch):
    """A device's unicast to the router (a renewal, its first DNS query, its one DHCPRELEASE) waits on this
    answer, and a release waits only as long as its client keeps the address: ISC dhclient -r sends it, then
    its script removes the address, and the kernel drops a packet still waiting on ARP with the last address.
    Through the controller the answer sometimes came after that (test_returning_device's lost release)."""
    phone = join(router, switch, PHONE)
    gateway = router.devices[PHONE].subnet.gateway
    [answer] = switch.send(arp_request(PHONE, phone, gateway))
    assert answer.port == WLAN
    got = {k: answer.packet[k] for k in ("eth_src", "eth_dst", "arp_op", "arp_sha", "arp_spa", "arp_tha", "arp_tpa")}
    assert got == {
        "eth_src": ROUTER_MAC,
        "eth_dst": PHONE,
        "arp_op": 2,
        "arp_sha": ROUTER_MAC,
        "arp_spa": gateway,
        "arp_tha": PHONE,
        "arp_tpa": phone,
    }
    # What the switch cannot vouch for still goes to the controller, which decides (and answers none of these):
    # another sender address, another device's gateway, a sender hardware address not its own.
    laptop = join(router, switch, LAPTOP, permit=False)
    for asked in (
        arp_request(PHONE, "10.2.0.99", gateway),
        arp_request(PHONE, phone, router.devices[LAPTOP].subnet.gateway),
        {**arp_request(PHONE, phone, gateway), "arp_sha": TABLET},
    ):
        [copy] = switch.send(asked)
        assert copy.port == flows.CONTROLLER
    # A pending device's too (the controller answers it: its DHCP needs no unicast).
    [copy] = switch.send(arp_request(LAPTOP, laptop, router.devices[LAPTOP].subnet.gateway))
    assert copy.port == flows.CONTROLLER


def test_the_gateway_address_is_added_once_a_device_may_talk_to_the_router(router, switch):
    lease(router, PHONE)
    effects = router.decisions.permit(PHONE)
    assert AddGatewayAddress(router.devices[PHONE].subnet) in effects


def test_a_paused_devices_connections_stop_and_flow_again_when_it_is_resumed(router, switch):
    phone = join(router, switch, PHONE)
    laptop = join(router, switch, LAPTOP)
    to_internet = ipv4(WLAN, PHONE, ROUTER_MAC, phone, INTERNET, flows.PROTO_TCP, 40000, 443)
    from_internet = ipv4(LOCAL, ROUTER_MAC, PHONE, INTERNET, phone, flows.PROTO_TCP, 443, 40000)
    assert forwarded(switch.send(to_internet)) and forwarded(switch.send(from_internet))
    switch.apply(router.decisions.pause(PHONE))
    assert router.status(PHONE)["paused"] is True and router.status(PHONE)["state"] == "permitted"
    assert switch.send(to_internet) == [] and switch.send(from_internet) == []  # its connection stopped
    # It keeps its lease: its DHCP still reaches the router, so it is back at once when resumed.
    renewal = ipv4(WLAN, PHONE, BROADCAST_MAC, phone, "255.255.255.255", flows.PROTO_UDP, 68, 67)
    assert ports(switch.send(renewal)) == [LOCAL]
    # Positive control: another device is not paused with it.
    assert forwarded(switch.send(ipv4(WLAN, LAPTOP, ROUTER_MAC, laptop, INTERNET, flows.PROTO_TCP, 40000, 443)))
    switch.apply(router.decisions.resume(PHONE))
    assert router.status(PHONE)["paused"] is False
    assert forwarded(switch.send(to_internet)) and forwarded(switch.send(from_internet))
