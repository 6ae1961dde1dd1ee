"""Internet only, the plugged-in gate (`concerns/gates/internet_only.py`), through ws.v1's operations, the
router core and a simulated switch: where a device's packets end up. Made internet only, a phone reaches
the internet, the router's resolver and the router's web UI, and no other device (unicast over IPv4 and
IPv6, broadcast, multicast); with the gate off the same packets reach the laptop. It is kept across a
restart and follows the phone to a new MAC on a merge."""

import ipaddress
import sqlite3

import pytest
from fakeoftable import FakeSwitch, ipv4
from support import LAPTOP, PHONE, ROUTER_MAC, WLAN, join, lease
from test_ipv6_router import INTERNET as INTERNET_V6
from test_ipv6_router import ipv6_packet

from homework_controller import flows
from homework_controller.api import operations
from homework_controller.core.router import HomeRouter
from homework_controller.policy import dhcp
from homework_controller.store import DeviceStore
from homework_controller.wire.lan import ROUTER_ADDRESS
from homework_controller.wire.prefixes import gateway_of

INTERNET = "198.51.100.80"
NEW = "06:11:22:33:44:55"  # the phone's next private address
ANNAS_PHONE = [("hostname", b"annas-phone"), ("param_req_list", [1, 3, 6, 15, 26, 28, 51, 58, 59, 43])]
LEASE = 3600


@pytest.fixture
def home(router, switch):
    """A phone and a laptop, permitted: their IPv4 addresses."""
    return join(router, switch, PHONE), join(router, switch, LAPTOP)


def ws1(router, switch, verb, mac=PHONE):
    """A gate's verb as ws.v1 performs it for the owner, its effects carried out: the device's status."""
    return operations.perform(router, operations.BY_NAME[verb], [mac], switch.apply, applied=True)


def ends(switch, packet) -> set:
    """Where a packet ends up: the router, or the device whose MAC it is sent to on the radio (the
    controller's copies left out)."""
    return {
        ROUTER if d.port == flows.LOCAL else (d.port, d.packet["eth_dst"])
        for d in switch.send(packet)
        if d.port != flows.CONTROLLER
    }


def host(prefix, n=0xAA) -> str:
    return str(ipaddress.IPv6Network(prefix).network_address + n)


def from_phone(src, dst, proto=flows.PROTO_TCP, dport=443, mac=PHONE):
    return ipv4(WLAN, mac, ROUTER_MAC, src, dst, proto, 40000, dport)


ROUTER = "the router"
TO_THE_ROUTER = {ROUTER}
TO_THE_LAPTOP = {(WLAN, LAPTOP)}


def test_an_internet_only_phone_reaches_the_internet_and_the_router_and_no_other_device(router, switch, home):
    phone, laptop = home
    gateway = router.status(PHONE)["gateway"]
    unicast = from_phone(phone, laptop)
    broadcast = from_phone(phone, flows.ALL_HOSTS, flows.PROTO_UDP, 9)
    mdns = from_phone(phone, "224.0.0.251", flows.PROTO_UDP, 5353)
    # The gate off (the positive control): the phone's packets reach the laptop.
    assert ends(switch, unicast) == TO_THE_LAPTOP
    assert ends(switch, broadcast) == ends(switch, mdns) == TO_THE_LAPTOP | TO_THE_ROUTER

    status = ws1(router, switch, "internet-only")
    assert status["internet_only"] and not status["paused"] and status["applied"]
    assert ends(switch, unicast) == set()
    assert ends(switch, broadcast) == ends(switch, mdns) == TO_THE_ROUTER  # the router still hears it
    assert ends(switch, from_phone(phone, INTERNET)) == TO_THE_ROUTER
    assert ends(switch, from_phone(phone, gateway, flows.PROTO_UDP, flows.DNS_PORT)) == TO_THE_ROUTER
    assert ends(switch, from_phone(phone, ROUTER_ADDRESS, dport=80)) == TO_THE_ROUTER  # the web UI
    # The laptop is not internet only: it still reaches the internet, and the phone's replies do not reach it.
    assert ends(switch, from_phone(laptop, INTERNET, mac=LAPTOP)) == TO_THE_ROUTER
    assert ends(switch, from_phone(phone, laptop, dport=40000)) == set()

    status = ws1(router, switch, "lan-access")
    assert not status["internet_only"]
    assert ends(switch, unicast) == TO_THE_LAPTOP
    assert ends(switch, broadcast) == TO_THE_LAPTOP | TO_THE_ROUTER


