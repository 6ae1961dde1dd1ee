"""Pausing a device from the web UI: who may (whoever may refuse it: an owner, a wall panel),
who may not (a member, even for their own device; a page not signed in), and what every page
learns (the device is paused, then not)."""

from conftest import Api, signed_in, sse, wait_for

PHONE, LAPTOP = "02:00:00:00:00:71", "02:00:00:00:00:72"


def test_an_owner_pauses_and_resumes_a_device_and_every_page_learns_it(app, owner, controller):
    controller.joined(PHONE, state="permitted")
    stream = sse(owner)
    wait_for(stream, lambda e, d: e == "devices", 5)
    r = owner.post(f"/api/devices/{PHONE}/pause")
    assert r.status_code == 200 and r.json["device"]["paused"] is True
    assert controller.status(PHONE)["paused_why"] == "paused" and ("pause", PHONE) in controller.calls
    wait_for(stream, lambda e, d: e == "devices" and any(x["mac"] == PHONE and x["paused"] for x in d), 2)
    assert owner.get(f"/api/devices/{PHONE}").json["device"]["paused"] is True
    r = owner.post(f"/api/devices/{PHONE}/resume")
    assert r.status_code == 200 and r.json["device"]["paused"] is False
    assert controller.status(PHONE)["paused"] is False
    wait_for(stream, lambda e, d: e == "devices" and any(x["mac"] == PHONE and not x["paused"] for x in d), 2)


def test_a_wall_panel_may_pause_a_member_and_a_stranger_may_not(app, owner, controller):
    mine = controller.joined(PHONE, state="permitted")
    controller.joined(LAPTOP, state="permitted")
    kiosk = signed_in(app, "kiosk", owner)
    # A member signed in on their phone (so it is theirs): pausing is refusing, which members may not.
    assert owner.post("/api/accounts", {"username": "kid", "password": "kid password"}).status_code == 201
    member = Api(app, ip=mine["ip"])
    member.session()
    assert member.post("/api/login", {"username": "kid", "password": "kid password"}).status_code == 200
    anonymous = Api(app)
    anonymous.session()
    for action in ("pause", "resume"):
        r = member.post(f"/api/devices/{PHONE}/{action}")
        assert r.status_code == 403 and r.json["code"] == "role"
        assert anonymous.post(f"/api/devices/{PHONE}/{action}").status_code == 401
    assert not any(m in ("pause", "resume") for m, _ in controller.calls)
    # The control: the wall panel may, as it may refuse a device.
    assert kiosk.post(f"/api/devices/{LAPTOP}/pause").json["device"]["paused"] is True
    assert kiosk.post(f"/api/devices/{LAPTOP}/resume").json["device"]["paused"] is False


def test_bad_input_and_a_missing_controller_cost_only_that_request(app, owner, controller):
    controller.joined(PHONE, state="permitted")
    assert owner.post("/api/devices/not-a-mac/pause").status_code == 400
    r = owner.post("/api/devices/02:00:00:00:00:99/pause")
    assert r.status_code == 404 and r.json["component"] == "controller"
    # Without a CSRF token nothing is paused.
    assert owner.post(f"/api/devices/{PHONE}/pause", csrf=False).status_code == 403
    assert controller.status(PHONE)["paused"] is False
    controller.stop()
    r = owner.post(f"/api/devices/{PHONE}/pause")
    assert r.status_code == 503 and r.json["component"] == "controller"
