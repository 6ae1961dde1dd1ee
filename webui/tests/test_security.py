"""Authentication, authorisation and CSRF for every endpoint, found from the url_map."""

import os
import stat

import pytest
from conftest import OWNER, Api, setup_code, signed_in

from homework_webui.security import PUBLIC
from homework_webui.services import services

SAFE = {"GET", "HEAD", "OPTIONS"}
SAMPLE_ARGS = {"mac": "02:00:00:00:00:01", "account_id": 2, "app_name": "video", "name": "x.js"}
BODIES = {"priority": {"priority": "high"}, "name": {"name": "Grandma's iPad"}}


def state_changing(app):
    """(rule, method, url, view) for every non-GET route: a new endpoint is tested automatically."""
    out = []
    for rule in app.url_map.iter_rules():
        for method in sorted(rule.methods - SAFE):
            url = rule.build({a: SAMPLE_ARGS[a] for a in rule.arguments}, append_unknown=False)[1]
            out.append((rule.rule, method, url, app.view_functions[rule.endpoint]))
    return out


def test_every_view_declares_access(app):
    for endpoint, view in app.view_functions.items():
        if endpoint == "static":
            continue
        assert getattr(view, "access", None) is not None, f"{endpoint} has no @access declaration"


def test_there_are_state_changing_endpoints_to_test(app):
    rules = {r for r, *_ in state_changing(app)}
    assert {
        "/api/login",
        "/api/devices/<mac>/permit",
        "/api/apps/<path:app_name>/priority",
        "/api/accounts",
        "/api/pairing-codes",
    } <= rules


def test_without_session_refused(app, owner, controller):
    controller.joined("02:00:00:00:00:01")
    anon = Api(app)
    anon.session()  # has a valid anonymous CSRF token, but no sign-in
    for rule, method, url, view in state_changing(app):
        if view.access == PUBLIC:
            continue
        r = anon.call(method, url, {})
        assert r.status_code == 401, (method, rule, r.status_code, r.json)


def test_without_csrf_refused(app, owner, controller):
    controller.joined("02:00:00:00:00:01")
    for rule, method, url, _view in state_changing(app):
        r = owner.call(method, url, {}, csrf=False)
        assert r.status_code == 403 and r.json["code"] == "csrf", (method, rule, r.status_code)
        # A token from another browser's session is no better than none.
        r = owner.client.open(url, method=method, json={}, headers={"X-CSRF-Token": "forged" + "x" * 40})
        assert r.status_code == 403 and r.json["code"] == "csrf", (method, rule)


def test_wrong_role_refused(app, owner, controller):
    controller.joined("02:00:00:00:00:01")
    apis = {"owner": owner, "member": signed_in(app, "member", owner), "kiosk": signed_in(app, "kiosk", owner)}
    checked = 0
    for rule, method, url, view in state_changing(app):
        if view.access == PUBLIC:
            continue
        for role, api in apis.items():
            if role not in view.access:
                r = api.call(method, url, BODIES.get(rule.rsplit("/", 1)[-1], {}))
                assert r.status_code == 403 and r.json["code"] == "role", (role, method, rule, r.status_code)
                checked += 1
    assert checked > 10


def test_kiosk_rights(app, owner, controller, hwdb):
    controller.joined("02:00:00:00:00:01")
    kiosk = signed_in(app, "kiosk", owner)
    assert kiosk.get("/api/devices").status_code == 200
    assert kiosk.post("/api/devices/02:00:00:00:00:01/permit").status_code == 200
    assert controller.status("02:00:00:00:00:01")["state"] == "permitted"
    assert kiosk.put("/api/apps/video/priority", {"priority": "high"}).status_code == 403
    assert kiosk.get("/api/apps").status_code == 403
    assert kiosk.post("/api/accounts", {"username": "x", "password": "y" * 10}).status_code == 403
    assert kiosk.get("/api/accounts").status_code == 403
    assert kiosk.post("/api/pairing-codes").status_code == 403
    assert kiosk.post("/api/devices/02:00:00:00:00:01/name", {"name": "x"}).status_code == 403
    assert len(hwdb.query("select * from AppPriority").rows) == 0


def test_first_run_requires_owner_password(app):
    api = Api(app)
    s = api.session().json
    assert s["setup_required"] is True and s["user"] is None
    for user, password in [("admin", "admin"), ("admin", "password"), ("root", ""), ("owner", "")]:
        assert api.post("/api/login", {"username": user, "password": password}).status_code == 401
    assert api.get("/api/devices").status_code == 401
    code = setup_code(app)
    assert api.post("/api/setup", {"username": "owner", "password": "short", "setup_code": code}).status_code == 400
    r = api.post("/api/setup", {"username": "o", "password": OWNER[1], "setup_code": code}, csrf=False)
    assert r.status_code == 403
    r = api.post("/api/setup", {"username": OWNER[0], "password": OWNER[1], "setup_code": code})
    assert r.status_code == 201 and r.json["user"]["role"] == "owner"
    # Nobody can "set up" an owned router again.
    other = Api(app)
    other.session()
    assert other.session().json["setup_required"] is False
    assert other.post("/api/setup", {"username": "evil", "password": "evil password"}).status_code == 409