def test_over_ipv6_it_reaches_the_internet_and_its_gateway_and_neither_of_the_laptops_64s(router, switch, home):
    phone64s, laptop64s = router.ipv6.current[PHONE], router.ipv6.current[LAPTOP]
    assert len(laptop64s) == 2  # one of the delegated prefix, one of the household's ULA

    def sent(dst):
        return ends(switch, ipv6_packet(WLAN, PHONE, ROUTER_MAC, host(phone64s[0]), dst))

    assert all(sent(host(prefix)) == TO_THE_LAPTOP for prefix in laptop64s)  # the gate off: reached
    ws1(router, switch, "internet-only")
    assert [sent(host(prefix)) for prefix in laptop64s] == [set(), set()]
    assert sent(INTERNET_V6) == TO_THE_ROUTER
    assert all(sent(gateway_of(prefix)) == TO_THE_ROUTER for prefix in phone64s)  # its resolver, the router
    assert sent("ff02::fb") == TO_THE_ROUTER  # mDNS: the router alone
    ws1(router, switch, "lan-access")
    assert all(sent(host(prefix)) == TO_THE_LAPTOP for prefix in laptop64s)


def test_it_is_kept_across_a_restart(router, switch, home, db_path, clock):
    phone, laptop = home
    ws1(router, switch, "internet-only")
    assert router.store.flush()
    restarted = HomeRouter(DeviceStore(db_path), clock=clock)
    after = FakeSwitch()
    after.apply(restarted.switch_ready(WLAN, ROUTER_MAC))
    assert restarted.status(PHONE)["internet_only"] and not restarted.status(LAPTOP)["internet_only"]
    assert ends(after, from_phone(phone, laptop)) == set()
    assert ends(after, from_phone(phone, INTERNET)) == TO_THE_ROUTER
    assert ends(after, from_phone(laptop, phone, mac=LAPTOP)) == {(WLAN, PHONE)}  # the laptop is not gated


def test_it_follows_the_phone_to_its_new_mac_on_a_merge_and_leaves_with_it(db_path, clock):
    router = HomeRouter(DeviceStore(db_path), dhcp.LeasePolicy(30, LEASE), clock=clock)
    switch = FakeSwitch()
    switch.apply(router.switch_ready(WLAN, ROUTER_MAC))
    ip = join(router, switch, PHONE, client=ANNAS_PHONE)
    laptop = join(router, switch, LAPTOP)
    ws1(router, switch, "internet-only")
    clock.now += LEASE + 1  # away, and back under a new MAC
    lease(router, NEW, ANNAS_PHONE)
    assert router.status(NEW)["looks_like"]["mac"] == PHONE and not router.status(NEW)["internet_only"]
    switch.apply(router.joining.merge(NEW, PHONE))
    assert join(router, switch, NEW, permit=False) == ip
    assert router.status(NEW)["internet_only"]
    assert ends(switch, from_phone(ip, laptop, mac=NEW)) == set()
    assert ends(switch, from_phone(ip, INTERNET, mac=NEW)) == TO_THE_ROUTER
    assert router.store.flush()
    with sqlite3.connect(db_path) as db:
        assert db.execute("SELECT mac, gate, value FROM gate_state").fetchall() == [(NEW, "internet-only", "on")]
    # Forgotten (as a pending newcomer making way is), it leaves the disk with the device.
    router.reconciler.forget(router.devices[NEW])
    assert router.store.flush()
    with sqlite3.connect(db_path) as db:
        assert db.execute("SELECT count(*) FROM gate_state").fetchone() == (0,)


def test_a_database_from_before_the_gates_opens_with_their_table(db_path):
    store = DeviceStore(db_path)
    store.close()
    with sqlite3.connect(db_path) as db:
        db.execute("DROP TABLE gate_state")
    reopened = DeviceStore(db_path)
    assert reopened.load_gate_state("internet-only") == {}
    reopened.save_gate_state(PHONE, "internet-only", "on")
    assert reopened.flush()
    reopened.close()
    assert DeviceStore(db_path).load_gate_state("internet-only") == {PHONE: "on"}
