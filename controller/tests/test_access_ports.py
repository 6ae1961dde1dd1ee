"""Several access ports (the radio's and a wired one): each behaves like the air, and a device is bound
to the port it took its lease on. Where packets end up (fakeoftable), decision by decision."""

import pytest
from dhcp_frames import frame, reply_of
from fakeoftable import FakeSwitch, ipv4
from scapy.layers.inet import IP, TCP
from scapy.layers.l2 import ARP, Ether
from support import LAPTOP, PHONE, PHONE_CLIENT, ROUTER_MAC, TABLET

from homenet.fake_hostapd import FakeHostapd
from homework_controller import flows
from homework_controller.__main__ import parse_args
from homework_controller.concerns import port_binding
from homework_controller.config import Config
from homework_controller.edge.switch.sink import EdgeSink
from homework_controller.edge.switch.switch_connection import SwitchConnection
from homework_controller.effects import AnswerDhcp, AuthenticatorForget, AuthenticatorKick, SendFrame, TellHousehold
from homework_controller.policy import wifi_keys
from homework_controller.radio import hostapd_ctrl
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


def forgotten(effects):
    return [e for e in effects if isinstance(e, AuthenticatorForget)]


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


# -- Roaming: a second access point on another access port (a satellite's cable in LAN). The access point that
# authenticated a device says where it is; a frame where it did not authenticate is a copy's.


def own_key(router, mac) -> str:
    router.passphrases.network_named("home")  # as hostapd names it when the controller attaches
    return router.decisions.issue_wifi_key(mac)["keyid"]


def test_a_device_roaming_with_its_own_passphrase_moves_at_once_and_keeps_its_address_and_decisions(router, switch):
    phone = join_on(router, switch, PHONE, WLAN)
    keyid = own_key(router, PHONE)
    switch.apply(router.joining.station_joined(PHONE, keyid, WLAN))
    router.decisions.rename(PHONE, "Anna's phone")
    assert reaches_the_internet(switch, WLAN, PHONE, phone)
    for there, before in ((LAN, WLAN), (WLAN, LAN), (LAN, WLAN)):  # to the satellite, back, and again
        effects = router.joining.station_joined(PHONE, keyid, there)  # it authenticated there: its key proves it
        assert not clone_events(effects)
        switch.apply(effects)
        status = router.status(PHONE)
        assert (status["access_port"], status["ip"], status["state"]) == (there, phone, "permitted")
        assert status["name"] == "Anna's phone" and status["clone_suspected"] is None
        assert reaches_the_internet(switch, there, PHONE, phone)
        assert not reaches_the_internet(switch, before, PHONE, phone)  # its MAC where it left: a copy's
        router.joining.station_left(PHONE, before)  # the access point it left says so, later: nothing changes
        assert router.status(PHONE)["access_port"] == there


def test_a_guest_passphrase_device_moves_on_the_word_of_the_access_point_it_roamed_to(router, switch):
    """A station roaming away need not tell the access point it leaves (on real 802.11 it did not): the one
    that authenticated it says where it is."""
    phone = join_on(router, switch, PHONE, WLAN)
    switch.apply(router.joining.station_joined(PHONE, "", WLAN))
    effects = router.joining.station_joined(PHONE, "", LAN)  # the satellite authenticated it
    assert not clone_events(effects)
    switch.apply(effects)
    assert router.status(PHONE)["access_port"] == LAN and router.status(PHONE)["ip"] == phone
    assert reaches_the_internet(switch, LAN, PHONE, phone)
    assert not reaches_the_internet(switch, WLAN, PHONE, phone)
    router.joining.station_left(PHONE, WLAN)  # the radio notices, minutes later: nothing changes
    switch.apply(router.joining.station_joined(PHONE, "", WLAN))  # and back
    assert router.status(PHONE)["access_port"] == WLAN and reaches_the_internet(switch, WLAN, PHONE, phone)


