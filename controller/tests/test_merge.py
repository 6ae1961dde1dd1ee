"""A phone back under a new private MAC without a passphrase of its own is a newcomer, but one that
looks like a device the household decided about (same DHCP name and client, that device away): its
status offers `looks_like`, and the household's merge makes it that device, with everything the
household said about it, on the disk too. No offer while the device is online, for another client,
or between two lookalikes; no merge of a decided device or into one that is online."""

import pytest
from dhcp_frames import frame
from fakeoftable import FakeSwitch
from support import LAPTOP, PHONE, ROUTER_MAC, WLAN, join, lease, up

from homework_controller import flows
from homework_controller.core.router import HomeRouter
from homework_controller.effects import ForgetNeighbours, RemoveRules, TellHousehold
from homework_controller.errors import Conflict, UnknownDevice
from homework_controller.flows.values import cookie_of
from homework_controller.policy import dhcp
from homework_controller.store import DeviceStore

NEW = "06:11:22:33:44:55"  # the phone's next private address
WWW = "198.51.100.7"
ANNAS_PHONE = [("hostname", b"annas-phone"), ("param_req_list", [1, 3, 6, 15, 26, 28, 51, 58, 59, 43])]
ANOTHER_CLIENT = [("hostname", b"annas-phone"), ("param_req_list", [1, 28, 2, 3, 15, 6, 119, 12])]
PERMITTED_LEASE, PENDING_LEASE = 3600, 30
OFFERED = {"mac": PHONE, "label": "Anna's phone", "matched": ["host name", "requested options"]}


@pytest.fixture
def router(db_path, clock):
    return HomeRouter(DeviceStore(db_path), dhcp.LeasePolicy(PENDING_LEASE, PERMITTED_LEASE), clock=clock)


def permitted(router, switch, mac, client, name=""):
    """Joins, is permitted (and named), renews to a permitted device's lease: its address."""
    ip = join(router, switch, mac, client=client)
    if name:
        switch.apply(router.decisions.rename(mac, name))
    return ip


def away(clock):
    clock.now += PERMITTED_LEASE + 1  # its lease ran out: it left (or came back under another MAC)


def reaches(switch, mac, ip) -> bool:
    return any(d.port != flows.CONTROLLER for d in switch.send(up(ip, WWW, src_mac=mac)))


def test_a_newcomer_that_looks_like_an_away_device_is_offered_and_merged_into_it(router, switch, clock, db_path):
    ip = permitted(router, switch, PHONE, ANNAS_PHONE, name="Anna's phone")
    router.decisions.set_schedule(PHONE, "sun-thu 21:30-07:00")
    away(clock)
    lease(router, NEW, ANNAS_PHONE)
    assert router.status(NEW)["looks_like"] == OFFERED
    assert router.status(NEW)["state"] == "pending" and not reaches(switch, NEW, router.status(NEW)["ip"])

    pending_ip = router.status(NEW)["ip"]
    effects = router.joining.merge(NEW, PHONE)
    switch.apply(effects)
    assert RemoveRules(cookie_of(PHONE)) in effects
    # The router's stack forgets both MACs it had: the phone's address is behind its new MAC now, and the
    # newcomer's pending /30 goes to the next newcomer.
    assert {e.address for e in effects if isinstance(e, ForgetNeighbours)} == {ip, pending_ip}
    [told] = [e for e in effects if isinstance(e, TellHousehold)]
    assert told.kind == "new-address" and "the household said it is the same device" in told.message
    with pytest.raises(UnknownDevice):
        router.status(PHONE)
    status = router.status(NEW)
    assert (status["state"], status["name"], status["earlier_macs"]) == ("permitted", "Anna's phone", [PHONE])
    assert status["schedule"].endswith("21:30-07:00") and status["looks_like"] is None
    # Its next DHCP (the pending lease it holds is gone) gets the phone's /30 with a permitted lease.
    assert join(router, switch, NEW, permit=False) == ip
    assert router.status(NEW)["lease_seconds_left"] == PERMITTED_LEASE
    assert reaches(switch, NEW, ip)
    # On the disk (ws.v1 answers a decision once it is there): a restart still knows it as the phone.
    assert router.store.flush()
    again = HomeRouter(DeviceStore(db_path), dhcp.LeasePolicy(PENDING_LEASE, PERMITTED_LEASE), clock=clock)
    assert (again.status(NEW)["name"], again.status(NEW)["state"]) == ("Anna's phone", "permitted")


