"""The attacks of issue 10 (web UI part), each beside the same request from the household working."""

import http.client
import json
import os
import socket
import sys
import threading
import time
import urllib.request

import pytest
from conftest import OWNER, STREAM_END, Api, make_app, setup_code, setup_owner, signed_in, sse, wait_for
from waitress import wasyncore

from homework_webui import accounts
from homework_webui.accounts import AccountStore
from homework_webui.services import services
from homework_webui.serving import HELD_BACK_PER_SECOND, ClientLimits, create_server
from homework_webui.updates import CHUNK_BYTES

# --- 1. DNS rebinding: Host and Origin ---------------------------------------------------------


def test_a_foreign_host_name_is_refused_before_anything_runs(tmp_path, controller, hwdb):
    app = make_app(tmp_path, controller, hwdb, start_live=False, hostnames=["router.home", "10.2.0.1"])
    api = Api(app)
    # A rebinding page: its own name, answering with the router's address.
    r = api.get("/api/session", headers={"Host": "evil.example:8080"})
    assert r.status_code == 400
    r = api.call(
        "POST",
        "/api/setup",
        {"username": "evil", "password": "evil password 1", "setup_code": setup_code(app)},
        headers={"Host": "evil.example:8080", "Origin": "http://evil.example:8080"},
    )
    assert r.status_code == 400
    assert services(app).accounts.needs_setup()
    # The router's own names and addresses work.
    for host in ("127.0.0.1:8080", "localhost:8080", "10.2.0.1:8080", "router.home:8080", "ROUTER.HOME.", "[::1]:8080"):
        assert api.get("/api/session", headers={"Host": host}).status_code == 200, host


def test_a_state_change_from_another_origin_is_refused(app, owner, controller):
    controller.joined("02:00:00:00:00:71")
    for origin in ("http://evil.example:8080", "null", "http://localhost.evil.example"):
        r = owner.post("/api/devices/02:00:00:00:00:71/permit", headers={"Origin": origin})
        assert r.status_code == 403 and r.json["code"] == "origin", origin
    assert controller.status("02:00:00:00:00:71")["state"] == "pending"
    # The page's own origin (and a client that sends none, like curl) is fine.
    r = owner.post("/api/devices/02:00:00:00:00:71/permit", headers={"Origin": "http://localhost"})
    assert r.status_code == 200
    assert owner.post("/api/devices/02:00:00:00:00:71/deny").status_code == 200


# --- 2. first run: a one-time setup code, atomic account changes --------------------------------


def test_first_run_needs_the_setup_code(app, tmp_path):
    path = tmp_path / "state" / "setup-code"
    code = path.read_text().strip()
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    groups = code.split("-")
    assert [len(g) for g in groups] == [4, 4, 4] and not set(code) & set("01ILO")
    api = Api(app)
    api.session()
    body = {"username": OWNER[0], "password": OWNER[1]}
    for wrong in (None, "", "AAAA-BBBB-CCCC"):
        r = api.post("/api/setup", {**body, "setup_code": wrong} if wrong is not None else body)
        assert r.status_code == 403 and r.json["code"] == "setup-code", wrong
    assert services(app).accounts.needs_setup()
    # Typed loosely (lower case, spaces) it still works; then it is spent.
    r = api.post("/api/setup", {**body, "setup_code": " " + code.lower().replace("-", " ") + " "})
    assert r.status_code == 201 and r.json["user"]["role"] == "owner"
    assert not path.exists()
    other = Api(app)
    other.session()
    assert other.post("/api/setup", {**body, "username": "second", "setup_code": code}).status_code == 409


