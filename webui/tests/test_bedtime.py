"""Pause for a while, bedtimes and allowances from the web UI (issue 23): the owner sets them, a wall
panel may only pause for a while (it may refuse a device), a member may do none of it (not even for
their own device: a bedtime is not theirs to lift); bad input is refused with the controller's words."""

import time

from conftest import Api, signed_in

PHONE, LAPTOP, TABLET = "02:00:00:00:00:81", "02:00:00:00:00:82", "02:00:00:00:00:83"
NEW_PHONE, NEW_TABLET = "06:00:00:00:00:81", "06:00:00:00:00:83"  # their next private addresses


def test_the_owner_sets_a_bedtime_an_allowance_and_a_bonus(app, owner, controller):
    controller.joined(PHONE, state="permitted")
    r = owner.post(f"/api/devices/{PHONE}/schedule", {"windows": "sun-thu 21:30-07:00"})
    assert r.status_code == 200 and r.json["device"]["schedule"] == "mon,tue,wed,thu,sun 21:30-07:00"
    r = owner.post(f"/api/devices/{PHONE}/allowance", {"amount": "1 MB"})
    assert (
        r.json["device"]["allowance"] | {"kind": "bytes", "allowed": 1_000_000, "warning": False}
        == (r.json["device"]["allowance"])
    )
    controller.moved(PHONE, 850_000)  # the switch counts what it sends
    assert owner.get(f"/api/devices/{PHONE}").json["device"]["allowance"]["warning"] is True
    controller.moved(PHONE, 150_000)
    device = owner.get(f"/api/devices/{PHONE}").json["device"]
    assert (device["paused"], device["paused_why"]) == (True, "allowance")
    r = owner.post(f"/api/devices/{PHONE}/bonus", {"amount": "500 MB"})
    assert r.status_code == 200 and not r.json["device"]["paused"] and r.json["device"]["allowance"]["bonus"] == 5e8
    assert ("bonus", PHONE) in controller.calls
    # Empty clears (it reaches the controller as "", not as a missing argument).
    assert owner.post(f"/api/devices/{PHONE}/schedule", {"windows": ""}).json["device"]["schedule"] == ""
    assert owner.post(f"/api/devices/{PHONE}/allowance", {"amount": ""}).json["device"]["allowance"] is None


def test_pause_for_a_while_says_until_when(app, owner, controller):
    controller.joined(PHONE, state="permitted")
    device = owner.post(f"/api/devices/{PHONE}/pause-for", {"for": "30"}).json["device"]
    assert (device["paused"], device["paused_why"]) == (True, "paused") and device["paused_until"]
    assert owner.post(f"/api/devices/{PHONE}/resume").json["device"]["paused_until"] is None


def test_a_wall_panel_may_pause_for_a_while_but_not_set_bedtimes_and_a_member_may_do_neither(app, owner, controller):
    mine = controller.joined(PHONE, state="permitted")
    controller.joined(LAPTOP, state="permitted")
    kiosk = signed_in(app, "kiosk", owner)
    assert owner.post("/api/accounts", {"username": "kid", "password": "kid password"}).status_code == 201
    member = Api(app, ip=mine["ip"])  # signed in on the phone, so the phone is theirs
    member.session()
    assert member.post("/api/login", {"username": "kid", "password": "kid password"}).status_code == 200
    anonymous = Api(app)
    anonymous.session()
    changes = (
        ("schedule", {"windows": ""}),
        ("allowance", {"amount": ""}),
        ("bonus", {"amount": "30 min"}),
    )
    for what, sent in changes:
        for who in (kiosk, member):
            r = who.post(f"/api/devices/{PHONE}/{what}", sent)
            assert r.status_code == 403 and r.json["code"] == "role", what
        assert anonymous.post(f"/api/devices/{PHONE}/{what}", sent).status_code == 401
    assert member.post(f"/api/devices/{PHONE}/pause-for", {"for": "30"}).status_code == 403
    for who in (kiosk, member):
        assert who.post("/api/household-time", {"time_zone": "Europe/London"}).status_code == 403
    assert not any(m in ("schedule", "allowance", "bonus", "pause-for", "time-zone") for m, _ in controller.calls)
    # The controls: the wall panel may pause for a while, the owner may set the rest, anyone signed in may read.
    assert kiosk.post(f"/api/devices/{LAPTOP}/pause-for", {"for": "tomorrow"}).json["device"]["paused"] is True
    assert owner.post(f"/api/devices/{PHONE}/schedule", {"windows": "daily 21:00-07:00"}).status_code == 200
    assert member.get("/api/household-time").json == {"time_zone": "UTC", "reset_time": "04:00"}