def test_no_offer_while_the_device_is_online_for_another_client_or_between_two_lookalikes(router, switch, clock):
    permitted(router, switch, PHONE, ANNAS_PHONE, name="Anna's phone")
    lease(router, NEW, ANNAS_PHONE)
    assert router.status(NEW)["looks_like"] is None  # the phone is online: the newcomer is another device
    with pytest.raises(Conflict):
        router.joining.merge(NEW, PHONE)
    away(clock)
    assert router.status(NEW)["looks_like"] == OFFERED  # positive control
    other = "06:11:22:33:44:66"
    lease(router, other, ANOTHER_CLIENT)  # the same name from another DHCP client
    assert router.status(other)["looks_like"] is None
    permitted(router, switch, LAPTOP, ANNAS_PHONE)  # a second away device with the phone's name and client
    away(clock)
    lease(router, NEW, ANNAS_PHONE)
    assert router.status(NEW)["looks_like"] is None  # a guess among two is no offer


def test_only_a_newcomer_is_merged_and_only_into_a_decided_device(router, switch, clock):
    permitted(router, switch, PHONE, ANNAS_PHONE)
    away(clock)
    join(router, switch, NEW, permit=False, client=ANNAS_PHONE)
    lease(router, LAPTOP, ANNAS_PHONE)
    with pytest.raises(Conflict):
        router.joining.merge(NEW, LAPTOP)  # into another newcomer
    with pytest.raises(UnknownDevice):
        router.joining.merge(NEW, "06:00:00:00:00:99")
    switch.apply(router.decisions.permit(NEW))
    with pytest.raises(Conflict):
        router.joining.merge(NEW, PHONE)  # the household decided about it already
    assert router.status(PHONE)["state"] == "permitted" and router.status(NEW)["state"] == "permitted"


def test_a_device_with_its_own_passphrase_is_not_offered_on_its_looks(db_path, clock):
    """With its own passphrase the phone says who it is when it joins (test_new_address.py): a lookalike
    that joined with the guest passphrase is not taken for it, however alike."""
    router = HomeRouter(
        DeviceStore(db_path), dhcp.LeasePolicy(PENDING_LEASE, PERMITTED_LEASE), clock=clock, wifi_ssid="home"
    )
    switch = FakeSwitch()
    switch.apply(router.switch_ready(WLAN, ROUTER_MAC))
    permitted(router, switch, PHONE, ANNAS_PHONE, name="Anna's phone")
    permitted(router, switch, LAPTOP, ANOTHER_CLIENT)
    router.decisions.issue_wifi_key(PHONE)
    away(clock)
    lease(router, NEW, ANNAS_PHONE)
    other = "06:11:22:33:44:66"
    lease(router, other, ANOTHER_CLIENT)
    assert router.status(other)["looks_like"]["mac"] == LAPTOP  # positive control: no passphrase of its own
    assert router.status(NEW)["looks_like"] is None
    with pytest.raises(Conflict, match="its own passphrase"):
        router.joining.merge(NEW, PHONE)
    assert router.status(PHONE)["state"] == "permitted" and router.status(NEW)["state"] == "pending"


def test_a_merged_devices_marks_under_its_old_mac_leave_the_switch(router, switch, clock):
    """The marks its lookups made (its old MAC's marks cookie) go with its old rules; under its new MAC
    its next lookup marks again (the positive control)."""
    ip = permitted(router, switch, PHONE, ANNAS_PHONE)
    switch.apply(router.dns_answer([("us04web.zoom.us", WWW, 300)], ip))
    assert [r for r in switch.rules if r.cookie == flows.marks_cookie(PHONE)]
    away(clock)
    lease(router, NEW, ANNAS_PHONE)
    switch.apply(router.joining.merge(NEW, PHONE))
    assert not [r for r in switch.rules if r.cookie == flows.marks_cookie(PHONE)]
    new_ip = router.joining.on_dhcp(frame(NEW, "request", ciaddr=ip, src_ip=ip, options=list(ANNAS_PHONE)))
    switch.apply(new_ip)
    switch.apply(router.dns_answer([("us04web.zoom.us", WWW, 300)], ip))
    assert [r for r in switch.rules if r.cookie == flows.marks_cookie(NEW)]


# ---- issue 39: identity moves only with proof


