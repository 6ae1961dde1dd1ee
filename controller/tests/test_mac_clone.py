"""A copied MAC: the router notices a second DHCP client or a station with the wrong passphrase,
tells the household once per few minutes, and shows it in the device's status."""

from dhcp_frames import frame
from support import OTHER_CLIENT, PHONE, PHONE_CLIENT, ROUTER_MAC, WLAN, lease

from homework_controller.core.router import HomeRouter
from homework_controller.effects import AuthenticatorKick, TellHousehold
from homework_controller.policy import dhcp, fingerprints
from homework_controller.store import DeviceStore
from homework_controller.wire import dhcp_wire
from homework_controller.wire.dhcp_wire import DhcpRequest


def ask(router, mac, client, msg_type="discover", **kw):
    return router.joining.on_dhcp(frame(mac, msg_type, options=client, **kw))


def clone_events(effects):
    return [e for e in effects if isinstance(e, TellHousehold) and e.kind == "mac-clone"]


def request(**fields):
    return DhcpRequest(
        msg_type=dhcp_wire.REQUEST, xid=1, flags=0, ciaddr="0.0.0.0", giaddr="0.0.0.0", chaddr=PHONE, **fields
    )


def test_fingerprints_differ_only_in_fields_both_messages_carry():
    phone = fingerprints.Fingerprint.of(request(hostname="phone", parameter_list="011c0306"))
    assert fingerprints.differences(phone, phone) == []
    # A message that leaves an option out is no evidence (clients do, e.g. in some REQUESTs).
    assert fingerprints.differences(phone, fingerprints.Fingerprint.of(request(parameter_list="011c0306"))) == []
    assert fingerprints.differences(
        phone, fingerprints.Fingerprint.of(request(hostname="intruder", parameter_list="011c0306"))
    ) == ["host name 'phone' -> 'intruder'"]
    assert fingerprints.differences(
        phone, fingerprints.Fingerprint.of(request(hostname="phone", parameter_list="0103061c"))
    ) == ["requested options differ"]
    assert fingerprints.differences(
        fingerprints.Fingerprint.of(request(client_id="01020000")),
        fingerprints.Fingerprint.of(request(client_id="01020001")),
    ) == ["client identifier differ"]


def test_dhcp_decodes_what_the_fingerprint_needs():
    req = dhcp_wire.decode_request(frame(PHONE, "request", options=[*PHONE_CLIENT, ("client_id", b"\x01abc")]).payload)
    assert (req.hostname, req.parameter_list, req.client_id) == ("phone", "011c0306", "01616263")


def test_a_second_client_on_a_permitted_devices_mac_is_told_once_and_shown_until_the_household_looks(router, clock):
    assert not clone_events(lease(router, PHONE, PHONE_CLIENT))
    router.decisions.permit(PHONE)
    # Positive control: the phone itself renewing, and re-joining after a reboot, raises nothing.
    lease(router, PHONE, PHONE_CLIENT)
    assert not clone_events(ask(router, PHONE, PHONE_CLIENT))
    assert router.status(PHONE)["clone_suspected"] is None
    assert router.counters["mac_clone_suspected"] == 0

    effects = ask(router, PHONE, OTHER_CLIENT)
    [event] = clone_events(effects)
    assert event.mac == PHONE and "host name 'phone' -> 'intruder'" in event.message
    status = router.status(PHONE)
    assert status["clone_suspected"] == {"at": clock.now, "differs": ["host name 'phone' -> 'intruder'"]}
    # Not changed silently: the device keeps its state and the household keeps seeing its own name.
    assert status["state"] == "permitted" and status["hostname"] == "phone"

    # No flood: the copier asking again and again is told once per interval, and counted each time.
    clock.now += 60
    assert not clone_events(ask(router, PHONE, OTHER_CLIENT) + ask(router, PHONE, OTHER_CLIENT))
    assert router.counters["mac_clone_suspected"] == 3
    clock.now += fingerprints.CLONE_EVENT_INTERVAL_S
    assert len(clone_events(ask(router, PHONE, OTHER_CLIENT))) == 1

    router.decisions.permit(PHONE)  # the household has looked at it
    assert router.status(PHONE)["clone_suspected"] is None
    # ... and the next DHCP client is the device's own (as after an OS update): no longer reported.
    counted = router.counters["mac_clone_suspected"]
    ask(router, PHONE, OTHER_CLIENT)
    ask(router, PHONE, OTHER_CLIENT)
    assert router.counters["mac_clone_suspected"] == counted