def test_password_hash_and_state_files(app, owner, tmp_path):
    state = tmp_path / "state"
    assert stat.S_IMODE(os.stat(state).st_mode) == 0o700
    for name in ("accounts.sqlite", "session_secret"):
        assert stat.S_IMODE(os.stat(state / name).st_mode) == 0o600, name
    store = services(app).accounts
    stored = store._read("select pw_hash from accounts where username = 'owner'")[0]["pw_hash"]
    assert stored.startswith("scrypt$") and OWNER[1] not in stored


def test_cookie_flags(app):
    api = Api(app)
    api.session()
    r = api.post("/api/setup", {"username": OWNER[0], "password": OWNER[1], "setup_code": setup_code(app)})
    cookie = r.headers["Set-Cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie


def test_login_rate_limited(app, owner):
    api = Api(app)
    api.session()
    for _ in range(5):
        assert api.post("/api/login", {"username": "owner", "password": "wrong password"}).status_code == 401
    r = api.post("/api/login", {"username": OWNER[0], "password": OWNER[1]})
    assert r.status_code == 429 and int(r.headers["Retry-After"]) > 0
    # Another device is not held back by this one's failures (test_hardening.py has more).
    other = Api(app, ip="127.0.0.2")
    other.session()
    assert other.post("/api/login", {"username": OWNER[0], "password": OWNER[1]}).status_code == 200


def test_logout_ends_session(app, owner):
    assert owner.get("/api/accounts").status_code == 200
    assert owner.post("/api/logout").status_code == 200
    assert owner.get("/api/accounts").status_code == 401


def test_kiosk_pairing(app, owner):
    code = owner.post("/api/pairing-codes").json["code"]
    panel = Api(app)
    panel.session()
    assert panel.post("/api/pair", {"code": "WRONGONE"}).status_code == 400
    r = panel.post("/api/pair", {"code": code.lower(), "name": "Kitchen wall"})
    assert r.status_code == 201 and r.json["user"]["role"] == "kiosk"
    assert panel.session().json["user"]["username"] == "Kitchen wall"
    # A code works once.
    again = Api(app)
    again.session()
    assert again.post("/api/pair", {"code": code}).status_code == 400
    # Unpairing (deleting the kiosk account) signs the panel out.
    kiosk_id = r.json["user"]["id"]
    assert owner.delete(f"/api/accounts/{kiosk_id}").status_code == 200
    assert panel.get("/api/devices").status_code == 401


def test_pairing_guesses_rate_limited(app, owner):
    panel = Api(app)
    panel.session()
    for _ in range(5):
        panel.post("/api/pair", {"code": "AAAAAAAA"})
    code = owner.post("/api/pairing-codes").json["code"]
    assert panel.post("/api/pair", {"code": code}).status_code == 429


def test_member_names_only_own_devices(app, owner, controller):
    mine = controller.joined("02:00:00:00:00:0a", state="permitted")
    controller.joined("02:00:00:00:00:0b", state="permitted")
    assert owner.post("/api/accounts", {"username": "kid", "password": "kid password"}).status_code == 201
    member = Api(app, ip=mine["ip"])
    member.session()
    r = member.post("/api/login", {"username": "kid", "password": "kid password"})
    assert r.status_code == 200, r.data
    assert member.post("/api/devices/02:00:00:00:00:0a/name", {"name": "Kid's phone"}).status_code == 200
    assert controller.status("02:00:00:00:00:0a")["name"] == "Kid's phone"
    r = member.post("/api/devices/02:00:00:00:00:0b/name", {"name": "mine now"})
    assert r.status_code == 403


@pytest.mark.parametrize("state", ["pending", "denied", "blacklisted"])
def test_unpermitted_device_cannot_reach_ui(app, owner, controller, state):
    dev = controller.joined("02:00:00:00:00:0c", state=state)
    for path in ("/", "/api/session", "/api/devices"):
        assert Api(app, ip=dev["ip"]).get(path).status_code == 403
    controller.call("whitelist", dev["mac"])  # let in (a blacklist lifted too)
    services(app).hub.refresh_devices()
    assert Api(app, ip=dev["ip"]).get("/api/session").status_code == 200


def test_unknown_lan_address_refused(app, owner):
    assert Api(app, ip="10.2.9.9").get("/api/session").status_code == 403
