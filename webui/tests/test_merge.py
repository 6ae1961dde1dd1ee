"""A newcomer that looks like a device the household knows, back under a new private MAC without a
passphrase of its own (the controller's `looks_like`; controller/tests/test_merge.py): the board
offers it, and whoever may let a newcomer in (owner, wall panel) says it is that device. It is then
that device under its new MAC, with its state, name and owner; the old MAC leaves the board. A member
may not; a refusal of the controller's (the device is online) comes back as cannot-merge."""

from conftest import Api, signed_in

PHONE, NEW_PHONE, STRANGER = "02:00:00:00:00:81", "06:00:00:00:00:81", "06:00:00:00:00:99"


def test_the_owner_merges_a_returning_phone_and_it_keeps_its_name_state_and_owner(app, owner, controller):
    kid = owner.post("/api/accounts", {"username": "kid", "password": "kid password"}).json
    kid_id = kid["account"]["id"] if "account" in kid else kid["id"]
    controller.joined(PHONE, state="permitted", hostname="annas-phone", name="Anna's phone")
    assert owner.post(f"/api/devices/{PHONE}/owner", {"account_id": kid_id}).status_code == 200
    controller.release(PHONE)  # away
    controller.joined(NEW_PHONE, hostname="annas-phone")
    controller.joined(STRANGER, hostname="laptop")
    devices = {d["mac"]: d for d in owner.get("/api/devices").json["devices"]}
    offered = devices[NEW_PHONE]["looks_like"]
    assert (offered["mac"], offered["label"], offered["matched"]) == (
        PHONE,
        "Anna's phone",
        ["host name", "requested options"],
    )
    assert devices[STRANGER]["looks_like"] is None  # positive control: another name is no offer

    r = owner.post(f"/api/devices/{NEW_PHONE}/merge", {"into": PHONE})
    assert r.status_code == 200
    assert (r.json["device"]["mac"], r.json["device"]["state"], r.json["device"]["name"]) == (
        NEW_PHONE,
        "permitted",
        "Anna's phone",
    )
    assert ("merge", f"{NEW_PHONE}/{PHONE}") in controller.calls
    devices = {d["mac"]: d for d in owner.get("/api/devices").json["devices"]}
    assert PHONE not in devices and devices[NEW_PHONE]["owner_id"] == kid_id


def test_the_wall_panel_may_merge_a_member_may_not_and_the_controllers_refusal_is_said(app, owner, controller):
    controller.joined(PHONE, state="permitted", hostname="annas-phone")
    controller.joined(NEW_PHONE, hostname="annas-phone")
    kiosk = signed_in(app, "kiosk", owner)
    assert owner.post("/api/accounts", {"username": "kid", "password": "kid password"}).status_code == 201
    member = Api(app)
    member.session()
    assert member.post("/api/login", {"username": "kid", "password": "kid password"}).status_code == 200

    r = member.post(f"/api/devices/{NEW_PHONE}/merge", {"into": PHONE})
    assert r.status_code == 403 and r.json["code"] == "role"
    r = kiosk.post(f"/api/devices/{NEW_PHONE}/merge", {"into": PHONE})  # the phone is online: not it
    assert r.status_code == 409 and r.json["code"] == "cannot-merge"
    assert kiosk.post(f"/api/devices/{NEW_PHONE}/merge", {"into": "not a mac"}).status_code == 400
    controller.release(PHONE)  # away
    r = kiosk.post(f"/api/devices/{NEW_PHONE}/merge", {"into": PHONE})
    assert r.status_code == 200 and r.json["device"]["state"] == "permitted"