def test_the_access_point_a_station_roamed_away_from_without_a_word_forgets_it(router, switch):
    """A roaming station does not tell the access point it leaves, which keeps its protected association until
    its inactivity timeout (and lists the station as its own): at the station's next visit there it questions
    the stale one first (SA Query). Once another access point has authenticated it, the one it left forgets it
    (hostapd's `DEAUTHENTICATE <mac> tx=0`: no frame to the station)."""
    join_on(router, switch, PHONE, WLAN)
    first = router.joining.station_joined(PHONE, "", WLAN)
    assert forgotten(first) == []  # its first association: held nowhere else
    switch.apply(first)
    for there, left in ((LAN, WLAN), (WLAN, LAN), (LAN, WLAN)):  # to the satellite, back, and again
        effects = router.joining.station_joined(PHONE, "", there)
        assert forgotten(effects) == [AuthenticatorForget(PHONE, left)]
        switch.apply(effects)
        # Still heard there when that word came (not forgotten yet), it is in that access point's next list.
        assert router.joining.listed_at(left, {PHONE}) == [AuthenticatorForget(PHONE, left)]
        assert router.joining.listed_at(there, {PHONE}) == []  # where it is: kept
        router.joining.station_left(PHONE, left)  # what the access point then says: nothing more to forget
        assert router.joining.listed_at(left, {PHONE}) == []
    assert forgotten(router.joining.station_joined(PHONE, "", LAN)) == []  # the same access point again: nothing
    # A station's word from the access point it is on already, with its own key now: nothing to forget either.
    assert forgotten(router.joining.station_joined(PHONE, own_key(router, PHONE), LAN)) == []


def gateway_answers(effects, port):
    """The ARP answers for a gateway the effects send out of `port`: (to MAC, gateway, its MAC, to address)."""
    frames = [Ether(e.data) for e in effects if isinstance(e, SendFrame) and e.port == port]
    return [(f.dst, f[ARP].psrc, f[ARP].hwsrc, f[ARP].pdst) for f in frames if ARP in f and f[ARP].op == 2]


def test_a_station_that_reassociates_is_told_where_its_gateway_is_unasked(router, switch):
    """A station's stack forgets its neighbours when its link goes down, for a moment at every (re)association;
    the ARP it sends for its gateway then is lost, and it asks again only a second later (each of the radio
    story's roams waited that second). Whichever access point authenticates it, the router answers unasked,
    out of that port: its stack takes the answer it is waiting for."""
    phone = join_on(router, switch, PHONE, WLAN)
    gateway = router.devices[PHONE].subnet.gateway
    told = (PHONE, gateway, ROUTER_MAC, phone)
    for port in (WLAN, LAN, LAN):  # on its radio, roamed to the satellite, and reassociated there
        effects = router.joining.station_joined(PHONE, "", port)
        assert gateway_answers(effects, port) == [told]
        switch.apply(effects)
    # A station the router has given no address (it has not asked yet): nothing (a copy: below).
    assert gateway_answers(router.joining.station_joined(TABLET, "", WLAN), WLAN) == []


def test_a_guest_passphrase_copy_at_the_other_access_point_is_flagged_by_the_devices_own_frames(router, switch, clock):
    """With the guest passphrase the MAC is the device's only identity, on one radio as on two: a copier at the
    satellite takes it over as it would on the router's radio. The device's own frames, still arriving where it
    is, say so: flagged, and the household's word puts it back."""
    phone = join_on(router, switch, PHONE, WLAN)
    switch.apply(router.joining.station_joined(PHONE, "", WLAN))
    switch.apply(router.joining.station_joined(PHONE, "", LAN))  # the copy (the phone never left the radio)
    router.joining.on_admission_copy(WLAN, packet_in(PHONE, phone))  # as a roam's first frames: a moment's grace
    clock.now += port_binding.ROAM_GRACE_S
    [event] = clone_events(router.joining.on_admission_copy(WLAN, packet_in(PHONE, phone)))
    assert f"access port {WLAN}" in event.message and router.status(PHONE)["clone_suspected"] is not None
    switch.apply(router.decisions.permit(PHONE))  # the household looks at it: where the phone itself was seen
    assert router.status(PHONE)["access_port"] == WLAN and reaches_the_internet(switch, WLAN, PHONE, phone)
    assert not reaches_the_internet(switch, LAN, PHONE, phone)