def test_bad_input_is_refused_with_the_controllers_words_and_changes_nothing(app, owner, controller):
    controller.joined(PHONE, state="permitted")
    for what, sent, says in (
        ("schedule", {"windows": "funday 21:00-07:00"}, "not a day"),
        ("schedule", {"windows": 42}, "must be text"),
        ("allowance", {"amount": "lots"}, "not an amount"),
        ("bonus", {"amount": "30 min"}, "no allowance"),
        ("pause-for", {"for": "forever"}, "pause for minutes"),
        ("pause-for", {"for": "x" * 100}, "at most 20"),
    ):
        r = owner.post(f"/api/devices/{PHONE}/{what}", sent)
        assert r.status_code == 400 and says in r.json["error"], (what, r.json)
    device = owner.get(f"/api/devices/{PHONE}").json["device"]
    assert (device["schedule"], device["allowance"], device["paused"]) == ("", None, False)
    r = owner.post("/api/household-time", {"time_zone": "Atlantis/Capital"})
    assert r.status_code == 400 and "time zone" in r.json["error"]
    r = owner.post("/api/household-time", {"time_zone": "Europe/Berlin", "reset_time": "05:30"})
    assert r.json == {"time_zone": "Europe/Berlin", "reset_time": "05:30"}


def schedules(controller) -> dict[str, str]:
    """The router's bedtimes, by device."""
    return {d["mac"]: d["schedule"] for d in controller.call("status") if d["schedule"]}


def test_a_persons_bedtime_is_set_on_every_device_they_own(app, owner, controller):
    for mac in (PHONE, LAPTOP, TABLET):
        controller.joined(mac, state="permitted")
    kid_id = new_member(owner)
    for mac in (PHONE, LAPTOP, "02:00:00:00:00:99"):  # the last one the router has not seen yet
        assert owner.post(f"/api/devices/{mac}/owner", {"account_id": kid_id}).status_code == 200
    r = owner.post(f"/api/accounts/{kid_id}/schedule", {"windows": "sun-thu 21:30-07:00"})
    assert r.status_code == 200 and r.json["not_seen"] == ["02:00:00:00:00:99"]
    assert sorted(d["mac"] for d in r.json["devices"]) == [PHONE, LAPTOP]
    # A device not theirs keeps none (the tablet).
    assert schedules(controller) == {
        PHONE: "mon,tue,wed,thu,sun 21:30-07:00",
        LAPTOP: "mon,tue,wed,thu,sun 21:30-07:00",
    }
    r = owner.post(f"/api/accounts/{kid_id}/schedule", {"windows": "sun 25:00-07:00"})
    assert r.status_code == 400 and schedules(controller)[PHONE] == "mon,tue,wed,thu,sun 21:30-07:00"
    assert owner.post("/api/accounts/9999/schedule", {"windows": ""}).status_code == 404


def test_a_persons_phone_back_under_a_new_mac_is_still_theirs(app, owner, controller):
    """A phone that joined with its own passphrase under a new private MAC is the same device to the router,
    which names the MACs it had (`earlier_macs`; controller/tests/test_new_address.py): it keeps its owner,
    so the person's bedtime reaches it under its new MAC."""
    kid_id = new_member(owner)
    for mac in (PHONE, TABLET):
        controller.joined(mac, state="permitted")
    assert owner.post(f"/api/devices/{PHONE}/owner", {"account_id": kid_id}).status_code == 200
    controller.back_under(PHONE, NEW_PHONE)
    controller.back_under(TABLET, NEW_TABLET)  # no one owned it before

    def listed():
        devices = {d["mac"]: d for d in owner.get("/api/devices").json["devices"]}
        return devices if NEW_PHONE in devices and NEW_TABLET in devices else None

    devices = wait_until(listed)
    assert devices[NEW_PHONE]["owner_id"] == kid_id
    assert devices[NEW_TABLET]["owner_id"] is None  # positive control: nobody's before, nobody's now
    r = owner.post(f"/api/accounts/{kid_id}/schedule", {"windows": "sun-thu 21:30-07:00"})
    assert r.status_code == 200 and r.json["not_seen"] == []
    assert [d["mac"] for d in r.json["devices"]] == [NEW_PHONE]
    assert set(schedules(controller)) == {NEW_PHONE}


