"""A device that joins with its own Wi-Fi passphrase under a new MAC (a phone's private address) is
still that device: its record, decisions, name, /30, DNS rules, passphrase and controls follow it,
on the disk too; the old MAC's rules leave the switch. The guest passphrase proves nothing, so a
new MAC with it is a newcomer."""

import pytest
from dhcp_frames import frame
from fakeoftable import FakeSwitch
from support import LAPTOP, PHONE, ROUTER_MAC, TABLET, WLAN, join, up

from homework_controller import flows
from homework_controller.core.router import HomeRouter
from homework_controller.effects import (
    AuthenticatorDeny,
    AuthenticatorKick,
    PublishWifiKeys,
    RemoveRules,
    TellHousehold,
)
from homework_controller.errors import UnknownDevice
from homework_controller.flows.values import cookie_of
from homework_controller.model import State
from homework_controller.policy import wifi_keys
from homework_controller.store import DeviceStore

NEW = "06:11:22:33:44:55"  # the phone's next private address (locally administered)
OTHER = "06:66:77:88:99:aa"
WWW = "198.51.100.7"


@pytest.fixture
def home(db_path, clock):
    router = HomeRouter(DeviceStore(db_path), clock=clock, wifi_ssid="home")
    switch = FakeSwitch()
    switch.apply(router.switch_ready(WLAN, ROUTER_MAC))
    return router, switch


def own_key(router, mac) -> str:
    return router.decisions.issue_wifi_key(mac)["keyid"]


def reaches(switch, mac, ip) -> bool:
    return any(d.port != flows.CONTROLLER for d in switch.send(up(ip, WWW, src_mac=mac)))


def test_the_phone_back_under_a_new_mac_with_its_own_passphrase_keeps_everything_the_household_said(
    home, db_path, clock
):
    router, switch = home
    ip = join(router, switch, PHONE)
    router.decisions.rename(PHONE, "Anna's phone")
    router.decisions.deny_dns(PHONE, "games.example.test")
    router.decisions.set_schedule(PHONE, "sun-thu 21:30-07:00")
    router.decisions.set_allowance(PHONE, "2 h")
    keyid = own_key(router, PHONE)
    assert reaches(switch, PHONE, ip)
    before = router.status(PHONE)
    assert "Ipv6Addresses" in {type(c).__name__ for c in router.concerns if c.knows(PHONE)}  # its /64s too

    effects = router.joining.station_joined(NEW, keyid)
    switch.apply(effects)
    assert RemoveRules(cookie_of(PHONE)) in effects  # the old MAC's rules leave the switch
    assert PublishWifiKeys() in effects  # the key file names the new MAC
    [told] = [e for e in effects if isinstance(e, TellHousehold)]
    assert told.kind == "new-address" and told.mac == NEW and "Anna's phone" in told.message
    assert not reaches(switch, PHONE, ip)  # nothing of it is left under the old MAC
    with pytest.raises(UnknownDevice):
        router.status(PHONE)
    assert [type(c).__name__ for c in router.concerns if c.knows(PHONE)] == []
    # It joins again before hostapd has read the file written since: hostapd still names its old key id.
    assert router.joining.station_joined(NEW, keyid) == []

    status = router.status(NEW)
    assert (status["state"], status["name"], status["ip"]) == ("permitted", "Anna's phone", ip)
    assert status["earlier_macs"] == [PHONE]  # what the web UI's owner of the phone follows
    assert status["wifi_key"]["keyid"] == wifi_keys.device_keyid(NEW)
    assert status["schedule"] == before["schedule"] and before["schedule"].endswith("21:30-07:00")
    assert status["allowance"] == before["allowance"] and status["allowance"]["amount"] == 120
    assert [r["domain"] for r in router.decisions.dns_rules_of(NEW)] == ["games.example.test"]
    # Its DHCP under the new MAC gets its own /30 back, with a permitted device's lease, and it is online.
    assert join(router, switch, NEW, permit=False) == ip
    switch.apply(router.joining.on_dhcp(frame(NEW, "request", ciaddr=ip, src_ip=ip)))
    assert router.status(NEW)["lease_seconds_left"] > 30
    assert reaches(switch, NEW, ip)

    # A restart: the disk says the same.
    assert router.store.flush()
    store = DeviceStore(db_path)
    assert PHONE not in store.load() and store.load()[NEW].name == "Anna's phone"
    assert set(store.load_dns_rules()) == set(store.load_wifi_keys()) == set(store.load_schedules()) == {NEW}
    assert set(store.load_allowances()) == {NEW}
    assert store.load_earlier_macs() == {NEW: (PHONE,)}
    store.close()
    # Its next private address: both earlier MACs are remembered, in order; back to one it had, that one is not.
    switch.apply(router.joining.station_joined(OTHER, wifi_keys.device_keyid(NEW)))
    assert router.status(OTHER)["earlier_macs"] == [PHONE, NEW]
    switch.apply(router.joining.station_joined(PHONE, wifi_keys.device_keyid(OTHER)))
    assert router.status(PHONE)["earlier_macs"] == [NEW, OTHER]
    assert router.store.flush()
    store = DeviceStore(db_path)
    assert store.load_earlier_macs() == {PHONE: (NEW, OTHER)} and set(store.load()) == {PHONE}
    store.close()


