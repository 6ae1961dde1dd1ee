"""The attacks of issue 20 (web UI part), each beside the household's same request working:
the wall panel lifting the owner's blacklist, a non-ASCII CSRF token, guessing the current
password, concurrent pairing-code guesses, and the household's agent key shown only to an owner."""

import contextlib
import http.client
import json
import logging
import os
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time

from conftest import OWNER, Api, make_app, setup_owner, signed_in
from stack import free_port
from waitress import wasyncore

from homework_webui.services import services
from homework_webui.serving import ClientLimits, create_server
from homework_webui.updates import CHUNK_BYTES

BLOCKED = "02:00:00:00:00:b1"


def test_the_wall_panel_cannot_lift_the_owners_blacklist(app, owner, controller):
    controller.joined(BLOCKED)
    assert owner.post(f"/api/devices/{BLOCKED}/blacklist").status_code == 200
    kiosk = signed_in(app, "kiosk", owner)
    for action in ("permit", "deny"):
        r = kiosk.post(f"/api/devices/{BLOCKED}/{action}")
        # The controller's authority table: the panel may not lift a block (issue 39), said with why.
        assert r.status_code == 403, (action, r.status_code, r.json)
        assert "may not lift a blacklist" in r.json["error"] and r.json["code"] == "role"
        assert controller.status(BLOCKED)["state"] == "blacklisted"
    assert kiosk.post(f"/api/devices/{BLOCKED}/whitelist").status_code == 403
    assert controller.status(BLOCKED)["state"] == "blacklisted"
    # The owner lifting it works, and then the wall panel decides as usual.
    r = owner.post(f"/api/devices/{BLOCKED}/whitelist")
    assert r.status_code == 200 and r.json["device"]["state"] == "permitted"
    assert kiosk.post(f"/api/devices/{BLOCKED}/deny").json["device"]["state"] == "denied"
    assert kiosk.post(f"/api/devices/{BLOCKED}/permit").json["device"]["state"] == "permitted"


def test_a_non_ascii_csrf_token_is_refused_not_a_server_error(app, owner, controller):
    controller.joined("02:00:00:00:00:c1")
    for token in ("é" * 43, "\u2603", owner.csrf[:-1] + "\xff"):
        r = owner.post("/api/devices/02:00:00:00:00:c1/permit", headers={"X-CSRF-Token": token})
        assert r.status_code == 403 and r.json["code"] == "csrf", (token, r.status_code)
    assert controller.status("02:00:00:00:00:c1")["state"] == "pending"
    assert owner.post("/api/devices/02:00:00:00:00:c1/permit").status_code == 200


def test_a_json_body_nested_deeper_than_the_parser_goes_is_refused_not_a_server_error(app, owner, controller):
    controller.joined("02:00:00:00:00:c2")
    nested = b"[" * 5000 + b"]" * 5000  # within the body limit
    headers = {"X-CSRF-Token": owner.csrf, "Content-Type": "application/json"}
    r = owner.client.open(
        "/api/devices/02:00:00:00:00:c2/name",
        method="POST",
        data=nested,
        headers=headers,
        environ_base={"REMOTE_ADDR": owner.ip},
    )
    assert r.status_code == 400, r.status_code
    # The same request with a body it understands works.
    assert owner.post("/api/devices/02:00:00:00:00:c2/name", {"name": "kitchen radio"}).status_code == 200


def test_the_current_password_cannot_be_guessed_faster_than_a_sign_in(app, owner):
    member = signed_in(app, "member", owner)
    member.ip = "127.0.0.5"  # the member's phone; the owner's browser has not failed
    statuses = [
        member.post("/api/me/password", {"current": f"guess {i}", "password": "new password 1"}).status_code
        for i in range(12)
    ]
    assert statuses[:5] == [403] * 5 and set(statuses[5:]) == {429}, statuses
    r = member.post("/api/me/password", {"current": "member password 1", "password": "new password 1"})
    assert r.status_code == 429 and int(r.headers["Retry-After"]) > 0
    # At the allowed rate the right password works (the owner, on a device that has not failed).
    for _ in range(2):
        assert owner.post("/api/me/password", {"current": "wrong", "password": "x" * 10}).status_code == 403
    r = owner.post("/api/me/password", {"current": OWNER[1], "password": "owner's new password"})
    assert r.status_code == 200
    assert Api(app).session().status_code == 200


