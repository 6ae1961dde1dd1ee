"""Internet only from the device panel: the owner ticks it and the phone's packets to the laptop stop at the
router's switch while its packets to the internet go on (the controller core on its fake switch); unticked,
the laptop is reached again. A member, even for their own device, and the wall panel may not; the panel
offers it to the owner alone (`may`)."""

from conftest import Api, signed_in
from fakeoftable import ipv4

from homework_controller import flows

PHONE, LAPTOP = "02:00:00:00:00:71", "02:00:00:00:00:72"
ROUTER_MAC = "02:48:57:00:00:01"
INTERNET = "198.51.100.80"


def reaches(controller, dst: str) -> bool:
    """Whether a packet from the phone to dst leaves the switch (to a device or to the router)."""
    packet = ipv4(1, PHONE, ROUTER_MAC, controller.status(PHONE)["ip"], dst, flows.PROTO_TCP, 40000, 443)
    return any(d.port != flows.CONTROLLER for d in controller.switch.send(packet))


def test_the_owner_makes_a_phone_internet_only_and_it_no_longer_reaches_the_laptop(app, owner, controller):
    controller.joined(PHONE, state="permitted")
    laptop = controller.joined(LAPTOP, state="permitted")["ip"]
    device = owner.get(f"/api/devices/{PHONE}").json["device"]
    assert {"internet-only", "lan-access"} <= set(device["may"]) and device["internet_only"] is False
    assert reaches(controller, laptop) and reaches(controller, INTERNET)  # the control: the gate off

    r = owner.post(f"/api/devices/{PHONE}/internet-only", {"on": True})
    assert r.status_code == 200 and r.json["device"]["internet_only"] is True
    assert not reaches(controller, laptop) and reaches(controller, INTERNET)
    assert owner.get(f"/api/devices/{PHONE}").json["device"]["internet_only"] is True

    r = owner.post(f"/api/devices/{PHONE}/internet-only", {"on": False})
    assert r.status_code == 200 and r.json["device"]["internet_only"] is False
    assert reaches(controller, laptop)


def test_a_member_and_the_wall_panel_may_not_and_bad_input_changes_nothing(app, owner, controller):
    mine = controller.joined(PHONE, state="permitted")
    controller.joined(LAPTOP, state="permitted")
    assert owner.post("/api/accounts", {"username": "kid", "password": "kid password"}).status_code == 201
    member = Api(app, ip=mine["ip"])  # signed in on the phone: it is theirs
    member.session()
    assert member.post("/api/login", {"username": "kid", "password": "kid password"}).status_code == 200
    kiosk = signed_in(app, "kiosk", owner)
    for session in (member, kiosk):
        assert "internet-only" not in session.get(f"/api/devices/{PHONE}").json["device"]["may"]
        r = session.post(f"/api/devices/{PHONE}/internet-only", {"on": True})
        assert r.status_code == 403 and r.json["code"] == "role"
    for bad in ({}, {"on": "yes"}, {"on": 1}):
        assert owner.post(f"/api/devices/{PHONE}/internet-only", bad).status_code == 400
    assert controller.status(PHONE)["internet_only"] is False
    # The control: the owner may.
    assert owner.post(f"/api/devices/{PHONE}/internet-only", {"on": True}).json["device"]["internet_only"] is True
