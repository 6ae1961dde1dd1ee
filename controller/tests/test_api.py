"""ws.v1 as a caller sees it: routes, verbs and JSON errors."""

import io
import json
import threading
import time
import urllib.error
import urllib.request
from wsgiref import simple_server

import pytest
from dhcp_frames import forged
from support import PHONE, HoldsCounted, lease

from homework_controller.api import api, authority, operations, ws_service
from homework_controller.api.server import TimedLock
from homework_controller.edge import ofapp
from homework_controller.errors import NotConfigured, UnknownDevice
from homework_controller.model import BadMac


def request(app, verb, path, query="", host="127.0.0.1:8081", **headers):
    """A request as the web UI's client sends it (loopback Host, no Origin), unless told otherwise."""
    out = {}

    def start_response(status, headers):
        out["status"], out["headers"] = int(status.split()[0]), dict(headers)

    environ = {
        "REQUEST_METHOD": verb,
        "PATH_INFO": path,
        "QUERY_STRING": query,
        "SERVER_PORT": "8081",
        "wsgi.input": io.BytesIO(),
        **{f"HTTP_{name.upper()}": value for name, value in headers.items()},
    }
    if host is not None:
        environ["HTTP_HOST"] = host
    body = b"".join(app(environ, start_response))
    return out["status"], json.loads(body)


def service(name, *args, role=None):
    if name == "permit" and args[0] == "bad":
        raise BadMac("not a MAC address: 'bad'")
    if name == "permit" and args[0] == "02:00:00:00:00:99":
        raise UnknownDevice("no device 02:00:00:00:00:99 has asked to join")
    return {"called": operations.BY_NAME[name].call.__name__, "args": list(args)}


APP = api.make_app(service)


def test_state_changes_need_post():
    assert request(APP, "GET", "/ws.v1/permit/02:00:00:00:00:01")[0] == 405
    assert request(APP, "POST", "/ws.v1/permit/02:00:00:00:00:01") == (
        200,
        {"called": "permit", "args": ["02:00:00:00:00:01"]},
    )


def test_errors_are_json_with_a_4xx_code():
    assert request(APP, "POST", "/ws.v1/permit/bad") == (400, {"error": "not a MAC address: 'bad'"})
    status, body = request(APP, "POST", "/ws.v1/permit/02:00:00:00:00:99")
    assert status == 404 and "has asked to join" in body["error"]
    status, body = request(APP, "GET", "/ws.v1/nonsense")
    assert status == 404 and "permit" in body["methods"]
    assert request(APP, "POST", "/ws.v1/permit")[0] == 400


def test_every_original_method_is_routed():
    for method in (
        "permit",
        "deny",
        "status",
        "dhcp-status",
        "whitelist",
        "blacklist",
        "blacklist-status",
        "permit-dns",
        "deny-dns",
    ):
        assert method in api.ROUTES
    assert request(APP, "POST", "/ws.v1/deny-dns/02:00:00:00:00:01/games.example.test")[1]["called"] == "deny_dns"
    assert request(APP, "GET", "/ws.v1/status/02:00:00:00:00:01")[1]["args"] == ["02:00:00:00:00:01"]


def test_a_name_with_slashes_and_quotes_arrives_whole():
    status, body = request(APP, "POST", "/ws.v1/name/02:00:00:00:00:01", "name=Grandma%27s%20iPad%2FAir")
    assert status == 200 and body["args"] == ["02:00:00:00:00:01", "Grandma's iPad/Air"]
    assert request(APP, "POST", "/ws.v1/name/02:00:00:00:00:01")[0] == 400


def test_an_empty_value_clears_and_a_missing_one_is_refused():
    # "Empty clears it" (a name, a bedtime, an allowance): ?windows= arrives as "", not as nothing.
    for query, args in (("name=", ["02:00:00:00:00:01", ""]),):
        status, body = request(APP, "POST", "/ws.v1/name/02:00:00:00:00:01", query)
        assert status == 200 and body["args"] == args
    status, body = request(APP, "POST", "/ws.v1/schedule/02:00:00:00:00:01", "windows=")
    assert status == 200 and body == {"called": "set_schedule", "args": ["02:00:00:00:00:01", ""]}
    assert request(APP, "POST", "/ws.v1/schedule/02:00:00:00:00:01")[0] == 400  # the control: it must be said