def test_concurrent_pairing_guesses_cannot_slip_past_the_limit(app, owner):
    """Thirty wrong codes at once from one address: at most five are looked at."""
    guesses = 30
    start = threading.Barrier(guesses)
    statuses: list[int] = []

    def guess(i: int) -> None:
        panel = Api(app, ip="127.0.0.9")
        panel.session()
        start.wait()
        statuses.append(panel.post("/api/pair", {"code": f"WRONG{i:03d}"}).status_code)

    threads = [threading.Thread(target=guess, args=(i,)) for i in range(guesses)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(statuses) == guesses
    assert statuses.count(400) <= 5 and statuses.count(429) >= guesses - 5, sorted(statuses)
    # A panel elsewhere pairs with a real code, and a bad panel name costs no guess.
    code = owner.post("/api/pairing-codes").json["code"]
    panel = Api(app)
    panel.session()
    assert panel.post("/api/pair", {"code": code, "name": "tab\there"}).status_code == 400
    assert panel.post("/api/pair", {"code": code, "name": "Hall"}).status_code == 201


# --- the household's agent key --------------------------------------------------------------


AGENT_KEY = "0123456789abcdef" * 4


def test_only_an_owner_sees_the_agent_key(tmp_path, controller, hwdb, caplog):
    key_file = tmp_path / "agent.key"
    app = make_app(tmp_path, controller, hwdb, start_live=False, agent_key_file=str(key_file))
    owner = setup_owner(app)
    # hwdb has not made it yet: a clear 404, read again on the next request.
    r = owner.get("/api/agent-key")
    assert r.status_code == 404 and "agent key" in r.json["error"] and r.json["code"] == "no-agent-key"
    key_file.write_text(AGENT_KEY + "\n")
    with caplog.at_level(logging.DEBUG):
        r = owner.get("/api/agent-key")
    assert r.status_code == 200 and r.json["key"] == AGENT_KEY
    assert r.json["command"] == f"endhost-agent --router-key {AGENT_KEY}"
    assert r.headers["Cache-Control"] == "no-store"
    assert not [rec for rec in caplog.records if AGENT_KEY in rec.getMessage()]
    assert signed_in(app, "kiosk", owner).get("/api/agent-key").status_code == 403
    assert signed_in(app, "member", owner).get("/api/agent-key").status_code == 403
    assert Api(app).get("/api/agent-key").status_code == 401
    # A damaged file is not shown as a key.
    key_file.write_text("not a key\n")
    assert owner.get("/api/agent-key").status_code == 404


def test_without_an_agent_key_file_the_feature_is_off(app, owner):
    r = owner.get("/api/agent-key")
    assert r.status_code == 404 and "--agent-key-file" in r.json["error"]


# --- what one client can hold of the server ----------------------------------------------------


def lan_address() -> str | None:
    """One of this machine's own non-loopback IPv4 addresses: to the web UI, a client from it
    is a LAN device (None if the machine has none)."""
    out = subprocess.run(["ip", "-4", "-o", "addr", "show", "scope", "global"], capture_output=True, text=True).stdout
    found = re.search(r"inet (\d+\.\d+\.\d+\.\d+)/", out)
    return found.group(1) if found else None


@contextlib.contextmanager
def waitress_serving(app, listen: list[str]):
    """The app behind the production server (serving.create_server), on a thread; yields the
    bound (host, port) pairs."""
    server = create_server(app, listen, workers=2, max_streams=services(app).hub.limits.max_total)
    stop = threading.Event()

    def run():
        while not stop.is_set():
            wasyncore.loop(timeout=0.1, map=server._map if hasattr(server, "_map") else server.map, count=1)
        server.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield getattr(server, "effective_listen", None) or [(server.effective_host, server.effective_port)]
    finally:
        stop.set()
        thread.join(5)


def alive(s: socket.socket) -> bool:
    """Whether the server still holds this (non-blocking) connection open."""
    try:
        return s.recv(1) != b""
    except BlockingIOError:
        return True
    except OSError:
        return False


def test_one_address_trickling_requests_cannot_hold_the_ui(small_app):
    """200 half-sent requests from one device, each kept going by a byte now and then: the wall
    panel on loopback and another client are answered at once, the device holds no more than its
    own allowance, and what it holds is closed when the request's deadline is up."""
    attacker = lan_address() or "127.0.0.3"
    listen = ["127.0.0.1:0"] + ([f"{attacker}:0"] if not attacker.startswith("127.") else [])
    with waitress_serving(small_app, listen) as bound:
        target = bound[-1]
        t0 = time.monotonic()
        tricklers = []
        for _ in range(200):
            s = socket.socket()
            s.bind((attacker, 0))
            s.settimeout(2)
            try:
                s.connect((target[0], int(target[1])))
                s.sendall(b"POST /api/login HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: ")
            except OSError:
                pass  # refused at once: what an address over its allowance gets
            s.setblocking(False)
            tricklers.append(s)
        stop = threading.Event()

        def trickle():
            while not stop.wait(0.5):
                for s in tricklers:
                    with contextlib.suppress(OSError):
                        s.send(b"a")

        threading.Thread(target=trickle, daemon=True).start()
        try:
            time.sleep(0.5)
            loopback = bound[0]
            for source in ("127.0.0.1", "127.0.0.2"):
                for _ in range(3):
                    started = time.monotonic()
                    conn = http.client.HTTPConnection(
                        loopback[0], int(loopback[1]), timeout=5, source_address=(source, 0)
                    )
                    conn.request("GET", "/api/health")
                    assert conn.getresponse().status == 200
                    conn.close()
                    assert time.monotonic() - started < 1.0, source
            held = sum(alive(s) for s in tricklers)
            assert 0 < held <= ClientLimits().per_address, held
            # The deadline: every trickler is closed, however steadily it trickles.
            deadline = t0 + ClientLimits().request_seconds + 3
            while any(alive(s) for s in tricklers) and time.monotonic() < deadline:
                time.sleep(0.2)
            assert not any(alive(s) for s in tricklers), sum(alive(s) for s in tricklers)
            # The same device sending a whole request in time is answered.
            s = socket.create_connection((target[0], int(target[1])), timeout=5, source_address=(attacker, 0))
            s.sendall(b"GET /api/health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            assert s.recv(100).startswith(b"HTTP/1.1 ")
            s.close()
        finally:
            stop.set()
            for s in tricklers:
                s.close()


def _server_holds(pid: int) -> tuple[int, int]:
    """The web UI process's resident memory (bytes) and how many temporary files it has open."""
    with open(f"/proc/{pid}/status") as f:
        rss = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))
    temp = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
            temp += target.startswith(tempfile.gettempdir()) or "(deleted)" in target
    return rss, temp