def test_a_newcomer_sending_only_the_host_name_is_not_offered_and_is_told_what_differs(router, switch, clock):
    """Finding 5: a stranger sending only Anna's phone's host name was offered as it (fields it left out
    were not compared). Positive control: her phone's whole client is offered."""
    permitted(router, switch, PHONE, ANNAS_PHONE, name="Anna's phone")
    away(clock)
    stranger = "06:11:22:33:44:77"
    lease(router, stranger, [("hostname", b"annas-phone")])  # her name, and nothing else of her client
    status = router.status(stranger)
    assert status["looks_like"] is None
    assert status["resembles"] == {
        "mac": PHONE,
        "label": "Anna's phone",
        "matched": ["host name"],
        "differs": ["requested options left out this time"],
    }
    with pytest.raises(Conflict, match="not offered"):
        router.joining.merge(stranger, PHONE)
    assert router.status(PHONE)["state"] == "permitted" and router.status(stranger)["state"] == "pending"
    lease(router, NEW, ANNAS_PHONE)
    assert router.status(NEW)["looks_like"] == OFFERED and router.status(NEW)["resembles"] is None


def test_the_devices_dhcp_client_is_kept_across_a_restart(router, switch, clock, db_path):
    """Finding 5: fingerprints were in memory only; after a restart an away device was compared with
    nothing. Now its client is on the disk: the same client is offered, another is not."""
    permitted(router, switch, PHONE, ANNAS_PHONE, name="Anna's phone")
    away(clock)
    router.store.flush()
    again = HomeRouter(DeviceStore(db_path), dhcp.LeasePolicy(PENDING_LEASE, PERMITTED_LEASE), clock=clock)
    again.switch_ready(WLAN, ROUTER_MAC)
    lease(again, NEW, ANNAS_PHONE)
    assert again.status(NEW)["looks_like"] == OFFERED
    other = "06:11:22:33:44:66"
    lease(again, other, ANOTHER_CLIENT)
    assert again.status(other)["looks_like"] is None
    assert "requested options differ" in again.status(other)["resembles"]["differs"]


@pytest.mark.parametrize("decision", ["blacklist", "deny"])
def test_a_newcomer_is_never_merged_into_a_blocked_or_denied_device(router, switch, clock, decision):
    """Finding 1: a newcomer with a blocked device's name and client was offered as it, and a merge moved
    the block onto the newcomer's MAC, freeing the blocked MAC. Positive control: a permitted one is."""
    permitted(router, switch, PHONE, ANNAS_PHONE, name="Anna's phone")
    permitted(router, switch, LAPTOP, ANOTHER_CLIENT, name="Dad's laptop")
    state = router.status(getattr(router.decisions, decision)(PHONE) and PHONE)["state"]
    assert state in ("blacklisted", "denied")
    away(clock)
    lease(router, NEW, ANNAS_PHONE)
    assert router.status(NEW)["looks_like"] is None
    with pytest.raises(Conflict, match="never merged"):
        router.joining.merge(NEW, PHONE)
    assert router.status(PHONE)["state"] == state and router.status(NEW)["state"] == "pending"
    other = "06:11:22:33:44:66"
    lease(router, other, ANOTHER_CLIENT)  # the permitted laptop's client: offered, merged
    assert router.status(other)["looks_like"]["mac"] == LAPTOP
    switch.apply(router.joining.merge(other, LAPTOP))
    assert router.status(other)["state"] == "permitted"


def test_a_newcomer_is_merged_only_into_the_device_it_was_offered_as(router, switch, clock):
    """Finding 1: `merge` took any `into`, so a guest's device could be given any away device's identity.
    Positive control: the device offered."""
    permitted(router, switch, PHONE, ANNAS_PHONE, name="Anna's phone")
    permitted(router, switch, LAPTOP, ANOTHER_CLIENT, name="Dad's laptop")
    away(clock)
    lease(router, NEW, ANNAS_PHONE)
    with pytest.raises(Conflict, match="not offered"):
        router.joining.merge(NEW, LAPTOP)
    assert router.status(LAPTOP)["state"] == "permitted" and router.status(NEW)["state"] == "pending"
    switch.apply(router.joining.merge(NEW, PHONE))
    assert router.status(NEW)["name"] == "Anna's phone"


def test_two_clients_that_both_send_only_the_host_name_prove_nothing(router, switch, clock):
    """A host name alone is anyone's to send: a device that never asked for options is offered for no one
    (positive control: the same with its options is, in the first test)."""
    name_only = [("hostname", b"annas-phone")]
    permitted(router, switch, PHONE, name_only, name="Anna's phone")
    away(clock)
    lease(router, NEW, name_only)
    status = router.status(NEW)
    assert status["looks_like"] is None
    assert status["resembles"]["differs"] == ["no requested options to compare"]
