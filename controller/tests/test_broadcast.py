"""Broadcast and link-scope multicast in a houseful of devices: every other permitted device hears each frame
once (the copies in groups, a group per block of devices: `base_flows.BroadcastCopies`), however devices come
and go, and a device that comes or goes costs the switch its block's changes, not every device's rules."""

from fakeoftable import FakeSwitch, ipv4
from support import ROUTER_MAC, WLAN, join

from homework_controller import flows
from homework_controller.edge.switch.switch_connection import SwitchConnection
from homework_controller.effects import RuleChange
from homework_controller.flows import base_flows

BROADCAST_MAC = "ff:ff:ff:ff:ff:ff"


def macs(count, first=1):
    return [f"02:00:00:00:{i // 256:02x}:{i % 256:02x}" for i in range(first, first + count)]


def heard(switch, router, sender):
    """Who hears the sender's mDNS over IPv4 and over IPv6 (the copies out of the radio, by their MAC), the
    router's stack once beside them."""
    v4, v6 = mdns(switch, router, sender)
    copies = []
    for deliveries in (v4, v6):
        assert [d.port for d in deliveries].count(flows.LOCAL) == 1
        copies.append(sorted(d.packet["eth_dst"] for d in deliveries if d.port != flows.LOCAL))
    assert copies[0] == copies[1]
    return copies[0]


def mdns(switch, router, sender):
    ip = router.devices[sender].subnet.device_ip
    v4 = switch.send(ipv4(WLAN, sender, BROADCAST_MAC, ip, "224.0.0.251", flows.PROTO_UDP, 5353, 5353))
    v6 = switch.send(
        {
            "in_port": WLAN,
            "eth_src": sender,
            "eth_dst": "33:33:00:00:00:fb",
            "eth_type": 0x86DD,
            "ip_proto": flows.PROTO_UDP,
            "ipv6_src": "fe80::1",
            "ipv6_dst": "ff02::fb",
        }
    )
    return v4, v6


def test_in_a_houseful_every_other_permitted_device_hears_a_broadcast_once_as_devices_come_and_go(router, switch):
    permitted = macs(40)  # two or three to each block of copies
    pending = macs(3, first=200)
    for mac in permitted:
        join(router, switch, mac)
    for mac in pending:
        join(router, switch, mac, permit=False)
    for sender in permitted[:: len(permitted) // 8]:
        assert heard(switch, router, sender) == sorted(set(permitted) - {sender})
    assert {base_flows.broadcast_block(m) for m in permitted} == set(range(base_flows.BROADCAST_BLOCKS))

    # One denied, one blacklisted, one of the pending permitted: the others hear exactly who forwards now.
    denied, blacklisted, newcomer = permitted[5], permitted[21], pending[0]
    switch.apply(router.decisions.deny(denied))
    switch.apply(router.decisions.blacklist(blacklisted))
    switch.apply(router.decisions.permit(newcomer))
    forwarding = (set(permitted) - {denied, blacklisted}) | {newcomer}
    for sender in sorted(forwarding)[::5] + [newcomer]:
        assert heard(switch, router, sender) == sorted(forwarding - {sender})
    assert mdns(switch, router, pending[1]) == ([], [])  # a pending device's goes nowhere

    # A switch that reconnects gets the same from the router's state.
    fresh = FakeSwitch()
    fresh.apply(router.switch_ready(WLAN, ROUTER_MAC))
    assert heard(fresh, router, newcomer) == sorted(forwarding - {newcomer})


def test_a_permit_in_a_household_of_a_hundred_sends_the_switch_its_blocks_changes_not_every_devices(router, switch):
    for mac in macs(99):
        join(router, switch, mac)
    [newcomer] = macs(1, first=100)
    join(router, switch, newcomer, permit=False)
    changes = [e for e in router.decisions.permit(newcomer) if isinstance(e, RuleChange)]
    switch.apply(changes)
    assert len(heard(switch, router, newcomer)) == 99
    connection = SwitchConnection()
    connection.datapath = _Datapath()
    sent = sum(len(connection.encode_rules(change)[1]) for change in changes)
    # Every sender's rules naming every other device made it 1.3 MB; its block's changes are a few kB.
    assert sent < 64 * 1024, sent


class _Datapath:
    """What encoding a message needs of os-ken's datapath."""

    from os_ken.ofproto import ofproto_v1_3 as ofproto
    from os_ken.ofproto import ofproto_v1_3_parser as ofproto_parser

    def set_xid(self, msg):
        msg.xid = 1