def _http(port: int, method: str, path: str, body: bytes = b"", headers: dict | None = None, timeout=30):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    conn.request(method, path, body, headers or {})
    r = conn.getresponse()
    data = r.read()
    conn.close()
    return r, data


def test_large_bodies_are_refused_on_their_headers(tmp_path, controller, hwdb):
    """Twelve 8 MiB sign-ins: each is answered 413 on its headers, and the server holds none of
    their bodies (no temporary file, no memory); the owner's update piece of the same size is
    taken (the positive control)."""
    port = free_port()
    update_dir = tmp_path / "update"
    proc = subprocess.Popen(
        [sys.executable, "-m", "homework_webui", "--listen", f"127.0.0.1:{port}", "--controller-url", controller.url]
        + ["--hwdb", f"127.0.0.1:{hwdb.port}", "--state-dir", str(tmp_path / "state"), "--log-level", "WARNING"]
        + ["--update-dir", str(update_dir), "--dist", str(tmp_path / "nodist")],
        cwd=os.path.join(os.path.dirname(__file__), ".."),
    )
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                socket.create_connection(("127.0.0.1", port), 0.2).close()
                break
            time.sleep(0.1)
        rss_before, temp_before = _server_holds(proc.pid)
        senders = []
        for _ in range(12):
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            s.sendall(
                b"POST /api/login HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                + f"Content-Length: {CHUNK_BYTES}\r\n\r\n".encode()
            )
            senders.append(s)
        for s in senders:
            assert s.recv(100).startswith(b"HTTP/1.1 413"), "refused on its headers, before any body"
        for s in senders:
            with contextlib.suppress(OSError):
                s.sendall(b"{" * (2 << 20))  # the body anyway: the server does not read it
        rss_during, temp_during = _server_holds(proc.pid)
        for s in senders:
            s.close()
        assert temp_during == temp_before, (temp_before, temp_during)
        assert rss_during - rss_before < 8 << 20, (rss_before, rss_during)
        # Nobody but a signed-in owner sends a large body: not a stranger, not with a forged cookie.
        for cookie in ("", "hw_session=forged.cookie.value"):
            r, _ = _http(port, "PUT", "/api/update/bundle?offset=0", b"\0" * (64 << 10), {"Cookie": cookie})
            assert r.status == 413
        # The owner's update: one piece of the largest size, handed to the installer whole.
        r, data = _http(port, "GET", "/api/session")
        cookie, csrf = r.getheader("Set-Cookie").split(";")[0], json.loads(data)["csrf_token"]
        code = (tmp_path / "state" / "setup-code").read_text().strip()
        owner = {"Cookie": cookie, "X-CSRF-Token": csrf, "Content-Type": "application/json"}
        body = json.dumps({"username": OWNER[0], "password": OWNER[1], "setup_code": code}).encode()
        r, data = _http(port, "POST", "/api/setup", body, owner)
        assert r.status == 201, data
        owner.update(Cookie=r.getheader("Set-Cookie").split(";")[0], **{"X-CSRF-Token": json.loads(data)["csrf_token"]})
        r, data = _http(port, "POST", "/api/update", json.dumps({"size": CHUNK_BYTES}).encode(), owner)
        assert r.status == 201, data
        bundle = os.urandom(CHUNK_BYTES)
        r, data = _http(
            port, "PUT", "/api/update/bundle?offset=0", bundle, {**owner, "Content-Type": "application/octet-stream"}
        )
        assert r.status == 200, data
        assert (update_dir / "bundle").read_bytes() == bundle
    finally:
        proc.terminate()
        proc.wait(10)


def test_a_chunked_body_is_cut_off_at_the_limit(small_app):
    """A body without Content-Length is counted as it arrives: past 16 KiB the request gets 413
    and the connection is closed; a small chunked body reaches the app (which wants its CSRF token)."""

    def chunked(port: int, pieces: int) -> bytes:
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        s.sendall(b"POST /api/login HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n")
        with contextlib.suppress(OSError):
            for _ in range(pieces):
                s.sendall(b"1000\r\n" + b" " * 0x1000 + b"\r\n")
            s.sendall(b"2\r\n{}\r\n0\r\n\r\n")
        answer = s.recv(200)
        s.close()
        return answer

    with waitress_serving(small_app, ["127.0.0.1:0"]) as bound:
        port = int(bound[0][1])
        assert chunked(port, 8).startswith(b"HTTP/1.1 413")  # 32 KiB
        assert chunked(port, 1).startswith(b"HTTP/1.1 403")  # 4 KiB: the app's own answer