def test_a_new_mac_with_the_guest_passphrase_is_a_newcomer_and_the_device_stays_where_it_is(home):
    router, switch = home
    ip = join(router, switch, PHONE)
    own_key(router, PHONE)
    assert router.joining.station_joined(NEW, wifi_keys.GUEST_KEYID) == []
    assert router.status(PHONE)["state"] == "permitted"
    newcomer_ip = join(router, switch, NEW, permit=False)
    assert newcomer_ip != ip and router.status(NEW)["state"] == "pending"
    assert not reaches(switch, NEW, newcomer_ip) and reaches(switch, PHONE, ip)


def test_the_newcomer_the_phone_was_taken_for_under_its_new_mac_makes_way(home):
    router, switch = home
    ip = join(router, switch, PHONE)
    keyid = own_key(router, PHONE)
    newcomer_ip = join(router, switch, NEW, permit=False)  # its DHCP came before hostapd's event
    switch.apply(router.joining.station_joined(NEW, keyid))
    assert router.status(NEW)["state"] == "permitted" and router.status(NEW)["name"] == ""
    assert join(router, switch, NEW, permit=False) == ip
    # The newcomer's /30 is free again: the next newcomer gets it.
    assert join(router, switch, TABLET, permit=False) == newcomer_ip


def test_another_decided_devices_mac_with_the_phones_passphrase_is_neither_device(home):
    router, switch = home
    join(router, switch, PHONE)
    laptop_ip = join(router, switch, LAPTOP)
    keyid = own_key(router, PHONE)
    effects = router.joining.station_joined(LAPTOP, keyid)
    assert AuthenticatorKick(LAPTOP) in effects
    assert any(isinstance(e, TellHousehold) and e.kind == "mac-clone" and e.mac == LAPTOP for e in effects)
    switch.apply(effects)
    # Nothing moved: both devices are as they were.
    assert router.status(PHONE)["wifi_key"]["keyid"] == keyid
    assert router.status(LAPTOP)["state"] == "permitted" and reaches(switch, LAPTOP, laptop_ip)
    # Positive control: the phone itself joining with its passphrase is no news.
    assert router.joining.station_joined(PHONE, keyid) == []


def test_a_blacklisted_device_back_under_a_new_mac_is_still_refused(home):
    router, switch = home
    join(router, switch, PHONE)
    keyid = own_key(router, PHONE)
    switch.apply(router.decisions.blacklist(PHONE))
    effects = router.joining.station_joined(OTHER, keyid)
    assert AuthenticatorDeny(OTHER, True) in effects and AuthenticatorDeny(PHONE, False) in effects
    assert router.status(OTHER)["state"] == State.BLACKLISTED.value
    assert router.blacklist_status() == [OTHER]