def test_wifi_passphrase_methods_are_routed_with_their_verbs_and_a_router_without_wifi_says_501():
    mac = "02:00:00:00:00:01"
    assert request(APP, "POST", f"/ws.v1/wifi-key/{mac}")[1] == {"called": "issue_wifi_key", "args": [mac]}
    assert request(APP, "GET", f"/ws.v1/wifi-key/{mac}")[0] == 405  # a new passphrase is never made by a GET
    assert request(APP, "GET", f"/ws.v1/show-wifi-key/{mac}")[1]["called"] == "wifi_key_of"
    assert request(APP, "POST", f"/ws.v1/revoke-wifi-key/{mac}")[1]["called"] == "revoke_wifi_key"

    def no_wifi(name, *args, role=None):
        raise NotConfigured("this router has no Wi-Fi network configured (--wifi-ssid)")

    assert request(api.make_app(no_wifi), "POST", f"/ws.v1/wifi-key/{mac}") == (
        501,
        {"error": "this router has no Wi-Fi network configured (--wifi-ssid)"},
    )


def test_a_page_under_a_foreign_name_gets_nothing_and_the_web_uis_own_requests_work():
    """ws.v1 answers Wi-Fi passphrases, and a browser may run on the router itself: a page whose name
    resolves to 127.0.0.1 (DNS rebinding) sends its own name as Host, and is refused."""
    mac = "02:00:00:00:00:01"
    for host in ("evil.example", "evil.example:8081", "127.0.0.1:8081.evil.example", "127.0.0.1:9999", "", None):
        status, body = request(APP, "GET", f"/ws.v1/show-wifi-key/{mac}", host=host)
        assert status == 400 and "loopback" in body["error"], host
    # The web UI's client: a loopback Host at the API's port, by address or name, and no Origin.
    for host in ("127.0.0.1:8081", "localhost:8081", "[::1]:8081"):
        assert request(APP, "GET", f"/ws.v1/show-wifi-key/{mac}", host=host)[0] == 200, host
        assert request(APP, "POST", f"/ws.v1/permit/{mac}", host=host)[0] == 200, host


def test_a_state_change_from_another_sites_page_is_refused():
    """A page elsewhere may make the browser POST to loopback (no CORS needed to send it): its Origin says so."""
    mac = "02:00:00:00:00:01"
    for origin in ("https://evil.example", "http://127.0.0.1:8080", "null"):
        status, body = request(APP, "POST", f"/ws.v1/permit/{mac}", origin=origin)
        assert status == 403 and "another site" in body["error"], origin
    # Positive control: the same request from ws.v1's own origin, or with none (not a browser), is served.
    assert request(APP, "POST", f"/ws.v1/permit/{mac}", origin="http://127.0.0.1:8081")[0] == 200
    assert request(APP, "POST", f"/ws.v1/permit/{mac}")[0] == 200


def performed(router):
    """ws.v1 over the router as the controller serves it: each operation performed for its role."""

    def call(name, *args, role):
        return operations.perform(router, operations.BY_NAME[name], list(args), lambda effects: None, True, role)

    return api.make_app(call)


def test_permit_of_a_blacklisted_device_answers_409_with_the_reason_and_whitelist_lifts_it(router):
    app = performed(router)
    lease(router, PHONE)
    router.decisions.blacklist(PHONE)
    for decision in ("permit", "deny"):
        status, body = request(app, "POST", f"/ws.v1/{decision}/{PHONE}")
        assert status == 409 and "the owner must lift the block (whitelist)" in body["error"]
        assert router.status(PHONE)["state"] == "blacklisted"
    lifted = request(app, "POST", f"/ws.v1/whitelist/{PHONE}")
    assert lifted == (200, dict(operations.status(router, PHONE), applied=True))
    assert request(app, "POST", f"/ws.v1/permit/{PHONE}")[1]["state"] == "permitted"


def test_over_a_real_socket_a_loopback_client_is_served_and_a_foreign_host_refused():
    server = simple_server.make_server("127.0.0.1", 0, APP, handler_class=_Quiet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_port}/ws.v1"
    try:
        with urllib.request.urlopen(urllib.request.Request(f"{base}/status", method="GET"), timeout=5) as resp:
            assert resp.status == 200
        foreign = urllib.request.Request(f"{base}/status", headers={"Host": "evil.example"})
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(foreign, timeout=5)
        assert refused.value.code == 400
    finally:
        server.shutdown()
        server.server_close()


class _Quiet(simple_server.WSGIRequestHandler):
    def log_message(self, *args):
        pass