def test_a_copy_of_a_device_with_its_own_passphrase_is_put_off_the_other_access_point(router, switch):
    phone = join_on(router, switch, PHONE, WLAN)
    keyid = own_key(router, PHONE)
    switch.apply(router.joining.station_joined(PHONE, keyid, WLAN))
    effects = router.joining.station_joined(PHONE, wifi_keys.GUEST_KEYID, LAN)  # its MAC, the guest passphrase
    # Put off the satellite's air, not the router's radio's, where the phone itself is; told nothing.
    assert AuthenticatorKick(PHONE, LAN) in effects and AuthenticatorKick(PHONE) not in effects
    assert gateway_answers(effects, LAN) == []
    assert clone_events(effects)
    switch.apply(effects)
    assert router.status(PHONE)["access_port"] == WLAN
    assert reaches_the_internet(switch, WLAN, PHONE, phone) and not reaches_the_internet(switch, LAN, PHONE, phone)


def test_a_wired_devices_mac_authenticated_on_the_radio_with_the_guest_passphrase_is_not_moved(router, switch):
    """A cable says nothing of who is on it, so nothing says the laptop left it: the household decides."""
    laptop = join_on(router, switch, LAPTOP, LAN)
    switch.apply(router.joining.station_joined(LAPTOP, "", WLAN))
    assert router.status(LAPTOP)["access_port"] == LAN
    assert clone_events(router.joining.on_admission_copy(WLAN, packet_in(LAPTOP, laptop)))
    assert reaches_the_internet(switch, LAN, LAPTOP, laptop) and not reaches_the_internet(switch, WLAN, LAPTOP, laptop)
    # With its own passphrase it proves who it is: it moves (a laptop going from its cable to the Wi-Fi), and
    # nothing is forgotten (a cable holds no association; the guest one at the radio is the laptop's own now).
    effects = router.joining.station_joined(LAPTOP, own_key(router, LAPTOP), WLAN)
    assert forgotten(effects) == []
    switch.apply(effects)
    assert router.status(LAPTOP)["access_port"] == WLAN and reaches_the_internet(switch, WLAN, LAPTOP, laptop)


def test_the_radios_list_of_its_stations_makes_its_port_an_access_points(router, switch):
    """A device bound to the radio's port by its DHCP, before the radio said anything of it: once the radio is
    heard (its list of stations, at the controller's start), its port is an access point's, and the satellite's
    word moves the device; a port no access point speaks for is a cable's, where that word does not."""
    phone = join_on(router, switch, PHONE, WLAN)
    switch.apply(router.joining.station_joined(PHONE, "", LAN))
    assert router.status(PHONE)["access_port"] == WLAN  # not yet known as a radio: as a cable
    switch.apply(router.joining.stations_at(WLAN, {TABLET}))  # the radio's list: not the phone
    switch.apply(router.joining.station_joined(PHONE, "", LAN))
    assert router.status(PHONE)["access_port"] == LAN and reaches_the_internet(switch, LAN, PHONE, phone)


def test_the_routers_hostapd_puts_off_its_air_only_stations_of_its_own_radio():
    """A copy at a satellite is the satellite's to put off its air: the router's hostapd, where the device
    itself may be, is told only of kicks at its own radio's port (or of no port: the router's own)."""
    told: list = []

    class Authenticator:
        def tell(self, what):
            told.append(what)

    connection = SwitchConnection()
    connection.radio_port = WLAN
    sink = EdgeSink(connection, None, None, Authenticator(), None, ipv6=False)
    for kick in (AuthenticatorKick(PHONE, LAN), AuthenticatorKick(PHONE, WLAN), AuthenticatorKick(TABLET)):
        sink.carry_out(kick)
    assert told == [AuthenticatorKick(PHONE, WLAN), AuthenticatorKick(TABLET)]
    # A station that roamed away: the router's hostapd forgets those of its own radio; a satellite its own (told in
    # the answer to its links report).
    told.clear()
    for forget in (AuthenticatorForget(PHONE, LAN), AuthenticatorForget(TABLET, WLAN)):
        sink.carry_out(forget)
    assert told == [AuthenticatorForget(TABLET, WLAN)]


