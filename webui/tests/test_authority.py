"""Who may do what is the controller's word (homework_controller/authority.py, issue 39): the web UI tells
it whose session asks (X-Homework-Role) and passes its refusal on (403, code "role", the reason), rather
than keeping a copy of the table that could drift. The web UI keeps what only it knows: sign-in, CSRF,
which member owns which device."""

import pytest
from conftest import Api, signed_in

from homework_controller import authority
from homework_controller.operations import BY_NAME
from homework_webui.controller import CONTROLLER_ROLES, ROLE_HEADER

PENDING, PERMITTED, ANNAS, NEW_ANNA, BLOCKED = (f"02:00:00:00:00:{n}" for n in ("51", "52", "53", "54", "55"))

# Each web UI route that asks one ws.v1 operation of a device, with its body and the device it acts on
# (the controller core answers them all).
ROUTES = [
    ("permit", "permit", {}, PENDING),
    ("deny", "deny", {}, PENDING),
    ("blacklist", "blacklist", {}, PENDING),
    ("whitelist", "whitelist", {}, BLOCKED),
    ("pause", "pause", {}, PERMITTED),
    ("pause-for", "pause-for", {"for": "30"}, PERMITTED),
    ("schedule", "schedule", {"windows": "daily 21:00-07:00"}, PERMITTED),
    ("allowance", "allowance", {"amount": "2 h"}, PERMITTED),
    ("name", "name", {"name": "The kitchen"}, PERMITTED),
    ("resume", "resume", {}, PERMITTED),
    ("route-owner", "route-owner", {"prefix": "fdee:1:2:3::/64"}, PERMITTED),
    ("merge", "merge", {"into": ANNAS}, NEW_ANNA),
]


def test_the_web_ui_and_the_controller_name_the_roles_alike():
    assert ROLE_HEADER == authority.HEADER
    assert set(CONTROLLER_ROLES.values()) <= set(authority.ROLES)


@pytest.mark.parametrize("role", ["owner", "member", "kiosk"])
@pytest.mark.parametrize(("route", "operation", "sent", "target"), ROUTES, ids=[r[0] for r in ROUTES])
def test_each_route_does_what_the_controllers_table_lets_the_role_do(
    app, owner, controller, role, route, operation, sent, target
):
    """Every role against every route that asks the controller: refused (403, the controller's reason,
    nothing performed) exactly where the table refuses that role, and done where it allows."""
    for mac, state in ((PENDING, "pending"), (PERMITTED, "permitted"), (BLOCKED, "blacklisted")):
        controller.joined(mac, state=state)
    controller.joined(ANNAS, state="permitted", hostname="annas-phone")
    controller.release(ANNAS)  # away
    controller.joined(NEW_ANNA, hostname="annas-phone")
    if role == "member":  # signed in on the device, so it is theirs (the web UI's own check passes)
        assert owner.post("/api/accounts", {"username": "kid", "password": "kid password"}).status_code == 201
        api = Api(app, ip=controller.status(PERMITTED)["ip"])
        api.session()
        assert api.post("/api/login", {"username": "kid", "password": "kid password"}).status_code == 200
    else:
        api = signed_in(app, role, owner)
    before = controller.call("status")
    args = [NEW_ANNA, ANNAS] if target == NEW_ANNA else [target]
    why = authority.refusal(
        CONTROLLER_ROLES[role], operation, authority.target_states(controller.router, BY_NAME[operation], args)
    )
    r = api.post(f"/api/devices/{target}/{route}", sent)
    if why is not None:
        assert (r.status_code, r.json["code"], r.json["error"]) == (403, "role", why), (role, route, r.json)
        assert controller.call("status") == before
        assert not [c for c in controller.calls if c[0] == operation]
    elif role == "member" and target != PERMITTED:
        # Not their device: the web UI's own rule (it knows who owns which), before the controller is asked.
        assert r.status_code == 403 and r.json["code"] == "role"
    else:
        assert r.status_code == 200, (role, route, r.json)
        assert [c for c in controller.calls if c[0] == operation]


def test_the_wall_panel_cannot_merge_a_newcomer_into_a_blocked_device_nor_one_it_was_not_offered_as(
    app, owner, controller
):
    """Finding 1 (issue 39): the panel's merge into a blacklisted device answered 200, moving the block
    onto the newcomer's MAC and freeing the blocked one. Positive control: into the device offered."""
    controller.joined(BLOCKED, state="blacklisted", hostname="annas-phone")
    controller.release(BLOCKED)  # away (a blacklisted device's DHCP is ignored: it has no lease to end)
    controller.joined(NEW_ANNA, hostname="annas-phone")
    controller.joined(PERMITTED, state="permitted", hostname="dads-laptop")
    controller.release(PERMITTED)
    kiosk = signed_in(app, "kiosk", owner)
    for into in (BLOCKED, PERMITTED):
        r = kiosk.post(f"/api/devices/{NEW_ANNA}/merge", {"into": into})
        assert r.status_code == 409 and r.json["code"] == "cannot-merge", r.json
    assert controller.status(BLOCKED)["state"] == "blacklisted" and controller.status(NEW_ANNA)["state"] == "pending"
    controller.joined(ANNAS, state="permitted", hostname="annas-phone")
    controller.release(ANNAS)  # away
    assert kiosk.get("/api/devices").json["devices"]  # the board
    r = kiosk.post(f"/api/devices/{NEW_ANNA}/merge", {"into": ANNAS})
    assert r.status_code == 200 and r.json["device"]["state"] == "permitted"