def test_each_request_acts_for_the_role_its_header_names_and_a_refusal_changes_nothing(router):
    """Issue 39: the controller decides who may do what (`authority.TABLE`); the web UI says for whom it
    asks. The wall panel may let a device in but not block it or lift a block; an unknown role is bad
    input; without the header, the router's own administrator on loopback (the owner)."""
    app = performed(router)
    lease(router, PHONE)
    status, body = request(app, "POST", f"/ws.v1/blacklist/{PHONE}", x_homework_role="panel")
    assert (status, body) == (403, {"error": "the wall panel may not block a device"})
    assert router.status(PHONE)["state"] == "pending"
    assert request(app, "POST", f"/ws.v1/permit/{PHONE}", x_homework_role="panel")[1]["state"] == "permitted"
    assert request(app, "POST", f"/ws.v1/blacklist/{PHONE}", x_homework_role="Owner")[1]["state"] == "blacklisted"
    status, body = request(app, "POST", f"/ws.v1/whitelist/{PHONE}", x_homework_role="panel")
    assert status == 403 and "may not lift a blacklist" in body["error"]
    status, body = request(app, "POST", f"/ws.v1/permit/{PHONE}", x_homework_role="panel")
    assert status == 403 and "may not lift a blacklist" in body["error"]
    assert router.status(PHONE)["state"] == "blacklisted"
    status, body = request(app, "POST", f"/ws.v1/whitelist/{PHONE}", x_homework_role="guest")
    assert status == 400 and authority.HEADER in body["error"]
    assert request(app, "GET", "/ws.v1/status", x_homework_role="device")[0] == 403  # a device sees only itself
    assert request(app, "POST", f"/ws.v1/whitelist/{PHONE}")[1]["state"] == "permitted"


def test_a_benchmark_starts_a_counters_phase_over_ws_v1_and_only_the_owner_may():
    """`POST counters-phase`, as make bench calls it, through the I/O edge's own `call` (the lock's phase
    counts afresh); a member or the wall panel is refused and the phase goes on (positive control: the owner)."""
    edge = ofapp.HomeworkController.__new__(ofapp.HomeworkController)  # the I/O edge without its sockets
    edge.lock = TimedLock()
    with edge.lock:
        time.sleep(0.01)  # a long hold before the phase
    app, started = api.make_app(edge.call), edge.lock.phase_started
    for role in ("member", "panel"):
        status, body = request(app, "POST", "/ws.v1/counters-phase", x_homework_role=role)
        assert status == 403 and "may not start a measuring phase" in body["error"]
    assert edge.lock.phase_started == started and edge.lock.phase_max_hold_s >= 0.01
    assert request(app, "GET", "/ws.v1/counters-phase")[0] == 405  # a change: POST only
    status, body = request(app, "POST", "/ws.v1/counters-phase")
    assert status == 200 and body["lock_phase_started"] == round(edge.lock.phase_started, 3)
    assert edge.lock.phase_started > started and edge.lock.phase_max_hold_s < 0.01  # the long hold is not this phase's


def test_a_thread_that_takes_the_lock_turn_after_turn_does_not_keep_it_from_another():
    """The worker serves a storm's frames turn after turn, each under the lock; another device's DNS lookup takes it
    twice. A plain lock released and taken again at once by a thread that keeps the GIL went to that thread again
    and again: here the other thread's wait had a p99 of a second. The lock is handed over in turn."""
    lock, stop, waits = TimedLock(), threading.Event(), []

    def turns():  # the worker in a storm: 0.4 ms of CPU a turn, back to back
        while not stop.is_set():
            with lock:
                started = time.thread_time()
                while time.thread_time() - started < 0.0004:
                    pass

    worker = threading.Thread(target=turns, daemon=True)
    worker.start()
    try:
        for _ in range(100):
            asked = time.monotonic()
            with lock:
                waits.append(time.monotonic() - asked)
            time.sleep(0.003)
    finally:
        stop.set()
        worker.join()
    waits.sort()
    assert waits[98] < 0.05, f"p99 wait {waits[98] * 1e3:.0f} ms, median {waits[50] * 1e3:.2f} ms"
    assert lock.waiting == 0


def test_the_listing_of_a_storms_devices_takes_the_lock_a_few_devices_at_a_time_and_lists_every_one(router):
    """Issue 39, measured in `make bench` (hostile.json): during a lease-completing storm ws.v1 `status` of every
    device, which the web UI asks for on each batch of Leases rows, held the lock 110 ms: a storm's pending
    devices' statuses at once, while every other device's DHCP and DNS waited. Now the listing takes the lock a
    few devices at a time; positive control: every device is listed, as `status` of every device answers at once
    (with its `may`), in order."""
    edge = ofapp.HomeworkController.__new__(ofapp.HomeworkController)  # the I/O edge without its sockets
    edge.router, edge.lock, edge.switch_ready = router, HoldsCounted(), True
    lease(router, PHONE)
    for n in range(200):
        router.joining.on_dhcp(forged(f"02:fe:00:00:00:{n:02x}"))
    router._status_of = edge.lock.counting(router._status_of)
    listed = edge.call("status")
    assert 0 < max(edge.lock.per_hold) <= ws_service.STATUS_PER_HOLD
    del router._status_of
    # As the operation answers it at once: each with what every role may do to it (the web UI's buttons).
    assert listed == operations.status(router) and len(listed) == 201 and listed[0]["mac"] == PHONE
    assert listed[0]["may"]["owner"]