def test_the_routers_hostapd_forgets_a_station_gone_from_it_without_a_frame_and_kicks_a_copy_with_one(tmp_path):
    """What the router's hostapd is asked: a station that roamed away is dropped with `tx=0` (it is at another
    access point: nothing is sent to it), and only if it sent nothing there for a moment (back already, or amid a
    handshake there, it stays: the router's word may be older than its return); a copy is put off the air with a
    deauthentication frame (through hostapd_cli)."""
    ctrl = str(tmp_path / "wlan0")
    hostapd = FakeHostapd(ctrl)
    sta = "{mac}\nflags=[AUTH][ASSOC][AUTHORIZED][MFP]\nhostapdWPAPTKState=11\ninactive_msec={ms}\n"
    try:
        authenticator = hostapd_ctrl.Authenticator(ctrl, "", list)
        hostapd.stations[PHONE] = sta.format(mac=PHONE, ms=hostapd_ctrl.GONE_AFTER_MS // 4)  # just back
        authenticator._tell(AuthenticatorForget(PHONE, WLAN))
        assert PHONE in hostapd.stations
        hostapd.stations[PHONE] = sta.format(mac=PHONE, ms=hostapd_ctrl.GONE_AFTER_MS * 2)  # gone
        authenticator._tell(AuthenticatorForget(PHONE, WLAN))
        authenticator._tell(AuthenticatorKick(TABLET))
        assert [a for a in hostapd.asked if a.startswith("DEAUTHENTICATE")] == [
            f"DEAUTHENTICATE {PHONE} tx=0",
            f"DEAUTHENTICATE {TABLET}",
        ]
        assert PHONE not in hostapd.stations
    finally:
        hostapd.close()


def test_the_radios_access_port_is_the_interface_hostapd_serves(tmp_path):
    """On the image hostapd's socket is found under the bridge's name, a link to the radio's (wlan0)."""
    (tmp_path / "wlan0").touch()
    (tmp_path / "br-lan").symlink_to("wlan0")
    assert Config(hostapd_ctrl=str(tmp_path / "br-lan")).radio_port_name() == "wlan0"
    assert Config(hostapd_ctrl=str(tmp_path / "wlan0")).radio_port_name() == "wlan0"
    assert Config(hostapd_ctrl="").radio_port_name() == ""  # no hostapd: no radio


def test_a_roams_first_frames_before_the_access_points_word_raise_no_alarm_and_a_copys_later_ones_do(
    router, switch, clock
):
    """The station's first frames at the access point it roamed to reach the switch before that access point's
    word reaches the controller (a satellite's comes over HTTP): dropped, and nobody is told, for a moment."""
    phone = join_on(router, switch, PHONE, WLAN)
    switch.apply(router.joining.station_joined(PHONE, "", WLAN))
    switch.apply(router.joining.stations_at(LAN, set()))  # the satellite is heard: its port is an access point's
    assert not clone_events(router.joining.on_admission_copy(LAN, packet_in(PHONE, phone)))  # ahead of its word
    # Its ARP for its gateway as it reassociated there, ahead of the word too: answered out of that port, or it
    # would ask again only a second later (each of the radio story's roams waited that second); not moved yet.
    gateway = router.devices[PHONE].subnet.gateway
    effects = router.joining.on_admission_copy(LAN, arp_request(PHONE, phone, gateway))
    assert [e.port for e in effects if isinstance(e, SendFrame)] == [LAN] and not clone_events(effects)
    assert router.status(PHONE)["access_port"] == WLAN
    switch.apply(router.joining.station_joined(PHONE, "", LAN))  # the word
    assert router.status(PHONE)["access_port"] == LAN and router.status(PHONE)["clone_suspected"] is None
    # Its MAC back at the radio with no word from the radio: a moment's grace, then a copy's, whose ARP is not
    # answered.
    assert not clone_events(router.joining.on_admission_copy(WLAN, packet_in(PHONE, phone)))
    clock.now += port_binding.ROAM_GRACE_S
    assert clone_events(router.joining.on_admission_copy(WLAN, packet_in(PHONE, phone)))
    effects = router.joining.on_admission_copy(WLAN, arp_request(PHONE, phone, gateway))
    assert not [e for e in effects if isinstance(e, SendFrame)]
    # Long after, a real roam there has its moment's grace again: not even counted as a copy's sighting.
    clock.now += port_binding.ROAM_GRACE_S * 11
    sightings = router.counters["mac_clone_suspected"]
    router.joining.on_admission_copy(WLAN, packet_in(PHONE, phone))
    assert router.counters["mac_clone_suspected"] == sightings
    switch.apply(router.joining.station_joined(PHONE, "", WLAN))
    assert router.status(PHONE)["access_port"] == WLAN