def test_a_persons_allowance_is_shared_by_their_devices_and_follows_a_device_given_to_them(app, owner, controller):
    for mac in (PHONE, LAPTOP, TABLET):
        controller.joined(mac, state="permitted")
    kid_id = new_member(owner)
    for mac in (PHONE, LAPTOP, "02:00:00:00:00:99"):  # the last one the router has not seen yet
        owner.post(f"/api/devices/{mac}/owner", {"account_id": kid_id})
    assert owner.get(f"/api/accounts/{kid_id}/allowance").json == {"allowance": None, "not_seen": []}
    r = owner.post(f"/api/accounts/{kid_id}/allowance", {"amount": "2 h"})
    assert r.status_code == 200 and r.json["allowance"]["devices"] == [PHONE, LAPTOP]
    assert r.json["not_seen"] == ["02:00:00:00:00:99"] and r.json["allowance"]["text"] == "120 min"
    # Used up together: both of the kid's devices are held, the tablet (not theirs) is not.
    controller.online_for(PHONE, 120)
    devices = {d["mac"]: d for d in owner.get("/api/devices").json["devices"]}
    assert [devices[m]["paused_why"] for m in (PHONE, LAPTOP, TABLET)] == ["allowance", "allowance", None]
    assert devices[PHONE]["shared_allowance"]["used_up"] is True
    r = owner.post(f"/api/accounts/{kid_id}/bonus", {"amount": "30 min"})
    assert r.status_code == 200 and r.json["allowance"]["allowed"] == 150
    assert not owner.get(f"/api/devices/{PHONE}").json["device"]["paused"]
    # The tablet is given to the kid: it shares the allowance from now on; the laptop, given away, does not.
    assert owner.post(f"/api/devices/{TABLET}/owner", {"account_id": kid_id}).status_code == 200
    me = owner.get("/api/session").json["user"]["id"]
    assert owner.post(f"/api/devices/{LAPTOP}/owner", {"account_id": me}).status_code == 200
    assert owner.get(f"/api/accounts/{kid_id}/allowance").json["allowance"]["devices"] == [PHONE, TABLET]
    # Bad input is the controller's words; removing it lets every device go; a deleted person's goes with them.
    r = owner.post(f"/api/accounts/{kid_id}/allowance", {"amount": "lots"})
    assert r.status_code == 400 and "not an amount" in r.json["error"]
    assert owner.post(f"/api/accounts/{kid_id}/allowance", {"amount": ""}).json["allowance"] is None
    assert not any(d["shared_allowance"] for d in controller.call("status"))
    owner.post(f"/api/accounts/{kid_id}/allowance", {"amount": "1 GB"})
    assert owner.delete(f"/api/accounts/{kid_id}").status_code == 200
    assert controller.call("shared-allowances") == []
    assert owner.post("/api/accounts/9999/allowance", {"amount": "1 h"}).status_code == 404


def test_only_the_owner_sets_a_persons_allowance(app, owner, controller):
    kid_id = new_member(owner)
    mine = controller.joined(PHONE, state="permitted")
    member = Api(app, ip=mine["ip"])  # signed in on the phone, so the phone is theirs
    member.session()
    assert member.post("/api/login", {"username": "kid", "password": "kid password"}).status_code == 200
    kiosk = signed_in(app, "kiosk", owner)
    for who in (member, kiosk):
        for what, sent in (("allowance", {"amount": "9 h"}), ("bonus", {"amount": "9 h"})):
            assert who.post(f"/api/accounts/{kid_id}/{what}", sent).status_code == 403, what
        assert who.get(f"/api/accounts/{kid_id}/allowance").status_code == 403
    assert controller.call("shared-allowances") == []
    assert owner.post(f"/api/accounts/{kid_id}/allowance", {"amount": "9 h"}).json["allowance"]["devices"] == [PHONE]


def new_member(owner) -> int:
    """The owner adds a member, "kid": its account id."""
    kid = owner.post("/api/accounts", {"username": "kid", "password": "kid password"}).json
    return kid["account"]["id"] if "account" in kid else kid["id"]


def wait_until(found, timeout=5.0):
    deadline = time.monotonic() + timeout
    while (value := found()) is None:
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)
    return value
