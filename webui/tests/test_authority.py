"""Who may do what is the controller's word (homework_controller/api/authority.py, issue 39): the web UI tells
it whose session asks (X-Homework-Role) and passes its refusal on (403, code "role", the reason), rather
than keeping a copy of the table that could drift. The web UI keeps what only it knows: sign-in, CSRF,
which member owns which device."""

import pytest
from conftest import Api, signed_in, sse, wait_for

from homework_controller.api import authority
from homework_controller.api.operations import BY_NAME
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


@pytest.fixture
def table(monkeypatch):
    """The controller's table, to change in a test: `authority.allowed` remembers its answers, so it forgets
    them before and after (the core runs in this process)."""
    authority.allowed.cache_clear()
    yield monkeypatch
    monkeypatch.undo()
    authority.allowed.cache_clear()


def _may(api, mac: str) -> list[str]:
    return next(d for d in api.get("/api/devices").json["devices"] if d["mac"] == mac)["may"]


def test_each_session_is_offered_what_the_controllers_table_lets_its_role_do_and_only_that(app, owner, controller):
    """Issue 39: the page shows the buttons of `may`, which the web UI takes from the controller's status for
    the session's role (the kiosk's is the wall panel's), a member's only on their own devices. Each offer
    is checked against the call it offers: what is listed is done, what is not is refused."""
    controller.joined(BLOCKED, state="blacklisted")
    controller.joined(ANNAS, state="permitted", hostname="annas-phone")
    controller.joined(PERMITTED, state="permitted")
    assert owner.post("/api/accounts", {"username": "kid", "password": "kid password"}).status_code == 201
    member = Api(app, ip=controller.status(PERMITTED)["ip"])  # signed in on it: PERMITTED is the kid's
    member.session()
    assert member.post("/api/login", {"username": "kid", "password": "kid password"}).status_code == 200
    kiosk = signed_in(app, "kiosk", owner)

    assert "whitelist" in _may(owner, BLOCKED) and {"blacklist", "wifi-key", "schedule"} <= set(_may(owner, ANNAS))
    assert not {"whitelist", "permit", "deny", "blacklist"} & set(_may(kiosk, BLOCKED))  # unblock: the owner's
    assert {"pause", "resume"} <= set(_may(kiosk, ANNAS))
    assert not {"blacklist", "wifi-key", "show-wifi-key", "schedule", "name"} & set(_may(kiosk, ANNAS))
    assert {"wifi-key", "show-wifi-key", "revoke-wifi-key", "name", "dns-rules"} == set(_may(member, PERMITTED))
    assert _may(member, ANNAS) == [] and _may(member, BLOCKED) == []  # not the kid's
    # What each is offered is what its call does.
    assert kiosk.post(f"/api/devices/{BLOCKED}/whitelist").status_code == 403
    assert kiosk.post(f"/api/devices/{ANNAS}/pause").json["device"]["may"] == _may(kiosk, ANNAS)
    assert member.post(f"/api/devices/{ANNAS}/wifi-key").status_code == 403
    assert member.post(f"/api/devices/{PERMITTED}/wifi-key").status_code == 200
    assert owner.post(f"/api/devices/{BLOCKED}/whitelist").json["device"]["state"] == "permitted"
    # A device's details: its DNS rules only for a session that may read them.
    assert "dns" in member.get(f"/api/devices/{PERMITTED}").json["device"]
    assert "dns" not in member.get(f"/api/devices/{ANNAS}").json["device"]
    assert "dns" not in kiosk.get(f"/api/devices/{ANNAS}").json["device"]


def test_every_live_page_is_sent_its_own_sessions_offers(app, owner, controller):
    """The live board reads the controller once for every page (as the wall panel); each page's stream is
    sent the devices with its session's `may` alone: the owner's, the wall panel's, a member's own."""
    controller.joined(PERMITTED, state="permitted")
    assert owner.post("/api/accounts", {"username": "kid", "password": "kid password"}).status_code == 201
    member = Api(app, ip=controller.status(PERMITTED)["ip"])
    member.session()
    assert member.post("/api/login", {"username": "kid", "password": "kid password"}).status_code == 200
    kiosk = signed_in(app, "kiosk", owner)
    streams = {name: sse(api) for name, api in (("owner", owner), ("kiosk", kiosk), ("member", member))}
    assert owner.post(f"/api/devices/{PERMITTED}/name", {"name": "Kid's tablet"}).status_code == 200

    def named(stream) -> dict:
        devices = wait_for(
            stream, lambda ev, data: ev == "devices" and any(d["name"] == "Kid's tablet" for d in data), 5
        )
        return next(d for d in devices if d["mac"] == PERMITTED)

    seen = {name: named(stream) for name, stream in streams.items()}
    assert {"blacklist", "schedule", "wifi-key"} <= set(seen["owner"]["may"])
    assert "pause" in seen["kiosk"]["may"] and not {"blacklist", "wifi-key", "name"} & set(seen["kiosk"]["may"])
    assert set(seen["member"]["may"]) == {"wifi-key", "show-wifi-key", "revoke-wifi-key", "name", "dns-rules"}
    assert seen["member"]["owner_id"] is not None


def test_a_change_to_the_controllers_table_changes_what_the_pages_offer(app, owner, controller, table):
    """The web UI restates nothing: the wall panel no longer allowed to pause (the table changed), its page
    no longer offers it, and the owner's still does."""
    controller.joined(PERMITTED, state="permitted")
    kiosk = signed_in(app, "kiosk", owner)
    assert "pause" in _may(kiosk, PERMITTED)
    table.setitem(authority.TABLE, "pause", {authority.OWNER: authority.ALWAYS})
    authority.allowed.cache_clear()
    assert "pause" not in _may(kiosk, PERMITTED) and "pause" in _may(owner, PERMITTED)
    assert kiosk.post(f"/api/devices/{PERMITTED}/pause").status_code == 403