def test_first_run_can_make_the_box_an_access_point_of_the_households_router(tmp_path, controller, hwdb):
    """The first-run page's other choice: the router's pairing code handed to the image (its root job makes
    the box a satellite and restarts it), only while the box has no owner, and only where the image takes it."""
    spool = tmp_path / "role"
    spool.mkdir()
    app = make_app(tmp_path, controller, hwdb, start_live=False, role_spool=str(spool))
    api = Api(app)
    assert api.session().json["can_be_access_point"] is True
    box = {"setup_code": setup_code(app)}
    # A device on the LAN without the box's own setup code cannot make the household's new router an
    # access point (and restart it): refused, nothing handed over.
    for wrong in ({}, {"setup_code": "AAAA-BBBB-CCCC"}):
        r = api.post("/api/setup/access-point", {"code": "ABCD-EFGH", "name": "Landing", **wrong})
        assert r.status_code == 403 and r.json["code"] == "setup-code", r.json
    for bad in ("", "no_underscores", "x" * 65, "ABCD:EFGH"):
        r = api.post("/api/setup/access-point", {"code": bad, **box})
        assert r.status_code == 400, bad
    assert api.post("/api/setup/access-point", {"code": "ABCD-EFGH", "name": "a\u200bb", **box}).status_code == 400
    assert not list(spool.iterdir())  # nothing handed over for a bad request
    assert api.post("/api/setup/access-point", {"code": "ABCD-EFGH", **box}, csrf=False).status_code == 403
    # Typed loosely (case, spaces, dashes), as the router reads it.
    r = api.post("/api/setup/access-point", {"code": " abcd-EFGH ", "name": "Landing", **box})
    assert r.status_code == 202 and r.json["restarting"] is True
    request = spool / "request"
    assert json.loads(request.read_text()) == {"role": "satellite", "code": "ABCDEFGH", "name": "Landing"}
    assert oct(request.stat().st_mode & 0o777) == "0o600" and [p.name for p in spool.iterdir()] == ["request"]
    # Once an owner exists the box is theirs: it no longer offers the choice.
    setup_owner(app)
    assert Api(app).session().json["can_be_access_point"] is False
    assert api.post("/api/setup/access-point", {"code": "ABCD-EFGH", **box}).status_code == 409
    # Without a spool (the emulated home, OpenWrt) the box is a router and nothing else.
    plain = make_app(tmp_path, controller, hwdb, name="plain", start_live=False)
    other = Api(plain)
    assert other.session().json["can_be_access_point"] is False
    assert other.post("/api/setup/access-point", {"code": "ABCD-EFGH"}).status_code == 404


def test_the_setup_code_survives_a_restart_and_a_provisioned_one_wins(tmp_path, controller, hwdb):
    first = make_app(tmp_path, controller, hwdb, start_live=False)
    again = make_app(tmp_path, controller, hwdb, start_live=False)
    assert setup_code(first) == setup_code(again)  # the code on the console stays true
    label = tmp_path / "label-code"
    label.write_text("HJKM-NPQR-STUV\n")
    provisioned = make_app(tmp_path, controller, hwdb, name="image-state", start_live=False, setup_code_file=str(label))
    assert not (tmp_path / "image-state" / "setup-code").exists()
    api = Api(provisioned)
    api.session()
    body = {"username": "o", "password": OWNER[1]}
    assert api.post("/api/setup", {**body, "setup_code": "AAAA-BBBB-CCCC"}).status_code == 403
    assert api.post("/api/setup", {**body, "setup_code": "hjkmnpqrstuv"}).status_code == 201


def test_wrong_setup_codes_are_rate_limited_per_device(app):
    guesser = Api(app, ip="127.0.0.2")
    guesser.session()
    for _ in range(5):
        assert (
            guesser.post(
                "/api/setup", {"username": "x", "password": OWNER[1], "setup_code": "AAAA-BBBB-CCCC"}
            ).status_code
            == 403
        )
    r = guesser.post("/api/setup", {"username": "x", "password": OWNER[1], "setup_code": setup_code(app)})
    assert r.status_code == 429 and int(r.headers["Retry-After"]) > 0
    # The household, at the wall panel, is not held up by the guesser.
    setup_owner(app)