def test_a_mac_whose_lease_ran_out_is_free_for_a_new_client_and_its_fingerprint_replaces_the_old(router, clock):
    lease(router, PHONE, PHONE_CLIENT)
    clock.now += 31  # the pending lease ran out: whoever asks next is simply the device
    router.tick()
    assert not clone_events(lease(router, PHONE, OTHER_CLIENT))
    assert router.status(PHONE)["hostname"] == "intruder"
    assert len(clone_events(ask(router, PHONE, PHONE_CLIENT))) == 1  # now the other one is the second client


def test_after_a_restart_the_first_client_is_taken_for_the_lease_holder(db_path, clock):
    first = HomeRouter(DeviceStore(db_path), dhcp.LeasePolicy(30, 3600), clock=clock)
    first.switch_ready(WLAN, ROUTER_MAC)
    lease(first, PHONE, PHONE_CLIENT)
    first.decisions.permit(PHONE)
    lease(first, PHONE, PHONE_CLIENT)  # the hour-long lease, written to the disk
    first.store.close()
    second = HomeRouter(DeviceStore(db_path), dhcp.LeasePolicy(30, 3600), clock=clock)
    second.switch_ready(WLAN, ROUTER_MAC)
    assert not clone_events(ask(second, PHONE, PHONE_CLIENT, "request", ciaddr=second.status(PHONE)["ip"]))
    assert len(clone_events(ask(second, PHONE, OTHER_CLIENT))) == 1


def test_a_device_given_its_own_passphrase_keeps_the_guest_one_until_it_switches_even_across_a_restart(db_path, clock):
    """Issue 37: a device on the guest passphrase that is given its own keeps its connection (it rejoins on
    the guest passphrase, say after a radio restart) and is no copy of itself, until it has joined with its
    own once; from then on, the guest passphrase with its MAC is a copy's. Which is when survives a restart."""
    router = HomeRouter(DeviceStore(db_path), dhcp.LeasePolicy(30, 3600), clock=clock, wifi_ssid="home")
    router.switch_ready(WLAN, ROUTER_MAC)
    lease(router, PHONE, PHONE_CLIENT)
    router.decisions.permit(PHONE)
    keyid = router.decisions.issue_wifi_key(PHONE)["keyid"]
    assert router.joining.station_joined(PHONE, "guest") == []  # still on the guest passphrase: no alarm
    assert router.status(PHONE)["clone_suspected"] is None
    clock.now += 60
    assert router.joining.station_joined(PHONE, keyid) == []  # switched
    assert router.status(PHONE)["wifi_key"]["used"] == clock.now
    router.store.close()

    again = HomeRouter(DeviceStore(db_path), dhcp.LeasePolicy(30, 3600), clock=clock, wifi_ssid="home")
    again.switch_ready(WLAN, ROUTER_MAC)
    effects = again.joining.station_joined(PHONE, "guest")
    assert AuthenticatorKick(PHONE) in effects and len(clone_events(effects)) == 1
    # A new passphrase (the old one shown to someone): the device is on the old one until it switches again.
    again.decisions.issue_wifi_key(PHONE)
    assert again.status(PHONE)["wifi_key"]["used"] == 0.0


def test_a_station_using_a_devices_mac_with_another_passphrase_is_taken_off_the_air(db_path, clock):
    router = HomeRouter(DeviceStore(db_path), dhcp.LeasePolicy(30, 3600), clock=clock, wifi_ssid="home")
    router.switch_ready(WLAN, ROUTER_MAC)
    lease(router, PHONE, PHONE_CLIENT)
    router.decisions.permit(PHONE)
    # Without a passphrase of its own, any passphrase is the device's.
    assert router.joining.station_joined(PHONE, "guest") == []
    keyid = router.decisions.issue_wifi_key(PHONE)["keyid"]
    assert router.joining.station_joined(PHONE, keyid) == []  # positive control: the phone with its own
    effects = router.joining.station_joined(PHONE, "guest")
    assert AuthenticatorKick(PHONE) in effects
    [event] = clone_events(effects)
    assert "joined the Wi-Fi with passphrase 'guest', not its own" in event.message
    assert router.status(PHONE)["clone_suspected"]["differs"] == [
        "joined the Wi-Fi with passphrase 'guest', not its own"
    ]
