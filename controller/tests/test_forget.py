"""A device the router forgets (a pending device making way for a newcomer) leaves nothing behind:
not in memory, not on the disk, and a device asking again under its MAC starts afresh."""

from dhcp_frames import frame
from support import LAPTOP, PHONE, PHONE_CLIENT, ROUTER_MAC, TABLET, WLAN, lease, solicit_router

from homework_controller.core.router import HomeRouter
from homework_controller.effects import ForgetNeighbours
from homework_controller.policy import dhcp
from homework_controller.store import DeviceStore


def test_an_evicted_pending_device_leaves_no_dns_rule_in_memory_or_on_the_disk(db_path, clock):
    router = HomeRouter(DeviceStore(db_path), dhcp.LeasePolicy(30, 3600), clock=clock, max_pending=2)
    router.switch_ready(WLAN, ROUTER_MAC)
    router.joining.on_dhcp(frame(PHONE, "discover"))  # all a newcomer that never took its lease sent
    router.decisions.deny_dns(PHONE, "games.example.test")  # the household looked at it while it waited
    assert router.decisions.dns_rules_of(PHONE) == [
        {"domain": "games.example.test", "display": "games.example.test", "action": "deny"}
    ]
    for mac in (LAPTOP, TABLET):  # two newcomers; the phone, silent longest, makes way
        clock.now += 1
        router.joining.on_dhcp(frame(mac, "discover"))
    assert PHONE not in {d["mac"] for d in router.status()}
    assert router.store.flush()
    assert PHONE not in DeviceStore(db_path).load_dns_rules()  # a restart does not bring it back
    # A device asking again under the phone's MAC is a newcomer with no rules of the old one's.
    clock.now += 1
    router.joining.on_dhcp(frame(PHONE, "discover"))
    assert router.decisions.dns_rules_of(PHONE) == []
    # Positive control: a device that stays keeps its rule, in memory and on the disk.
    router.decisions.deny_dns(TABLET, "games.example.test")
    assert router.store.flush()
    assert [r["domain"] for r in router.decisions.dns_rules_of(TABLET)] == ["games.example.test"]
    assert DeviceStore(db_path).load_dns_rules()[TABLET] == {"games.example.test": "deny"}


def test_after_an_eviction_no_concern_knows_the_device(db_path, clock):
    router = HomeRouter(DeviceStore(db_path), dhcp.LeasePolicy(30, 3600), clock=clock, max_pending=1)
    router.switch_ready(WLAN, ROUTER_MAC)
    lease(router, PHONE, PHONE_CLIENT)  # its DHCP client is remembered (a copied MAC would differ)
    router.decisions.deny_dns(PHONE, "games.example.test")
    router.dns_answer([("games.example.test", "198.51.100.81", 300)])
    solicit_router(router, PHONE)  # it asked for IPv6 too (a newcomer is told of no prefix)
    assert "Ipv6Addresses" in {type(c).__name__ for c in router.concerns}  # every concern that ships is asked
    knowing = {type(c).__name__ for c in router.concerns if c.knows(PHONE)}
    assert knowing == {
        "DeviceRegistry",
        "SwitchMirror",
        "DnsGating",
        "CloneWatch",
        "Ipv6Addresses",
    }  # all cleared below
    clock.now += 1
    router.joining.on_dhcp(frame(LAPTOP, "discover"))
    assert [type(c).__name__ for c in router.concerns if c.knows(PHONE)] == []
    assert [type(c).__name__ for c in router.concerns if c.knows(LAPTOP)] == ["DeviceRegistry"]  # the newcomer


def test_the_next_newcomer_on_an_evicted_devices_slash30_is_not_sent_to_the_old_mac(db_path, clock):
    """The router's stack had learnt the evicted device's MAC for its address (it answered its DNS): the
    eviction has it forget that, or the newcomer given the same /30 gets no answers from the router."""
    router = HomeRouter(DeviceStore(db_path), dhcp.LeasePolicy(30, 3600), clock=clock, max_pending=1)
    router.switch_ready(WLAN, ROUTER_MAC)
    evicted_ip = lease(router, PHONE, PHONE_CLIENT)
    clock.now += 1
    effects = router.joining.on_dhcp(frame(LAPTOP, "discover"))
    assert ForgetNeighbours(evicted_ip, PHONE) in effects
    # Positive control: a newcomer that evicts nobody has the stack forget nothing.
    clock.now += 1
    router.joining.on_dhcp(frame(LAPTOP, "request", options=[("requested_addr", router.status(LAPTOP)["ip"])]))
    assert not [e for e in router.joining.on_dhcp(frame(LAPTOP, "discover")) if isinstance(e, ForgetNeighbours)]