def test_concurrent_first_runs_make_one_owner(app):
    code = setup_code(app)
    browsers = [Api(app) for _ in range(4)]
    for b in browsers:
        b.session()
    start = threading.Barrier(len(browsers))
    statuses = []

    def claim(i, b):
        start.wait()
        r = b.post("/api/setup", {"username": f"owner{i}", "password": OWNER[1], "setup_code": code})
        statuses.append(r.status_code)

    threads = [threading.Thread(target=claim, args=(i, b)) for i, b in enumerate(browsers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(statuses) == [201, 409, 409, 409]
    owners = [a for a in services(app).accounts.list_accounts() if a["role"] == "owner"]
    assert len(owners) == 1


def test_two_owners_removing_each_other_leave_one(tmp_path, monkeypatch):
    # Password hashing is not what this is about: made cheap, many rounds fit in a moment.
    monkeypatch.setattr(accounts, "hash_password", lambda password: "not a hash")
    store = AccountStore(str(tmp_path / "accounts.sqlite"))
    survivor = store.create_account("first", "owner password 1", "owner")["id"]
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # interleave the two threads as finely as the interpreter allows
    try:
        for round_ in range(200):
            a, b = (store.create_account(f"{x}{round_}", "owner password 1", "owner")["id"] for x in "ab")
            store.delete_account(survivor)  # leave exactly the two racing owners
            start = threading.Barrier(2)
            outcomes: list[str] = []

            def remove(victim, start=start, outcomes=outcomes):
                start.wait()
                try:
                    store.delete_account(victim)
                    outcomes.append("removed")
                except ValueError:
                    outcomes.append("refused")

            threads = [threading.Thread(target=remove, args=(v,)) for v in (a, b)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(10)
            owners = [x for x in store.list_accounts() if x["role"] == "owner"]
            assert len(owners) == 1 and sorted(outcomes) == ["refused", "removed"], (round_, owners, outcomes)
            survivor = owners[0]["id"]
    finally:
        sys.setswitchinterval(old)


# --- 3. a damaged accounts database -------------------------------------------------------------


@pytest.mark.parametrize("damage", ["garbage", "torn pages"])
def test_a_damaged_accounts_database_is_set_aside_and_first_run_needs_a_code(tmp_path, controller, hwdb, damage):
    state = tmp_path / "state"
    app = make_app(tmp_path, controller, hwdb, start_live=False)
    owner = setup_owner(app)
    for i in range(200):  # enough rows for the file to have pages worth tearing
        services(app).accounts.create_session({"id": 1, "role": "owner"}, "x" * 100 + str(i))
    services(app).accounts.close()
    db = state / "accounts.sqlite"
    data = bytearray(db.read_bytes())
    if damage == "garbage":
        data = bytearray(b"not a database at all\n" * 100)
    else:
        for off in range(4096, len(data), 4096):
            data[off + 8 : off + 200] = os.urandom(192)
    db.write_bytes(bytes(data))

    app = make_app(tmp_path, controller, hwdb, start_live=False)
    kept = [p for p in state.iterdir() if p.name.startswith("accounts.sqlite.damaged-")]
    assert len(kept) == 1 and kept[0].read_bytes() == bytes(data)
    # The old sign-ins are gone, and the router is not handed to whoever comes first.
    old_browser = Api(app)
    old_browser.client.set_cookie("hw_session", owner.client.get_cookie("hw_session").value)
    assert old_browser.get("/api/devices").status_code == 401
    assert Api(app).session().json["setup_required"] is True
    first = Api(app)
    first.session()
    assert first.post("/api/setup", {"username": "first", "password": OWNER[1]}).status_code == 403
    assert (
        first.post(
            "/api/setup", {"username": "household", "password": OWNER[1], "setup_code": setup_code(app)}
        ).status_code
        == 201
    )


# --- 4. live streams cannot freeze the UI --------------------------------------------------------


@pytest.fixture
def served(small_app):
    """The app behind waitress, sized the way `python -m homework_webui` sizes it."""
    limits = services(small_app).hub.limits
    server = create_server(small_app, ["127.0.0.1:0"], workers=2, max_streams=limits.max_total)
    stop = threading.Event()

    def run():  # server.run(), in steps, so that it can be stopped between them
        while not stop.is_set():
            wasyncore.loop(timeout=0.1, map=server._map, count=1)
        server.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    yield server.effective_port
    stop.set()
    thread.join(5)


def open_stream(port, cookie):
    """A raw EventSource: returns (socket, HTTP status) once the response head arrives."""
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.sendall(f"GET /api/events HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nCookie: hw_session={cookie}\r\n\r\n".encode())
    head = b""
    while b"\r\n" not in head:
        chunk = s.recv(1024)
        if not chunk:
            break
        head += chunk
    return s, int(head.split(b" ", 2)[1])


def timed_get(port, path, timeout=3.0):
    t0 = time.monotonic()
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as r:
        return r.status, time.monotonic() - t0


def sign_in_over_http(port, username, password, timeout=3.0):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    conn.request("GET", "/api/session")
    r = conn.getresponse()
    cookie = r.getheader("Set-Cookie").split(";")[0]
    csrf = json.loads(r.read())["csrf_token"]
    conn.request(
        "POST",
        "/api/login",
        json.dumps({"username": username, "password": password}),
        {"Content-Type": "application/json", "X-CSRF-Token": csrf, "Cookie": cookie},
    )
    r = conn.getresponse()
    r.read()
    conn.close()
    return r.status


def test_one_member_cannot_freeze_the_ui_with_streams(small_app, served):
    port = served
    member = signed_in(small_app, "member", setup_owner(small_app))
    cookie = member.client.get_cookie("hw_session").value
    # Nearly as many as one address may open (serving.ClientLimits.per_address), leaving room
    # for the test's own requests from the same address.
    streams = [open_stream(port, cookie) for _ in range(ClientLimits().per_address - 4)]
    try:
        statuses = [status for _, status in streams]
        assert statuses.count(200) == services(small_app).hub.limits.per_session
        assert set(statuses) == {200, 429}
        status, took = timed_get(port, "/api/health")
        assert status == 200 and took < 2.0
        assert sign_in_over_http(port, *OWNER) == 200
    finally:
        for s, _ in streams:
            s.close()


def test_many_sessions_cannot_freeze_the_ui_with_streams(small_app, served):
    port = served
    hub = services(small_app).hub
    owner = setup_owner(small_app)
    streams = []
    try:
        # One account may not take every slot…
        member = signed_in(small_app, "member", owner)
        for _ in range(3):
            again = Api(small_app)
            again.session()
            r = again.post("/api/login", {"username": member.username, "password": "member password 1"})
            assert r.status_code == 200
            cookie = again.client.get_cookie("hw_session").value
            streams += [open_stream(port, cookie) for _ in range(hub.limits.per_session)]
        statuses = [status for _, status in streams]
        assert statuses.count(200) == hub.limits.per_account
        # …and all accounts together may not take more than the total.
        for _ in range(hub.limits.max_total // hub.limits.per_session + 1):
            cookie = signed_in(small_app, "member", owner).client.get_cookie("hw_session").value
            streams += [open_stream(port, cookie) for _ in range(hub.limits.per_session)]
        statuses = [status for _, status in streams]
        assert statuses.count(200) == hub.limits.max_total
        assert statuses.count(429) == len(streams) - hub.limits.max_total
        status, took = timed_get(port, "/api/health")
        assert status == 200 and took < 2.0
        assert sign_in_over_http(port, *OWNER) == 200
        # A stream given back is a slot free again.
        streams.pop(0)[0].close()
        deadline = time.monotonic() + 5
        while hub.stream_count() >= hub.limits.max_total and time.monotonic() < deadline:
            time.sleep(0.02)
        streams.append(open_stream(port, owner.client.get_cookie("hw_session").value))
        assert streams[-1][1] == 200
    finally:
        for s, _ in streams:
            s.close()


# --- 5. a guest's wrong guesses do not lock the household out ------------------------------------


def permitted_devices(controller, n):
    return [controller.joined(f"02:00:00:00:01:{i:02x}", state="permitted")["ip"] for i in range(n)]


def test_a_guests_failures_do_not_lock_out_the_wall_panel(app, owner, controller):
    (guest_ip,) = permitted_devices(controller, 1)
    services(app).hub.refresh_devices()
    guest = Api(app, ip=guest_ip)
    guest.session()
    for _ in range(5):
        assert guest.post("/api/login", {"username": OWNER[0], "password": "guess password"}).status_code == 401
    r = guest.post("/api/login", {"username": OWNER[0], "password": OWNER[1]})
    assert r.status_code == 429 and int(r.headers["Retry-After"]) > 0
    panel = Api(app)  # loopback: the wall panel
    panel.session()
    assert panel.post("/api/login", {"username": OWNER[0], "password": OWNER[1]}).status_code == 200


def test_many_guessing_devices_are_held_back_but_a_clean_device_signs_in(app, owner, controller):
    ips = permitted_devices(controller, 6)
    services(app).hub.refresh_devices()
    guessers = [Api(app, ip=ip) for ip in ips[:5]]
    for g in guessers:
        g.session()
        for _ in range(4):  # each stays under its own device's limit
            assert g.post("/api/login", {"username": OWNER[0], "password": "guess password"}).status_code == 401
    # The account has seen 20 failures: a device that took part must now wait, even with the right password.
    r = guessers[0].post("/api/login", {"username": OWNER[0], "password": OWNER[1]})
    assert r.status_code == 429
    clean = Api(app, ip=ips[5])
    clean.session()
    assert clean.post("/api/login", {"username": OWNER[0], "password": OWNER[1]}).status_code == 200


def test_a_held_back_guests_flood_waits_in_its_own_lane(small_app, served):
    """Behind waitress, a guest already held back gets its 429s from a paced lane of its own:
    its flood slows to the lane's pace instead of taking the household's threads and CPU,
    while the owner signs in and the API answers as usual."""
    port = served
    setup_owner(small_app)
    answers: dict[int, int] = {}
    stop = threading.Event()

    def flood():
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30, source_address=("127.0.0.2", 0))
        conn.request("GET", "/api/session")
        r = conn.getresponse()
        headers = {
            "Content-Type": "application/json",
            "Cookie": r.getheader("Set-Cookie").split(";")[0],
            "X-CSRF-Token": json.loads(r.read())["csrf_token"],
        }
        while not stop.is_set():
            conn.request("POST", "/api/login", json.dumps({"username": OWNER[0], "password": "a guess"}), headers)
            r = conn.getresponse()
            r.read()
            answers[r.status] = answers.get(r.status, 0) + 1

    guests = [threading.Thread(target=flood, daemon=True) for _ in range(4)]
    for g in guests:
        g.start()
    try:
        deadline = time.monotonic() + 30
        while not answers.get(429):
            assert time.monotonic() < deadline, f"the guest was never held back: {answers}"
            time.sleep(0.01)
        held_before, t0 = answers[429], time.monotonic()
        # The household meanwhile, as usual.
        assert sign_in_over_http(port, *OWNER) == 200
        status, took = timed_get(port, "/api/health")
        assert status == 200 and took < 2.0
        stop.wait(max(0.0, 2.0 - (time.monotonic() - t0)))
        rate = (answers[429] - held_before) / (time.monotonic() - t0)
    finally:
        stop.set()
        for g in guests:
            g.join(10)
    assert answers.get(401) == 5, answers  # the guest's own five tries were answered in full
    assert 0 < rate <= HELD_BACK_PER_SECOND * 1.5, f"{rate:.0f} refusals/s"


# --- 6. streams end with the session ---------------------------------------------------------------


def test_sign_out_ends_the_live_stream_at_once(app, owner):
    other = signed_in(app, "member", owner)
    mine, theirs = sse(owner), sse(other)
    wait_for(mine, lambda e, d: e == "devices", 5)
    wait_for(theirs, lambda e, d: e == "devices", 5)
    t0 = time.monotonic()
    assert owner.post("/api/logout").status_code == 200
    wait_for(mine, lambda e, d: e == STREAM_END, 1.0)
    assert time.monotonic() - t0 < 1.0
    # Someone else's stream carries on.
    services(app).hub.broadcast("health", {"controller": True, "hwdb": True})
    wait_for(theirs, lambda e, d: e == "health", 1.0)


def test_deleting_an_account_ends_its_streams_at_once(app, owner):
    member = signed_in(app, "member", owner)
    account_id = member.session().json["user"]["id"]
    stream = sse(member)
    wait_for(stream, lambda e, d: e == "devices", 5)
    assert owner.delete(f"/api/accounts/{account_id}").status_code == 200
    wait_for(stream, lambda e, d: e == STREAM_END, 1.0)
    assert owner.get("/api/accounts").status_code == 200


def test_a_password_reset_ends_the_accounts_streams(app, owner):
    member = signed_in(app, "member", owner)
    account_id = member.session().json["user"]["id"]
    stream = sse(member)
    wait_for(stream, lambda e, d: e == "devices", 5)
    assert owner.post(f"/api/accounts/{account_id}/password", {"password": "a new password"}).status_code == 200
    wait_for(stream, lambda e, d: e == STREAM_END, 1.0)


# --- 7. names ----------------------------------------------------------------------------------------


def test_a_pairing_name_with_a_tab_is_refused_and_the_code_still_works(app, owner):
    code = owner.post("/api/pairing-codes").json["code"]
    panel = Api(app)
    panel.session()
    result = []
    t = threading.Thread(
        target=lambda: result.append(panel.post("/api/pair", {"code": code, "name": "Hall\tpanel"})), daemon=True
    )
    t.start()
    t.join(5)
    assert not t.is_alive(), "pairing with a tab in the name never returned"
    assert result[0].status_code == 400 and "name" in result[0].json["error"]
    r = panel.post("/api/pair", {"code": code, "name": "Hall panel"})
    assert r.status_code == 201 and r.json["user"]["username"] == "Hall panel"


@pytest.mark.parametrize("name", ["tab\there", "line\u2028break", "del\x7f", "zero\u200bwidth", ""])
def test_names_must_be_printable(app, owner, controller, name):
    controller.joined("02:00:00:00:00:81")
    assert owner.post("/api/accounts", {"username": name, "password": "member password 1"}).status_code == 400
    assert owner.post("/api/accounts", {"username": "Kid", "password": "member password 1"}).status_code == 201
    if name:  # an empty device name clears it
        assert owner.post("/api/devices/02:00:00:00:00:81/name", {"name": name}).status_code == 400
    assert owner.post("/api/devices/02:00:00:00:00:81/name", {"name": "Kid's tablet"}).status_code == 200


def test_two_panels_with_the_same_name_are_told_apart(app, owner):
    names = []
    for _ in range(2):
        code = owner.post("/api/pairing-codes").json["code"]
        panel = Api(app)
        panel.session()
        names.append(panel.post("/api/pair", {"code": code, "name": "Hall"}).json["user"]["username"])
    assert names == ["Hall", "Hall 2"]


# --- 6. what the server holds for one request ---------------------------------------------------


def test_no_request_body_beyond_an_update_piece_is_held(small_app, served):
    """waitress holds a request's whole body before the app can refuse it: a device sending a
    huge body is refused as soon as it says so, and without an owner's session even a body the
    size of an update piece is (test_abuse.py has the owner's upload going through)."""

    def post(size: int) -> int:
        conn = http.client.HTTPConnection("127.0.0.1", served, timeout=10)
        conn.putrequest("PUT", "/api/update/bundle?offset=0")
        conn.putheader("Content-Type", "application/octet-stream")
        conn.putheader("Content-Length", str(size))
        conn.endheaders()
        try:
            conn.send(b"\0" * min(size, CHUNK_BYTES))
        except OSError:
            pass  # the server may close before the body is in
        status = conn.getresponse().status
        conn.close()
        return status

    assert post(1 << 29) == 413  # half a gigabyte: refused on its headers
    assert post(CHUNK_BYTES + 1) == 413
    assert post(CHUNK_BYTES) == 413  # no owner signed in
